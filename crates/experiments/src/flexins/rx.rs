//! `sluice experiment flexins-rx` (flexins.txt 5.4, Figure 14's shape): 8 KB RDMA WRITEs
//! into a growing receive working set (target buffers cycled), direct placement from the
//! device's frame against a staging copy through an engine buffer, with the responder's
//! bytes touched per payload byte (from the stack's counters) and its CPU per message.

use std::time::Duration;

use clap::Args;
use sluice_rdma::stack::{RxPath, TxPath};

use super::rig::{self, RunResult, RunSpec};
use super::table::{rows_notes_series, Point, Side};
use super::tx::size_label;
use crate::error::ExperimentError;
use crate::plot::Plot;
use crate::report::Report;
use crate::Common;

/// Bytes per WRITE.
pub const SIZE: u64 = 8192;

/// `sluice experiment flexins-rx`.
#[derive(Args, Debug)]
pub struct RxArgs {
    /// Output directory (`--quick`: two working sets, 200 WRITEs each).
    #[command(flatten)]
    pub common: Common,
    /// Seconds per point (default 2).
    #[arg(long)]
    pub seconds: Option<f64>,
}

/// One measured point.
#[derive(Clone, Copy, Debug)]
pub struct RxPoint {
    /// The receive working set in bytes.
    pub working_set: u64,
    /// The receive path.
    pub path: RxPath,
    /// What the run did.
    pub result: RunResult,
}

/// The working sets measured.
pub fn working_sets(quick: bool) -> Vec<u64> {
    if quick {
        vec![64 << 10, 1 << 20]
    } else {
        vec![
            64 << 10,
            256 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
            64 << 20,
            256 << 20,
        ]
    }
}

/// A path's name in tables and legends.
pub fn rx_name(p: RxPath) -> &'static str {
    match p {
        RxPath::Direct => "direct",
        RxPath::Staging => "staging",
    }
}

/// Runs every working set on both paths.
pub fn measure(args: &RxArgs) -> Result<Vec<RxPoint>, ExperimentError> {
    let quick = args.common.quick;
    let mut out = Vec::new();
    for working_set in working_sets(quick) {
        for path in [RxPath::Direct, RxPath::Staging] {
            let result = rig::run(RunSpec {
                tx_path: TxPath::HeaderOnly,
                rx_path: path,
                qps: 2,
                size: SIZE,
                working_set,
                depth: 16,
                messages: if quick { 200 } else { u64::MAX },
                budget: Duration::from_secs_f64(args.seconds.unwrap_or(2.0)),
            })?;
            out.push(RxPoint {
                working_set,
                path,
                result,
            });
        }
    }
    Ok(out)
}

/// Runs the experiment and builds its report.
pub fn run(args: &RxArgs) -> Result<Report, ExperimentError> {
    let points = measure(args)?;
    let sets = working_sets(args.common.quick);
    let shown: Vec<Point<'_>> = points
        .iter()
        .map(|p| Point {
            x: size_label(p.working_set),
            path: rx_name(p.path),
            result: &p.result,
        })
        .collect();
    let (rows, notes, series) = rows_notes_series(
        Side::Rx,
        &shown,
        "direct/staging",
        [rx_name(RxPath::Direct), rx_name(RxPath::Staging)],
    );
    Ok(Report {
        name: "flexins-rx".into(),
        setup: vec![
            "two RDMA stacks on two threads over an in-memory device pair (no lab), 2 RC QPs, \
             path MTU 4096, 8 KB WRITEs 16 deep per QP into target slots cycled over the \
             working set, header-only TX, unpaced"
                .into(),
            "touched/B: the responder's bytes copied and read per payload byte (placement + \
             staging copy of the frame + ICRC pass, StackCounters::rx_touch); CPU: the \
             responder thread's per WRITE"
                .into(),
        ],
        columns: [
            "working set",
            "rx path",
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
            title: "8 KB RDMA WRITEs: direct RX placement vs staging".into(),
            x_label: "receive working set".into(),
            y_label: "Gbit/s".into(),
            x_categories: Some(sets.iter().map(|&s| size_label(s)).collect()),
            series,
        }),
        data: None,
    })
}
