//! `sluice experiment incast`: N bulk senders into one receiver through the software
//! switch's bottleneck port, with a concurrent 64 B RPC flow to the same receiver; DCTCP
//! against NewReno on the engine, side by side in one run (the shape of flextoe.txt
//! Table 4).
//!
//! ```text
//!  sluice-a: engine, the SENDERS ── br0 ── sw-up ┐
//!            (N connections, DCTCP or NewReno)  │ sluice switch (sluice-s)
//!  sluice-c2: Linux `sluice loadgen rpc` ─ sw-c2 ┤
//!            (the RPC flow, closed loop, 64 B)  │
//!  sluice-c1: engine, the RECEIVER ─────── sw-c1 ┘ ← the bottleneck: rate, queue-bytes,
//!            (sink + echo, DCTCP receiver)          ECN threshold K
//! ```
//!
//! - "N senders" are N connections of one engine in sluice-a, each a bulk sender (stream to
//!   the receiver's sink), not N hosts: two shared cores cannot run N engine processes. They
//!   still meet where incast happens, in the switch's egress queue towards the receiver.
//! - The receiver is a second engine, in sluice-c1, on sl-c1 (whose kernel address is
//!   removed, so Linux does not answer for it) at 10.77.0.101. It runs DCTCP, so it echoes
//!   CE per segment (RFC 8257 3.2) — the kernel here has no DCTCP, and a Linux receiver
//!   would latch ECE until CWR (RFC 3168). It accepts ECN only when the sender asks.
//! - The policy under test is the senders': DCTCP (ECN-capable, so the switch marks above K)
//!   against NewReno (not ECN-capable: above the queue's capacity the switch tail-drops).
//! - The RPC flow is a Linux client in sluice-c2 against the receiver's echo: its requests
//!   wait in the bottleneck queue behind the bulk data, its replies return uncongested.
//!   Its p99 with no senders (N = 0) is the unloaded reference.
//! - Per run the switch is started afresh and stopped with SIGTERM; its counters for the
//!   bottleneck port (tail drops, ECN marks, maximum queue depth) are parsed from its report.
//! - Per-connection throughput is what the receiver acknowledged (snd_una) over the measured
//!   window; Jain's index is over those N numbers.

mod senders;
mod switch_proc;

use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use clap::Args;
use sluice_bench::{run_loadgen, EngineServer, EngineSpec, Kind, Latency, Timing, Workload, PORTS};
use sluice_engine::setup::{Backend, EngineOptions, Transport};
use sluice_lab::presets::LabPreset;
use sluice_lab::{client_iface, client_ip, client_ns, Lab, NS_SWITCH, PREFIX_LEN};
use sluice_switch::PortReport;
use sluice_tcp::Algorithm;

use crate::error::ExperimentError;
use crate::fairness::jain;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::{lab_workload, Common, LabRun};
use senders::{Senders, IDLE_BEFORE_SLEEP};
use switch_proc::SwitchProc;

/// The receiver's client namespace (sluice-c1).
const RECEIVER: u8 = 1;
/// The RPC client's namespace (sluice-c2).
const RPC_CLIENT: u8 = 2;

/// `sluice experiment incast`.
#[derive(Args, Debug)]
pub struct IncastArgs {
    /// Size, output directory and seed (of the switch).
    #[command(flatten)]
    pub common: Common,
    /// Sender counts (default 1,2,4,8,16; with --quick 1,4,16).
    #[arg(long, value_delimiter = ',')]
    pub senders: Vec<usize>,
    /// The bottleneck's line rate (the switch's egress towards the receiver), bits/s.
    #[arg(long, default_value = "1g")]
    pub rate: String,
    /// The bottleneck queue's capacity in bytes (tail drop beyond).
    #[arg(long, default_value = "256k")]
    pub queue_bytes: String,
    /// The bottleneck's ECN marking threshold K in bytes.
    #[arg(long, default_value = "30k")]
    pub ecn_k: String,
    /// The engines' device backend: af_xdp, af_packet or tap.
    #[arg(long, default_value = "af_packet")]
    pub backend: Backend,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// The bottleneck port's counters from the switch's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames dropped because the queue was full.
    pub tail_drops: u64,
    /// Frames marked CE.
    pub ecn_marked: u64,
    /// Deepest the queue got, bytes.
    pub max_queue_bytes: u64,
    /// Frames sent out of the port.
    pub forwarded: u64,
}

