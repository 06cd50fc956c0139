//! Where and how the engine runs: the flags every engine subcommand shares (interface and
//! address or `--lab`, backend, fault injection, transport), and running an app on it.

use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use sluice_device::XdpMode;
use sluice_engine::multicore::{Layout, MultiEngine};
use sluice_engine::setup::{self, Backend, EngineOptions, Transport};
use sluice_engine::{App, DEFAULT_LINGER};
use sluice_lab::presets::LabPreset;
use sluice_switch::parse_size;
use sluice_tcp::{Algorithm, ConfigError, MemoryLimits, Recovery};

use crate::cores::CoresArgs;
use crate::error::CliError;
use crate::sim_args::{refuse_sim_flags, SimLinkArgs};

/// Where the engine runs: an interface and address, or `--lab`.
#[derive(Args, Debug, Clone)]
pub struct Attach {
    /// Interface the engine owns (it must have no kernel address).
    #[arg(long)]
    pub(crate) iface: Option<String>,
    /// The engine's address and prefix, e.g. 10.77.0.1/24 (with --backend sim: default 10.77.0.1/24).
    #[arg(long)]
    pub(crate) ip: Option<String>,
    /// Device backend: af_packet, tap, af_xdp, or sim (simulated peers, no root).
    #[arg(long, default_value = "af_packet")]
    pub(crate) backend: Backend,
    /// Shorthand for the engine side of the lab: sl-a in namespace sluice-a, 10.77.0.1/24.
    #[arg(long)]
    pub(crate) lab: bool,
    /// With --backend af_xdp: run the XDP program in the driver (drv) or generic path (skb).
    #[arg(long, default_value = "drv")]
    pub(crate) xdp_mode: XdpMode,
    /// Fault injection: drop each frame in and out with this probability (0..=1).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Fault injection: deliver each frame in and out late with this probability (0..=1).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reorder: f64,
    /// Seed of the fault injection's random choices.
    #[arg(long, default_value_t = 1)]
    pub(crate) impair_seed: u64,
    /// Once the application is done (e.g. `sink --count`), keep the engine running at most
    /// this many seconds for the connections it closed to finish closing (a lost FIN is
    /// retransmitted); 0 exits at once.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_LINGER.as_secs_f64())]
    pub(crate) linger: f64,
    #[command(flatten)]
    pub(crate) sim: SimLinkArgs,
    #[command(flatten)]
    pub(crate) transport: TransportArgs,
    #[command(flatten)]
    pub(crate) cores: CoresArgs,
}

/// Loss recovery as the flag spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RecoveryArg {
    /// SACK-based recovery (RFC 6675) with a bounded scoreboard.
    Sack,
    /// Go-back-N from snd_una, the papers' baseline.
    GoBackN,
}

/// The engine core's transport choices: congestion control, ECN, loss recovery, the limit on
/// buffered bytes (one set of flags for every subcommand that runs the engine).
#[derive(Args, Debug, Clone)]
pub struct TransportArgs {
    /// Default congestion control of new connections: dctcp, timely, reno (newreno), cubic
    /// or bbr; applications choose per connection with TCP_CONGESTION.
    #[arg(long = "cc", default_value = "dctcp", value_parser = Algorithm::from_str)]
    cc: Algorithm,
    /// Never negotiate ECN (DCTCP then sees no marks and reacts to loss only).
    #[arg(long)]
    no_ecn: bool,
    /// Loss recovery: sack or go-back-n.
    #[arg(long, value_enum, default_value = "sack")]
    recovery: RecoveryArg,
    /// Out-of-order intervals tracked per connection (0 to 64; default the engine's, 8).
    #[arg(long)]
    ooo_intervals: Option<usize>,
    /// Global limit on the bytes all connections buffer (unread, out of order, unacknowledged),
    /// as Linux's tcp_mem but in bytes: above PRESSURE windows reopen only a little and rings
    /// stop growing until the total falls below LOW; above HIGH new connections and new
    /// out-of-order data are refused. Sizes take k, m or g (KiB, MiB, GiB), e.g.
    /// 64m,96m,128m; default the engine's, derived from its ring memory (half, two thirds and
    /// all of 512 MiB).
    #[arg(long, value_name = "LOW,PRESSURE,HIGH")]
    tcp_mem: Option<String>,
    /// Half-open connections per listener before SYNs are answered with SYN cookies; 0
    /// answers every SYN with a cookie and keeps no state until the handshake completes
    /// (AccelTCP's setup offload; as Linux's tcp_syncookies=2). Default the engine's.
    #[arg(long)]
    syn_backlog: Option<usize>,
}

