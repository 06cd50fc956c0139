//! The control-path verbs (docs/verbs.md "Control path"): every request checked against
//! what the application owns (ENOENT otherwise), answered with a [`VerbsReply`].

use std::collections::VecDeque;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use sluice_rdma::stack::{PeerAddr, QpAttr, VerbsError};
use sluice_rdma::verbs::{Access, AttrMask, Key, PdId, QpState, Region as MrRegion, RegisterError};
use sluice_shm::verbs::pipe::PIPE_MAX_INLINE;
use sluice_shm::verbs::{QpAttrs, VerbsReply, VerbsRequest, MAX_INLINE};
use sluice_shm::{
    Consumer, EventFd, MappedFile, PipeConsumer, PipeKind, PipeProducer, Producer, ShmError,
};
use sluice_tcp::{Instant, Stack};

use super::memory::Backing;
use super::objects::{CqRec, PipeQp, PipeSet, QpRec, VerbsApp};
use super::work;
use super::Verbs;
use crate::counters::Counters;
use crate::queues::VerbsQueues;

type Reply = Result<VerbsReply, Errno>;

/// Answers `req` from the application at `app` (whose verbs queues are `queues`), with the
/// descriptors that came with it. Refusals are counted.
#[allow(clippy::too_many_arguments)]
pub(crate) fn request(
    v: &mut Verbs,
    app: u32,
    queues: &VerbsQueues,
    req: VerbsRequest,
    fds: Vec<OwnedFd>,
    stack: &mut Stack,
    now: Instant,
    counters: &mut Counters,
) -> VerbsReply {
    counters.verbs_requests += 1;
    let a = v
        .apps
        .entry(app)
        .or_insert_with(|| VerbsApp::new(queues.clone()));
    let r = match req {
        VerbsRequest::QueryDevice => Ok(VerbsReply::Device(v.device)),
        VerbsRequest::AllocPd => {
            if v.pds >= v.limits.max_pds {
                Err(Errno::ENOMEM)
            } else {
                let pd = v.next_pd;
                v.next_pd = v.next_pd.wrapping_add(1).max(1);
                v.pds += 1;
                a.pds.insert(pd);
                Ok(VerbsReply::Pd { pd })
            }
        }
        VerbsRequest::DeallocPd { pd } => {
            if !a.pds.contains(&pd) {
                Err(Errno::ENOENT)
            } else if a.pd_in_use(pd) {
                Err(Errno::EBUSY)
            } else {
                a.pds.remove(&pd);
                v.pds -= 1;
                Ok(VerbsReply::Done)
            }
        }
        VerbsRequest::RegMr {
            pd,
            addr,
            len,
            access,
            file_offset,
        } => reg_mr(v, app, pd, addr, len, access, file_offset, fds),
        VerbsRequest::DeregMr { key } => match a.mrs.remove(&key) {
            None => Err(Errno::ENOENT),
            Some((_, backing)) => {
                let _ = v.rdma.stack.dereg_mr(Key(key));
                v.rdma.mem.remove(backing);
                Ok(VerbsReply::Done)
            }
        },
        VerbsRequest::CreateCq { cqe, token } => create_cq(v, app, cqe, token, fds, false),
        VerbsRequest::CreatePipeCq { cqe, token } => create_cq(v, app, cqe, token, fds, true),
        VerbsRequest::DestroyCq { cq } => {
            if !a.cqs.contains_key(&cq) {
                Err(Errno::ENOENT)
            } else if a.cq_in_use(cq) {
                Err(Errno::EBUSY)
            } else {
                let rec = a.cqs.remove(&cq).expect("checked");
                if rec.producer.is_some() {
                    a.free_queue(rec.queue);
                } else {
                    a.arm_free.push(rec.queue);
                }
                let _ = v.rdma.stack.destroy_cq(cq);
                Ok(VerbsReply::Done)
            }
        }
        VerbsRequest::CreateQp {
            pd,
            send_cq,
            recv_cq,
            max_send_wr,
            max_recv_wr,
            max_inline,
        } => create_qp(
            v,
            app,
            pd,
            [send_cq, recv_cq],
            [max_send_wr, max_recv_wr],
            max_inline,
            None,
        ),
        VerbsRequest::CreatePipeQp {
            pd,
            send_cq,
            recv_cq,
            max_send_wr,
            max_recv_wr,
            max_inline,
            context,
        } => create_qp(
            v,
            app,
            pd,
            [send_cq, recv_cq],
            [max_send_wr, max_recv_wr],
            max_inline,
            Some(context),
        ),
        VerbsRequest::ModifyQp { qpn, mask, attrs } => {
            modify_qp(v, app, qpn, mask, &attrs, stack, now, counters)
        }
        VerbsRequest::QueryQp { qpn } => match a.qps.get(&qpn) {
            None => Err(Errno::ENOENT),
            Some(qp) => {
                let state = v.rdma.stack.qp_state(qpn).unwrap_or(QpState::Error) as u32;
                Ok(VerbsReply::QpAttrs(QpAttrs {
                    qp_state: state,
                    cur_qp_state: state,
                    ..qp.attrs
                }))
            }
        },
        VerbsRequest::DestroyQp { qpn } => match a.qps.remove(&qpn) {
            None => Err(Errno::ENOENT),
            Some(qp) => {
                v.offload.forget_qp(qpn);
                let _ = v.rdma.stack.destroy_qp(&mut v.rdma.mem, qpn);
                if let Some((backing, key)) = qp.inline {
                    let _ = v.rdma.stack.dereg_mr(key);
                    v.rdma.mem.remove(backing);
                }
                qp.sq.into_iter().chain(qp.rq).for_each(|q| a.free_queue(q));
                if let Some(p) = &qp.pipe {
                    a.pipes[p.set].qps -= 1;
                    let core = a.pipes[p.set].core as usize;
                    v.core_qps[core] = v.core_qps[core].saturating_sub(1);
                }
                Ok(VerbsReply::Done)
            }
        },
    };
    r.unwrap_or_else(|errno| {
        match errno {
            Errno::ENOENT => counters.verbs_not_owned += 1,
            Errno::EAGAIN => counters.verbs_arp_waits += 1,
            _ => counters.verbs_refused += 1,
        }
        VerbsReply::Failed {
            errno: errno as i32,
        }
    })
}

