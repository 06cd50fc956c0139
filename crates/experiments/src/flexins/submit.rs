//! flexins-pipe's first table (flexins.txt Figure 15's shape): work-request submission
//! through the notification pipe against the doorbell design, for N QPs in one context.
//! The application on engine 0 posts 64 B signaled RDMA WRITEs round-robin over its QPs
//! to their peers on engine 1: one at a time for latency (post -> completion), then a
//! window of them for throughput, with the initiating engine's thread CPU per WRITE.

use std::time::Instant;

use sluice::verbs::{send_flags, wc_status, SendData, SendOp, SendWr, Sge};
use sluice_bench::{cpu_seconds, current_thread_stat};

use super::engines::{Engines, IPS};
use super::verbs_side::{connect_all, Mode, VerbsSide, MAX_SEND_WR};
use crate::error::ExperimentError;
use crate::flows::quantile;

/// Bytes per WRITE.
pub const SIZE: usize = 64;
/// WRITEs outstanding in the throughput phase (over consecutive QPs).
pub const WINDOW: usize = MAX_SEND_WR as usize;

/// One (mode, QPs) point.
#[derive(Clone, Debug)]
pub struct SubmitPoint {
    /// Doorbell or pipe.
    pub mode: Mode,
    /// QPs in the context.
    pub qps: usize,
    /// Median time spent in the post call, microseconds.
    pub post_us_p50: f64,
    /// Median post -> completion, microseconds (one WRITE at a time).
    pub lat_us_p50: f64,
    /// 99th percentile post -> completion, microseconds.
    pub lat_us_p99: f64,
    /// WRITEs completed in both phases.
    pub writes: u64,
    /// Throughput phase: WRITEs per second.
    pub ops_per_s: f64,
    /// Throughput phase: the initiating engine's thread CPU per WRITE, microseconds.
    pub engine_cpu_us: f64,
    /// Throughput phase: the application thread's CPU per WRITE, microseconds.
    pub app_cpu_us: f64,
    /// Doorbells the initiating engine counted per WRITE (0 with pipes).
    pub doorbells_per_op: f64,
    /// Pipe lines the initiating engine took per WRITE (0 with doorbells).
    pub pipe_lines_per_op: f64,
    /// Every completion succeeded, in order, and every target slot holds its source.
    pub exact: bool,
    /// The first thing that was not (a completion or a slot), if any.
    pub mismatch: Option<String>,
}

fn pattern(k: usize) -> Vec<u8> {
    (0..SIZE)
        .map(|i| {
            (k as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(i as u32 % 31) as u8
                ^ i as u8
        })
        .collect()
}

fn write_wr(a: &VerbsSide, b: &VerbsSide, k: usize, wr_id: u64) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::Write {
            remote_addr: b.mr.addr() + (SIZE * k) as u64,
            rkey: b.mr.key(),
        },
        flags: send_flags::SIGNALED,
        data: SendData::Sge(Sge {
            addr: a.mr.addr() + (SIZE * k) as u64,
            length: SIZE as u32,
            lkey: a.mr.key(),
        }),
    }
}

fn post(a: &VerbsSide, wr: &SendWr<'_>, k: usize) -> Result<(), ExperimentError> {
    a.qps[k]
        .post_send(std::slice::from_ref(wr))
        .map_err(|e| ExperimentError::Workload(format!("post on QP {k}: {e:?}")))
}

