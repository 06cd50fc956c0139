//! One measured bulk transfer through an impaired port of `sluice switch`: the runs that
//! `sluice experiment loss` and `sluice experiment impair` are made of.
//!
//! ```text
//!  senders                                       sluice switch                  receivers
//!  engine   sluice-a sl-a 10.77.0.1  ─┐                                     ┌ Linux  sluice-c1 10.77.0.101
//!                                     ├ br0 ── sw-up ═══> sw-c1 (impaired) ┤
//!  Linux    sluice-k sl-k 10.77.0.3  ─┘      (unimpaired)                  └ engine sluice-c1 10.77.0.201
//! ```
//!
//! Every flow goes from a server in the default lab to a client in sluice-c1, the one client
//! namespace behind the switch, so its data crosses the switch's egress towards sluice-c1,
//! which applies the impairment (`loss=p`, `reorder=p`, `corrupt=p`, `duplicate=p`, ... as
//! `sluice switch` spells them). The ACKs go back through the uplink's unimpaired egress.
//! The same port carries every pairing, so they are compared on the same wire:
//!
//! - engine->linux: the engine serves its source in sluice-a; `sluice loadgen stream-down` in
//!   sluice-c1 receives on Linux's stack;
//! - linux->engine: `sluice kserve source` in sluice-k; a second engine receives in sluice-c1;
//! - engine->engine: the engine's source in sluice-a; the engine in sluice-c1 receives;
//! - linux->linux: `sluice kserve source` in sluice-k; `sluice loadgen` in sluice-c1;
//! - gbn->gbn, the papers' baseline: engine->engine with both ends configured with
//!   `Recovery::GoBackN` and no out-of-order intervals.
//!
//! The receiving engine shares sl-c1 with sluice-c1's kernel, which owns 10.77.0.101: the
//! engine takes another address on the same subnet, 10.77.0.201, which the kernel neither
//! answers ARP for nor accepts (it does not forward), so the engine alone speaks for it.
//!
//! Each run gets a fresh switch (in-process, on its own thread) whose port counters give
//! what the impairment really did, and a fresh engine at each end that is an engine, whose
//! core and device counters come back with the run. The engines run on AF_PACKET (the one
//! backend that opens sl-c1 as it is). Every receiver checks each byte it gets is what the
//! sources send.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_bench::{
    run_client_counted, run_loadgen, BenchError, EngineCounters, EngineServer, EngineSite,
    EngineSpec, Kind, Timing, Workload, PORTS,
};
use sluice_engine::setup::{Backend, EngineOptions};
use sluice_lab::presets::LabPreset;
use sluice_lab::switched::switch_port;
use sluice_lab::{client_iface, client_ns, Lab, ENGINE_IP, KERNEL_IP, NS_KERNEL};
use sluice_switch::{default_egress, PortReport, PortSpec, PortStats};
use sluice_tcp::cc::Algorithm;
use sluice_tcp::{Config, Recovery};

use crate::error::ExperimentError;
use crate::netstat;
use crate::switch_thread::SwitchThread;

/// The receiving engine's address on sl-c1 (sluice-c1's kernel owns 10.77.0.101).
pub const RECEIVER_ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 201);
/// The engines' device backend: AF_PACKET opens any interface, sl-c1 included.
pub const BACKEND: Backend = Backend::AfPacket;
/// The client namespace the receivers run in (behind the impaired port).
pub const RECEIVER_CLIENT: u8 = 1;

/// Who sends and who receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// The engine in sluice-a sends to Linux in sluice-c1.
    EngineToLinux,
    /// Linux in sluice-k sends to the engine in sluice-c1.
    LinuxToEngine,
    /// The engine in sluice-a sends to the engine in sluice-c1.
    EngineToEngine,
    /// Linux in sluice-k sends to Linux in sluice-c1.
    LinuxToLinux,
    /// Engine to engine, both with go-back-N and no out-of-order intervals: the baseline.
    GoBackN,
}

impl Pairing {
    /// Every pairing, in the order the loss experiment runs and shows them.
    pub const ALL: [Pairing; 5] = [
        Pairing::EngineToLinux,
        Pairing::LinuxToEngine,
        Pairing::EngineToEngine,
        Pairing::LinuxToLinux,
        Pairing::GoBackN,
    ];

    /// Its name in the table, the CSV and the plot.
    pub fn name(self) -> &'static str {
        match self {
            Pairing::EngineToLinux => "engine->linux",
            Pairing::LinuxToEngine => "linux->engine",
            Pairing::EngineToEngine => "engine->engine",
            Pairing::LinuxToLinux => "linux->linux",
            Pairing::GoBackN => "gbn->gbn",
        }
    }

    /// The pairing a name (as [`Pairing::name`] spells it) stands for.
    pub fn parse(name: &str) -> Option<Pairing> {
        Pairing::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether an engine sends (from sluice-a), else Linux (from sluice-k).
    pub fn engine_sends(self) -> bool {
        matches!(
            self,
            Pairing::EngineToLinux | Pairing::EngineToEngine | Pairing::GoBackN
        )
    }

    /// Whether an engine receives (in sluice-c1), else Linux.
    pub fn engine_receives(self) -> bool {
        !matches!(self, Pairing::EngineToLinux | Pairing::LinuxToLinux)
    }
}

