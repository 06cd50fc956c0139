//! Toy hosts and frame helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::VecDeque;

use sluice_sim::{Host, Instant};

/// An Ethernet address.
pub type Mac = [u8; 6];
/// The broadcast address.
pub const BROADCAST: Mac = [0xff; 6];
/// Ethertype used for toy frames (IEEE local experimental).
pub const ETHERTYPE_TOY: u16 = 0x88b5;
/// Toy frame kind: data.
pub const KIND_DATA: u8 = 0;
/// Toy frame kind: acknowledgement.
pub const KIND_ACK: u8 = 1;

/// A locally administered unicast MAC numbered `n`.
pub fn mac(n: u8) -> Mac {
    [0x02, 0, 0, 0, 0, n]
}

/// A toy frame: dst, src, ethertype, kind, big-endian seq, then a seq-derived pattern up to `size` bytes.
pub fn toy_frame(dst: Mac, src: Mac, kind: u8, seq: u32, size: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(size.max(19));
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE_TOY.to_be_bytes());
    f.push(kind);
    f.extend_from_slice(&seq.to_be_bytes());
    let mut i = 0u32;
    while f.len() < size {
        f.push((seq.wrapping_mul(31).wrapping_add(i)) as u8);
        i += 1;
    }
    f
}

/// Kind and sequence number of a toy frame.
pub fn parse_toy(f: &[u8]) -> Option<(u8, u32)> {
    if f.len() < 19 || f[12..14] != ETHERTYPE_TOY.to_be_bytes() {
        return None;
    }
    Some((f[14], u32::from_be_bytes([f[15], f[16], f[17], f[18]])))
}

/// One's-complement sum of 16-bit words.
fn ones_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// An Ethernet+IPv4 frame (optionally 802.1Q tagged) with the given TOS byte, `size` bytes total.
pub fn ipv4_frame(dst: Mac, src: Mac, vlan: bool, tos: u8, seq: u16, size: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let off = f.len();
    let total = (size - off) as u16;
    let [tl_hi, tl_lo] = total.to_be_bytes();
    let [id_hi, id_lo] = seq.to_be_bytes();
    f.extend_from_slice(&[
        0x45, tos, tl_hi, tl_lo, id_hi, id_lo, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    let ck = !ones_sum(&f[off..off + 20]);
    f[off + 10..off + 12].copy_from_slice(&ck.to_be_bytes());
    f.resize(size, 0xab);
    f
}

/// Offset of the IPv4 header in a frame built by [`ipv4_frame`].
pub fn ip_offset(f: &[u8]) -> usize {
    if f[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    }
}

/// Whether the IPv4 header checksum of a frame verifies.
pub fn ipv4_checksum_ok(f: &[u8]) -> bool {
    let off = ip_offset(f);
    let ihl = usize::from(f[off] & 0x0f) * 4;
    ones_sum(&f[off..off + ihl]) == 0xffff
}

/// Generates numbered data frames on demand.
#[derive(Clone, Debug)]
pub struct Generator {
    /// Destination MAC.
    pub dst: Mac,
    /// Frame size in bytes.
    pub size: usize,
    /// Frames to send in total.
    pub total: u32,
    /// Frames sent so far.
    pub sent: u32,
    /// Most frames outstanding (sent but not acknowledged), if windowed.
    pub window: Option<u32>,
    /// Acknowledgements received.
    pub acked: u32,
}

/// A configurable toy host.
#[derive(Debug, Default)]
pub struct Toy {
    /// Own MAC address (source of generated frames).
    pub mac: Mac,
    /// Explicit frames to send, in order.
    pub outbox: VecDeque<Vec<u8>>,
    /// Numbered data frames generated on demand.
    pub generator: Option<Generator>,
    /// Every received frame with its arrival time.
    pub received: Vec<(Instant, Vec<u8>)>,
    /// When set, received data frames are acknowledged to this MAC.
    pub ack_to: Option<Mac>,
    /// Whether to keep received frames (otherwise only counted).
    pub discard: bool,
    /// Frames received.
    pub rx_count: u64,
    /// Pending timer deadlines, earliest first.
    pub timers: VecDeque<Instant>,
    /// When each timer fired.
    pub fired: Vec<Instant>,
    /// Always report a deadline of zero (a misbehaving host).
    pub stuck_timer: bool,
    /// Length to report from `poll_transmit` once (to test oversized frames).
    pub bogus_len: Option<usize>,
}

impl Toy {
    /// A toy host with the given MAC.
    pub fn new(mac: Mac) -> Self {
        Toy {
            mac,
            ..Toy::default()
        }
    }

    /// Adds a generator of `total` frames of `size` bytes to `dst`.
    pub fn sending(mut self, dst: Mac, total: u32, size: usize) -> Self {
        self.generator = Some(Generator {
            dst,
            size,
            total,
            sent: 0,
            window: None,
            acked: 0,
        });
        self
    }

    /// Sequence numbers of received data frames, in arrival order.
    pub fn seqs(&self) -> Vec<u32> {
        self.received
            .iter()
            .filter_map(|(_, f)| parse_toy(f))
            .filter(|(k, _)| *k == KIND_DATA)
            .map(|(_, s)| s)
            .collect()
    }
}

impl Host for Toy {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.rx_count += 1;
        if let Some((kind, seq)) = parse_toy(frame) {
            if kind == KIND_ACK {
                if let Some(g) = &mut self.generator {
                    g.acked += 1;
                }
            } else if let Some(to) = self.ack_to {
                self.outbox
                    .push_back(toy_frame(to, self.mac, KIND_ACK, seq, 64));
            }
        }
        if !self.discard {
            self.received.push((now, frame.to_vec()));
        }
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(n) = self.bogus_len.take() {
            return Some(n);
        }
        if let Some(f) = self.outbox.pop_front() {
            buf[..f.len()].copy_from_slice(&f);
            return Some(f.len());
        }
        let g = self.generator.as_mut()?;
        if g.sent >= g.total {
            return None;
        }
        if let Some(w) = g.window {
            if g.sent - g.acked >= w {
                return None;
            }
        }
        let f = toy_frame(g.dst, self.mac, KIND_DATA, g.sent, g.size);
        g.sent += 1;
        buf[..f.len()].copy_from_slice(&f);
        Some(f.len())
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.stuck_timer {
            return Some(Instant::ZERO);
        }
        self.timers.front().copied()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.fired.push(now);
        if !self.stuck_timer {
            self.timers.pop_front();
        }
    }
}