fn errno_of(e: VerbsError) -> Errno {
    match e {
        VerbsError::NoSuchCq | VerbsError::NoSuchQp => Errno::ENOENT,
        VerbsError::Limit | VerbsError::Register(RegisterError::Full) => Errno::ENOMEM,
        VerbsError::Busy => Errno::EBUSY,
        _ => Errno::EINVAL,
    }
}

#[allow(clippy::too_many_arguments)]
fn reg_mr(
    v: &mut Verbs,
    app: u32,
    pd: u32,
    addr: u64,
    len: u64,
    access: u32,
    file_offset: u64,
    mut fds: Vec<OwnedFd>,
) -> Reply {
    let a = v.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    if !a.pds.contains(&pd) {
        return Err(Errno::ENOENT);
    }
    if fds.len() != 1 || len == 0 || len > v.limits.max_mr_size {
        return Err(Errno::EINVAL);
    }
    let file = MappedFile::map(fds.remove(0), file_offset, len).map_err(|e| match e {
        ShmError::Sys { err, .. } => err,
        _ => Errno::EINVAL,
    })?;
    let backing = v.rdma.mem.add(Backing::File(std::sync::Arc::new(file)));
    let region = MrRegion {
        pd: PdId(pd),
        addr,
        len,
        access: Access(access),
        backing,
        offset: 0,
    };
    match v.rdma.stack.reg_mr(region) {
        Ok(key) => {
            a.mrs.insert(key.0, (pd, backing));
            Ok(VerbsReply::Mr { key: key.0 })
        }
        Err(e) => {
            v.rdma.mem.remove(backing);
            Err(errno_of(e))
        }
    }
}

