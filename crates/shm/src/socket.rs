//! Socket blocks: per-slot state shared by the engine and the application.
//!
//! A block is two cache lines. The engine writes the first (how far it filled the RX ring
//! and drained the TX ring, the socket's flags, error and addresses); the application writes
//! the second (how far it read the RX ring and filled the TX ring). Positions are byte
//! counts since the slot was opened; ring offsets are positions masked by the ring size.
//! Each side reads the other's line and the engine checks what it reads (see the service).
//!
//! A listener's RX ring carries [`AcceptRecord`]s instead of bytes.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::{Congestion, Region};

/// Socket flags (the engine's line).
pub mod flags {
    /// The slot is in use.
    pub const ALLOCATED: u32 = 1 << 0;
    /// Listening; the RX ring carries accept records.
    pub const LISTENING: u32 = 1 << 1;
    /// An active open is in progress.
    pub const CONNECTING: u32 = 1 << 2;
    /// The connection is established (data may flow).
    pub const CONNECTED: u32 = 1 << 3;
    /// The peer's FIN follows the RX tail: end of stream once the ring is read.
    pub const RX_FIN: u32 = 1 << 4;
    /// The connection failed; the error field says why.
    pub const ERROR: u32 = 1 << 5;
    /// The engine holds data (or connections) it could not place: the RX ring was full.
    /// The application sends `Consumed` after reading so the engine resumes.
    pub const RX_STALLED: u32 = 1 << 6;
    /// Sending is shut down (FIN queued): writes fail with EPIPE.
    pub const TX_SHUT: u32 = 1 << 7;
    /// The connection is fully closed.
    pub const CLOSED: u32 = 1 << 8;
    /// The connection was given to a splice (docs/service.md, Splice): it belongs to the
    /// engine's splice stage; reads and writes fail, closing only frees the slot.
    pub const SPLICED: u32 = 1 << 9;
}

mod at {
    pub const RX_TAIL: usize = 0;
    pub const TX_HEAD: usize = 8;
    pub const FLAGS: usize = 16;
    pub const ERROR: usize = 20;
    pub const EVENT_SEQ: usize = 24;
    pub const PORTS: usize = 28;
    pub const LOCAL_IP: usize = 32;
    pub const PEER_IP: usize = 36;
    pub const CONGESTION: usize = 40;
    pub const RX_HEAD: usize = 64;
    pub const TX_TAIL: usize = 72;
}

/// One socket's block in a region.
#[derive(Clone, Copy)]
pub struct SocketBlock<'a> {
    region: &'a Region,
    offset: usize,
}

impl<'a> SocketBlock<'a> {
    /// Slot `s`'s block, or None if out of range.
    pub fn new(region: &'a Region, s: u32) -> Option<Self> {
        (s < region.layout().max_sockets).then(|| SocketBlock {
            region,
            offset: region.layout().socket_offset(s),
        })
    }

    fn u64(&self, at: usize) -> &'a AtomicU64 {
        self.region.atomic_u64(self.offset + at)
    }

    fn u32(&self, at: usize) -> &'a AtomicU32 {
        self.region.atomic_u32(self.offset + at)
    }

    /// End of the bytes the engine placed in the RX ring (engine-written).
    pub fn rx_tail(&self) -> &'a AtomicU64 {
        self.u64(at::RX_TAIL)
    }

    /// End of the bytes the engine took from the TX ring (engine-written).
    pub fn tx_head(&self) -> &'a AtomicU64 {
        self.u64(at::TX_HEAD)
    }

    /// Socket flags (engine-written, see [`flags`]).
    pub fn flags(&self) -> &'a AtomicU32 {
        self.u32(at::FLAGS)
    }

    /// The Linux errno of a failed connection (engine-written).
    pub fn error(&self) -> &'a AtomicU32 {
        self.u32(at::ERROR)
    }

    /// Bumped by the engine after every change to the engine's line, so a waiter can tell
    /// "something happened" (edge-triggered readiness) without comparing every field.
    pub fn event_seq(&self) -> &'a AtomicU32 {
        self.u32(at::EVENT_SEQ)
    }

    /// End of the bytes the application read from the RX ring (application-written).
    pub fn rx_head(&self) -> &'a AtomicU64 {
        self.u64(at::RX_HEAD)
    }

    /// End of the bytes the application wrote into the TX ring (application-written).
    pub fn tx_tail(&self) -> &'a AtomicU64 {
        self.u64(at::TX_TAIL)
    }

    /// Resets the whole block for a newly allocated slot (engine side).
    pub fn reset(&self, flags: u32) {
        for at in [at::RX_TAIL, at::TX_HEAD, at::RX_HEAD, at::TX_TAIL] {
            self.u64(at).store(0, Ordering::Relaxed);
        }
        for at in [
            at::ERROR,
            at::PORTS,
            at::LOCAL_IP,
            at::PEER_IP,
            at::CONGESTION,
        ] {
            self.u32(at).store(0, Ordering::Relaxed);
        }
        self.flags().store(flags, Ordering::Release);
        self.event_seq().fetch_add(1, Ordering::Release);
    }

    /// Records the local and peer addresses (engine side).
    pub fn set_addresses(&self, local: SocketAddrV4, peer: SocketAddrV4) {
        self.u32(at::LOCAL_IP)
            .store(u32::from(*local.ip()), Ordering::Relaxed);
        self.u32(at::PEER_IP)
            .store(u32::from(*peer.ip()), Ordering::Relaxed);
        let ports = local.port() as u32 | (peer.port() as u32) << 16;
        self.u32(at::PORTS).store(ports, Ordering::Release);
    }

    /// Publishes the connection's congestion-control algorithm (engine side): what
    /// getsockopt(TCP_CONGESTION) reads without a round trip to the engine.
    pub fn set_congestion(&self, algorithm: Congestion) {
        self.u32(at::CONGESTION)
            .store(u32::from(algorithm.code()), Ordering::Release);
    }

    /// The congestion-control algorithm the engine published; None before it wrote one
    /// (or if the value is not a known code).
    pub fn congestion(&self) -> Option<Congestion> {
        let code = self.u32(at::CONGESTION).load(Ordering::Acquire);
        u8::try_from(code).ok().and_then(Congestion::from_code)
    }

    /// The local address the engine recorded.
    pub fn local_addr(&self) -> SocketAddrV4 {
        let ports = self.u32(at::PORTS).load(Ordering::Acquire);
        let ip = self.u32(at::LOCAL_IP).load(Ordering::Relaxed);
        SocketAddrV4::new(Ipv4Addr::from(ip), ports as u16)
    }

    /// The peer address the engine recorded.
    pub fn peer_addr(&self) -> SocketAddrV4 {
        let ports = self.u32(at::PORTS).load(Ordering::Acquire);
        let ip = self.u32(at::PEER_IP).load(Ordering::Relaxed);
        SocketAddrV4::new(Ipv4Addr::from(ip), (ports >> 16) as u16)
    }
}

