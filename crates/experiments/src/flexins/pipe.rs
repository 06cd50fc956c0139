//! `sluice experiment flexins-pipe` (flexins.txt 3.4 and 5.5, Figure 15's shape): two
//! engines running the service over the in-memory device pair, applications attached
//! through libsluice. Table `submit`: 64 B WRITE submission through the notification
//! pipe against the doorbell design for 1, 100 and 2,000 QPs in one context (post ->
//! completion latency, throughput, the engine's CPU per WRITE). Table `rtt64`: 64 B round
//! trips, the inline QP against a pipe QP's SEND/RECV, Sluice TCP and Linux TCP.

use clap::Args;

use super::engines::Engines;
use super::rtt::{self, Path, RttPoint};
use super::submit::{self, SubmitPoint};
use super::verbs_side::Mode;
use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::Common;

/// `sluice experiment flexins-pipe`.
#[derive(Args, Debug)]
pub struct PipeArgs {
    /// Output directory (`--quick`: 200 timed WRITEs, 1,000 in the window and 300 round
    /// trips per row).
    #[command(flatten)]
    pub common: Common,
    /// WRITEs timed one at a time per point (default 20,000; the window phase runs 10x).
    #[arg(long)]
    pub ops: Option<u64>,
}

/// Everything one run measured.
pub struct PipeResults {
    /// Table `submit`: doorbell then pipe at each QP count.
    pub submit: Vec<SubmitPoint>,
    /// Table `rtt64`: one point per path.
    pub rtt: Vec<RttPoint>,
}

/// The QP counts of the submission table.
pub const QP_COUNTS: [usize; 3] = [1, 100, 2000];

/// Runs both tables on one pair of engines.
pub fn measure(args: &PipeArgs) -> Result<PipeResults, ExperimentError> {
    let quick = args.common.quick;
    let lat_ops = args.ops.unwrap_or(if quick { 200 } else { 20_000 });
    let tput_ops = if quick { 1000 } else { 10 * lat_ops };
    let trips = if quick { 300 } else { lat_ops };
    let engines = Engines::start(args.common.seed)?;
    let mut out = PipeResults {
        submit: Vec::new(),
        rtt: Vec::new(),
    };
    for qps in QP_COUNTS {
        for mode in [Mode::Doorbell, Mode::Pipe] {
            out.submit
                .push(submit::measure(&engines, mode, qps, lat_ops, tput_ops)?);
        }
    }
    for path in Path::ALL {
        out.rtt.push(rtt::measure(&engines, path, trips)?);
    }
    Ok(out)
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "NO" }.into()
}

/// The table's rows: `submit` rows then `rtt64` rows.
pub fn rows(r: &PipeResults) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = r
        .submit
        .iter()
        .map(|p| {
            vec![
                "submit".into(),
                p.mode.name().into(),
                p.qps.to_string(),
                fmt_num(p.post_us_p50),
                fmt_num(p.lat_us_p50),
                fmt_num(p.lat_us_p99),
                fmt_num(p.ops_per_s / 1e3),
                fmt_num(p.engine_cpu_us),
                fmt_num(p.app_cpu_us),
                fmt_num(p.doorbells_per_op),
                yes(p.exact),
            ]
        })
        .collect();
    rows.extend(r.rtt.iter().map(|p| {
        vec![
            "rtt64".into(),
            p.path.name().into(),
            if p.path == Path::LinuxTcp { "-" } else { "1" }.into(),
            "-".into(),
            fmt_num(p.p50_us),
            fmt_num(p.p99_us),
            fmt_num(p.per_s / 1e3),
            p.engine_cpu_us.map_or("-".into(), fmt_num),
            fmt_num(p.app_cpu_us),
            "-".into(),
            yes(p.exact),
        ]
    }));
    rows
}

