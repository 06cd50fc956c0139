//! The `Pair` rig: two MTP stacks joined by an in-memory wire in virtual time, with a
//! link rate and delay, seeded loss/reordering/duplication, and an optional device that
//! edits frames (appends feedback, trims, marks).
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddrV4};

use sluice_mtp::stack::{EndpointId, MtpStack, Nanos, StackConfig};
use sluice_wire::EthernetAddress;

pub const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const MAC_A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
pub const MAC_B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

/// A direction on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// What a device sees of the link as a frame enters it.
#[derive(Clone, Copy, Debug)]
pub struct LinkView {
    /// Frames queued ahead (waiting to be serialised).
    pub queued: u64,
    /// The time.
    pub now: Nanos,
}

/// Edits a frame entering the link; false drops it.
pub type Device = Box<dyn FnMut(Dir, &mut Vec<u8>, LinkView) -> bool>;

/// The extra one-way delay of the path a frame takes (after the device edited it): a
/// second, longer path beside the link's own.
pub type PathDelay = Box<dyn FnMut(Dir, &[u8]) -> Nanos>;

/// A small seeded generator (SplitMix64): the rig's only randomness.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 1.0 < p
    }
}

#[derive(Default)]
struct Link {
    heap: BinaryHeap<Reverse<(Nanos, u64, Vec<u8>)>>,
    busy_until: Nanos,
}

pub struct Pair {
    pub a: MtpStack,
    pub b: MtpStack,
    pub now: Nanos,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// Link rate in bit/s (0: no serialisation).
    pub rate_bps: u64,
    pub loss: f64,
    pub dup: f64,
    /// Probability of an extra random delay of up to `delay` (reordering).
    pub reorder: f64,
    pub rng: Rng,
    pub device: Option<Device>,
    /// Extra delay per frame (None: every frame takes `delay`).
    pub path_delay: Option<PathDelay>,
    /// Reordered frames are held back exactly this long instead of up to `delay` at random
    /// (as the lab's switches hold them).
    pub reorder_hold: Option<Nanos>,
    links: [Link; 2],
    seq: u64,
    buf: Vec<u8>,
    pub frames_delivered: u64,
}

pub fn config(mac: EthernetAddress, ip: Ipv4Addr) -> StackConfig {
    StackConfig::new(mac, ip)
}

impl Pair {
    pub fn new(seed: u64) -> Pair {
        Pair::with(config(MAC_A, IP_A), config(MAC_B, IP_B), seed)
    }

    pub fn with(ca: StackConfig, cb: StackConfig, seed: u64) -> Pair {
        let mut a = MtpStack::new(ca).expect("config a");
        let mut b = MtpStack::new(cb).expect("config b");
        a.set_neighbor(IP_B, MAC_B);
        b.set_neighbor(IP_A, MAC_A);
        Pair {
            a,
            b,
            now: 1_000,
            delay: 5_000,
            rate_bps: 0,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            rng: Rng(seed),
            device: None,
            path_delay: None,
            reorder_hold: None,
            links: [Link::default(), Link::default()],
            seq: 0,
            buf: vec![0; 9000],
            frames_delivered: 0,
        }
    }

    fn enqueue(&mut self, dir: Dir, mut frame: Vec<u8>) {
        let li = dir as usize;
        let ser = (frame.len() as u64 * 8 * 1_000_000_000)
            .checked_div(self.rate_bps)
            .unwrap_or(0);
        let link = &mut self.links[li];
        let queued = if ser == 0 {
            0
        } else {
            link.busy_until.saturating_sub(self.now) / ser.max(1)
        };
        if let Some(dev) = self.device.as_mut() {
            if !dev(
                dir,
                &mut frame,
                LinkView {
                    queued,
                    now: self.now,
                },
            ) {
                return;
            }
        }
        if self.rng.chance(self.loss) {
            return;
        }
        let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
        let extra = self.path_delay.as_mut().map_or(0, |f| f(dir, &frame));
        let link = &mut self.links[li];
        let depart = link.busy_until.max(self.now) + ser;
        link.busy_until = depart;
        for copy in 1..=copies {
            let mut at = depart + self.delay + extra;
            if self.rng.chance(self.reorder) {
                at += match self.reorder_hold {
                    Some(h) => h,
                    None => self.rng.next() % self.delay.max(1),
                };
            }
            self.seq += 1;
            // The last copy takes the frame itself (one allocation per frame, not two).
            let f = if copy == copies {
                std::mem::take(&mut frame)
            } else {
                frame.clone()
            };
            self.links[li].heap.push(Reverse((at, self.seq, f)));
        }
    }

    /// Moves every frame the stacks have to send onto the wire.
    pub fn flush(&mut self) {
        loop {
            let mut any = false;
            while let Some(n) = self.a.poll_transmit(self.now, &mut self.buf) {
                let f = self.buf[..n].to_vec();
                self.enqueue(Dir::AtoB, f);
                any = true;
            }
            while let Some(n) = self.b.poll_transmit(self.now, &mut self.buf) {
                let f = self.buf[..n].to_vec();
                self.enqueue(Dir::BtoA, f);
                any = true;
            }
            if !any {
                break;
            }
        }
    }

    /// Advances to the next frame arrival or timer and handles it (one frame at a time);
    /// false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let next_frame = self
            .links
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.heap.peek().map(|Reverse((t, s, _))| (*t, *s, i)))
            .min();
        let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match (next_frame, next_timer) {
            (Some((t, _, i)), timer) if timer.is_none_or(|tt| t <= tt) => {
                self.now = self.now.max(t);
                let Some(Reverse((_, _, f))) = self.links[i].heap.pop() else {
                    return false;
                };
                self.frames_delivered += 1;
                if i == 0 {
                    self.b.handle_frame(self.now, &f);
                } else {
                    self.a.handle_frame(self.now, &f);
                }
            }
            (_, Some(t)) => {
                self.now = self.now.max(t);
                self.a.handle_timeout(self.now);
                self.b.handle_timeout(self.now);
            }
            _ => return false,
        }
        self.flush();
        true
    }

    /// Steps until nothing is left or `limit` virtual nanoseconds pass.
    pub fn run(&mut self, limit: Nanos) {
        let end = self.now + limit;
        while self.now < end && self.step() {}
    }
}

pub fn dst(ip: Ipv4Addr, stack: &MtpStack, ep: EndpointId) -> SocketAddrV4 {
    SocketAddrV4::new(ip, stack.local_port(ep).expect("bound"))
}
