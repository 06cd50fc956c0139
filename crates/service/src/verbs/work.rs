//! Work requests from the verbs queues to the transport (docs/verbs.md "Posting"): on a
//! doorbell the engine takes a QP's receive and send entries while the transport has room,
//! copying inline data into the QP's inline buffer; a QP with entries left is retried each
//! iteration from a bounded list (one entry per QP), never by a scan of every QP.

use sluice_rdma::qp::{PostError, RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{QpAttr, VerbsError};
use sluice_rdma::verbs::{AttrMask, Key, QpState, WcOpcode, WcStatus};
use sluice_shm::verbs::pipe::{PipeRecv, PipeSend, PIPE_MAX_INLINE};
use sluice_shm::verbs::wqe::{inline_entries, send_flags};
use sluice_shm::verbs::{Cqe, RecvWqe, SendWqe, WrOpcode, INLINE_CHUNK};
use sluice_shm::Payload;

use super::memory::Backings;
use super::objects::{PipeQp, QpRec, Queued, VerbsApp};
use super::Verbs;
use crate::counters::Counters;

/// Lines the engine takes from one pipe per iteration at most: a busy context cannot
/// starve the others, and the work done per iteration stays bounded.
pub(crate) const PIPE_BUDGET: usize = 256;

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
        if let Some(q) = qp.rq_in.as_mut() {
            q.publish();
        }
        if let Some(q) = qp.sq_in.as_mut() {
            q.publish();
        }
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
                    v.ready_cqs.push(cq);
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

fn from_backlog<W>(q: Option<Queued<W>>) -> Taken<W> {
    match q {
        Some(Queued::Work(w)) => Taken::Work(w),
        Some(Queued::Bad(id, status, op)) => Taken::Bad(id, status, op),
        None => Taken::None,
    }
}

fn next_recv(qp: &mut QpRec, counters: &mut Counters) -> Taken<RecvWr> {
    if let Some(p) = qp.pipe.as_mut() {
        return from_backlog(p.recvs.pop_front());
    }
    let Some(e) = qp.rq_in.as_mut().and_then(|q| q.pop()) else {
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

fn next_send(qp: &mut QpRec, mem: &mut Backings, counters: &mut Counters) -> Taken<SendWr> {
    if let Some(p) = qp.pipe.as_mut() {
        return from_backlog(p.sends.pop_front());
    }
    let Some(sq) = qp.sq_in.as_mut() else {
        return Taken::None;
    };
    let Some(e) = sq.peek() else {
        return Taken::None;
    };
    let w = match SendWqe::decode(&e) {
        Ok(w) => w,
        Err(_) => {
            sq.pop();
            counters.wqes += 1;
            counters.bad_wqes += 1;
            return Taken::Bad(wr_id_of(&e), WcStatus::LocQpOpErr, WcOpcode::Send);
        }
    };
    let chunks = inline_entries(usize::from(w.inline_len)) as u64;
    // Taken whole: the continuation entries may still be being written.
    if !sq.has_entries(1 + chunks) {
        return Taken::None;
    }
    sq.pop();
    counters.wqes += 1;
    let mut lines = [[0u8; sluice_shm::PAYLOAD_BYTES]; MAX_CHUNKS];
    for line in lines.iter_mut().take(chunks as usize) {
        *line = sq.pop().unwrap_or([0; sluice_shm::PAYLOAD_BYTES]);
    }
    send_wr(qp, &w, &lines[..chunks as usize], 1, mem, counters)
}

/// Continuation lines of the longest inline request (a pipe's: one MTU).
const MAX_CHUNKS: usize = PIPE_MAX_INLINE.div_ceil(INLINE_CHUNK);

/// The transport's send work request for `w` with its inline continuation `lines`
/// (copied into the QP's inline buffer, whose slots number `slot_sets` x (max_send_wr +
/// 1)), or the error completion it makes.
fn send_wr(
    qp: &mut QpRec,
    w: &SendWqe,
    lines: &[Payload],
    slot_sets: u64,
    mem: &mut Backings,
    counters: &mut Counters,
) -> Taken<SendWr> {
    let inline_len = usize::from(w.inline_len);
    let mut bytes = [0u8; PIPE_MAX_INLINE];
    let mut bad_chunk = false;
    for (k, c) in lines.iter().enumerate() {
        match SendWqe::inline_chunk(c) {
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
        // IBV_WR_SLUICE_OFFLOAD (docs/offload.md): the response buffer rides in the remote
        // fields (a local region, checked by the transport at the response), the offload
        // opcode in imm as the application wrote it.
        WrOpcode::SluiceOffload => SendOp::Offload {
            opcode: w.imm,
            resp: Sge {
                addr: w.remote_addr,
                len: w.resp_len,
                lkey: Key(w.rkey),
            },
        },
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
        // the send that had it left the transport's queue (sends complete in order). Pipe
        // mode: and one per send its backlog holds.
        let slots = slot_sets * u64::from(qp.max_send_wr) + 1;
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

/// What one pipe line came to.
enum Line {
    /// Its continuation lines are not all there yet: the pipe waits.
    Wait,
    /// Taken; the QP it gave work to, if any.
    Took(Option<u32>),
}

/// Takes one line (and its continuations) from pipe `set` of `a` into its QP's backlog.
/// A line for a QP the application does not own, or not on this pipe, is counted and
/// dropped; garbage is counted and dropped; a request that does not decode, or past the
/// QP's backlog bound, completes in error (docs/verbs.md "Bad input").
fn take_line(
    a: &mut VerbsApp,
    set: usize,
    e: &Payload,
    mem: &mut Backings,
    counters: &mut Counters,
) -> Line {
    let pipe = &mut a.pipes[set].work;
    fn qp_of(
        qps: &mut std::collections::HashMap<u32, QpRec>,
        qpn: u32,
        set: usize,
    ) -> Option<&mut QpRec> {
        qps.get_mut(&qpn)
            .filter(|q| q.pipe.as_ref().is_some_and(|p| p.set == set))
    }
    if let Ok(r) = PipeRecv::decode(e) {
        pipe.pop();
        counters.wqes += u64::from(r.count);
        let Some(qp) = qp_of(&mut a.qps, r.qpn, set) else {
            counters.verbs_not_owned += 1;
            return Line::Took(None);
        };
        let p: &mut PipeQp = qp.pipe.as_mut().expect("filtered");
        for (k, b) in r.recvs.iter().take(usize::from(r.count)).enumerate() {
            let wr_id = u64::from(r.tag.wrapping_add(k as u32));
            if p.recvs.len() >= p.max_recv_wr as usize {
                counters.verbs_pipe_overposted += 1;
                p.recvs
                    .push_back(Queued::Bad(wr_id, WcStatus::LocQpOpErr, WcOpcode::Recv));
                continue;
            }
            let sge = if b.length == 0 {
                Sge {
                    addr: 0,
                    len: 0,
                    lkey: Key(0),
                }
            } else {
                Sge {
                    addr: b.addr,
                    len: b.length,
                    lkey: Key(r.lkey),
                }
            };
            p.recvs.push_back(Queued::Work(RecvWr { wr_id, sge }));
        }
        return Line::Took(Some(r.qpn));
    }
    let s = match PipeSend::decode(e) {
        Ok(s) => s,
        Err(_) => {
            pipe.pop();
            counters.bad_wqes += 1;
            // A request line that names a QP of this pipe but does not decode: the QP
            // learns of it by an error completion (and goes to ERR).
            if let Some(qpn) = PipeRecv::qpn_of(e) {
                if let Some(qp) = qp_of(&mut a.qps, qpn, set) {
                    let p = qp.pipe.as_mut().expect("filtered");
                    p.sends.push_back(Queued::Bad(
                        wr_id_of(e),
                        WcStatus::LocQpOpErr,
                        WcOpcode::Send,
                    ));
                    return Line::Took(Some(qpn));
                }
            }
            counters.verbs_pipe_garbage += 1;
            return Line::Took(None);
        }
    };
    let chunks = inline_entries(usize::from(s.wqe.inline_len));
    if !pipe.has_entries(1 + chunks as u64) {
        return Line::Wait;
    }
    pipe.pop();
    counters.wqes += 1;
    let mut lines = [[0u8; sluice_shm::PAYLOAD_BYTES]; MAX_CHUNKS];
    for line in lines.iter_mut().take(chunks) {
        *line = pipe.pop().unwrap_or([0; sluice_shm::PAYLOAD_BYTES]);
    }
    let Some(qp) = qp_of(&mut a.qps, s.qpn, set) else {
        counters.verbs_not_owned += 1;
        return Line::Took(None);
    };
    let backlog = qp.pipe.as_ref().map_or(0, |p| p.sends.len());
    let taken = if backlog >= qp.max_send_wr as usize {
        counters.verbs_pipe_overposted += 1;
        let op = match s.wqe.opcode {
            WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::SluiceOffload => WcOpcode::Offload,
            _ => WcOpcode::RdmaWrite,
        };
        Queued::Bad(s.wqe.wr_id, WcStatus::LocQpOpErr, op)
    } else {
        match send_wr(qp, &s.wqe, &lines[..chunks], 2, mem, counters) {
            Taken::Work(w) => Queued::Work(w),
            Taken::Bad(id, st, op) => Queued::Bad(id, st, op),
            Taken::None => return Line::Took(None),
        }
    };
    qp.pipe.as_mut().expect("filtered").sends.push_back(taken);
    Line::Took(Some(s.qpn))
}

/// Polls every work-request pipe (a bounded number of lines each) and moves what the
/// touched QPs got into the transport; whether any line was taken. No doorbell: the
/// engine looks at its pipes every iteration (flexins.txt 3.4).
pub(crate) fn poll_pipes(v: &mut Verbs, counters: &mut Counters) -> bool {
    let mut touched = std::mem::take(&mut v.touched);
    touched.clear();
    let mut any = false;
    for i in 0..v.pipe_apps.len() {
        let app = v.pipe_apps[i];
        let Some(a) = v.apps.get_mut(&app) else {
            continue;
        };
        let start = touched.len();
        for set in 0..a.pipes.len() {
            for _ in 0..PIPE_BUDGET {
                let Some(e) = a.pipes[set].work.peek() else {
                    break;
                };
                any = true;
                match take_line(a, set, &e, &mut v.rdma.mem, counters) {
                    // A request whose continuation lines are not all written yet is
                    // looked at again next time; it is counted once, when taken.
                    Line::Wait => break,
                    Line::Took(Some(qpn)) => {
                        counters.verbs_pipe_lines += 1;
                        if touched[start..].last() != Some(&qpn) {
                            touched.push(qpn);
                        }
                    }
                    Line::Took(None) => {
                        counters.verbs_pipe_lines += 1;
                    }
                }
            }
            // The producer learns of the room once per batch.
            a.pipes[set].work.publish();
        }
        touched[start..].sort_unstable();
        let mut prev = None;
        for &qpn in &touched[start..] {
            if prev != Some(qpn) {
                take(v, app, qpn, counters);
            }
            prev = Some(qpn);
        }
    }
    v.touched = touched;
    any
}