/// Counters of `port` in `sluice switch`'s SIGTERM report (its last report line).
pub fn parse_port_counters(report: &str, port: &str) -> Option<PortCounters> {
    let r = PortReport::last_in(report, port)?.ok()?;
    let link = &r.stats.egress.link;
    Some(PortCounters {
        tail_drops: link.queue_drops,
        ecn_marked: link.ecn_marked,
        max_queue_bytes: link.max_queue_bytes as u64,
        forwarded: r.stats.forwarded,
    })
}

/// One measured cell: N senders under one policy (N = 0: the RPC flow alone).
#[derive(Clone, Debug)]
struct Cell {
    senders: usize,
    policy: &'static str,
    gbps: f64,
    jain: f64,
    rpc: Latency,
    rpc_ops: u64,
    switch: PortCounters,
    timeouts: u64,
}

/// The policies compared: (name, the senders' algorithm).
const POLICIES: [(&str, Algorithm); 2] =
    [("dctcp", Algorithm::Dctcp), ("newreno", Algorithm::NewReno)];

/// Runs the experiment in the switched lab and builds its report.
pub fn run(args: &IncastArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let counts = if !args.senders.is_empty() {
        args.senders.clone()
    } else if quick {
        vec![1, 4, 16]
    } else {
        vec![1, 2, 4, 8, 16]
    };
    if counts.iter().any(|&n| n == 0 || n > 1024) {
        return Err(ExperimentError::Usage("--senders: each in 1..=1024".into()));
    }
    if args.backend == Backend::Sim {
        return Err(ExperimentError::Usage(
            "incast runs in the lab: --backend sim is not supported".into(),
        ));
    }
    let timing = args.lab.timing(quick);
    let bottleneck = format!(
        "{NS_SWITCH}:{}",
        sluice_lab::switched::switch_port(RECEIVER)
    );
    let port_spec = format!(
        "{bottleneck},rate={},queue-bytes={},ecn-k={}",
        args.rate, args.queue_bytes, args.ecn_k
    );
    let setup = Setup {
        backend: args.backend,
        port_spec: port_spec.clone(),
        bottleneck: bottleneck.clone(),
        seed: args.common.seed,
        timing,
    };
    let cells = args.lab.in_lab(
        "incast",
        |lab| {
            lab.up_switched(RPC_CLIENT)
                .and_then(|()| prepare(lab))
                .map_err(|e| lab_workload(&e))
        },
        |_| measure(&setup, &counts),
    )?;
    Ok(build_report(args, &setup, &cells))
}

/// What every run shares.
struct Setup {
    backend: Backend,
    port_spec: String,
    bottleneck: String,
    seed: u64,
    timing: Timing,
}

/// The receiver's namespace loses its kernel address (the engine answers there instead);
/// the RPC client's ports stay above the servers'.
fn prepare(lab: &Lab) -> Result<(), sluice_lab::LabError> {
    let ns = client_ns(RECEIVER);
    lab.ip_in(&ns, &["addr", "flush", "dev", &client_iface(RECEIVER)])?;
    let rpc = client_ns(RPC_CLIENT);
    lab.sysctl(&rpc, "net.ipv4.ip_local_port_range", "10000 65535")?;
    Ok(())
}

/// The receiver engine's options: sl-c1 in sluice-c1 at the client's address, DCTCP.
fn receiver_options(backend: Backend) -> EngineOptions {
    EngineOptions {
        iface: client_iface(RECEIVER),
        ip: client_ip(RECEIVER),
        prefix: PREFIX_LEN,
        netns: Some(client_ns(RECEIVER)),
        transport: Transport {
            congestion_control: Algorithm::Dctcp,
            ..Transport::default()
        },
        ..EngineOptions::lab(backend)
    }
}

