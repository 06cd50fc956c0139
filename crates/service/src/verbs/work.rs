//! Work requests from the verbs queues to the transport (docs/verbs.md "Posting"): on a
//! doorbell the engine takes a QP's receive and send entries while the transport has room,
//! copying inline data into the QP's inline buffer; a QP with entries left is retried each
//! iteration from a bounded list (one entry per QP), never by a scan of every QP.

use sluice_rdma::qp::{PostError, RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{QpAttr, VerbsError};
use sluice_rdma::verbs::{AttrMask, Key, QpState, WcOpcode, WcStatus};
use sluice_shm::verbs::wqe::{inline_entries, send_flags};
use sluice_shm::verbs::{Cqe, RecvWqe, SendWqe, WrOpcode, INLINE_CHUNK};
use sluice_shm::Payload;

use super::objects::QpRec;
use super::Verbs;
use crate::counters::Counters;

/// Where the work request id lies in a send or receive entry (docs/verbs.md), read from
/// an entry that does not decode so that its error completion still names it.
const WR_ID_AT: usize = 8;

fn wr_id_of(e: &Payload) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&e[WR_ID_AT..WR_ID_AT + 8]);
    u64::from_le_bytes(b)
}

/// What taking one entry came to.
enum Taken<W> {
    /// A work request for the transport.
    Work(W),
    /// A bad entry: complete it with this status (and the QP goes to ERR).
    Bad(u64, WcStatus, WcOpcode),
    /// Nothing (yet) to take.
    None,
}

/// `Command::QpDoorbell{qpn}` from the application at `app`: takes what its queues hold.
/// A QP it does not own is counted and ignored.
pub(crate) fn doorbell(v: &mut Verbs, app: u32, qpn: u32, counters: &mut Counters) {
    counters.verbs_doorbells += 1;
    let owned = v.apps.get(&app).is_some_and(|a| a.qps.contains_key(&qpn));
    if !owned {
        counters.verbs_not_owned += 1;
        return;
    }
    take(v, app, qpn, counters);
}

/// Takes again from the QPs that had entries left.
pub(crate) fn retry(v: &mut Verbs, counters: &mut Counters) {
    let list = std::mem::take(&mut v.retry);
    for &(app, qpn) in &list {
        if let Some(qp) = v.apps.get_mut(&app).and_then(|a| a.qps.get_mut(&qpn)) {
            qp.listed = false;
            take(v, app, qpn, counters);
        }
    }
    // Keep the allocation (swapped back when nothing was added meanwhile).
    if v.retry.is_empty() {
        let mut list = list;
        list.clear();
        v.retry = list;
    }
}

