//! The forwarding core: sans-IO and deterministic. Frames and the time come in; frames due
//! on each port go out. A learning bridge ([`Bridge`]) picks the egress, and each port's
//! [`Egress`] shapes, marks and impairs what leaves through it.
//!
//! A frame longer than the switch's largest frame (a 64 KB TCP segment from a Linux sender
//! with segmentation offload on) is cut into wire-sized segments here, with full checksums
//! ([`sluice_wire::gso::segment_tcp4`]), so the queue model sees what a wire would carry.

use std::time::Duration;

use rand::SeedableRng;
use sluice_fabric::mtp::{MtpDevice, Verdict};
use sluice_fabric::{Bridge, ChaCha8Rng, Forward, FramePool, LinkConfig, SwitchStats};

use crate::egress::{Egress, EgressStats};

/// Frames a port's delay line holds at most (beyond, they are dropped and counted).
pub const MAX_DELAYED: usize = 65_536;
/// Ethernet + IPv4 + TCP header bytes assumed at most when cutting a large segment.
const ETH_HLEN: usize = 14;

/// Counters of one port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received on this port.
    pub rx_frames: u64,
    /// Bytes received on this port.
    pub rx_bytes: u64,
    /// Frames handed to this port's device for transmission (forwarded out of it).
    pub forwarded: u64,
    /// Bytes handed to this port's device.
    pub forwarded_bytes: u64,
    /// Large frames received here and cut into wire-sized segments.
    pub segmented: u64,
    /// Frames received here that were too long and not cuttable (not IPv4 TCP), dropped.
    pub oversize_drops: u64,
    /// Hard send errors of this port's device (ENETDOWN, ...): the switch goes on.
    pub tx_errors: u64,
    /// Frames due on this port dropped because its device failed to take them.
    pub tx_error_drops: u64,
    /// The egress model's counters (tail drops, ECN marks, losses, duplicates, reorders,
    /// max queue depth).
    pub egress: EgressStats,
}

/// What a port's device did with a frame [`SwitchCore::transmit`] handed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxResult {
    /// Taken.
    Sent,
    /// No room now: the frame is kept and is the next one out.
    Full,
    /// The device failed (a hard error such as ENETDOWN): the frame is dropped and
    /// counted, and the port's next frames are still offered.
    Failed,
}

/// One port: its egress and counters.
#[derive(Debug)]
pub(crate) struct Port {
    pub(crate) egress: Egress,
    stats: PortStats,
    /// Whether floods (broadcast, unknown unicast) leave by this port.
    flood: bool,
}

/// The switch's forwarding state for a fixed set of ports.
#[derive(Debug)]
pub struct SwitchCore {
    pub(crate) ports: Vec<Port>,
    pub(crate) bridge: Bridge,
    /// What the switch does for MTP, if configured (`crate::mtp`).
    pub(crate) mtp: Option<Box<MtpDevice>>,
    pool: FramePool,
    /// Largest frame (Ethernet header included) any port sends; longer TCP is cut.
    max_frame: usize,
    /// Where segments of a large frame are written.
    scratch: Vec<u8>,
}

