//! Completions from the transport to the applications' completion queues (docs/verbs.md
//! "Completions", "Completion events"): while a CQ's verbs queue has room, its
//! completions are encoded there; an armed queue that gets a matching one is disarmed and
//! its completion channel signalled.

use std::sync::atomic::{fence, Ordering};

use sluice_rdma::verbs::{WcOpcode, WcStatus, WorkCompletion};
use std::collections::HashMap;
use std::sync::atomic::AtomicU32;

use sluice_shm::verbs::pipe::PipeCqe;
use sluice_shm::verbs::wqe::wc_flags;
use sluice_shm::verbs::Cqe;

use super::objects::{CqRec, PipeSet, QpRec, VerbsApp};
use super::Verbs;
use crate::counters::Counters;

/// The arm word's values (ibv_req_notify_cq): the next completion, or the next solicited.
const ARM_NEXT: u32 = 1;
const ARM_SOLICITED: u32 = 2;

fn cqe_of(wc: &WorkCompletion) -> Cqe {
    // An OFFLOAD the transport carried but whose handler failed (a non-zero status in imm)
    // is an error completion for the application: REM_OP_ERR, the status kept in imm. The
    // transport's QPs stay in RTS (docs/offload.md "Through the engine's service").
    let status = match (wc.opcode, wc.status, wc.imm) {
        (WcOpcode::Offload, WcStatus::Success, Some(s)) if s != 0 => WcStatus::RemOpErr,
        (_, s, _) => s,
    };
    Cqe {
        wr_id: wc.wr_id,
        status: status as u32 as u8,
        opcode: wc.opcode as u32 as u8,
        flags: if wc.imm.is_some() {
            wc_flags::WITH_IMM
        } else {
            0
        },
        byte_len: wc.byte_len,
        // Back to network order, as the application posted it.
        imm: wc.imm.unwrap_or(0).to_be(),
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
    }
}

/// Places what the transport completed into the applications' completion queues; calls
/// `placed(app)` for each application that got completions (its sleepers are woken).
///
/// Only the CQs that got completions are visited (the transport's ready list, the service's
/// own completions, and what a full queue left behind last time), not every CQ: engine CPU
/// stays flat in the number of idle CQs.
pub(crate) fn deliver(v: &mut Verbs, counters: &mut Counters, mut placed: impl FnMut(u32)) {
    // The scratch lists are kept between iterations: no allocation once warm.
    let mut wcs = std::mem::take(&mut v.wcs);
    let mut ready = std::mem::take(&mut v.ready_cqs);
    let mut left = std::mem::take(&mut v.ready_spare);
    left.clear();
    v.rdma.stack.take_ready_cqs(&mut ready);
    ready.sort_unstable();
    ready.dedup();
    for &cq in &ready {
        let Some((&app, a)) = v.apps.iter_mut().find(|(_, a)| a.cqs.contains_key(&cq)) else {
            continue;
        };
        let VerbsApp {
            cqs, pipes, qps, ..
        } = a;
        let Some(rec) = cqs.get_mut(&cq) else {
            continue;
        };
        if rec.dead {
            continue;
        }
        let room = match &rec.producer {
            Some(p) => p.free(),
            // Pipe mode: what every live completion pipe of the application can take
            // (a CQ's completions may come from QPs on any of them).
            None => Ok(pipes_room(pipes, counters)),
        };
        let Ok(room) = room else {
            // The application wrote a head out of bounds: the queue is not served
            // any more (it harms only that application).
            counters.corrupt_queues += 1;
            rec.dead = true;
            continue;
        };
        let mut n = 0;
        let mut fire = false;
        if room > 0 {
            wcs.clear();
            let _ = v.rdma.stack.poll_cq(cq, room as usize, &mut wcs);
            let mut out = Out {
                cq,
                pipes,
                qps,
                counters,
            };
            for wc in &wcs {
                let solicited = wc.solicited || wc.status != WcStatus::Success;
                fire |= push(rec, &cqe_of(wc), solicited, &mut out);
                n += 1;
            }
            // Then the service's own (bad or flushed entries), as room allows.
            while n < room {
                let Some(c) = rec.made.pop_front() else { break };
                fire |= push(rec, &c, true, &mut out);
                n += 1;
            }
        }
        if v.rdma.stack.cq_len(cq) > 0 || !rec.made.is_empty() {
            // The queue was full: visit it again next time.
            left.push(cq);
        }
        if n > 0 {
            counters.verbs_completions += n;
            placed(app);
        }
        if fire {
            if let Some(fd) = &rec.eventfd {
                if fd.notify(rec.token) {
                    counters.verbs_events += 1;
                } else {
                    // A channel nobody reads is full: its reader has events waiting.
                    counters.verbs_events_dropped += 1;
                }
            }
        }
    }
    wcs.clear();
    v.wcs = wcs;
    ready.clear();
    v.ready_spare = ready;
    v.ready_cqs = left;
}

/// The entries every live completion pipe of an application can take now (0 without
/// any); a pipe whose head the application wrote out of bounds is no longer served.
fn pipes_room(pipes: &mut [PipeSet], counters: &mut Counters) -> u64 {
    let mut room = None;
    for p in pipes.iter_mut().filter(|p| !p.dead) {
        match p.completions.credit() {
            Ok(c) => room = Some(room.map_or(c, |r: u64| r.min(c))),
            Err(_) => {
                counters.corrupt_queues += 1;
                p.dead = true;
            }
        }
    }
    room.unwrap_or(0)
}

/// Where a pipe-mode CQ's completions go: the completion pipe of each one's QP.
struct Out<'a> {
    cq: u32,
    pipes: &'a mut [PipeSet],
    qps: &'a HashMap<u32, QpRec>,
    counters: &'a mut Counters,
}

/// Pushes one completion; whether it fires the armed notification (which it disarms).
fn push(rec: &mut CqRec, cqe: &Cqe, solicited: bool, out: &mut Out<'_>) -> bool {
    // Room was checked: this cannot fail short of a corrupt head, counted by the caller.
    match rec.producer.as_mut() {
        Some(p) => {
            let _ = p.push(&cqe.encode());
        }
        None => {
            let set = out
                .qps
                .get(&cqe.qp_num)
                .and_then(|q| q.pipe.as_ref())
                .map(|p| p.set);
            let pushed = set.and_then(|s| out.pipes.get_mut(s)).is_some_and(|p| {
                !p.dead
                    && p.completions
                        .push(
                            &PipeCqe {
                                cq: out.cq,
                                cqe: *cqe,
                            }
                            .encode(),
                        )
                        .unwrap_or(false)
            });
            if !pushed {
                out.counters.verbs_pipe_unrouted += 1;
                return false;
            }
        }
    }
    if rec.eventfd.is_none() {
        return false;
    }
    let arm: Option<&AtomicU32> = if rec.producer.is_some() {
        rec.region.verbs_arm(rec.queue)
    } else {
        rec.region.pipe_arm(rec.queue)
    };
    let Some(arm) = arm else {
        return false;
    };
    // Pairs with the application's fence between arming and checking the queue once
    // more: either it sees this completion, or this sees its arm.
    fence(Ordering::SeqCst);
    let armed = arm.load(Ordering::Acquire);
    let matches = armed == ARM_NEXT || (armed == ARM_SOLICITED && solicited);
    matches
        && arm
            .compare_exchange(armed, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
}
