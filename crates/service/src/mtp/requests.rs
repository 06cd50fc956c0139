//! The MTP control path (docs/mtp.md "Messages in service mode"): registering memory and
//! binding endpoints, every name checked against what the application owns (ENOENT
//! otherwise), answered with an [`MtpReply`].

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use sluice_mtp::stack::{BindError, EndpointId};
use sluice_shm::mtp::{MtpReply, MtpRequest};
use sluice_shm::{Consumer, EventFd, MappedFile, Producer, ShmError};

use super::objects::{EpRec, Mem, MtpApp};
use super::Mtp;
use crate::counters::Counters;
use crate::queues::VerbsQueues;

type Reply = Result<MtpReply, Errno>;

/// Answers `req` from the application at `app` (whose verbs queues are `queues`), with
/// the descriptors that came with it. Refusals are counted.
pub(crate) fn request(
    m: &mut Mtp,
    app: u32,
    queues: &VerbsQueues,
    req: MtpRequest,
    fds: Vec<OwnedFd>,
    counters: &mut Counters,
) -> MtpReply {
    counters.mtp_requests += 1;
    m.apps
        .entry(app)
        .or_insert_with(|| MtpApp::new(queues.clone()));
    let r = match req {
        MtpRequest::RegMem {
            addr,
            len,
            file_offset,
        } => reg_mem(m, app, addr, len, file_offset, fds),
        MtpRequest::DeregMem { key } => dereg_mem(m, app, key),
        MtpRequest::Bind { port, token } => bind(m, app, port, token, fds),
        MtpRequest::Unbind { ep } => unbind(m, app, ep),
    };
    r.unwrap_or_else(|errno| {
        match errno {
            Errno::ENOENT => counters.mtp_not_owned += 1,
            _ => counters.mtp_refused += 1,
        }
        MtpReply::Failed {
            errno: errno as i32,
        }
    })
}

fn reg_mem(
    m: &mut Mtp,
    app: u32,
    addr: u64,
    len: u64,
    file_offset: u64,
    mut fds: Vec<OwnedFd>,
) -> Reply {
    let a = m.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    if fds.len() != 1 || len == 0 || addr.checked_add(len).is_none() {
        return Err(Errno::EINVAL);
    }
    if a.mems.len() >= MAX_MEMS {
        return Err(Errno::ENOMEM);
    }
    // The same checks as a verbs region: sealed against shrinking, long enough.
    let file = MappedFile::map(fds.remove(0), file_offset, len).map_err(|e| match e {
        ShmError::Sys { err, .. } => err,
        _ => Errno::EINVAL,
    })?;
    let key = a.next_key;
    a.next_key = a.next_key.wrapping_add(1).max(1);
    a.mems.insert(key, Mem { addr, file });
    Ok(MtpReply::Mem { key })
}

fn dereg_mem(m: &mut Mtp, app: u32, key: u32) -> Reply {
    let a = m.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    a.mems.remove(&key).ok_or(Errno::ENOENT)?;
    Ok(MtpReply::Done)
}

/// Registered memory an application may hold at most.
const MAX_MEMS: usize = 1024;

fn bind(m: &mut Mtp, app: u32, port: u16, token: u64, mut fds: Vec<OwnedFd>) -> Reply {
    if fds.len() > 1 {
        return Err(Errno::EINVAL);
    }
    let eventfd = fds.pop().map(EventFd::from_owned);
    // The engine writes to it on its own thread: a descriptor that can block it is refused.
    if eventfd.as_ref().is_some_and(|e| !e.is_nonblocking()) {
        return Err(Errno::EINVAL);
    }
    let (ep, port) = bind_port(m, port)?;
    let a = m.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    let Some(queues) = a.queues.take::<3>() else {
        m.core.stack.unbind(ep);
        return Err(Errno::ENOMEM);
    };
    let region = &a.queues.region;
    let (Some(sq_in), Some(rq_in), Some(cq_out)) = (
        Consumer::verbs(region.clone(), queues[0]),
        Consumer::verbs(region.clone(), queues[1]),
        Producer::verbs(region.clone(), queues[2]),
    ) else {
        m.core.stack.unbind(ep);
        a.free_queues(queues);
        return Err(Errno::EINVAL);
    };
    a.eps.insert(
        ep.0,
        EpRec {
            queues,
            sq_in,
            rq_in,
            cq_out,
            eventfd,
            token,
            posted: VecDeque::new(),
            held: None,
            sending: HashMap::new(),
            made: VecDeque::new(),
            readable: false,
            listed: false,
            dead: false,
        },
    );
    m.owners.insert(ep.0, app);
    Ok(MtpReply::Bound {
        ep: ep.0,
        port,
        sq: queues[0],
        rq: queues[1],
        cq: queues[2],
        max_message: m.max_message,
    })
}

/// Binds `port` in the transport (0: the transport picks a free ephemeral port).
fn bind_port(m: &mut Mtp, port: u16) -> Result<(EndpointId, u16), Errno> {
    let ep = m.core.stack.bind(port).map_err(|e| match e {
        BindError::InUse(_) => Errno::EADDRINUSE,
        BindError::TooMany | BindError::NoEphemeral => Errno::ENOMEM,
    })?;
    let port = m.core.stack.local_port(ep).ok_or(Errno::EINVAL)?;
    Ok((ep, port))
}

fn unbind(m: &mut Mtp, app: u32, ep: u32) -> Reply {
    let a = m.apps.get_mut(&app).ok_or(Errno::ENOENT)?;
    let rec = a.eps.remove(&ep).ok_or(Errno::ENOENT)?;
    a.free_queues(rec.queues);
    m.core.stack.unbind(EndpointId(ep));
    m.owners.remove(&ep);
    m.retry.retain(|&(x, e)| !(x == app && e == ep));
    Ok(MtpReply::Done)
}