impl SwitchCore {
    /// A switch with one port per entry of `egress`, frames up to `max_frame` bytes, and
    /// every port's randomness derived from `seed` (port i uses stream i + 1).
    pub fn new(egress: &[LinkConfig], max_frame: usize, seed: u64) -> Self {
        let ports = egress
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(i as u64 + 1);
                Port {
                    egress: Egress::new(p.clone(), rng, MAX_DELAYED),
                    stats: PortStats::default(),
                    flood: true,
                }
            })
            .collect();
        SwitchCore {
            ports,
            bridge: Bridge::default(),
            mtp: None,
            pool: FramePool::default(),
            max_frame: max_frame.max(ETH_HLEN + 68),
            scratch: vec![0u8; max_frame.max(ETH_HLEN + 68)],
        }
    }

    /// Keeps floods (broadcast, unknown unicast) from leaving by `port` (false), as a
    /// spanning tree blocks the redundant one of parallel links; unicast still uses it.
    pub fn set_flood(&mut self, port: usize, flood: bool) {
        if let Some(p) = self.ports.get_mut(port) {
            p.flood = flood;
        }
    }

    /// Number of ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// Takes a frame received on `port` at `now`; an unknown port's frame is ignored.
    pub fn receive(&mut self, now: Duration, port: usize, frame: &[u8]) {
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        p.stats.rx_frames += 1;
        p.stats.rx_bytes += frame.len() as u64;
        if frame.len() <= self.max_frame {
            self.forward(now, port, frame);
            return;
        }
        // The largest TCP payload that fits a frame, assuming the headers of this frame.
        let headers = tcp_headers_len(frame).unwrap_or(usize::MAX);
        let mss = self.max_frame.saturating_sub(headers);
        let mut scratch = std::mem::take(&mut self.scratch);
        let cut = mss > 0
            && sluice_wire::gso::segment_tcp4(frame, mss, &mut scratch, |seg| {
                self.forward(now, port, seg)
            })
            .is_ok();
        self.scratch = scratch;
        let stats = &mut self.ports[port].stats;
        if cut {
            stats.segmented += 1;
        } else {
            stats.oversize_drops += 1;
        }
    }

    /// Routes one wire-sized frame and offers it to the egress (or egresses) it goes to.
    fn forward(&mut self, now: Duration, in_port: usize, frame: &[u8]) {
        let forward = match self.mtp.as_deref_mut() {
            None => self.bridge.route(now, in_port, frame),
            Some(dev) => {
                let ports = &self.ports;
                self.bridge.route_by(now, in_port, frame, |group, hash| {
                    dev.choose(now, group, hash, frame, |p| {
                        ports
                            .get(p)
                            .map_or(0, |p| p.egress.channel().queued_bytes())
                    })
                })
            }
        };
        match forward {
            Forward::Drop => {}
            Forward::Port(out) => self.offer(now, out, frame),
            Forward::Flood => {
                for out in 0..self.ports.len() {
                    if out != in_port && self.ports[out].flood {
                        self.offer(now, out, frame);
                    }
                }
            }
        }
    }

    /// Copies `frame` into a pooled buffer and offers it to port `out`'s egress.
    fn offer(&mut self, now: Duration, out: usize, frame: &[u8]) {
        if let Some(p) = self.ports.get_mut(out) {
            let mut buf = self.pool.copy_of(frame);
            let mut headroom = 0;
            if let Some(dev) = self.mtp.as_deref_mut() {
                // The device looks at the queue as this frame would find it.
                p.egress.advance(now, &mut self.pool);
                match dev.admit(now, out, &mut buf, p.egress.channel()) {
                    Verdict::Forward { headroom: h } => headroom = h,
                    Verdict::Drop => {
                        self.pool.put(buf);
                        return;
                    }
                }
            }
            p.egress
                .offer_with_headroom(now, buf, headroom, &mut self.pool);
        }
    }

    /// Runs port `port`'s line up to `now` and passes each frame due to `send`, which
    /// says what the device did with it (see [`TxResult`]). Returns the frames sent.
    pub fn transmit(
        &mut self,
        now: Duration,
        port: usize,
        send: &mut dyn FnMut(&[u8]) -> TxResult,
    ) -> usize {
        let Some(p) = self.ports.get_mut(port) else {
            return 0;
        };
        p.egress.advance(now, &mut self.pool);
        let mut sent = 0;
        while let Some(frame) = p.egress.pop_ready(now) {
            match send(&frame) {
                TxResult::Sent => {}
                TxResult::Full => {
                    p.egress.push_front(frame);
                    break;
                }
                TxResult::Failed => {
                    // A port whose device fails loses its own frames, not the switch.
                    p.stats.tx_error_drops += 1;
                    self.pool.put(frame);
                    continue;
                }
            }
            p.stats.forwarded += 1;
            p.stats.forwarded_bytes += frame.len() as u64;
            self.pool.put(frame);
            sent += 1;
        }
        sent
    }

    /// Counts a hard send error of port `port`'s device (reported by the runner).
    pub fn count_tx_error(&mut self, port: usize) {
        if let Some(p) = self.ports.get_mut(port) {
            p.stats.tx_errors += 1;
        }
    }

    /// The earliest time any port has something to do.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.ports
            .iter()
            .filter_map(|p| p.egress.next_deadline())
            .min()
    }

    /// Counters of port `port`.
    pub fn port_stats(&self, port: usize) -> Option<PortStats> {
        self.ports.get(port).map(|p| PortStats {
            egress: p.egress.stats(),
            ..p.stats.clone()
        })
    }

    /// The forwarding decision's counters (received, forwarded, flooded, filtered, runts).
    pub fn bridge_stats(&self) -> &SwitchStats {
        &self.bridge.stats
    }
}