/// Moves a QP's receive then send entries into the transport while it takes them.
fn take(v: &mut Verbs, app: u32, qpn: u32, counters: &mut Counters) {
    let mut left = false;
    let mut errors: Vec<(u32, Cqe)> = Vec::new();
    {
        let Some(a) = v.apps.get_mut(&app) else {
            return;
        };
        let Some(qp) = a.qps.get_mut(&qpn) else {
            return;
        };
        let stack = &mut v.rdma.stack;
        let state = stack.qp_state(qpn).unwrap_or(QpState::Error);
        let mut failed = state == QpState::Error;
        // Receives: from INIT on.
        loop {
            let wr = match qp.held_recv.take() {
                Some(wr) => Taken::Work(wr),
                None => next_recv(qp, counters),
            };
            let (wr_id, status) = match wr {
                Taken::None => break,
                Taken::Bad(id, status, _) => (id, status),
                Taken::Work(wr) if failed => (wr.wr_id, WcStatus::WrFlushErr),
                Taken::Work(wr) => match stack.post_recv(qpn, wr) {
                    Ok(()) => continue,
                    Err(VerbsError::Post(PostError::WrongState)) if state == QpState::Reset => {
                        // Not yet: receives are taken from INIT on.
                        qp.held_recv = Some(wr);
                        break;
                    }
                    Err(VerbsError::Post(PostError::QueueFull)) => {
                        qp.held_recv = Some(wr);
                        left = true;
                        break;
                    }
                    Err(_) => (wr.wr_id, WcStatus::WrFlushErr),
                },
            };
            if status != WcStatus::WrFlushErr {
                failed = true;
            }
            errors.push((qp.recv_cq, made(wr_id, status, WcOpcode::Recv, qpn)));
        }
        // Sends: in RTS.
        loop {
            let wr = match qp.held_send.take() {
                Some(wr) => Taken::Work(wr),
                None => next_send(qp, &mut v.rdma.mem, counters),
            };
            let (wr_id, status, opcode) = match wr {
                Taken::None => break,
                Taken::Bad(id, status, op) => (id, status, op),
                Taken::Work(wr) if failed => (wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&wr)),
                Taken::Work(wr) => match stack.post_send(qpn, wr) {
                    Ok(()) => continue,
                    Err(VerbsError::Post(PostError::WrongState)) => {
                        // Before RTS: held until the modify that gets it there.
                        qp.held_send = Some(wr);
                        break;
                    }
                    Err(VerbsError::Post(PostError::QueueFull)) => {
                        qp.held_send = Some(wr);
                        left = true;
                        break;
                    }
                    Err(VerbsError::Post(PostError::TooLong)) => {
                        (wr.wr_id, WcStatus::LocLenErr, wc_opcode(&wr))
                    }
                    Err(_) => (wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&wr)),
                },
            };
            if status != WcStatus::WrFlushErr {
                failed = true;
            }
            errors.push((qp.send_cq, made(wr_id, status, opcode, qpn)));
        }
        qp.rq_in.publish();
        qp.sq_in.publish();
        if left && !qp.listed {
            qp.listed = true;
            v.retry.push((app, qpn));
        }
        if failed && state != QpState::Error {
            // A bad entry: the QP goes to ERR (what it holds completes flushed, before the
            // bad entry's own completion, which is made here).
            let _ = stack.modify_qp(
                &mut v.rdma.mem,
                qpn,
                QpState::Error,
                AttrMask::STATE,
                &QpAttr::default(),
            );
        }
        for (cq, cqe) in errors {
            if let Some(rec) = a.cqs.get_mut(&cq) {
                if rec.made.len() < rec.cqe as usize {
                    rec.made.push_back(cqe);
                } else {
                    counters.cq_overruns += 1;
                }
            }
        }
    }
}

fn made(wr_id: u64, status: WcStatus, opcode: WcOpcode, qpn: u32) -> Cqe {
    Cqe {
        wr_id,
        status: status as u8,
        opcode: opcode as u32 as u8,
        flags: 0,
        byte_len: 0,
        imm: 0,
        qp_num: qpn,
        src_qp: 0,
    }
}