/// Bytes of one accept record in a listener's RX ring.
pub const ACCEPT_RECORD_BYTES: usize = 16;

/// A connection the engine accepted on a listener, already in its own slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcceptRecord {
    /// The new connection's slot.
    pub slot: u32,
    /// The peer.
    pub peer: SocketAddrV4,
    /// The local port.
    pub local_port: u16,
}

impl AcceptRecord {
    /// The record's bytes.
    pub fn encode(&self) -> [u8; ACCEPT_RECORD_BYTES] {
        let mut b = [0u8; ACCEPT_RECORD_BYTES];
        b[0..4].copy_from_slice(&self.slot.to_le_bytes());
        b[4..8].copy_from_slice(&self.peer.ip().octets());
        b[8..10].copy_from_slice(&self.peer.port().to_le_bytes());
        b[10..12].copy_from_slice(&self.local_port.to_le_bytes());
        b
    }

    /// Reads a record (written by the engine, which the application trusts).
    pub fn decode(b: &[u8; ACCEPT_RECORD_BYTES]) -> AcceptRecord {
        AcceptRecord {
            slot: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            peer: SocketAddrV4::new(
                Ipv4Addr::new(b[4], b[5], b[6], b[7]),
                u16::from_le_bytes([b[8], b[9]]),
            ),
            local_port: u16::from_le_bytes([b[10], b[11]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dir, Layout};

    #[test]
    #[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
    fn blocks_do_not_overlap_and_addresses_round_trip() {
        let layout = Layout {
            max_sockets: 4,
            max_contexts: 1,
            queue_entries: 8,
            ring_size: 4096,
            ..Layout::default()
        };
        let r = Region::create("sock-test", layout).unwrap();
        for s in 0..4 {
            let b = SocketBlock::new(&r, s).unwrap();
            b.reset(flags::ALLOCATED);
            b.tx_tail().store(100 + s as u64, Ordering::Release);
            b.set_addresses(
                SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
                SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000 + s as u16),
            );
        }
        for s in 0..4 {
            let b = SocketBlock::new(&r, s).unwrap();
            assert_eq!(b.tx_tail().load(Ordering::Acquire), 100 + s as u64);
            assert_eq!(b.peer_addr().port(), 40000 + s as u16);
            assert_eq!(b.local_addr(), "10.0.0.1:80".parse().unwrap());
        }
        let b = SocketBlock::new(&r, 1).unwrap();
        assert_eq!(b.congestion(), None, "reset writes no algorithm");
        b.set_congestion(Congestion::Cubic);
        assert_eq!(b.congestion(), Some(Congestion::Cubic));
        assert_eq!(SocketBlock::new(&r, 2).unwrap().congestion(), None);
        b.reset(flags::ALLOCATED);
        assert_eq!(b.congestion(), None);
        assert!(SocketBlock::new(&r, 4).is_none());
        assert!(r.ring(4, Dir::Rx).is_none());
    }

    #[test]
    fn accept_records_round_trip() {
        let a = AcceptRecord {
            slot: 77,
            peer: "10.77.0.2:51234".parse().unwrap(),
            local_port: 6379,
        };
        assert_eq!(AcceptRecord::decode(&a.encode()), a);
    }
}
