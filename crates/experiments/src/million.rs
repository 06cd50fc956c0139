//! `sluice experiment million`: one server core holding many idle connections (issue 18
//! item 3), opened by stateless simulated peers in virtual time (sluice_sim::million).
//! Two runs, a baseline of 1,000 connections and `--conns`: for each, the connections
//! established, the server's resident memory (VmRSS before the core was made and after its
//! connections were up and idle), bytes per connection, the payload storage still
//! allocated, and the server's wall time per segment of a fixed echo workload on a few
//! more connections; then the ratio of the per-segment costs (issue 18's goal: <= 2x).

use clap::Args;
use sluice_sim::million::{self, MillionConfig, MillionReport};

use crate::error::ExperimentError;
use crate::report::{fmt_num, Report};
use crate::Common;

/// The baseline's connections.
const BASELINE: usize = 1000;

/// `sluice experiment million`.
#[derive(Args, Debug)]
pub struct MillionArgs {
    /// Output directory and seed (`--quick`: 20,000 connections unless `--conns`).
    #[command(flatten)]
    pub common: Common,
    /// Idle connections of the large run.
    #[arg(long)]
    pub conns: Option<usize>,
    /// Connections of the echo workload.
    #[arg(long, default_value_t = 8)]
    pub active: usize,
    /// Requests each echo connection sends.
    #[arg(long, default_value_t = 2000)]
    pub rounds: usize,
}

/// Runs the baseline and the large run and reports both.
pub fn run(args: &MillionArgs) -> Result<Report, ExperimentError> {
    let conns = args
        .conns
        .unwrap_or(if args.common.quick { 20_000 } else { 1_000_000 });
    let run = |n: usize| -> Result<MillionReport, ExperimentError> {
        million::run(&MillionConfig {
            conns: n,
            active: args.active,
            rounds: args.rounds,
            seed: args.common.seed,
        })
        .map_err(|e| ExperimentError::Workload(e.to_string()))
    };
    let base = run(BASELINE)?;
    let large = run(conns)?;
    let ratio = large.best_ns_per_segment / base.best_ns_per_segment.max(f64::MIN_POSITIVE);
    let ratio_all = large.ns_per_segment() / base.ns_per_segment().max(f64::MIN_POSITIVE);
    let state = large.state;
    let row = |r: &MillionReport| {
        let (rx, tx, pooled) = r.ring_bytes;
        vec![
            r.established.to_string(),
            fmt_num(r.rss_bytes as f64 / (1 << 20) as f64),
            fmt_num(r.bytes_per_connection()),
            (rx + tx).to_string(),
            pooled.to_string(),
            r.segments.to_string(),
            fmt_num(r.ns_per_segment()),
            fmt_num(r.best_ns_per_segment),
        ]
    };
    Ok(Report {
        name: "million".into(),
        setup: vec![
            format!(
                "one server core, idle connections from stateless simulated peers ({} source \
                 ports per address), then {} echo connections x {} requests of 64 B, seed {}",
                million::PEER_PORTS,
                args.active,
                args.rounds,
                args.common.seed
            ),
            "memory: VmRSS of this process after the connections are up and idle, minus \
             before the core was made; ns/segment: wall time in the server's calls per \
             segment it took in or sent during the echo workload (virtual-time simulation); \
             best block: the lowest over ten blocks of its round trips"
                .into(),
            format!(
                "once idle, the server's next timer of {} connections: {:?}",
                large.established, large.next_timer
            ),
            format!(
                "data-path state per connection: hot {} B (pre {}, protocol {}, post {}), \
                 scheduler {}, cold {}, rack {}; pooled rows of {} B x {} (an idle \
                 connection {} B)",
                state.hot(),
                state.pre,
                state.protocol,
                state.post,
                state.scheduler,
                state.cold,
                state.rack,
                state.pooled_row,
                state.pool_rows,
                state.idle()
            ),
        ],
        columns: [
            "connections",
            "RSS MiB",
            "B/conn",
            "ring bytes",
            "pooled bytes",
            "echo segments",
            "ns/segment",
            "best block",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![row(&base), row(&large)],
        notes: vec![format!(
            "ns/segment at {} over at {}: {:.2}x in the best blocks, {:.2}x over the whole \
             workloads (goal <= 2x)",
            large.established, base.established, ratio, ratio_all
        )],
        plot: None,
        data: None,
    })
}