/// Ethernet + IPv4 + TCP header length of an IPv4 TCP frame, if it is one.
fn tcp_headers_len(frame: &[u8]) -> Option<usize> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ihl = usize::from(frame.get(ETH_HLEN)? & 0x0f) * 4;
    let thl = usize::from(frame.get(ETH_HLEN + ihl + 12)? >> 4) * 4;
    Some(ETH_HLEN + ihl + thl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::default_egress;
    use proptest::prelude::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];

    fn frame(dst: [u8; 6], src: [u8; 6], len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12] = 0x88;
        f[13] = 0xb5;
        f
    }

    fn drain(sw: &mut SwitchCore, now: Duration) -> Vec<Vec<Vec<u8>>> {
        (0..sw.ports())
            .map(|p| {
                let mut out = Vec::new();
                sw.transmit(now, p, &mut |f| {
                    out.push(f.to_vec());
                    TxResult::Sent
                });
                out
            })
            .collect()
    }

    #[test]
    fn learns_floods_then_forwards() {
        let mut sw = SwitchCore::new(&vec![default_egress(); 3], 1514, 1);
        let now = Duration::ZERO;
        sw.receive(now, 0, &frame(B, A, 100));
        let out = drain(&mut sw, now);
        assert_eq!([out[0].len(), out[1].len(), out[2].len()], [0, 1, 1]);
        sw.receive(now, 1, &frame(A, B, 100));
        let out = drain(&mut sw, now);
        assert_eq!([out[0].len(), out[1].len(), out[2].len()], [1, 0, 0]);
        assert_eq!(out[0][0], frame(A, B, 100));
        let s0 = sw.port_stats(0).unwrap();
        assert_eq!(
            (s0.rx_frames, s0.forwarded, s0.forwarded_bytes),
            (1, 1, 100)
        );
        assert_eq!(sw.bridge_stats().flooded, 1);
        // Unknown C floods to both others; runts are dropped.
        sw.receive(now, 0, &frame(C, A, 60));
        sw.receive(now, 0, &[1, 2, 3]);
        let out = drain(&mut sw, now);
        assert_eq!([out[1].len(), out[2].len()], [1, 1]);
        assert_eq!(sw.bridge_stats().runts, 1);
    }

    #[test]
    fn a_port_with_flood_off_gets_no_floods_but_unicast() {
        let mut sw = SwitchCore::new(&vec![default_egress(); 3], 1514, 1);
        sw.set_flood(2, false);
        let now = Duration::ZERO;
        // B is unknown: the flood from port 0 leaves by port 1 only.
        sw.receive(now, 0, &frame(B, A, 100));
        let out = drain(&mut sw, now);
        assert_eq!([out[0].len(), out[1].len(), out[2].len()], [0, 1, 0]);
        // Once C is learned on port 2, unicast to it still goes out there.
        sw.receive(now, 2, &frame(A, C, 100));
        sw.receive(now, 0, &frame(C, A, 100));
        let out = drain(&mut sw, now);
        assert_eq!([out[0].len(), out[1].len(), out[2].len()], [1, 0, 1]);
    }

    #[test]
    fn a_refused_frame_is_kept_for_later() {
        let mut sw = SwitchCore::new(&vec![default_egress(); 2], 1514, 1);
        sw.receive(Duration::ZERO, 0, &frame(B, A, 100));
        assert_eq!(sw.transmit(Duration::ZERO, 1, &mut |_| TxResult::Full), 0);
        assert_eq!(sw.next_deadline(), Some(Duration::ZERO));
        assert_eq!(drain(&mut sw, Duration::ZERO)[1].len(), 1);
        assert_eq!(sw.port_stats(1).unwrap().tx_error_drops, 0);
    }

    #[test]
    fn a_failing_port_drops_and_counts_its_frames_and_the_others_go_on() {
        let mut sw = SwitchCore::new(&vec![default_egress(); 3], 1514, 1);
        let now = Duration::ZERO;
        sw.receive(now, 0, &frame(B, A, 60));
        sw.receive(now, 1, &frame(A, B, 60));
        sw.receive(now, 2, &frame(A, C, 60));
        drain(&mut sw, now);
        let forwarded = sw.port_stats(0).unwrap().forwarded;
        // Port 0's device is down: both frames for it are dropped and counted.
        sw.receive(now, 1, &frame(A, B, 100));
        sw.receive(now, 2, &frame(A, C, 100));
        sw.receive(now, 0, &frame(B, A, 100));
        assert_eq!(sw.transmit(now, 0, &mut |_| TxResult::Failed), 0);
        sw.count_tx_error(0);
        let s0 = sw.port_stats(0).unwrap();
        assert_eq!(
            (s0.forwarded, s0.tx_error_drops, s0.tx_errors),
            (forwarded, 2, 1)
        );
        assert_eq!(
            sw.transmit(now, 0, &mut |_| TxResult::Sent),
            0,
            "nothing kept for the failed port"
        );
        // Port 1 still forwards.
        assert_eq!(drain(&mut sw, now)[1].len(), 1);
        assert_eq!(sw.port_stats(1).unwrap().tx_error_drops, 0);
    }

    #[test]
    fn shaped_port_paces_frames() {
        let shaped = LinkConfig::new(8_000_000, Duration::ZERO);
        let mut sw = SwitchCore::new(&[default_egress(), shaped], 1514, 1);
        sw.receive(Duration::ZERO, 1, &frame(A, B, 60));
        for _ in 0..10 {
            sw.receive(Duration::ZERO, 0, &frame(B, A, 1000));
        }
        // 1000 B at 8 Mb/s = 1 ms each.
        let mut times = Vec::new();
        while let Some(t) = sw.next_deadline() {
            let n = drain(&mut sw, t)[1].len();
            times.extend(std::iter::repeat_n(t, n));
        }
        let expected: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(times, expected);
    }

    #[test]
    fn large_tcp_segments_are_cut_to_the_wire_size() {
        let mut sw = SwitchCore::new(&vec![default_egress(); 2], 1514, 1);
        sw.receive(Duration::ZERO, 1, &frame(A, B, 60));
        // Ethernet + IPv4 (20) + TCP (32) + 10 000 payload bytes.
        let payload = 10_000;
        let mut f = frame(B, A, 14 + 20 + 32 + payload);
        f[12] = 0x08;
        f[13] = 0x00;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((20 + 32 + payload) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[14 + 20 + 12] = 8 << 4;
        sw.receive(Duration::ZERO, 0, &f);
        let out = drain(&mut sw, Duration::ZERO);
        // 1514 - 66 = 1448 payload bytes a segment: 7 segments.
        assert_eq!(out[1].len(), 7);
        assert!(out[1].iter().all(|s| s.len() <= 1514));
        assert_eq!(out[1].iter().map(|s| s.len() - 66).sum::<usize>(), payload);
        assert_eq!(sw.port_stats(0).unwrap().segmented, 1);
        // Not TCP: dropped and counted.
        sw.receive(Duration::ZERO, 0, &frame(B, A, 3000));
        assert_eq!(sw.port_stats(0).unwrap().oversize_drops, 1);
    }

    proptest! {
        #[test]
        fn never_panics(frames in proptest::collection::vec(
            (0usize..4, proptest::collection::vec(any::<u8>(), 0..2000)), 0..30)) {
            let mut sw = SwitchCore::new(&vec![default_egress(); 3], 1514, 1);
            for (i, (port, f)) in frames.iter().enumerate() {
                let now = Duration::from_micros(i as u64);
                sw.receive(now, *port, f);
                for p in 0..4 {
                    sw.transmit(now, p, &mut |_| TxResult::Sent);
                }
            }
        }
    }
}