/// A change to the engines' core configuration, shared by both ends of a run.
pub type Configure = Arc<dyn Fn(&mut Config) + Send + Sync>;

/// The engines' configuration for a pairing: go-back-N with no out-of-order intervals for
/// the baseline, else the default with `ooo_intervals` if given.
pub fn configure(
    pairing: Pairing,
    ooo_intervals: Option<usize>,
    cc: Option<Algorithm>,
    rack_tlp: bool,
) -> Configure {
    let go_back_n = pairing == Pairing::GoBackN;
    Arc::new(move |c: &mut Config| {
        c.rack_tlp = rack_tlp;
        if let Some(cc) = cc {
            c.congestion_control = cc;
        }
        if go_back_n {
            c.recovery = Recovery::GoBackN;
            c.ooo_intervals = 0;
        } else if let Some(n) = ooo_intervals {
            c.ooo_intervals = n;
        }
    })
}

/// The switched lab's ports and which of them is impaired.
pub struct Wire {
    ports: Vec<String>,
    impaired: String,
}

impl Wire {
    /// The lab's switch ports, checking the one towards the receivers' namespace is there.
    pub fn of(lab: &Lab) -> Result<Wire, ExperimentError> {
        let ports = lab
            .switch_ports()
            .map_err(|e| ExperimentError::Workload(e.to_string()))?;
        let impaired = format!("{}:{}", sluice_lab::NS_SWITCH, switch_port(RECEIVER_CLIENT));
        if !ports.contains(&impaired) {
            return Err(ExperimentError::Workload(format!(
                "the switched lab has no port {impaired}: {ports:?}"
            )));
        }
        Ok(Wire { ports, impaired })
    }

