//! `sluice experiment flexins-rx` (flexins.txt 5.4, Figure 14's shape): 8 KB RDMA WRITEs
//! into a growing receive working set (target buffers cycled), direct placement from the
//! device's frame against a staging copy through an engine buffer, with the responder's
//! bytes touched per payload byte (from the stack's counters) and its CPU per message.

use std::time::Duration;

use clap::Args;
use sluice_rdma::stack::{RxPath, TxPath};

use super::rig::{self, RunResult, RunSpec};
use super::tx::size_label;
use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
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
    let rows = points
        .iter()
        .map(|p| {
            let t = p.result.rx_touch();
            let per = |v: u64| fmt_num(v as f64 / t.payload.max(1) as f64);
            vec![
                size_label(p.working_set),
                rx_name(p.path).into(),
                p.result.messages.to_string(),
                fmt_num(p.result.gbps()),
                fmt_num(p.result.rx_cpu_us_per_msg()),
                fmt_num(t.per_payload_byte()),
                per(t.staging),
                per(t.icrc),
                p.result.requester_qps.retransmits.to_string(),
                if p.result.exact { "yes" } else { "NO" }.into(),
            ]
        })
        .collect();
    let mut notes = Vec::new();
    for pair in points.chunks(2) {
        if let [d, s] = pair {
            notes.push(format!(
                "{}: direct/staging throughput {}, bytes touched per payload byte {}",
                size_label(d.working_set),
                fmt_ratio(d.result.gbps(), s.result.gbps()),
                fmt_ratio(
                    d.result.rx_touch().per_payload_byte(),
                    s.result.rx_touch().per_payload_byte()
                ),
            ));
        }
    }
    let series = [RxPath::Direct, RxPath::Staging]
        .into_iter()
        .map(|path| Series {
            name: rx_name(path).into(),
            points: points
                .iter()
                .filter(|p| p.path == path)
                .enumerate()
                .map(|(i, p)| (i as f64, p.result.gbps()))
                .collect(),
        })
        .collect();
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
