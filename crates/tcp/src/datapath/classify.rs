//! The pre-processor: parses a frame, identifies its connection and builds the header summary,
//! or hands anything that is not an established connection's common case to the control plane.

use std::net::Ipv4Addr;

use sluice_wire::arp::ArpRepr;
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp::{ChecksumCheck, TcpFlags, TcpHeader};
use sluice_wire::{EthernetAddress, WireError};

use super::state::PreState;
use super::summary::HeaderSummary;
use crate::table::{ConnTable, FourTuple};

/// A TCP segment for the control plane, already parsed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpInput<'a> {
    /// Sender's MAC (the next hop back).
    pub src_mac: EthernetAddress,
    /// IPv4 header.
    pub ip: Ipv4Repr,
    /// TCP header.
    pub tcp: TcpHeader,
    /// Payload.
    pub payload: &'a [u8],
    /// The connection's slot, if the 4-tuple is known.
    pub slot: Option<u32>,
}

/// Why the pre-processor dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// A header failed to parse.
    Malformed,
    /// A checksum did not verify.
    Checksum,
    /// Not our address or not a protocol we handle.
    NotForUs,
    /// An IPv4 fragment.
    Fragment,
}

impl DropReason {
    /// The counter that counts it ([`crate::Counters::rows`]), the drop tracepoint's reason.
    pub(crate) const fn counter(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Checksum => "bad_checksum",
            DropReason::NotForUs => "not_for_us",
            DropReason::Fragment => "fragments",
        }
    }
}

/// Where a frame goes next.
#[derive(Debug)]
pub(crate) enum Classified<'a> {
    /// The common case of an established connection: straight down the pipeline. Its
    /// header summary was written to the slot [`classify`] was given.
    FastPath,
    /// Any other TCP segment: the control plane.
    Exception(TcpInput<'a>),
    /// An ARP packet: the control plane's neighbor handling.
    Arp(ArpRepr),
    /// Dropped, with the counter to bump.
    Drop(DropReason),
}

impl From<WireError> for DropReason {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Checksum => DropReason::Checksum,
            _ => DropReason::Malformed,
        }
    }
}

/// Which received checksums the pre-processor verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Checks {
    /// The IPv4 header checksum (RFC 1122 3.2.1.2: a device's "checksum valid" covers the
    /// transport checksum only, so this is kept even for frames a device vouched for).
    pub ip: bool,
    /// The TCP checksum.
    pub tcp: bool,
}

/// Whether [`classify`] would send `frame` down the pipeline as an established
/// connection's common case (checksums not verified: that is the pre-processor's job), for
/// the engine's `established` hook point, which runs between classification and the
/// protocol stage without the pipeline's summary.
pub(crate) fn takes_fast_path(
    frame: &[u8],
    our_ip: Ipv4Addr,
    table: &ConnTable,
    pre: &[PreState],
) -> bool {
    let Ok((eth, l3)) = EthernetRepr::parse(frame) else {
        return false;
    };
    if eth.ethertype != EtherType::Ipv4 {
        return false;
    }
    let Ok((ip, l4)) = Ipv4Repr::parse(l3, false) else {
        return false;
    };
    if ip.dst != our_ip || ip.protocol != PROTOCOL_TCP || ip.is_fragment() {
        return false;
    }
    let Ok((tcp, _)) = TcpHeader::parse(l4, ip.src, ip.dst, ChecksumCheck::Skip) else {
        return false;
    };
    let common_case = tcp.flags.contains(TcpFlags::ACK)
        && (tcp.flags.0 & (TcpFlags::SYN.0 | TcpFlags::RST.0 | TcpFlags::URG.0)) == 0;
    let tuple = FourTuple {
        remote_ip: ip.src,
        remote_port: tcp.src_port,
        local_port: tcp.dst_port,
    };
    common_case
        && table
            .lookup(&tuple)
            .is_some_and(|slot| pre.get(slot as usize).is_some_and(|p| p.active))
}

/// Classifies one frame. A fast-path segment's header summary is written straight into
/// `summary` (its place in the batch) rather than returned: moving the freshly built
/// summary would read it back through a store-to-load forwarding stall.
#[inline]
pub(crate) fn classify<'a>(
    frame: &'a [u8],
    frame_index: u16,
    our_ip: Ipv4Addr,
    checks: Checks,
    table: &ConnTable,
    pre: &[PreState],
    summary: &mut HeaderSummary,
) -> Classified<'a> {
    let (eth, l3) = match EthernetRepr::parse(frame) {
        Ok(x) => x,
        Err(e) => return Classified::Drop(e.into()),
    };
    match eth.ethertype {
        EtherType::Ipv4 => {}
        EtherType::Arp => {
            return match ArpRepr::parse(l3) {
                Ok(arp) => Classified::Arp(arp),
                Err(e) => Classified::Drop(e.into()),
            }
        }
        _ => return Classified::Drop(DropReason::NotForUs),
    }
    // RFC 9293 MUST-3: received checksums are verified (unless the device already did).
    let (ip, l4) = match Ipv4Repr::parse(l3, checks.ip) {
        Ok(x) => x,
        Err(e) => return Classified::Drop(e.into()),
    };
    if ip.dst != our_ip || ip.protocol != PROTOCOL_TCP {
        return Classified::Drop(DropReason::NotForUs);
    }
    if ip.is_fragment() {
        return Classified::Drop(DropReason::Fragment);
    }
    let check = if checks.tcp {
        ChecksumCheck::Verify
    } else {
        ChecksumCheck::Skip
    };
    let (tcp, payload) = match TcpHeader::parse(l4, ip.src, ip.dst, check) {
        Ok(x) => x,
        Err(e) => return Classified::Drop(e.into()),
    };
    let tuple = FourTuple {
        remote_ip: ip.src,
        remote_port: tcp.src_port,
        local_port: tcp.dst_port,
    };
    let slot = table.lookup(&tuple);
    let common_case = tcp.flags.contains(TcpFlags::ACK)
        && (tcp.flags.0 & (TcpFlags::SYN.0 | TcpFlags::RST.0 | TcpFlags::URG.0)) == 0;
    match slot {
        Some(slot) if common_case && pre.get(slot as usize).is_some_and(|p| p.active) => {
            let (has_timestamp, ts_val, ts_ecr) = match tcp.options.timestamp {
                Some((v, e)) => (true, v, e),
                None => (false, 0, 0),
            };
            *summary = HeaderSummary {
                slot,
                frame: frame_index,
                payload_offset: (payload.as_ptr() as usize - frame.as_ptr() as usize) as u16,
                payload_len: payload.len() as u16,
                flags: tcp.flags,
                ecn_ce: ip.ecn == Ecn::Ce,
                seq: tcp.seq,
                ack: tcp.ack,
                window: tcp.window,
                has_timestamp,
                ts_val,
                ts_ecr,
                sack_blocks: tcp.options.sack_blocks,
                sack_count: tcp.options.sacks().len() as u8,
                log: pre[slot as usize].log,
                ..HeaderSummary::default()
            };
            Classified::FastPath
        }
        _ => Classified::Exception(TcpInput {
            src_mac: eth.src,
            ip,
            tcp,
            payload,
            slot,
        }),
    }
}