    /// The switch's ports, the one towards the receivers with `impairment` (`KEY=VALUE,...`
    /// as `sluice switch` takes them; empty: none) added to its spec.
    fn specs(&self, impairment: &str) -> Result<Vec<PortSpec>, ExperimentError> {
        let defaults = default_egress();
        self.ports
            .iter()
            .map(|name| {
                let spec = if *name == self.impaired && !impairment.is_empty() {
                    format!("{name},{impairment}")
                } else {
                    name.clone()
                };
                PortSpec::parse(&spec, &defaults)
                    .map_err(|e| ExperimentError::Usage(format!("switch port {spec}: {e}")))
            })
            .collect()
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Goodput over the measured window, Mbit/s.
    pub mbps: f64,
    /// Payload bytes the receiver got in the measured window, and the window's length.
    pub bytes: u64,
    /// The measured window's length, seconds.
    pub seconds: f64,
    /// The impaired port's counters over the whole run (warm-up included).
    pub port: PortStats,
    /// Frames the switch dropped other than by the impairment, on any port.
    pub other_drops: u64,
    /// The sending engine's counters over its whole run, if an engine sent.
    pub sender: Option<EngineCounters>,
    /// The receiving engine's counters over its whole run, if an engine received.
    pub receiver: Option<EngineCounters>,
    /// Linux's counters in the sender's namespace over the run ([`netstat::KEYS`]), if
    /// Linux sent.
    pub linux_sender: Option<Vec<u64>>,
    /// Linux's counters in the receivers' namespace over the run, if Linux received.
    pub linux_receiver: Option<Vec<u64>>,
    /// The sending engine's thread CPU over the whole run (setup and warm-up included).
    pub sender_cpu_s: Option<f64>,
    /// The receiving engine's thread CPU over the measured window.
    pub receiver_cpu_s: Option<f64>,
    /// Wall time of the whole run, seconds.
    pub wall_s: f64,
}

impl Outcome {
    /// Engine CPU nanoseconds per payload byte: the receiving engine's over the window, or
    /// the sending engine's over its whole run against the bytes of that run estimated at
    /// the window's rate (so setup and warm-up weigh in a little).
    pub fn engine_ns_per_byte(&self) -> Option<f64> {
        if self.bytes == 0 || self.seconds <= 0.0 {
            return None;
        }
        if let Some(cpu) = self.receiver_cpu_s {
            return Some(cpu * 1e9 / self.bytes as f64);
        }
        let cpu = self.sender_cpu_s?;
        let run_bytes = self.bytes as f64 / self.seconds * self.wall_s;
        Some(cpu * 1e9 / run_bytes.max(1.0))
    }
}

/// One run: a fresh switch with `impairment` on the receivers' port (its draws seeded with
/// `seed`), a fresh engine server if an engine sends (polling `idle_before_sleep` before
/// it sleeps), and one bulk transfer.
pub fn run_once(
    wire: &Wire,
    pairing: Pairing,
    config: &Configure,
    impairment: &str,
    seed: u64,
    timing: Timing,
    idle_before_sleep: Duration,
) -> Result<Outcome, ExperimentError> {
    let fail = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    let spec = EngineSpec {
        backend: BACKEND,
        idle_before_sleep: Some(idle_before_sleep),
    };
    let server = if pairing.engine_sends() {
        let site = EngineSite {
            configure: Arc::clone(config),
            ..EngineSite::lab(BACKEND)
        };
        let s = EngineServer::start_at(spec, site).map_err(|e| fail(&e))?;
        std::thread::sleep(Duration::from_millis(200));
        Some(s)
    } else {
        None
    };
    let switch = SwitchThread::start(wire.specs(impairment)?, seed)?;
    // Linux's counters where Linux is an end: its namespace holds this run's flow alone.
    let linux_ns = [
        (!pairing.engine_sends()).then_some(NS_KERNEL.to_string()),
        (!pairing.engine_receives()).then(|| client_ns(RECEIVER_CLIENT)),
    ];
    let before = linux_ns
        .iter()
        .map(|ns| ns.as_deref().map(netstat::snapshot).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let cpu0 = server.as_ref().map(EngineServer::cpu_seconds);
    let t0 = Instant::now();
    let measured = transfer(pairing, spec, config, timing);
    let wall_s = t0.elapsed().as_secs_f64();
    let mut linux = Vec::new();
    for (ns, b) in linux_ns.iter().zip(before) {
        linux.push(match (ns, b) {
            (Some(ns), Some(b)) => Some(netstat::delta(&b, &netstat::snapshot(ns)?)),
            _ => None,
        });
    }
    let linux_receiver = linux.pop().flatten();
    let linux_sender = linux.pop().flatten();
    let sender_cpu_s = server
        .as_ref()
        .zip(cpu0)
        .map(|(s, c0)| (s.cpu_seconds() - c0).max(0.0));
    let reports = switch.stop()?;
    let sender = match server {
        Some(s) => Some(s.stop_counted().map_err(|e| fail(&e))?),
        None => None,
    };
    let (m, receiver) = measured.map_err(|e| fail(&e))?;
    let port = reports
        .iter()
        .find(|r| r.name == wire.impaired)
        .ok_or_else(|| fail(&"the switch did not report the impaired port"))?;
    Ok(Outcome {
        mbps: m.gbps() * 1e3,
        bytes: m.bytes,
        seconds: m.seconds,
        port: port.stats.clone(),
        other_drops: reports.iter().map(other_drops).sum(),
        receiver_cpu_s: receiver.as_ref().map(|_| m.cpu_seconds),
        sender,
        receiver,
        sender_cpu_s,
        linux_sender,
        linux_receiver,
        wall_s,
    })
}

/// Frames a port of the switch dropped other than by its configured loss.
fn other_drops(r: &PortReport) -> u64 {
    r.stats.egress.link.queue_drops
        + r.stats.egress.delay_line_drops
        + r.stats.oversize_drops
        + r.stats.tx_error_drops
        + r.device.rx_truncated
        + r.device.rx_dropped
        + r.device.tx_dropped
}

/// One measured bulk transfer from the pairing's sender to its receiver in sluice-c1, with
/// the receiving engine's counters if an engine received.
fn transfer(
    pairing: Pairing,
    spec: EngineSpec,
    config: &Configure,
    timing: Timing,
) -> Result<(sluice_bench::Measurement, Option<EngineCounters>), BenchError> {
    let workload = Workload {
        kind: Kind::StreamDown,
        conns: 1,
    };
    let sender = if pairing.engine_sends() {
        ENGINE_IP
    } else {
        KERNEL_IP
    };
    if pairing.engine_receives() {
        let site = EngineSite {
            options: EngineOptions {
                iface: client_iface(RECEIVER_CLIENT),
                ip: RECEIVER_ENGINE_IP,
                netns: Some(client_ns(RECEIVER_CLIENT)),
                ..EngineOptions::lab(spec.backend)
            },
            configure: Arc::clone(config),
        };
        let (m, c) = run_client_counted(spec, site, workload, sender, PORTS.source, timing)?;
        Ok((m, Some(c)))
    } else {
        let target = SocketAddr::V4(SocketAddrV4::new(sender, PORTS.source));
        let m = run_loadgen(&client_ns(RECEIVER_CLIENT), workload, target, timing)?;
        Ok((m, None))
    }
}