/// Every cell: the unloaded RPC flow, then each sender count under each policy
/// (interleaved, so slow drift of the machine hits both alike).
fn measure(setup: &Setup, counts: &[usize]) -> Result<Vec<Cell>, ExperimentError> {
    let bench = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    let spec = EngineSpec {
        backend: setup.backend,
        idle_before_sleep: Some(IDLE_BEFORE_SLEEP),
    };
    let receiver =
        EngineServer::start_with(receiver_options(setup.backend), spec).map_err(|e| bench(&e))?;
    std::thread::sleep(Duration::from_millis(200));
    let mut cells = vec![cell(setup, 0, "unloaded", None)?];
    for &n in counts {
        for (name, algorithm) in POLICIES {
            cells.push(cell(setup, n, name, Some(algorithm))?);
        }
    }
    receiver.stop().map_err(|e| bench(&e))?;
    Ok(cells)
}

/// One run: a fresh switch, N senders (if any) and the RPC flow beside them.
fn cell(
    setup: &Setup,
    n: usize,
    policy: &'static str,
    algorithm: Option<Algorithm>,
) -> Result<Cell, ExperimentError> {
    let bench = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    eprintln!("sluice experiment incast: {n} senders, {policy}");
    let switch = SwitchProc::start(&setup.port_spec, setup.seed)?;
    let senders = match algorithm {
        Some(a) if n > 0 => Some(Senders::start(
            setup.backend,
            a,
            n,
            client_ip(RECEIVER),
            setup.timing,
        )?),
        _ => None,
    };
    let rpc_target = SocketAddr::V4(SocketAddrV4::new(client_ip(RECEIVER), PORTS.echo));
    let rpc = run_loadgen(
        &client_ns(RPC_CLIENT),
        Workload {
            kind: Kind::Rpc,
            conns: 1,
        },
        rpc_target,
        setup.timing,
    )
    .map_err(|e| bench(&e));
    let bulk = senders.map(Senders::finish).transpose();
    let report = switch.stop()?;
    let (rpc, bulk) = (rpc?, bulk?);
    let switch = parse_port_counters(&report, &setup.bottleneck).ok_or_else(|| {
        ExperimentError::Workload(format!(
            "no counters for {} in the switch's report:\n{report}",
            setup.bottleneck
        ))
    })?;
    let latency = rpc.latency.ok_or_else(|| {
        ExperimentError::Workload(format!(
            "the RPC flow completed no request ({n} senders, {policy})"
        ))
    })?;
    let (gbps, jain_index, timeouts) = match bulk {
        Some(b) => {
            let mbps: Vec<f64> = b
                .per_conn_bytes
                .iter()
                .map(|&x| x as f64 * 8.0 / b.seconds.max(1e-9) / 1e6)
                .collect();
            (mbps.iter().sum::<f64>() / 1e3, jain(&mbps), b.timeouts)
        }
        None => (0.0, f64::NAN, 0),
    };
    Ok(Cell {
        senders: n,
        policy,
        gbps,
        jain: jain_index,
        rpc: latency,
        rpc_ops: rpc.ops,
        switch,
        timeouts,
    })
}