/// Ratios: pipe against doorbell at each QP count, each mode's 2,000 QPs against its 1,
/// and each round trip against the inline QP's.
pub fn notes(r: &PipeResults) -> Vec<String> {
    let mut notes = Vec::new();
    let at = |mode, qps| r.submit.iter().find(|p| p.mode == mode && p.qps == qps);
    for qps in QP_COUNTS {
        if let (Some(d), Some(p)) = (at(Mode::Doorbell, qps), at(Mode::Pipe, qps)) {
            notes.push(format!(
                "{qps} QPs, pipe/doorbell: p50 latency {}, throughput {}, engine CPU per WRITE {}",
                fmt_ratio(p.lat_us_p50, d.lat_us_p50),
                fmt_ratio(p.ops_per_s, d.ops_per_s),
                fmt_ratio(p.engine_cpu_us, d.engine_cpu_us),
            ));
        }
    }
    let (lo, hi) = (QP_COUNTS[0], QP_COUNTS[QP_COUNTS.len() - 1]);
    for mode in [Mode::Doorbell, Mode::Pipe] {
        if let (Some(a), Some(b)) = (at(mode, lo), at(mode, hi)) {
            notes.push(format!(
                "{}, {hi} QPs/{lo}: p50 latency {}, engine CPU per WRITE {} (flat is 1.00x)",
                mode.name(),
                fmt_ratio(b.lat_us_p50, a.lat_us_p50),
                fmt_ratio(b.engine_cpu_us, a.engine_cpu_us),
            ));
        }
    }
    if let Some(inline) = r.rtt.iter().find(|p| p.path == Path::InlineQp) {
        for p in r.rtt.iter().filter(|p| p.path != Path::InlineQp) {
            notes.push(format!(
                "64 B round trip, {}/inline QP: p50 {}, p99 {}",
                p.path.name(),
                fmt_ratio(p.p50_us, inline.p50_us),
                fmt_ratio(p.p99_us, inline.p99_us),
            ));
        }
    }
    notes
}

/// Figure 15's shape: p50 submission latency and engine CPU per WRITE against QPs.
pub fn plot(r: &PipeResults) -> Plot {
    let mut series = Vec::new();
    for mode in [Mode::Doorbell, Mode::Pipe] {
        let pts = || r.submit.iter().filter(move |p| p.mode == mode).enumerate();
        series.push(Series {
            name: format!("{} p50 latency", mode.name()),
            points: pts().map(|(i, p)| (i as f64, p.lat_us_p50)).collect(),
        });
        series.push(Series {
            name: format!("{} engine CPU/WRITE", mode.name()),
            points: pts().map(|(i, p)| (i as f64, p.engine_cpu_us)).collect(),
        });
    }
    Plot {
        title: "64 B WRITE submission: notification pipe vs doorbell".into(),
        x_label: "QPs in one context".into(),
        y_label: "microseconds".into(),
        x_categories: Some(QP_COUNTS.iter().map(|q| q.to_string()).collect()),
        series,
    }
}

/// The report of measured results.
pub fn report(r: &PipeResults) -> Report {
    Report {
        name: "flexins-pipe".into(),
        setup: vec![
            "two engines (the service) on two threads over an in-memory device pair, no lab; \
             one application attached to each through libsluice, RC QPs, path MTU 1024"
                .into(),
            "submit: 64 B signaled WRITEs round-robin over N QPs of one context; post us: \
             the post call; p50/p99: post -> completion one at a time; kops/s and CPU: \
             8 outstanding; engine CPU: the initiating engine's thread per WRITE"
                .into(),
            "doorbell: per-QP queues and a QpDoorbell per post; pipe: the context's \
             work-request pipe, polled by the engine (doorbells/op shows which)"
                .into(),
            "rtt64: one thread plays both ends (no wake-ups); engine CPU: both engines per \
             round trip; app CPU: the driving thread (Linux: the kernel's TCP work in it)"
                .into(),
        ],
        columns: [
            "table",
            "row",
            "QPs",
            "post us",
            "p50 us",
            "p99 us",
            "kops/s",
            "engine CPU us/op",
            "app CPU us/op",
            "doorbells/op",
            "exact",
        ]
        .map(String::from)
        .to_vec(),
        rows: rows(r),
        notes: notes(r),
        plot: Some(plot(r)),
        data: None,
    }
}

/// Runs the experiment and builds its report.
pub fn run(args: &PipeArgs) -> Result<Report, ExperimentError> {
    Ok(report(&measure(args)?))
}