fn wc_opcode(wr: &SendWr) -> WcOpcode {
    match wr.op {
        SendOp::Send { .. } => WcOpcode::Send,
        SendOp::Write { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        // Not posted through the service yet (docs/offload.md).
        SendOp::Offload { .. } => WcOpcode::Offload,
    }
}

fn sge(s: Option<sluice_shm::verbs::WqeSge>) -> Sge {
    s.map_or(
        Sge {
            addr: 0,
            len: 0,
            lkey: Key(0),
        },
        |s| Sge {
            addr: s.addr,
            len: s.length,
            lkey: Key(s.lkey),
        },
    )
}

fn next_recv(qp: &mut QpRec, counters: &mut Counters) -> Taken<RecvWr> {
    let Some(e) = qp.rq_in.pop() else {
        return Taken::None;
    };
    counters.wqes += 1;
    match RecvWqe::decode(&e) {
        Ok(w) => Taken::Work(RecvWr {
            wr_id: w.wr_id,
            sge: sge(w.sge),
        }),
        Err(_) => {
            counters.bad_wqes += 1;
            Taken::Bad(wr_id_of(&e), WcStatus::LocQpOpErr, WcOpcode::Recv)
        }
    }
}

fn next_send(
    qp: &mut QpRec,
    mem: &mut super::memory::Backings,
    counters: &mut Counters,
) -> Taken<SendWr> {
    let Some(e) = qp.sq_in.peek() else {
        return Taken::None;
    };
    let w = match SendWqe::decode(&e) {
        Ok(w) => w,
        Err(_) => {
            qp.sq_in.pop();
            counters.wqes += 1;
            counters.bad_wqes += 1;
            return Taken::Bad(wr_id_of(&e), WcStatus::LocQpOpErr, WcOpcode::Send);
        }
    };
    let inline_len = usize::from(w.inline_len);
    let chunks = inline_entries(inline_len) as u64;
    // Taken whole: the continuation entries may still be being written.
    if !qp.sq_in.has_entries(1 + chunks) {
        return Taken::None;
    }
    qp.sq_in.pop();
    counters.wqes += 1;
    let mut bytes = [0u8; sluice_shm::verbs::MAX_INLINE];
    let mut bad_chunk = false;
    for k in 0..chunks as usize {
        let c = qp.sq_in.pop().unwrap_or([0; sluice_shm::PAYLOAD_BYTES]);
        match SendWqe::inline_chunk(&c) {
            Ok(chunk) => {
                let at = k * INLINE_CHUNK;
                let n = (inline_len - at).min(INLINE_CHUNK);
                bytes[at..at + n].copy_from_slice(&chunk[..n]);
            }
            Err(_) => bad_chunk = true,
        }
    }
    let remote = Remote {
        addr: w.remote_addr,
        rkey: Key(w.rkey),
    };
    // imm_data is posted in network order; the transport takes it in host order.
    let imm = u32::from_be(w.imm);
    let op = match w.opcode {
        WrOpcode::RdmaWrite => SendOp::Write { remote, imm: None },
        WrOpcode::RdmaWriteWithImm => SendOp::Write {
            remote,
            imm: Some(imm),
        },
        WrOpcode::Send => SendOp::Send { imm: None },
        WrOpcode::SendWithImm => SendOp::Send { imm: Some(imm) },
        WrOpcode::RdmaRead => SendOp::Read { remote },
    };
    let opcode = match op {
        SendOp::Send { .. } => WcOpcode::Send,
        SendOp::Write { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::Offload { .. } => WcOpcode::Offload,
    };
    let inline = w.flags & send_flags::INLINE != 0;
    if bad_chunk || (inline && matches!(op, SendOp::Read { .. })) {
        counters.bad_wqes += 1;
        return Taken::Bad(w.wr_id, WcStatus::LocQpOpErr, opcode);
    }
    let sge = if inline {
        let Some((backing, key)) = qp.inline.filter(|_| inline_len <= qp.max_inline as usize)
        else {
            counters.bad_wqes += 1;
            return Taken::Bad(w.wr_id, WcStatus::LocLenErr, opcode);
        };
        // One slot per send the transport may hold, plus one: a slot is reused only after
        // the send that had it left the transport's queue (sends complete in order).
        let slots = u64::from(qp.max_send_wr) + 1;
        let at = (qp.sends_taken % slots) as usize * qp.max_inline as usize;
        mem.write_inline(backing, at, &bytes[..inline_len]);
        Sge {
            addr: at as u64,
            len: inline_len as u32,
            lkey: key,
        }
    } else {
        sge(w.sge)
    };
    qp.sends_taken += 1;
    Taken::Work(SendWr {
        wr_id: w.wr_id,
        op,
        sge,
        signaled: w.flags & send_flags::SIGNALED != 0,
        solicited: w.flags & send_flags::SOLICITED != 0,
    })
}