fn create_cq(
    v: &mut Verbs,
    app: u32,
    cqe: u32,
    token: u64,
    mut fds: Vec<OwnedFd>,
    piped: bool,
) -> Reply {
    let a = v.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    if cqe == 0 || cqe > v.limits.max_cqe || fds.len() > 1 {
        return Err(Errno::EINVAL);
    }
    let eventfd = fds.pop().map(EventFd::from_owned);
    // The engine writes to it on its own thread: a descriptor that can block it is refused.
    if eventfd.as_ref().is_some_and(|e| !e.is_nonblocking()) {
        return Err(Errno::EINVAL);
    }
    let queue = if piped {
        a.take_arm_slot().ok_or(Errno::ENOMEM)?
    } else {
        let [queue] = a.take_queues::<1>().ok_or(Errno::ENOMEM)?;
        queue
    };
    let give_back = |a: &mut VerbsApp| {
        if piped {
            a.arm_free.push(queue);
        } else {
            a.free_queue(queue);
        }
    };
    let cq = match v.rdma.stack.create_cq(cqe as usize) {
        Ok(cq) => cq,
        Err(e) => {
            give_back(a);
            return Err(errno_of(e));
        }
    };
    let producer = if piped {
        None
    } else {
        Some(Producer::verbs(a.region.clone(), queue).ok_or(Errno::EINVAL)?)
    };
    a.cqs.insert(
        cq,
        CqRec {
            queue,
            producer,
            region: a.region.clone(),
            eventfd,
            token,
            cqe,
            dead: false,
            made: VecDeque::new(),
        },
    );
    Ok(VerbsReply::Cq { cq, queue, cqe })
}

/// The pipe set of `context` on the least loaded engine core (QPs counted per core over
/// every application), opened on first use; its index in the application's pipes.
fn place_on_pipe(v: &mut Verbs, app: u32, context: u32) -> Result<usize, Errno> {
    let a = v.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    let layout = a.region.layout();
    if context >= layout.max_contexts || layout.verbs_pipe_cores == 0 {
        return Err(Errno::EINVAL);
    }
    let cores = layout.verbs_pipe_cores as usize;
    if v.core_qps.len() < cores {
        v.core_qps.resize(cores, 0);
    }
    let core = (0..cores).min_by_key(|&c| v.core_qps[c]).unwrap_or(0) as u32;
    if let Some(i) = a
        .pipes
        .iter()
        .position(|p| p.context == context && p.core == core)
    {
        return Ok(i);
    }
    let (Some(work), Some(completions)) = (
        PipeConsumer::new(
            a.region.clone(),
            context,
            core,
            PipeKind::Work,
            v.publish_every,
        ),
        PipeProducer::new(a.region.clone(), context, core, PipeKind::Completion),
    ) else {
        return Err(Errno::EINVAL);
    };
    a.pipes.push(PipeSet {
        context,
        core,
        work,
        completions,
        qps: 0,
        dead: false,
    });
    if !v.pipe_apps.contains(&app) {
        v.pipe_apps.push(app);
    }
    Ok(a.pipes.len() - 1)
}