fn build_report(args: &IncastArgs, setup: &Setup, cells: &[Cell]) -> Report {
    let timing = setup.timing;
    let unloaded = cells
        .iter()
        .find(|c| c.senders == 0)
        .map_or(f64::NAN, |c| c.rpc.p99_us);
    let mut report = Report {
        name: "incast".into(),
        setup: vec![
            format!(
                "sluice experiment incast: N bulk senders (N connections of the engine in sluice-a) \
                 into one receiver (the engine in sluice-c1) through sluice switch's port towards it: \
                 rate {}, queue {} B, ECN K {} B",
                args.rate, args.queue_bytes, args.ecn_k
            ),
            format!(
                "  beside them a 64 B closed-loop RPC flow (Linux, sluice-c2) to the receiver's echo; \
                 {} s after {} s warm-up per run; {:?} backend; {} shared CPU cores",
                timing.seconds,
                timing.warmup,
                setup.backend,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        ],
        columns: [
            "senders",
            "policy",
            "Gbit/s",
            "Jain",
            "rpc p50 us",
            "rpc p99 us",
            "p99/unloaded",
            "rpc ops",
            "tail drops",
            "ECN marks",
            "max queue KB",
            "RTOs",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Report::default()
    };
    let mut series: Vec<Series> = POLICIES
        .iter()
        .map(|(name, _)| Series {
            name: (*name).into(),
            points: Vec::new(),
        })
        .collect();
    let mut reference = Series {
        name: "unloaded".into(),
        points: Vec::new(),
    };
    for c in cells {
        report.rows.push(vec![
            c.senders.to_string(),
            c.policy.to_string(),
            fmt_num(c.gbps),
            if c.jain.is_finite() {
                format!("{:.3}", c.jain)
            } else {
                "n/a".into()
            },
            fmt_num(c.rpc.p50_us),
            fmt_num(c.rpc.p99_us),
            fmt_ratio(c.rpc.p99_us, unloaded),
            c.rpc_ops.to_string(),
            c.switch.tail_drops.to_string(),
            c.switch.ecn_marked.to_string(),
            fmt_num(c.switch.max_queue_bytes as f64 / 1024.0),
            c.timeouts.to_string(),
        ]);
        if c.senders > 0 {
            let x = (c.senders as f64).log2();
            if let Some(s) = series.iter_mut().find(|s| s.name == c.policy) {
                s.points.push((x, c.rpc.p99_us));
            }
            reference.points.push((x, unloaded));
        }
    }
    reference.points.dedup_by(|a, b| a.0 == b.0);
    series.push(reference);
    let largest = cells.iter().map(|c| c.senders).max().unwrap_or(0);
    let verdict = cells
        .iter()
        .find(|c| c.senders == largest && c.policy == "dctcp" && largest > 0)
        .map(|c| {
            let ratio = c.rpc.p99_us / unloaded;
            let met = c.switch.tail_drops == 0 && ratio <= 2.0;
            format!(
                "measured: DCTCP at incast {largest}: {} tail drops, RPC p99 x{ratio:.2} of unloaded \
                 -> {}",
                c.switch.tail_drops,
                if met { "met" } else { "NOT met" }
            )
        });
    report.notes.push(
        "target: with DCTCP at incast 16, no tail drops and RPC p99 within 2x its unloaded value"
            .into(),
    );
    report.notes.extend(verdict);
    report.plot = Some(Plot {
        title: "p99 latency of an RPC flow beside N bulk senders".into(),
        x_label: "senders".into(),
        y_label: "RPC p99 (us)".into(),
        x_categories: Some((0..=10).map(|p| (1u32 << p).to_string()).collect()),
        series,
    });
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_switch_report() {
        let report = "sluice switch: port sluice-s:sw-c1 rate=1000000000bit/s queue_bytes=262144\n\
            sluice switch: ready, 3 ports\n\
            sluice switch: port sluice-s:sw-up rx=5 rx_bytes=300 forwarded=9 forwarded_bytes=1 \
            tail_drops=1 ecn_marked=2 lost=0 max_queue_bytes=3\n\
            sluice switch: port sluice-s:sw-c1 rx=5 rx_bytes=300 forwarded=1234 \
            forwarded_bytes=1 tail_drops=7 ecn_marked=42 lost=0 lost_random=0 \
            max_queue_bytes=31000 max_queue_packets=21\n";
        assert_eq!(
            parse_port_counters(report, "sluice-s:sw-c1"),
            Some(PortCounters {
                tail_drops: 7,
                ecn_marked: 42,
                max_queue_bytes: 31000,
                forwarded: 1234,
            })
        );
        assert_eq!(parse_port_counters(report, "sluice-s:sw-c2"), None);
        assert_eq!(parse_port_counters("garbage", "sluice-s:sw-c1"), None);
    }
}
