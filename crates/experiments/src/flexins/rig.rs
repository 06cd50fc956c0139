//! Two RDMA stacks on two threads over an in-memory device pair: the requester posts WRITEs
//! of one size from cycled source slots to cycled target slots and keeps a few outstanding
//! per QP; the responder places them. A run reports what it moved, its wall and CPU time,
//! the stacks' bytes touched and whether every target slot holds its source's bytes.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_bench::{cpu_seconds, current_thread_stat};
use sluice_device::{pair, Device, PairConfig, PairEnd, TxFrame};
use sluice_rdma::qp::{QpCounters, Remote, SendOp, SendWr, Sge, VecMemory};
use sluice_rdma::stack::{
    PeerAddr, QpAttr, RdmaStack, RxPath, StackConfig, StackCounters, Touched, TxPath,
};
use sluice_rdma::verbs::{Access, Key, PdId, Region, WcStatus, WorkCompletion};
use sluice_wire::EthernetAddress;

use crate::error::ExperimentError;

/// Where registered memory starts, as the application sees it.
const BASE: u64 = 0x1000_0000;
/// Path MTU code (IBV_MTU_4096).
const PATH_MTU: u8 = 5;
/// The device's largest frame: a 4096-byte payload and every header.
const MAX_FRAME: usize = 4224;
/// Source slots the requester cycles through.
const SOURCE_SLOTS: u64 = 64;

/// One run's parameters.
#[derive(Clone, Copy, Debug)]
pub struct RunSpec {
    /// The requester's transmit path.
    pub tx_path: TxPath,
    /// The responder's receive path.
    pub rx_path: RxPath,
    /// Queue pairs.
    pub qps: usize,
    /// Bytes per WRITE.
    pub size: u64,
    /// The responder's target memory, cycled through in slots of `size`.
    pub working_set: u64,
    /// WRITEs outstanding per QP.
    pub depth: usize,
    /// WRITEs in all at most (the run stops posting at this count or at `budget`).
    pub messages: u64,
    /// How long the requester posts at most.
    pub budget: Duration,
}

/// What a run did.
#[derive(Clone, Copy, Debug)]
pub struct RunResult {
    /// WRITEs completed.
    pub messages: u64,
    /// Payload bytes completed.
    pub bytes: u64,
    /// Wall time from the first post to the last completion.
    pub seconds: f64,
    /// The requester's thread CPU seconds.
    pub tx_cpu: f64,
    /// The responder's thread CPU seconds.
    pub rx_cpu: f64,
    /// The requester stack's counters.
    pub requester: StackCounters,
    /// The responder stack's counters.
    pub responder: StackCounters,
    /// The requester's QP counters, summed. The pair holds more frames than both windows,
    /// so a retransmission means a thread starved past the ACK timeout.
    pub requester_qps: QpCounters,
    /// Every target slot written holds its source slot's bytes.
    pub exact: bool,
}

impl RunResult {
    /// Payload throughput, Gbit/s.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e9
    }

    /// The requester's CPU per message, microseconds.
    pub fn tx_cpu_us_per_msg(&self) -> f64 {
        self.tx_cpu * 1e6 / self.messages.max(1) as f64
    }

    /// The responder's CPU per message, microseconds.
    pub fn rx_cpu_us_per_msg(&self) -> f64 {
        self.rx_cpu * 1e6 / self.messages.max(1) as f64
    }

    /// Transmit-side bytes touched.
    pub fn tx_touch(&self) -> Touched {
        self.requester.tx_touch
    }

    /// Receive-side bytes touched.
    pub fn rx_touch(&self) -> Touched {
        self.responder.rx_touch
    }
}

/// One side: a stack, its memory, its CQ, QPs and key.
struct Side {
    stack: RdmaStack,
    mem: VecMemory,
    cq: u32,
    qpns: Vec<u32>,
    key: Key,
    addr: PeerAddr,
}

fn err(what: &str, e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Workload(format!("{what}: {e}"))
}