/// Measures one point: `latency_ops` WRITEs one at a time, then `throughput_ops` with
/// [`WINDOW`] outstanding.
pub fn measure(
    engines: &Engines,
    mode: Mode,
    qps: usize,
    latency_ops: u64,
    throughput_ops: u64,
) -> Result<SubmitPoint, ExperimentError> {
    let mr_len = (SIZE * qps).max(4096);
    let a = VerbsSide::open(&engines.sockets[0], mode, qps, mr_len)?;
    let b = VerbsSide::open(&engines.sockets[1], mode, qps, mr_len)?;
    connect_all(&a, IPS[0], &b, IPS[1])?;
    for k in 0..qps {
        a.mr.write_at(SIZE * k, &pattern(k))
            .map_err(|e| ExperimentError::Workload(format!("source slot: {e}")))?;
    }
    let mut mismatch: Option<String> = None;
    let mut note = |what: String| {
        mismatch.get_or_insert(what);
    };

    // Latency: one WRITE at a time, QP after QP.
    let (mut post_us, mut lat_us) = (Vec::new(), Vec::new());
    for i in 0..latency_ops {
        let k = i as usize % qps;
        let wr = write_wr(&a, &b, k, i);
        let t0 = Instant::now();
        post(&a, &wr, k)?;
        post_us.push(t0.elapsed().as_secs_f64() * 1e6);
        let wc = a.next_completion()?;
        lat_us.push(t0.elapsed().as_secs_f64() * 1e6);
        if wc.status != wc_status::SUCCESS || wc.wr_id != i {
            note(format!("WRITE {i} on QP {k}: completion {wc:?}"));
        }
    }

    // Throughput: WINDOW outstanding over consecutive QPs; each completion posts the next.
    let before = engines.counters_when(0, super::verbs_side::WAIT, |_| true);
    let app_stat = current_thread_stat();
    let (app0, eng0) = (cpu_seconds(&app_stat), engines.cpu(0));
    let t0 = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    // Per-QP order holds; the CQ interleaves QPs, so completions are checked as a set.
    let mut outstanding = std::collections::VecDeque::new();
    while done < throughput_ops {
        while posted < throughput_ops && outstanding.len() < WINDOW {
            let k = (posted as usize) % qps;
            let id = latency_ops + posted;
            post(&a, &write_wr(&a, &b, k, id), k)?;
            outstanding.push_back(id);
            posted += 1;
        }
        let wc = a.next_completion()?;
        match outstanding.iter().position(|&id| id == wc.wr_id) {
            Some(at) if wc.status == wc_status::SUCCESS => {
                outstanding.remove(at);
            }
            _ => {
                note(format!(
                    "window: completion {wc:?}, waiting {outstanding:?}"
                ));
                outstanding.pop_front();
            }
        }
        done += 1;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let (app_cpu, eng_cpu) = (cpu_seconds(&app_stat) - app0, engines.cpu(0) - eng0);
    let after = engines.counters_when(0, super::verbs_side::WAIT, |c| match mode {
        Mode::Doorbell => c.verbs_doorbells >= before.verbs_doorbells + throughput_ops,
        Mode::Pipe => c.verbs_pipe_lines >= before.verbs_pipe_lines + throughput_ops,
    });
    // Both phases start at QP 0.
    for k in 0..qps.min(latency_ops.max(throughput_ops) as usize) {
        let mut got = vec![0u8; SIZE];
        b.mr.read_at(SIZE * k, &mut got)
            .map_err(|e| ExperimentError::Workload(format!("target slot: {e}")))?;
        if got != pattern(k) {
            note(format!("target slot {k} differs"));
        }
    }
    let per = |v: u64| v as f64 / throughput_ops.max(1) as f64;
    Ok(SubmitPoint {
        mode,
        qps,
        post_us_p50: quantile(&mut post_us, 0.5),
        lat_us_p50: quantile(&mut lat_us, 0.5),
        lat_us_p99: quantile(&mut lat_us, 0.99),
        writes: latency_ops + done,
        ops_per_s: done as f64 / seconds.max(1e-9),
        engine_cpu_us: eng_cpu * 1e6 / done.max(1) as f64,
        app_cpu_us: app_cpu * 1e6 / done.max(1) as f64,
        doorbells_per_op: per(after.verbs_doorbells - before.verbs_doorbells),
        pipe_lines_per_op: per(after.verbs_pipe_lines - before.verbs_pipe_lines),
        exact: mismatch.is_none(),
        mismatch,
    })
}