/// Parses `--tcp-mem LOW,PRESSURE,HIGH` (sizes as the switch's: `1500`, `64k`, `8m`, `1g`).
/// The order of the three is the core's to check (`Config::validate`).
fn parse_tcp_mem(spec: &str) -> Result<MemoryLimits, CliError> {
    const FLAG: &str = "--tcp-mem";
    let parts: Vec<&str> = spec.split(',').collect();
    let [low, pressure, high] = parts.as_slice() else {
        return Err(CliError::usage(format!(
            "{FLAG}: {spec:?} is not LOW,PRESSURE,HIGH (three sizes, e.g. 64m,96m,128m)"
        )));
    };
    let size = |v: &str| parse_size(FLAG, v).map_err(|e| CliError::usage(e.to_string()));
    Ok(MemoryLimits {
        low: size(low)?,
        pressure: size(pressure)?,
        high: size(high)?,
    })
}

impl TransportArgs {
    /// The core's transport choices from the flags, checked as the core checks its
    /// configuration.
    pub(crate) fn transport(&self) -> Result<Transport, CliError> {
        let t = Transport {
            congestion_control: self.cc,
            ecn: !self.no_ecn,
            recovery: match self.recovery {
                RecoveryArg::Sack => Recovery::Sack,
                RecoveryArg::GoBackN => Recovery::GoBackN,
            },
            ooo_intervals: self.ooo_intervals,
            tcp_mem: self.tcp_mem.as_deref().map(parse_tcp_mem).transpose()?,
            syn_backlog: self.syn_backlog,
        };
        t.validate().map_err(|e| {
            let flag = match e {
                ConfigError::Range("tcp_mem", _) => "--tcp-mem",
                ConfigError::Range("ooo_intervals", _) => "--ooo-intervals",
                _ => "--cc/--no-ecn/--recovery/--ooo-intervals/--tcp-mem",
            };
            CliError::usage(format!("{flag}: {e}"))
        })?;
        Ok(t)
    }

    /// One line for the startup message.
    pub(crate) fn describe(t: &Transport) -> String {
        format!(
            "cc {}, ECN {}, {} recovery{}{}",
            t.congestion_control,
            if t.ecn { "on" } else { "off" },
            match t.recovery {
                Recovery::Sack => "SACK",
                Recovery::GoBackN => "go-back-N",
            },
            t.ooo_intervals
                .map_or(String::new(), |n| format!(", {n} out-of-order intervals")),
            t.tcp_mem.map_or(String::new(), |m| format!(
                ", tcp_mem {}/{}/{} bytes",
                m.low, m.pressure, m.high
            )),
        ) + &t.syn_backlog.map_or(String::new(), |n| match n {
            0 => ", SYN cookies always".to_string(),
            n => format!(", SYN backlog {n}"),
        })
    }
}

impl Attach {
    /// The engine's options from the flags (checked).
    pub(crate) fn options(&self) -> Result<EngineOptions, CliError> {
        refuse_sim_flags(self.sim.given())?;
        let mut opts = self.attachment()?;
        opts.xdp_mode = self.xdp_mode;
        opts.transport = self.transport.transport()?;
        if self.loss != 0.0 || self.reorder != 0.0 {
            for (flag, p) in [("--loss", self.loss), ("--reorder", self.reorder)] {
                if !(0.0..=1.0).contains(&p) {
                    return Err(CliError::Usage(format!(
                        "{flag}: {p} is not a probability within 0..=1"
                    )));
                }
            }
            opts = opts.impaired(self.impair_seed, self.loss, self.reorder);
        }
        Ok(opts)
    }