#[allow(clippy::too_many_arguments)]
fn create_qp(
    v: &mut Verbs,
    app: u32,
    pd: u32,
    cqs: [u32; 2],
    wr: [u32; 2],
    max_inline: u32,
    context: Option<u32>,
) -> Reply {
    let a = v.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    if !a.pds.contains(&pd) || !cqs.iter().all(|cq| a.cqs.contains_key(cq)) {
        return Err(Errno::ENOENT);
    }
    // A QP's completions go where its mode sends them: its CQs must be of the same mode.
    let cqs_piped = cqs.iter().all(|cq| a.cqs[cq].producer.is_none());
    let cqs_queued = cqs.iter().all(|cq| a.cqs[cq].producer.is_some());
    if (context.is_some() && !cqs_piped) || (context.is_none() && !cqs_queued) {
        return Err(Errno::EINVAL);
    }
    let wr_ok = |n: u32| (1..=v.limits.max_wr).contains(&n);
    // A pipe-mode QP may carry up to one MTU inline (the low-latency inline QP).
    let inline_cap = if context.is_some() {
        PIPE_MAX_INLINE
    } else {
        MAX_INLINE
    };
    if !wr_ok(wr[0]) || !wr_ok(wr[1]) || max_inline as usize > inline_cap {
        return Err(Errno::EINVAL);
    }
    let set = match context {
        Some(c) => Some(place_on_pipe(v, app, c)?),
        None => None,
    };
    let a = v.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    let (sq, rq) = match set {
        Some(_) => (None, None),
        None => {
            let [sq, rq] = a.take_queues::<2>().ok_or(Errno::ENOMEM)?;
            (Some(sq), Some(rq))
        }
    };
    let free_queues = |a: &mut VerbsApp| sq.into_iter().chain(rq).for_each(|q| a.free_queue(q));
    let rdma = &mut v.rdma;
    let qpn = match rdma
        .stack
        .create_qp(PdId(pd), cqs[0], cqs[1], wr[0] as usize, wr[1] as usize)
    {
        Ok(qpn) => qpn,
        Err(e) => {
            free_queues(a);
            return Err(errno_of(e));
        }
    };
    // The inline buffer: one slot per send the transport may hold, and one for a send
    // taken while it is full (pipe mode: and one per send its backlog may hold). A
    // local-only region of the QP's domain.
    let mut inline = None;
    if max_inline > 0 {
        let slots = if set.is_some() {
            2 * wr[0] as usize + 1
        } else {
            wr[0] as usize + 1
        };
        let len = slots * max_inline as usize;
        let backing = rdma.mem.add(Backing::Inline(vec![0; len]));
        let region = MrRegion {
            pd: PdId(pd),
            addr: 0,
            len: len as u64,
            access: Access::empty(),
            backing,
            offset: 0,
        };
        match rdma.stack.reg_mr(region) {
            Ok(key) => inline = Some((backing, key)),
            Err(e) => {
                rdma.mem.remove(backing);
                let _ = rdma.stack.destroy_qp(&mut rdma.mem, qpn);
                free_queues(a);
                return Err(errno_of(e));
            }
        }
    }
    let sq_in = sq.and_then(|q| Consumer::verbs(a.region.clone(), q));
    let rq_in = rq.and_then(|q| Consumer::verbs(a.region.clone(), q));
    let pipe = set.map(|set| PipeQp {
        set,
        sends: VecDeque::new(),
        recvs: VecDeque::new(),
        max_recv_wr: wr[1],
    });
    let core = set.map(|set| {
        a.pipes[set].qps += 1;
        a.pipes[set].core
    });
    if let Some(core) = core {
        v.core_qps[core as usize] += 1;
    }
    a.qps.insert(
        qpn,
        QpRec {
            pd,
            send_cq: cqs[0],
            recv_cq: cqs[1],
            sq,
            rq,
            sq_in,
            rq_in,
            pipe,
            max_send_wr: wr[0],
            max_inline,
            inline,
            sends_taken: 0,
            held_send: None,
            held_recv: None,
            attrs: QpAttrs::default(),
            listed: false,
        },
    );
    Ok(match (core, sq, rq) {
        (Some(core), _, _) => VerbsReply::PipeQp {
            qpn,
            core,
            max_send_wr: wr[0],
            max_recv_wr: wr[1],
            max_inline,
        },
        (None, Some(sq), Some(rq)) => VerbsReply::Qp {
            qpn,
            sq,
            rq,
            max_send_wr: wr[0],
            max_recv_wr: wr[1],
            max_inline,
        },
        _ => return Err(Errno::EINVAL),
    })
}

