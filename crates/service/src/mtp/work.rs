//! Entries from an endpoint's queues to the transport (docs/mtp.md "Messages in service
//! mode", "Posting"): on a doorbell the engine takes posted buffers and messages while the
//! transport and the endpoint have room; an endpoint with entries left is retried each
//! iteration from a bounded list (one entry per endpoint), never by a scan of every one.
//! Every entry is checked; a bad one completes with an error under its cookie.

use std::net::{Ipv4Addr, SocketAddrV4};

use sluice_mtp::stack::{EndpointId, SendError, SendOptions};
use sluice_shm::mtp::entry::cookie_of;
use sluice_shm::mtp::{CqeKind, MtpCqe, MtpStatus, RecvEntry, SendEntry};
use sluice_tcp::{Instant, Stack};

use super::objects::{EpRec, MtpApp, Sending};
use super::{Mtp, MtpCore, MAX_UNRESOLVED};
use crate::counters::Counters;

/// An error completion for an entry.
fn refused(kind: CqeKind, status: MtpStatus, cookie: u64, peer: SocketAddrV4, len: u32) -> MtpCqe {
    MtpCqe {
        kind,
        status,
        cookie,
        msg_id: 0,
        len,
        peer,
        priority: 0,
        tc: 0,
    }
}

const NOWHERE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);

/// `Command::MtpDoorbell{ep}` from the application at `app`: takes what its queues hold.
/// An endpoint it does not own is counted and ignored (another application's queues are
/// never touched).
pub(crate) fn doorbell(
    m: &mut Mtp,
    app: u32,
    ep: u32,
    tcp: &mut Stack,
    now: Instant,
    counters: &mut Counters,
) {
    counters.mtp_doorbells += 1;
    let owned = m.apps.get(&app).is_some_and(|a| a.eps.contains_key(&ep));
    if !owned {
        counters.mtp_not_owned += 1;
        return;
    }
    take(m, app, ep, tcp, now, counters);
}

/// Takes again from the endpoints that had entries left.
pub(crate) fn retry(m: &mut Mtp, tcp: &mut Stack, now: Instant, counters: &mut Counters) {
    let list = std::mem::take(&mut m.retry);
    for &(app, ep) in &list {
        if let Some(rec) = m.apps.get_mut(&app).and_then(|a| a.eps.get_mut(&ep)) {
            rec.listed = false;
            take(m, app, ep, tcp, now, counters);
        }
    }
    if m.retry.is_empty() {
        let mut list = list;
        list.clear();
        m.retry = list;
    }
}