    /// `--linger` as a duration (checked: a number of seconds within 0..=3600).
    pub(crate) fn linger(&self) -> Result<Duration, CliError> {
        if !(0.0..=3600.0).contains(&self.linger) {
            return Err(CliError::usage(format!(
                "--linger: {} is not a number of seconds within 0..=3600",
                self.linger
            )));
        }
        Ok(Duration::from_secs_f64(self.linger))
    }

    fn attachment(&self) -> Result<EngineOptions, CliError> {
        if self.lab {
            return Ok(EngineOptions::lab(self.backend));
        }
        let iface = self.iface.clone().ok_or_else(|| {
            CliError::usage("--iface is required without --lab (or use --backend sim)")
        })?;
        let spec = self
            .ip
            .clone()
            .ok_or_else(|| CliError::usage("--ip is required without --lab"))?;
        let (ip, prefix) = parse_ip(&spec)?;
        Ok(EngineOptions {
            iface,
            ip,
            prefix,
            backend: self.backend,
            netns: None,
            impair: None,
            xdp_mode: self.xdp_mode,
            transport: Transport::default(),
            // The lab's TAP name and MAC, as before; its hooks run only inside sluice-a.
            site: sluice_lab::presets::SITE,
        })
    }
}

/// Parses `ADDR[/PREFIX]` (prefix 24 if absent).
pub(crate) fn parse_ip(spec: &str) -> Result<(Ipv4Addr, u8), CliError> {
    let (addr, prefix) = spec.split_once('/').unwrap_or((spec, "24"));
    let ip: Ipv4Addr = addr
        .parse()
        .map_err(|_| CliError::usage(format!("--ip: {addr:?} is not an IPv4 address")))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| CliError::usage("--ip: prefix must be 0..=32"))?;
    Ok((ip, prefix))
}

/// Opens the engine where `attach` says and runs `app` on it until it is done.
pub(crate) fn run_app(attach: &Attach, app: &mut dyn App) -> Result<(), CliError> {
    let opts = attach.options()?;
    let linger = attach.linger()?;
    let mut engine = setup::open(&opts)?;
    engine.linger = linger;
    eprintln!(
        "sluice: engine at {}/{} on {} ({:?} backend; {})",
        opts.ip,
        opts.prefix,
        opts.iface,
        opts.backend,
        TransportArgs::describe(&opts.transport)
    );
    engine.run(app, None)?;
    Ok(())
}

/// Runs the application `factory` makes where `attach` says: on the single-core engine
/// (`factory(0)`), or with `--cores`/`--layout` on the multi-core engine, one instance per
/// flow group (`factory(g)`), after printing the flow-group assignment. Returns the
/// applications when they are done.
pub(crate) fn run_on_cores<A: App + Send>(
    attach: &Attach,
    mut factory: impl FnMut(u16) -> A,
) -> Result<Vec<A>, CliError> {
    let Some(layout) = attach.cores.layout()? else {
        let mut app = factory(0);
        run_app(attach, &mut app)?;
        return Ok(vec![app]);
    };
    if attach.backend == setup::Backend::Sim {
        return Err(CliError::usage(
            "--cores/--layout with --backend sim: the simulated wire runs the single-core \
             engine here (the multi-core engine over it is tested by crates/sim/tests/multicore.rs); \
             use --cores 1",
        ));
    }
    let opts = attach.options()?;
    let (device, config) = setup::open_multi(&opts)?;
    let mut engine = MultiEngine::new(device, config, layout, factory).map_err(CliError::Multi)?;
    engine.linger = attach.linger()?;
    eprintln!(
        "sluice: engine at {}/{} on {} ({:?} backend; {}; {} data-path core(s), {})",
        opts.ip,
        opts.prefix,
        opts.iface,
        opts.backend,
        TransportArgs::describe(&opts.transport),
        attach.cores.cores,
        layout_name(&layout),
    );
    eprint!("{}", engine.describe());
    engine.run(None).map_err(CliError::Multi)?;
    Ok(engine.into_apps())
}