fn side(n: u8, spec: &RunSpec, mem: VecMemory) -> Result<Side, ExperimentError> {
    let addr = PeerAddr {
        ip: Ipv4Addr::new(10, 21, 0, n),
        mac: EthernetAddress([2, 0, 0, 0, 0x21, n]),
    };
    let mut stack = RdmaStack::new(StackConfig {
        // Unpaced: the experiment measures the data path, not DCQCN.
        line_rate_bps: 0,
        max_inflight: 128,
        tx_path: spec.tx_path,
        rx_path: spec.rx_path,
        ..StackConfig::new(addr.mac, addr.ip)
    });
    let cq = stack.create_cq(4096).map_err(|e| err("create_cq", e))?;
    let key = stack
        .reg_mr(Region {
            pd: PdId(1),
            addr: BASE,
            len: mem.0.len() as u64,
            access: Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
            backing: 0,
            offset: 0,
        })
        .map_err(|e| err("reg_mr", e))?;
    let qpns = (0..spec.qps)
        .map(|_| stack.create_qp(PdId(1), cq, cq, 1024, 16))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err("create_qp", e))?;
    Ok(Side {
        stack,
        mem,
        cq,
        qpns,
        key,
        addr,
    })
}

/// RESET -> INIT -> RTR -> RTS of `s`'s QP `i` towards `peer`'s.
fn connect(s: &mut Side, i: usize, peer: &Side) -> Result<(), ExperimentError> {
    let attr = QpAttr {
        access: 0b111,
        path_mtu: PATH_MTU,
        dest_qpn: peer.qpns[i],
        rq_psn: 0x100,
        sq_psn: 0x100,
        // 268 ms: the pair loses nothing, so only a starved thread (a loaded machine)
        // reaches it.
        timeout: 16,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        peer: Some(peer.addr),
        ..QpAttr::default()
    };
    s.stack
        .connect_rc(&mut s.mem, s.qpns[i], &attr)
        .map_err(|e| err("modify_qp", e))?;
    Ok(())
}

/// One engine round: frames in, due timers, frames out; whether anything moved.
fn pump(s: &mut Side, dev: &mut PairEnd, t0: Instant) -> Result<bool, ExperimentError> {
    let now = t0.elapsed().as_nanos() as u64;
    let (stack, mem) = (&mut s.stack, &mut s.mem);
    let got = dev
        .receive(&mut |f, _| stack.handle_frame(now, mem, f))
        .map_err(|e| err("receive", e))?;
    if stack.poll_timeout().is_some_and(|t| t <= now) {
        stack.handle_timeout(now, mem);
    }
    let mut sent = 0;
    loop {
        let mut produced = false;
        let queued = dev
            .transmit_with(&mut |buf| {
                let n = stack.poll_transmit(now, mem, buf)?;
                produced = true;
                Some(TxFrame::plain(n))
            })
            .map_err(|e| err("transmit", e))?;
        if queued && produced {
            sent += 1;
            continue;
        }
        if !queued {
            dev.flush().map_err(|e| err("flush", e))?;
            continue;
        }
        break;
    }
    dev.flush().map_err(|e| err("flush", e))?;
    Ok(got > 0 || sent > 0)
}

/// A byte pattern for source slot memory (distinct per slot and position).
fn pattern(len: usize) -> VecMemory {
    VecMemory(
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
            .collect(),
    )
}