#[allow(clippy::too_many_arguments)]
fn modify_qp(
    v: &mut Verbs,
    app: u32,
    qpn: u32,
    mask: u32,
    attrs: &QpAttrs,
    stack: &mut Stack,
    now: Instant,
    counters: &mut Counters,
) -> Reply {
    let a = v.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    let qp = a.qps.get_mut(&qpn).ok_or(Errno::ENOENT)?;
    let mask = AttrMask(mask);
    let current = v.rdma.stack.qp_state(qpn).ok_or(Errno::ENOENT)?;
    let next = if mask.contains(AttrMask::STATE) {
        QpState::from_u32(attrs.qp_state).ok_or(Errno::EINVAL)?
    } else {
        current
    };
    let mut peer = None;
    if mask.contains(AttrMask::AV) {
        let ip = attrs.dest_ip.ok_or(Errno::EINVAL)?;
        // The next hop's MAC comes from the engine's ARP; until it is known the caller
        // retries (libsluice: for up to a second).
        match stack.neighbor(ip) {
            Some(mac) => peer = Some(PeerAddr { ip, mac }),
            None => {
                stack.resolve_neighbor(ip, now);
                return Err(Errno::EAGAIN);
            }
        }
    }
    let attr = QpAttr {
        cur_state: mask
            .contains(AttrMask::CUR_STATE)
            .then(|| QpState::from_u32(attrs.cur_qp_state))
            .flatten(),
        access: attrs.access,
        path_mtu: attrs.path_mtu,
        dest_qpn: attrs.dest_qpn,
        rq_psn: attrs.rq_psn,
        sq_psn: attrs.sq_psn,
        timeout: attrs.timeout,
        retry_cnt: attrs.retry_cnt,
        rnr_retry: attrs.rnr_retry,
        min_rnr_timer: attrs.min_rnr_timer,
        max_rd_atomic: attrs.max_rd_atomic,
        peer,
    };
    v.rdma
        .stack
        .modify_qp(&mut v.rdma.mem, qpn, next, mask, &attr)
        .map_err(errno_of)?;
    keep_attrs(&mut qp.attrs, mask, attrs);
    if next == QpState::Reset {
        qp.attrs = QpAttrs::default();
    }
    // Work held back for the state (sends before RTS) may go now, or is flushed (ERR).
    work::doorbell(v, app, qpn, counters);
    Ok(VerbsReply::Done)
}

/// Records the attributes `mask` names, for QueryQp.
fn keep_attrs(kept: &mut QpAttrs, mask: AttrMask, given: &QpAttrs) {
    let given_has = |m| mask.contains(m);
    if given_has(AttrMask::ACCESS_FLAGS) {
        kept.access = given.access;
    }
    if given_has(AttrMask::PATH_MTU) {
        kept.path_mtu = given.path_mtu;
    }
    if given_has(AttrMask::DEST_QPN) {
        kept.dest_qpn = given.dest_qpn;
    }
    if given_has(AttrMask::RQ_PSN) {
        kept.rq_psn = given.rq_psn;
    }
    if given_has(AttrMask::SQ_PSN) {
        kept.sq_psn = given.sq_psn;
    }
    if given_has(AttrMask::TIMEOUT) {
        kept.timeout = given.timeout;
    }
    if given_has(AttrMask::RETRY_CNT) {
        kept.retry_cnt = given.retry_cnt;
    }
    if given_has(AttrMask::RNR_RETRY) {
        kept.rnr_retry = given.rnr_retry;
    }
    if given_has(AttrMask::MIN_RNR_TIMER) {
        kept.min_rnr_timer = given.min_rnr_timer;
    }
    if given_has(AttrMask::MAX_QP_RD_ATOMIC) {
        kept.max_rd_atomic = given.max_rd_atomic;
    }
    if given_has(AttrMask::MAX_DEST_RD_ATOMIC) {
        kept.max_dest_rd_atomic = given.max_dest_rd_atomic;
    }
    if given_has(AttrMask::AV) {
        kept.dest_ip = given.dest_ip;
    }
}
