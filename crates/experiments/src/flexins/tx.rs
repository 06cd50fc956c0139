//! `sluice experiment flexins-tx` (flexins.txt 5.3, Figure 12's shape): RDMA WRITE
//! throughput of 2 QPs for payloads of 64 B to 64 KB, header-only TX against the staging
//! copy, with the engine's bytes touched per payload byte (from the stack's counters) and
//! the requester's CPU per message.

use std::time::Duration;

use clap::Args;
use sluice_rdma::stack::{RxPath, TxPath};

use super::rig::{self, RunResult, RunSpec};
use super::table::{rows_notes_series, Point, Side};
use crate::error::ExperimentError;
use crate::plot::Plot;
use crate::report::Report;
use crate::Common;

/// `sluice experiment flexins-tx`.
#[derive(Args, Debug)]
pub struct TxArgs {
    /// Output directory (`--quick`: three sizes, 200 WRITEs each).
    #[command(flatten)]
    pub common: Common,
    /// Seconds per point (default 2).
    #[arg(long)]
    pub seconds: Option<f64>,
}

/// One measured point.
#[derive(Clone, Copy, Debug)]
pub struct TxPoint {
    /// Bytes per WRITE.
    pub size: u64,
    /// The transmit path.
    pub path: TxPath,
    /// What the run did.
    pub result: RunResult,
}

/// The payload sizes measured.
pub fn sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![64, 4096, 65536]
    } else {
        vec![64, 256, 1024, 4096, 16384, 65536]
    }
}

/// Runs every size on both paths.
pub fn measure(args: &TxArgs) -> Result<Vec<TxPoint>, ExperimentError> {
    let quick = args.common.quick;
    let mut out = Vec::new();
    for size in sizes(quick) {
        for path in [TxPath::HeaderOnly, TxPath::Staging] {
            let result = rig::run(RunSpec {
                tx_path: path,
                rx_path: RxPath::Direct,
                qps: 2,
                size,
                working_set: size * 64,
                depth: 32,
                messages: if quick { 200 } else { u64::MAX },
                budget: Duration::from_secs_f64(args.seconds.unwrap_or(2.0)),
            })?;
            out.push(TxPoint { size, path, result });
        }
    }
    Ok(out)
}

/// A path's name in tables and legends.
pub fn tx_name(p: TxPath) -> &'static str {
    match p {
        TxPath::HeaderOnly => "header-only",
        TxPath::Staging => "staging",
    }
}

/// A byte count as 64B, 4KB, 1MB.
pub fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KB", b >> 10),
        b => format!("{b}B"),
    }
}

/// Runs the experiment and builds its report.
pub fn run(args: &TxArgs) -> Result<Report, ExperimentError> {
    let points = measure(args)?;
    let sizes = sizes(args.common.quick);
    let shown: Vec<Point<'_>> = points
        .iter()
        .map(|p| Point {
            x: size_label(p.size),
            path: tx_name(p.path),
            result: &p.result,
        })
        .collect();
    let (rows, mut notes, series) = rows_notes_series(
        Side::Tx,
        &shown,
        "header-only/staging",
        [tx_name(TxPath::HeaderOnly), tx_name(TxPath::Staging)],
    );
    // TCP's half (issue 21 item 1): the same comparison for TCP sends, from the counters.
    let tcp_bytes = if args.common.quick { 1 << 20 } else { 16 << 20 };
    notes.extend(super::tcp::notes(&super::tcp::measure(
        &[64, 4096, 65536],
        tcp_bytes,
    )));
    Ok(Report {
        name: "flexins-tx".into(),
        setup: vec![
            "two RDMA stacks on two threads over an in-memory device pair (no lab), 2 RC QPs, \
             path MTU 4096, WRITEs 32 deep per QP from 64 cycled source slots, unpaced"
                .into(),
            "touched/B: the requester's bytes copied and read per payload byte (payload \
             gather + staging copy + ICRC pass, StackCounters::tx_touch); CPU: the requester \
             thread's per WRITE"
                .into(),
        ],
        columns: [
            "size",
            "tx path",
            "WRITEs",
            "Gbit/s",
            "CPU us/msg",
            "touched/B",
            "staging/B",
            "ICRC/B",
            "retx",
            "exact",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        notes,
        plot: Some(Plot {
            title: "RDMA WRITE throughput, 2 QPs: header-only TX vs staging".into(),
            x_label: "payload".into(),
            y_label: "Gbit/s".into(),
            x_categories: Some(sizes.iter().map(|&s| size_label(s)).collect()),
            series,
        }),
        data: None,
    })
}