/// Runs one point: the requester on this thread's helper, the responder on another.
pub fn run(spec: RunSpec) -> Result<RunResult, ExperimentError> {
    if spec.size == 0 || spec.qps == 0 || spec.depth == 0 || spec.working_set < spec.size {
        return Err(ExperimentError::Usage(
            "size, QPs and depth must be positive, the working set at least one slot".into(),
        ));
    }
    let target_slots = spec.working_set / spec.size;
    let source_slots = SOURCE_SLOTS.min(target_slots);
    let mut a = side(1, &spec, pattern((source_slots * spec.size) as usize))?;
    let mut b = side(
        2,
        &spec,
        VecMemory(vec![0; (target_slots * spec.size) as usize]),
    )?;
    for i in 0..spec.qps {
        connect(&mut a, i, &b)?;
        connect(&mut b, i, &a)?;
    }
    let (mut da, mut db) = pair(PairConfig {
        max_frame: MAX_FRAME,
        capacity: 1024,
        ..PairConfig::default()
    })
    .map_err(|e| err("device pair", e))?;
    let b_key = b.key;
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let responder = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<(Side, f64), ExperimentError> {
            let stat = current_thread_stat();
            let cpu0 = cpu_seconds(&stat);
            while !stop.load(Ordering::Acquire) {
                pump(&mut b, &mut db, t0)?;
            }
            Ok((b, cpu_seconds(&stat) - cpu0))
        })
    };
    let rkey = b_key;
    let requester = requester(
        &mut a,
        &mut da,
        &spec,
        rkey,
        (target_slots, source_slots),
        t0,
    );
    stop.store(true, Ordering::Release);
    let (b, rx_cpu) = responder
        .join()
        .map_err(|_| ExperimentError::Workload("the responder thread panicked".into()))??;
    let (messages, seconds, tx_cpu) = requester?;
    // Target slot j was last written from source slot j mod source_slots.
    let size = spec.size as usize;
    let written = messages.min(target_slots) as usize;
    let exact = (0..written).all(|j| {
        let s = (j % source_slots as usize) * size;
        b.mem.0[j * size..(j + 1) * size] == a.mem.0[s..s + size]
    });
    Ok(RunResult {
        messages,
        bytes: messages * spec.size,
        seconds,
        tx_cpu,
        rx_cpu,
        requester: a.stack.counters,
        responder: b.stack.counters,
        requester_qps: a.stack.qp_counters(),
        exact,
    })
}

/// The requester's loop: post, pump, reap; (messages, seconds, CPU seconds).
fn requester(
    a: &mut Side,
    dev: &mut PairEnd,
    spec: &RunSpec,
    rkey: Key,
    (target_slots, source_slots): (u64, u64),
    t0: Instant,
) -> Result<(u64, f64, f64), ExperimentError> {
    let stat = current_thread_stat();
    let cpu0 = cpu_seconds(&stat);
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut outstanding = vec![0usize; spec.qps];
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(256);
    let mut last_done = start;
    let mut idle_since: Option<Instant> = None;
    loop {
        let posting = posted < spec.messages && start.elapsed() < spec.budget;
        if !posting && done == posted {
            break;
        }
        if posting {
            for (q, out) in outstanding.iter_mut().enumerate() {
                while *out < spec.depth && posted < spec.messages {
                    let wr = SendWr {
                        wr_id: q as u64,
                        op: SendOp::Write {
                            remote: Remote {
                                addr: BASE + (posted % target_slots) * spec.size,
                                rkey,
                            },
                            imm: None,
                        },
                        sge: Sge {
                            addr: BASE + (posted % source_slots) * spec.size,
                            len: spec.size as u32,
                            lkey: a.key,
                        },
                        signaled: true,
                        solicited: false,
                    };
                    a.stack
                        .post_send(a.qpns[q], wr)
                        .map_err(|e| err("post_send", e))?;
                    *out += 1;
                    posted += 1;
                }
            }
        }
        let moved = pump(a, dev, t0)?;
        wcs.clear();
        a.stack
            .poll_cq(a.cq, 256, &mut wcs)
            .map_err(|e| err("poll_cq", e))?;
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(ExperimentError::Workload(format!(
                    "a WRITE completed with {:?}",
                    wc.status
                )));
            }
            outstanding[wc.wr_id as usize] -= 1;
            done += 1;
            last_done = Instant::now();
        }
        // A stuck run (a bug, not a slow machine: the ACK timeout is 268 ms) ends with an
        // error rather than a hang.
        if moved || !wcs.is_empty() {
            idle_since = None;
        } else if idle_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(10) {
            return Err(ExperimentError::Workload(format!(
                "no progress for 10 s with {} WRITEs outstanding",
                posted - done
            )));
        }
    }
    let seconds = last_done.duration_since(start).as_secs_f64();
    Ok((done, seconds, cpu_seconds(&stat) - cpu0))
}
