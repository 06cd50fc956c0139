//! `sluice switch`: the userspace software switch (sluice-switch) between interfaces in
//! any namespaces, with shaped, ECN-marking, impaired egress queues. Prints a `ready` line,
//! forwards until SIGTERM or SIGINT, then prints every port's counters.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::error::CliError;
use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM};
use sluice_switch::{default_egress, set_param, LinkConfig, MtpConfig, PortSpec, Runner};

/// `sluice switch`.
#[derive(Args, Debug)]
pub struct SwitchArgs {
    /// A port, `[NETNS:]IFACE[,KEY=VALUE...]` (repeat, two at least); keys override the
    /// flags below for this port's egress: rate, queue-bytes, queue-packets, ecn-k, loss,
    /// burst-loss, reorder, reorder-delay, duplicate, corrupt, delay, class-queues (N
    /// queues by DSCP, deficit round robin); and give it an MTP pathlet: pathlet=ID,
    /// pathlet-tc=TC, feedback=ecn[:K]|rate|queue (docs/mtp.md "Devices"); flood=off keeps
    /// broadcasts and unknown unicast from leaving by it (parallel links between switches).
    #[arg(long = "port", value_name = "SPEC")]
    ports: Vec<String>,
    /// The switched lab's ports (sluice-s:sw-up and sluice-s:sw-c1.., built by
    /// `sluice lab up --switch`); a --port of the same name overrides one.
    #[arg(long)]
    lab: bool,
    /// Egress line rate of every port, e.g. 100m, 1g (bits/s); 0 is unlimited.
    #[arg(long)]
    rate: Option<String>,
    /// Egress queue capacity in bytes (tail drop beyond), e.g. 256k.
    #[arg(long)]
    queue_bytes: Option<String>,
    /// Egress queue capacity in frames, besides bytes.
    #[arg(long)]
    queue_packets: Option<String>,
    /// Mark CE on ECT packets when the egress queue holds more than K bytes at enqueue.
    #[arg(long)]
    ecn_k: Option<String>,
    /// Random loss probability per frame (0..=1).
    #[arg(long)]
    loss: Option<String>,
    /// Gilbert–Elliott burst loss, P_GOOD_TO_BAD:P_BAD_TO_GOOD[:LOSS_IN_BAD].
    #[arg(long)]
    burst_loss: Option<String>,
    /// Probability a frame is held back by --reorder-delay (later frames overtake it).
    #[arg(long)]
    reorder: Option<String>,
    /// Hold-back of a reordered frame, e.g. 500us.
    #[arg(long)]
    reorder_delay: Option<String>,
    /// Probability a frame is sent twice.
    #[arg(long)]
    duplicate: Option<String>,
    /// Probability one bit of a frame is flipped.
    #[arg(long)]
    corrupt: Option<String>,
    /// Fixed delay of every frame, e.g. 100us, 5ms.
    #[arg(long)]
    delay: Option<String>,
    /// MTP: how route groups (--route) are balanced: hash (ECMP), spray, alternate:PERIOD
    /// (an optical switch, e.g. alternate:384us) or message (MTP messages pinned to the
    /// least-loaded allowed port).
    #[arg(long)]
    balancer: Option<String>,
    /// MTP: a route group, MAC=PORT+PORT... (port indices in --port order); repeat.
    #[arg(long = "route", value_name = "MAC=PORTS")]
    routes: Vec<String>,
    /// MTP: per-tenant fair share by traffic class on each shared queue; a class over its
    /// share is dropped while the queue holds more than this many bytes, e.g. 64k.
    #[arg(long)]
    fair_share: Option<String>,
    /// MTP: trim data packets to their header on overflow; trimmed headers may use this
    /// many bytes beyond the queue, e.g. 16k.
    #[arg(long)]
    trim: Option<String>,
    /// Seed of the random choices (port i draws from stream i + 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl SwitchArgs {
    /// The switch-wide egress parameters from the flags.
    fn defaults(&self) -> Result<LinkConfig, CliError> {
        let mut p = default_egress();
        let flags = [
            ("rate", &self.rate),
            ("queue-bytes", &self.queue_bytes),
            ("queue-packets", &self.queue_packets),
            ("ecn-k", &self.ecn_k),
            ("loss", &self.loss),
            ("burst-loss", &self.burst_loss),
            ("reorder", &self.reorder),
            ("reorder-delay", &self.reorder_delay),
            ("duplicate", &self.duplicate),
            ("corrupt", &self.corrupt),
            ("delay", &self.delay),
        ];
        for (key, value) in flags {
            if let Some(v) = value {
                set_param(&mut p, key, v).map_err(|e| CliError::usage(format!("--{e}")))?;
            }
        }
        Ok(p)
    }

