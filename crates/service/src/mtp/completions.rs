//! From the transport to the applications (docs/mtp.md "Messages in service mode"): its
//! events become send completions, whole messages are copied into posted buffers, and
//! completions go into each endpoint's completion queue while it has room; an armed queue
//! that gets one is disarmed and its eventfd signalled.

use std::sync::atomic::{fence, Ordering};

use sluice_mtp::stack::{EndpointId, Event, FailReason};
use sluice_shm::mtp::{CqeKind, MtpCqe, MtpStatus};
use sluice_shm::Region;

use std::collections::HashMap;

use super::objects::{locate, EpRec, Mem, MtpApp};
use super::Mtp;
use crate::counters::Counters;

/// The arm word's value asking for the next completion.
const ARM_NEXT: u32 = 1;

/// Turns the transport's events into completions, places waiting messages in posted
/// buffers and completions in completion queues; calls `placed(app)` for each application
/// that got completions (its sleepers are woken).
pub(crate) fn deliver(m: &mut Mtp, counters: &mut Counters, mut placed: impl FnMut(u32)) {
    // Bounded by the transport's event queue.
    while let Some(ev) = m.core.stack.poll_event() {
        let (ep, msg_id, status) = match ev {
            Event::Readable { ep } => {
                if let Some(rec) = endpoint(m, ep.0) {
                    rec.readable = true;
                }
                continue;
            }
            Event::Delivered { ep, msg_id, .. } => (ep, msg_id, MtpStatus::Success),
            Event::Failed { ep, msg_id, reason } => (
                ep,
                msg_id,
                match reason {
                    FailReason::Timeout => MtpStatus::Timeout,
                    FailReason::Unbound => MtpStatus::Flushed,
                },
            ),
        };
        let Some(rec) = endpoint(m, ep.0) else {
            // Its endpoint was unbound (or its application left): nobody to tell.
            continue;
        };
        let Some(s) = rec.sending.remove(&msg_id) else {
            continue;
        };
        if status == MtpStatus::Success {
            counters.mtp_sent += 1;
        } else {
            counters.mtp_failed += 1;
        }
        rec.made.push_back(MtpCqe {
            kind: CqeKind::Sent,
            status,
            cookie: s.cookie,
            msg_id,
            len: s.len,
            peer: s.dst,
            priority: 0,
            tc: 0,
        });
    }
    let stack = &mut m.core.stack;
    for (&app, a) in m.apps.iter_mut() {
        let mut any = false;
        let MtpApp {
            mems, eps, queues, ..
        } = a;
        for (&ep, rec) in eps.iter_mut() {
            if !rec.posted.is_empty() && (rec.readable || rec.held.is_some()) {
                receive(mems, rec, ep, stack, counters);
            }
            any |= flush(&queues.region, rec, counters);
        }
        if any {
            placed(app);
        }
    }
}

fn endpoint(m: &mut Mtp, ep: u32) -> Option<&mut EpRec> {
    let app = *m.owners.get(&ep)?;
    m.apps.get_mut(&app)?.eps.get_mut(&ep)
}

/// Copies whole messages into the oldest posted buffers. A buffer too short for the
/// message completes `BufferTooSmall` and the message waits for the next one.
fn receive(
    mems: &HashMap<u32, Mem>,
    rec: &mut EpRec,
    ep: u32,
    stack: &mut sluice_mtp::stack::MtpStack,
    counters: &mut Counters,
) {
    while let Some(&buf) = rec.posted.front() {
        let Some(msg) = rec
            .held
            .take()
            .or_else(|| stack.recv_message(EndpointId(ep)))
        else {
            rec.readable = false;
            return;
        };
        rec.posted.pop_front();
        let len = msg.data.len() as u32;
        let mut c = MtpCqe {
            kind: CqeKind::Received,
            status: MtpStatus::Success,
            cookie: buf.cookie,
            msg_id: msg.msg_id,
            len,
            peer: msg.src,
            priority: msg.priority,
            tc: msg.tc,
        };
        let placed = (msg.data.len() <= buf.len as usize)
            .then(|| locate(mems, buf.key, buf.addr, len))
            .flatten()
            .is_some_and(|(mem, at)| mem.file.write_at(at, &msg.data));
        if placed {
            counters.mtp_received += 1;
        } else {
            // Too short, or its memory was unregistered since: the message stays.
            c.status = if msg.data.len() > buf.len as usize {
                MtpStatus::BufferTooSmall
            } else {
                MtpStatus::BadMemory
            };
            counters.mtp_bad_entries += 1;
            rec.held = Some(msg);
        }
        rec.made.push_back(c);
    }
}

/// Moves waiting completions into the completion queue while it has room; whether any
/// were placed.
fn flush(region: &Region, rec: &mut EpRec, counters: &mut Counters) -> bool {
    if rec.dead || rec.made.is_empty() {
        return false;
    }
    let Ok(room) = rec.cq_out.free() else {
        // The application wrote a head out of bounds: the queue is not served any more.
        counters.corrupt_queues += 1;
        rec.dead = true;
        rec.made.clear();
        return false;
    };
    let mut n = 0;
    while n < room {
        let Some(c) = rec.made.pop_front() else {
            break;
        };
        let _ = rec.cq_out.push(&c.encode());
        n += 1;
    }
    if n == 0 {
        return false;
    }
    counters.mtp_completions += n;
    if let (Some(fd), Some(arm)) = (&rec.eventfd, region.verbs_arm(rec.queues[2])) {
        // Pairs with the application's fence between arming and checking the queue once
        // more: either it sees these completions, or this sees its arm.
        fence(Ordering::SeqCst);
        let disarmed = arm
            .compare_exchange(ARM_NEXT, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if disarmed && fd.notify(rec.token) {
            counters.mtp_events += 1;
        }
    }
    true
}