/// Moves an endpoint's posted buffers, then its messages, into the engine and the
/// transport while there is room.
fn take(m: &mut Mtp, app: u32, ep: u32, tcp: &mut Stack, now: Instant, counters: &mut Counters) {
    let Mtp {
        core,
        apps,
        retry,
        unresolved,
        max_message,
        ..
    } = m;
    let Some(a) = apps.get_mut(&app) else {
        return;
    };
    let Some(mut rec) = a.eps.remove(&ep) else {
        return;
    };
    let mut left = take_buffers(a, &mut rec, counters);
    // Messages: while the endpoint can hold their completions and the transport takes them.
    while rec.made_room() {
        let Some(e) = rec.sq_in.peek() else {
            break;
        };
        let s = match SendEntry::decode(&e) {
            Ok(s) => s,
            Err(_) => {
                rec.sq_in.pop();
                counters.mtp_entries += 1;
                counters.mtp_bad_entries += 1;
                let c = refused(
                    CqeKind::Sent,
                    MtpStatus::BadEntry,
                    cookie_of(&e),
                    NOWHERE,
                    0,
                );
                rec.made.push_back(c);
                continue;
            }
        };
        let bad = |status| refused(CqeKind::Sent, status, s.cookie, s.dst, s.len);
        if s.len > *max_message {
            rec.sq_in.pop();
            counters.mtp_entries += 1;
            counters.mtp_bad_entries += 1;
            rec.made.push_back(bad(MtpStatus::TooLong));
            continue;
        }
        let Some((mem, at)) = a.locate(s.key, s.addr, s.len) else {
            rec.sq_in.pop();
            counters.mtp_entries += 1;
            counters.mtp_bad_entries += 1;
            rec.made.push_back(bad(MtpStatus::BadMemory));
            continue;
        };
        let mut data = vec![0u8; s.len as usize];
        if !mem.file.read_at(at, &mut data) {
            rec.sq_in.pop();
            counters.mtp_entries += 1;
            counters.mtp_bad_entries += 1;
            rec.made.push_back(bad(MtpStatus::BadMemory));
            continue;
        }
        let opts = SendOptions {
            priority: s.priority,
            tc: s.tc,
        };
        match core
            .stack
            .send_message_owned(now.as_nanos(), EndpointId(ep), s.dst, data, opts)
        {
            Ok(msg_id) => {
                rec.sq_in.pop();
                counters.mtp_entries += 1;
                rec.sending.insert(
                    msg_id,
                    Sending {
                        cookie: s.cookie,
                        dst: s.dst,
                        len: s.len,
                    },
                );
                neighbor(core, unresolved, *s.dst.ip(), tcp, now, counters);
            }
            Err(SendError::TooManyOutstanding) => {
                // Taken again as messages complete.
                left = true;
                break;
            }
            Err(e) => {
                rec.sq_in.pop();
                counters.mtp_entries += 1;
                counters.mtp_bad_entries += 1;
                rec.made.push_back(bad(match e {
                    SendError::TooLong(_) => MtpStatus::TooLong,
                    SendError::UnknownEndpoint => MtpStatus::Flushed,
                    _ => MtpStatus::BadDestination,
                }));
            }
        }
    }
    if !rec.made_room() && (rec.sq_in.has_entry() || rec.rq_in.has_entry()) {
        left = true;
    }
    rec.sq_in.publish();
    rec.rq_in.publish();
    if left && !rec.listed {
        rec.listed = true;
        retry.push((app, ep));
    }
    a.eps.insert(ep, rec);
}

/// Takes posted buffers while the endpoint holds fewer than its receive queue's capacity;
/// whether some were left for lack of room.
fn take_buffers(a: &MtpApp, rec: &mut EpRec, counters: &mut Counters) -> bool {
    while rec.made_room() && (rec.posted.len() as u64) < rec.rq_in.capacity() {
        let Some(e) = rec.rq_in.pop() else {
            return false;
        };
        counters.mtp_entries += 1;
        let status = match RecvEntry::decode(&e) {
            Err(_) => MtpStatus::BadEntry,
            Ok(r) if a.locate(r.key, r.addr, r.len).is_none() => MtpStatus::BadMemory,
            Ok(r) => {
                rec.posted.push_back(r);
                rec.readable = true;
                continue;
            }
        };
        counters.mtp_bad_entries += 1;
        let c = refused(CqeKind::Received, status, cookie_of(&e), NOWHERE, 0);
        rec.made.push_back(c);
    }
    rec.rq_in.has_entry()
}

/// Hands the transport the next hop's MAC for `ip` from the TCP core's ARP cache, or
/// starts resolving it (the transport keeps the message until it has the MAC).
fn neighbor(
    core: &mut MtpCore,
    unresolved: &mut Vec<Ipv4Addr>,
    ip: Ipv4Addr,
    tcp: &mut Stack,
    now: Instant,
    c: &mut Counters,
) {
    match tcp.neighbor(ip) {
        Some(mac) => core.set_neighbor(ip, mac),
        None => {
            if !unresolved.contains(&ip) && unresolved.len() < MAX_UNRESOLVED {
                unresolved.push(ip);
                c.mtp_arp_waits += 1;
            }
            tcp.resolve_neighbor(ip, now);
        }
    }
}