    /// The MTP device's switch-wide configuration from the flags.
    fn mtp(&self) -> Result<MtpConfig, CliError> {
        let mut cfg = MtpConfig::default();
        let flags = [
            ("balancer", &self.balancer),
            ("fair-share", &self.fair_share),
            ("trim", &self.trim),
        ];
        for (key, value) in flags {
            if let Some(v) = value {
                cfg.set(key, v)
                    .map_err(|e| CliError::usage(format!("--{e}")))?;
            }
        }
        for r in &self.routes {
            cfg.set("route", r)
                .map_err(|e| CliError::usage(format!("--{e}")))?;
        }
        Ok(cfg)
    }

    /// The ports, with their egress parameters.
    fn ports(&self) -> Result<Vec<PortSpec>, CliError> {
        let defaults = self.defaults()?;
        let mut given = self
            .ports
            .iter()
            .map(|s| {
                PortSpec::parse(s, &defaults).map_err(|e| CliError::usage(format!("--port {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !self.lab {
            return Ok(given);
        }
        let lab = sluice_lab::Lab::new().switch_ports()?;
        let mut ports = Vec::new();
        for name in lab {
            let spec = PortSpec::parse(&name, &defaults).map_err(CliError::SwitchPort)?;
            match given.iter().position(|g| g.name() == spec.name()) {
                Some(i) => ports.push(given.remove(i)),
                None => ports.push(spec),
            }
        }
        ports.extend(given);
        Ok(ports)
    }
}

/// Runs `sluice switch` until SIGTERM or SIGINT.
pub fn run(args: &SwitchArgs) -> Result<(), CliError> {
    let ports = args.ports()?;
    let mtp = args.mtp()?;
    let mut runner = Runner::open(&ports, args.seed)?;
    runner
        .core_mut()
        .configure_mtp(&ports, &mtp)
        .map_err(|e| CliError::usage(format!("--{e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone())
            .and_then(|_| signal_hook::flag::register(signal, stop.clone()))
            .map_err(|source| CliError::Signal { signal, source })?;
    }
    for p in &ports {
        let e = &p.egress;
        let imp = &e.impairment;
        println!(
            "sluice switch: port {} rate={} queue_bytes={} ecn_k={} loss={} burst_loss={} \
             reorder={} duplicate={} delay={:?}",
            p.name(),
            if e.bandwidth_bps == 0 {
                "unlimited".to_owned()
            } else {
                format!("{}bit/s", e.bandwidth_bps)
            },
            e.queue_capacity_bytes,
            e.ecn_threshold_bytes
                .map_or("off".to_owned(), |k| k.to_string()),
            imp.loss,
            imp.burst_loss.map_or("off".to_owned(), |g| format!(
                "{}:{}:{}",
                g.p_good_to_bad, g.p_bad_to_good, g.loss_in_bad
            )),
            imp.reorder,
            imp.duplicate,
            e.delay,
        );
    }
    if let Some(dev) = runner.core().mtp_device() {
        println!(
            "sluice switch: mtp balancer={:?} groups={} pathlets={:?}",
            dev.balancer(),
            mtp.groups.len(),
            ports
                .iter()
                .map(|p| p.pathlet.map(|x| x.id))
                .collect::<Vec<_>>(),
        );
    }
    println!("sluice switch: ready, {} ports", ports.len());
    let _ = std::io::stdout().flush();
    let started = Instant::now();
    let result = runner.run(&stop);
    let secs = started.elapsed().as_secs_f64();
    for r in runner.report() {
        println!("{}", r.line(secs));
    }
    let b = runner.core().bridge_stats();
    println!(
        "sluice switch: stopped after {secs:.1} s; bridge received={} forwarded={} flooded={} \
         filtered={} runts={} table_full={} aged={}",
        b.received, b.forwarded, b.flooded, b.filtered, b.runts, b.table_full, b.aged
    );
    if let Some(m) = runner.core().mtp_stats() {
        println!("sluice switch: mtp {m:?}");
    }
    let _ = std::io::stdout().flush();
    result.map_err(CliError::from)
}