/// The layout as `--layout` names it.
fn layout_name(layout: &Layout) -> &'static str {
    match layout {
        Layout::RunToCompletion { .. } => "run-to-completion",
        Layout::Pipelined { .. } => "pipelined",
        Layout::Replicated { .. } => "replicated pre/post",
        Layout::FlowGroups { .. } => "flow groups",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        attach: Attach,
    }

    /// The transport the flags give; a flag clap refuses is a usage error with clap's text.
    fn transport(args: &[&str]) -> Result<Transport, CliError> {
        let cli = Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
            .map_err(|e| CliError::usage(e.to_string()))?;
        cli.attach.transport.transport()
    }

    #[test]
    fn transport_flags_reach_the_core_config() {
        let t = transport(&[]).unwrap();
        assert_eq!(
            t,
            Transport::default(),
            "no flags: the core's defaults (DCTCP, ECN, SACK)"
        );
        assert_eq!(t.congestion_control, Algorithm::Dctcp);
        let t = transport(&[
            "--cc",
            "CUBIC",
            "--no-ecn",
            "--recovery",
            "go-back-n",
            "--ooo-intervals",
            "4",
            "--tcp-mem",
            "64M,96m,1G",
        ])
        .unwrap();
        let mut config = setup::core_config(
            sluice_wire::EthernetAddress::default(),
            Ipv4Addr::new(10, 77, 0, 1),
            1500,
        );
        t.apply(&mut config);
        assert_eq!(config.congestion_control, Algorithm::Cubic);
        assert!(!config.ecn);
        assert_eq!(config.recovery, Recovery::GoBackN);
        assert_eq!(config.ooo_intervals, 4);
        assert_eq!(
            config.memory_limits(),
            MemoryLimits {
                low: 64 << 20,
                pressure: 96 << 20,
                high: 1 << 30,
            }
        );
        assert_eq!(
            transport(&["--tcp-mem", "4096,8k,12288"]).unwrap().tcp_mem,
            Some(MemoryLimits {
                low: 4096,
                pressure: 8192,
                high: 12288,
            }),
            "plain bytes and suffixes mix"
        );
        assert_eq!(
            transport(&["--cc", "newreno"]).unwrap().congestion_control,
            Algorithm::NewReno
        );
        assert_eq!(
            transport(&["--cc", "timely"]).unwrap().congestion_control,
            Algorithm::Timely
        );
    }

    #[test]
    fn linger_flag_defaults_to_the_engines_and_is_checked() {
        let linger = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
                .map_err(|e| CliError::usage(e.to_string()))
                .and_then(|cli| cli.attach.linger())
        };
        assert_eq!(linger(&[]).unwrap(), DEFAULT_LINGER);
        assert_eq!(
            linger(&["--linger", "0.5"]).unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(linger(&["--linger", "0"]).unwrap(), Duration::ZERO);
        for bad in ["-1", "NaN", "1e9"] {
            let flag = format!("--linger={bad}");
            let e = linger(&[&flag]).unwrap_err().to_string();
            assert!(e.contains("--linger"), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_transport_flags_are_refused_clearly() {
        let e = transport(&["--cc", "bbr2"]).unwrap_err().to_string();
        assert!(e.contains("unknown congestion control"), "{e}");
        let e = transport(&["--ooo-intervals", "65"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--ooo-intervals") && e.contains("ooo_intervals must be in 0..=64"),
            "{e}"
        );
        let e = transport(&["--recovery", "fast"]).unwrap_err().to_string();
        assert!(e.contains("go-back-n"), "{e}");
    }

    #[test]
    fn bad_tcp_mem_is_refused_naming_the_flag() {
        for (bad, says) in [
            ("64m,96m", "is not LOW,PRESSURE,HIGH"),
            ("1m,2m,3m,4m", "is not LOW,PRESSURE,HIGH"),
            ("1m,lots,3m", "\"lots\" is not a number"),
            ("1m,2q,3m", "unknown unit \"q\""),
            ("1m,2m,2t", "unknown unit \"t\""),
            ("2m,1m,3m", "tcp_mem must be in 0 < low <= pressure <= high"),
            ("0,1m,3m", "tcp_mem must be in 0 < low <= pressure <= high"),
        ] {
            let e = transport(&["--tcp-mem", bad]).unwrap_err();
            assert!(matches!(e, CliError::Usage(_)), "{bad}: {e:?}");
            let e = e.to_string();
            assert!(
                e.starts_with("--tcp-mem: ") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }
}
