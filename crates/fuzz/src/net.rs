//! The fuzzer's wire between the two stacks: a bounded pool of frames in flight that the case
//! delivers in order or not, drops, duplicates and delays at will.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use sluice_wire::EthernetAddress;

/// One of the two hosts of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The host that opens the case's first connections (the client).
    A,
    /// The host that listens first (the server).
    B,
}

impl Side {
    /// The other host.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    /// Index into per-side arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The host's address.
    pub fn ip(self) -> Ipv4Addr {
        match self {
            Side::A => Ipv4Addr::new(10, 0, 0, 1),
            Side::B => Ipv4Addr::new(10, 0, 0, 2),
        }
    }

    /// The host's MAC.
    pub fn mac(self) -> EthernetAddress {
        EthernetAddress([0x02, 0, 0, 0, 0, 1 + self as u8])
    }

    /// Both sides.
    pub const BOTH: [Side; 2] = [Side::A, Side::B];
}

/// A frame on its way to `to`.
#[derive(Clone, Debug)]
pub struct Packet {
    /// The receiving host.
    pub to: Side,
    /// The frame.
    pub bytes: Vec<u8>,
    /// Byte-identical to a frame the sending stack emitted (possibly a copy or a late one).
    /// Anything else is forged, and the stream checks must account for it.
    pub pristine: bool,
}

/// Frames in flight, oldest first. Bounded: when full, the oldest frame is lost, as in a
/// tail-drop queue, so a case cannot grow memory whatever the stacks emit.
pub struct Wire {
    frames: VecDeque<Packet>,
    cap: usize,
    /// Frames lost to the bound.
    pub overflow_drops: u64,
}

impl Wire {
    /// A wire holding at most `cap` frames.
    pub fn new(cap: usize) -> Self {
        Wire {
            frames: VecDeque::with_capacity(cap),
            cap,
            overflow_drops: 0,
        }
    }

    /// Frames in flight.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Puts a frame on the wire.
    pub fn push(&mut self, p: Packet) {
        if self.frames.len() == self.cap {
            self.frames.pop_front();
            self.overflow_drops += 1;
        }
        self.frames.push_back(p);
    }

    /// Takes the frame at `i` (0 is the oldest).
    pub fn take(&mut self, i: usize) -> Option<Packet> {
        self.frames.remove(i)
    }

    /// The frame at `i`.
    pub fn get(&self, i: usize) -> Option<&Packet> {
        self.frames.get(i)
    }

    /// Exchanges two frames (reordering).
    pub fn swap(&mut self, i: usize, j: usize) {
        if i < self.frames.len() && j < self.frames.len() {
            self.frames.swap(i, j);
        }
    }
}
