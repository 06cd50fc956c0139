//! `sluice experiment fairness`: 1 to 1024 bulk connections served at once by the engine
//! (sluice-a) and by Linux kernel TCP (sluice-k) to Linux clients in sluice-b, in one run;
//! per-connection throughput (median and 1st percentile) and Jain's fairness index
//! (flextoe.txt Figure 16: Linux's index drops to 0.36 at 2K connections).

use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use clap::Args;
use sluice_engine::setup::Backend;
use sluice_lab::{ENGINE_IP, KERNEL_IP, NS_CLIENT, NS_KERNEL};

use crate::error::ExperimentError;
use crate::flows::quantile;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, Report};
use crate::{lab_workload, Common, LabRun};
use sluice_bench::{
    run_loadgen, EngineServer, EngineSpec, KernelServers, Kind, Timing, Workload, PORTS,
};

/// `sluice experiment fairness`.
#[derive(Args, Debug)]
pub struct FairnessArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
    /// Connection counts (default 1,4,16,64,256,1024; with --quick 1,16,128).
    #[arg(long, value_delimiter = ',')]
    pub conns: Vec<usize>,
    /// The engine's device backend: af_xdp, af_packet or tap.
    #[arg(long, default_value = "af_packet")]
    pub backend: Backend,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// Per-connection throughput of one run.
#[derive(Clone, Copy, Debug)]
struct Shares {
    total_gbps: f64,
    median_mbps: f64,
    p1_mbps: f64,
    jain: f64,
}

/// Jain's fairness index of `x`: (sum x)^2 / (n * sum x^2); 1 is perfectly fair.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (x.len() as f64 * squares)
}

fn shares(per_conn_bytes: &[u64], seconds: f64, conns: usize) -> Result<Shares, ExperimentError> {
    if per_conn_bytes.len() != conns {
        return Err(ExperimentError::Workload(format!(
            "{} of {conns} connections reported",
            per_conn_bytes.len()
        )));
    }
    let mut mbps: Vec<f64> = per_conn_bytes
        .iter()
        .map(|&b| b as f64 * 8.0 / seconds.max(1e-9) / 1e6)
        .collect();
    Ok(Shares {
        total_gbps: mbps.iter().sum::<f64>() / 1e3,
        jain: jain(&mbps),
        median_mbps: quantile(&mut mbps, 0.5),
        p1_mbps: quantile(&mut mbps, 0.01),
    })
}

/// Runs the experiment in the lab and builds its report.
pub fn run(args: &FairnessArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let counts = if !args.conns.is_empty() {
        args.conns.clone()
    } else if quick {
        vec![1, 16, 128]
    } else {
        vec![1, 4, 16, 64, 256, 1024]
    };
    if counts.iter().any(|&n| n == 0 || n > 4096) {
        return Err(ExperimentError::Usage("--conns: each in 1..=4096".into()));
    }
    let timing = args.lab.timing(quick);
    let rows = args.lab.in_lab(
        "fairness",
        |lab| {
            lab.up().map_err(|e| lab_workload(&e))?;
            sluice_bench::prepare(lab).map_err(|e| lab_workload(&e))
        },
        |_| measure(args.backend, &counts, timing),
    )?;
    let mut report = Report {
        name: "fairness".into(),
        setup: vec![
            format!(
                "sluice experiment fairness: N bulk connections from one server to Linux clients \
                 in sluice-b (sluice loadgen stream-down, a thread per connection), {} s after {} s warm-up",
                timing.seconds, timing.warmup
            ),
            format!(
                "  engine: sluice-a, {:?} backend; linux: sluice kserve in sluice-k; {} shared CPU cores",
                args.backend,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        ],
        columns: [
            "conns", "side", "total Gbit/s", "median Mbit/s", "p1 Mbit/s", "p1/median", "Jain",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        notes: vec!["target: Jain's index >= 0.95 at 1024 connections".into()],
        ..Report::default()
    };
    let mut series = vec![
        Series {
            name: "engine".into(),
            points: Vec::new(),
        },
        Series {
            name: "linux".into(),
            points: Vec::new(),
        },
    ];
    for (n, engine, linux) in rows {
        for (side, s, line) in [("engine", engine, 0), ("linux", linux, 1)] {
            report.rows.push(vec![
                n.to_string(),
                side.to_string(),
                fmt_num(s.total_gbps),
                fmt_num(s.median_mbps),
                fmt_num(s.p1_mbps),
                format!("{:.2}", s.p1_mbps / s.median_mbps),
                format!("{:.3}", s.jain),
            ]);
            series[line].points.push(((n as f64).log2(), s.jain));
        }
    }
    report.plot = Some(Plot {
        title: "Jain's fairness index of per-connection throughput".into(),
        x_label: "connections".into(),
        y_label: "Jain's index".into(),
        x_categories: Some((0..=12).map(|p| (1u32 << p).to_string()).collect()),
        series,
    });
    Ok(report)
}

/// Every connection count on the engine and on Linux.
fn measure(
    backend: Backend,
    counts: &[usize],
    timing: Timing,
) -> Result<Vec<(usize, Shares, Shares)>, ExperimentError> {
    let bench = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
    let run = |ip, n| -> Result<Shares, ExperimentError> {
        let w = Workload {
            kind: Kind::StreamDown,
            conns: n,
        };
        let target = SocketAddr::V4(SocketAddrV4::new(ip, PORTS.source));
        eprintln!("sluice experiment fairness: {n} connections to {target}");
        let m = run_loadgen(NS_CLIENT, w, target, timing).map_err(|e| bench(&e))?;
        shares(&m.per_conn_bytes, m.seconds, n)
    };
    let mut engine_rows = Vec::new();
    let server = EngineServer::start(EngineSpec {
        backend,
        idle_before_sleep: Some(Duration::from_micros(100)),
    })
    .map_err(|e| bench(&e))?;
    std::thread::sleep(Duration::from_millis(200));
    for &n in counts {
        engine_rows.push(run(ENGINE_IP, n)?);
    }
    server.stop().map_err(|e| bench(&e))?;
    let kernel = KernelServers::start(NS_KERNEL).map_err(|e| bench(&e))?;
    let mut rows = Vec::new();
    for (&n, e) in counts.iter().zip(engine_rows) {
        rows.push((n, e, run(KERNEL_IP, n)?));
    }
    drop(kernel);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_and_shares() {
        assert!((jain(&[1.0, 1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        // One connection of n takes everything: 1/n.
        assert!((jain(&[4.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert!(jain(&[]).is_nan());
        let s = shares(&[1_000_000, 2_000_000, 3_000_000], 1.0, 3).unwrap();
        assert!((s.total_gbps - 0.048).abs() < 1e-9);
        assert!((s.median_mbps - 16.0).abs() < 1e-9);
        assert!((s.p1_mbps - 8.0).abs() < 1e-9);
        assert!(shares(&[1, 2], 1.0, 3).is_err());
    }
}
