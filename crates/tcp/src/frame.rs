//! Frame emission: Ethernet + IPv4 + TCP headers around a payload, and the bounded queue of
//! small control frames (ACKs, RSTs, SYN-ACKs, ARP) produced while handling input.

use std::net::Ipv4Addr;

use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp::{self, TcpHeader};
use sluice_wire::EthernetAddress;

/// Largest control frame: Ethernet, IPv4 and a TCP header with 40 bytes of options.
pub const CONTROL_FRAME_MAX: usize = 14 + 20 + 60;

/// Addresses of one side of a connection, enough to emit its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Our MAC.
    pub src_mac: EthernetAddress,
    /// The next hop's MAC.
    pub dst_mac: EthernetAddress,
    /// Our IP.
    pub src_ip: Ipv4Addr,
    /// The peer's IP.
    pub dst_ip: Ipv4Addr,
}

/// How the TCP checksum of an emitted segment is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxChecksum {
    /// Computed over the whole segment.
    Full,
    /// Only the pseudo-header sum is stored (Linux's CHECKSUM_PARTIAL): the device, or the
    /// receiver's offload, completes it from the TCP header on.
    Partial,
}

/// A frame written by [`crate::Stack::poll_transmit_offload`], with the offloads it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Frame length in bytes.
    pub len: usize,
    /// Segment the TCP payload into this many bytes per segment (TSO/GSO); 0: a single segment.
    pub gso_size: u16,
    /// The TCP checksum is partial ([`TxChecksum::Partial`]).
    pub csum_partial: bool,
}

/// Offset of the TCP header in every frame this core emits (Ethernet, IPv4 without options).
pub const TCP_HEADER_OFFSET: usize = 14 + sluice_wire::ipv4::HEADER_LEN;

/// Writes a complete frame for `header` with a payload of `payload_len` bytes, which `fill`
/// writes into the slice it is given. Returns the frame length, or None if `buf` is too small.
/// The packet is Not-ECT: control segments, pure ACKs and retransmissions never are ECT
/// (RFC 3168 6.1.1, 6.1.4, 6.1.5).
#[inline]
pub fn emit_segment(
    buf: &mut [u8],
    route: &Route,
    ident: u16,
    header: &TcpHeader,
    payload_len: usize,
    csum: TxChecksum,
    fill: impl FnOnce(&mut [u8]),
) -> Option<usize> {
    emit_segment_ecn(
        buf,
        route,
        ident,
        header,
        payload_len,
        csum,
        Ecn::NotEct,
        fill,
    )
}

/// [`emit_segment`] with the IP ECN codepoint `ecn` (ECT(0) on new data of an ECN
/// connection, RFC 3168 6.1.2).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn emit_segment_ecn(
    buf: &mut [u8],
    route: &Route,
    ident: u16,
    header: &TcpHeader,
    payload_len: usize,
    csum: TxChecksum,
    ecn: Ecn,
    fill: impl FnOnce(&mut [u8]),
) -> Option<usize> {
    let eth = EthernetRepr {
        dst: route.dst_mac,
        src: route.src_mac,
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    let tcp_len = header.header_len();
    let segment_len = tcp_len + payload_len;
    let ip = Ipv4Repr {
        src: route.src_ip,
        dst: route.dst_ip,
        protocol: PROTOCOL_TCP,
        payload_len: u16::try_from(segment_len).ok()?,
        ttl: 64,
        dscp: 0,
        ecn,
        ident,
        dont_fragment: true,
        more_fragments: false,
        fragment_offset: 0,
    };
    let ip_at = eth.header_len();
    let tcp_at = ip_at + sluice_wire::ipv4::HEADER_LEN;
    let total = tcp_at + segment_len;
    if buf.len() < total {
        return None;
    }
    eth.emit(buf).ok()?;
    ip.emit(&mut buf[ip_at..]).ok()?;
    header.emit(&mut buf[tcp_at..]).ok()?;
    let payload = &mut buf[tcp_at + tcp_len..total];
    fill(payload);
    // The header's share of the checksum comes from its fields, not from re-reading the
    // bytes just written; only the payload is summed from memory.
    // RFC 9293 MUST-2: every segment we send carries its checksum (a partial one is
    // completed by the device's offload before it reaches the wire).
    let c = match csum {
        TxChecksum::Full => {
            tcp::segment_checksum(header.sum(), tcp_len, payload, route.src_ip, route.dst_ip)
        }
        TxChecksum::Partial => {
            tcp::pseudo_header_checksum(segment_len as u32, route.src_ip, route.dst_ip)
        }
    };
    buf[tcp_at + 16..tcp_at + 18].copy_from_slice(&c.to_be_bytes());
    Some(total)
}

/// A bounded FIFO of small frames in preallocated fixed-size slots.
pub struct ControlQueue {
    slots: Box<[[u8; CONTROL_FRAME_MAX]]>,
    lens: Box<[u16]>,
    head: usize,
    len: usize,
}

impl ControlQueue {
    /// Creates a queue holding up to `capacity` frames.
    pub fn new(capacity: usize) -> Self {
        ControlQueue {
            slots: vec![[0; CONTROL_FRAME_MAX]; capacity].into_boxed_slice(),
            lens: vec![0; capacity].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no frame waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most frames it holds.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Builds a frame in the next free slot with `build`, which returns its length.
    /// Returns false (nothing queued) if the queue is full or `build` declines.
    #[inline]
    pub fn push_with(&mut self, build: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        if self.len == self.slots.len() {
            return false;
        }
        let at = crate::queue::wrap(self.head + self.len, self.slots.len());
        match build(&mut self.slots[at]) {
            Some(n) if n <= CONTROL_FRAME_MAX => {
                self.lens[at] = n as u16;
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    /// Moves the oldest frame into `out`, returning its length.
    #[inline]
    pub fn pop_into(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let n = self.lens[self.head] as usize;
        if out.len() < n {
            return None;
        }
        out[..n].copy_from_slice(&self.slots[self.head][..n]);
        self.head = crate::queue::wrap(self.head + 1, self.slots.len());
        self.len -= 1;
        Some(n)
    }
}
