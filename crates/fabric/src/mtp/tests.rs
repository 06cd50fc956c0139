//! The device's behaviours, each on frames built with `MtpFrameRepr::emit` and real
//! channels driven in virtual time.

use std::net::Ipv4Addr;
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sluice_mtp::wire::{
    Encap, FeedbackKind, List, MtpFrameRepr, MtpRepr, PathletTc, DEVICE_TRIMMED, FLAG_DATA,
};
use sluice_wire::ethernet::EthernetAddress;
use sluice_wire::ipv4::Ecn;

use super::*;
use crate::link::{Channel, LinkConfig, Offer};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const GBPS: u64 = 1_000_000_000;

/// An MTP data frame: message `msg` of `pkts` packets of `payload` bytes, class `tc`.
fn mtp(msg: u32, pkt: u16, pkts: u16, payload: usize, tc: u8, exclude: &[PathletTc]) -> Vec<u8> {
    let data = vec![0xab; payload];
    let mut repr = MtpFrameRepr::new(
        (EthernetAddress([2, 0, 0, 0, 0, 1]), SRC),
        (EthernetAddress([2, 0, 0, 0, 0, 2]), DST),
        Encap::Ip,
        MtpRepr {
            src_port: 4000,
            dst_port: 5000,
            flags: FLAG_DATA,
            tc,
            msg_id: msg,
            msg_len: u32::from(pkts) * payload as u32,
            msg_pkts: pkts,
            pkt_num: pkt,
            pkt_offset: u32::from(pkt) * payload as u32,
            pkt_len: payload as u16,
            exclude: List::Items(exclude),
            feedback_slots: 2,
            ..MtpRepr::default()
        },
    );
    // ECN-capable, so the links' marking applies as to the stack's traffic.
    repr.ip.ecn = Ecn::Ect0;
    repr.ip.dscp = tc;
    let mut buf = vec![0u8; repr.frame_len(payload).unwrap()];
    repr.emit(&mut buf, &data).unwrap();
    buf
}

/// A channel of `gbps` with a `queue` byte queue, drained in virtual time.
struct Line {
    ch: Channel,
    done_at: Option<Duration>,
    sent: Vec<Vec<u8>>,
}

impl Line {
    fn new(config: LinkConfig) -> Line {
        Line {
            ch: Channel::new(config, ChaCha8Rng::seed_from_u64(1)),
            done_at: None,
            sent: Vec::new(),
        }
    }

    fn advance(&mut self, now: Duration) {
        while let Some(t) = self.done_at.filter(|t| *t <= now) {
            self.sent.extend(self.ch.finish());
            self.done_at = self.ch.start_next().map(|ns| t + Duration::from_nanos(ns));
        }
    }

    fn offer(&mut self, now: Duration, frame: Vec<u8>, headroom: usize) -> bool {
        self.advance(now);
        match self.ch.offer_with_headroom(frame, headroom).0 {
            Offer::Dropped(_) => false,
            Offer::Started(ns) => {
                self.done_at = Some(now + Duration::from_nanos(ns));
                true
            }
            Offer::Queued => true,
            Offer::Immediate(f) => {
                self.sent.push(f);
                true
            }
        }
    }
}

fn parse_feedback(frame: &[u8]) -> Vec<(PathletTc, FeedbackKind, u32)> {
    let (f, _) = MtpFrameRepr::parse(frame, true).expect("checksums still valid");
    f.mtp
        .feedback
        .iter()
        .map(|fb| (fb.at, fb.kind, fb.value))
        .collect()
}

#[test]
fn ecn_feedback_is_appended_with_a_valid_checksum_and_follows_the_queue() {
    let mut dev = MtpDevice::new(1).with_pathlet(0, Pathlet::ecn(7, 3000));
    let mut line = Line::new(LinkConfig::new(GBPS, Duration::ZERO));
    let t0 = Duration::ZERO;
    let mut values = Vec::new();
    for i in 0..6 {
        let mut f = mtp(1, i, 6, 1000, 3, &[]);
        assert_eq!(
            dev.admit(t0, 0, &mut f, &line.ch),
            Verdict::Forward { headroom: 0 }
        );
        let fb = parse_feedback(&f);
        assert_eq!(fb.len(), 1);
        assert_eq!(fb[0].0, PathletTc { pathlet: 7, tc: 3 });
        assert_eq!(fb[0].1, FeedbackKind::Ecn);
        values.push(fb[0].2);
        line.offer(t0, f, 0);
    }
    // The first frame goes on the line; the queue then holds 0, 1, 2, 3 frames (of ~1.1 KB)
    // as frames 1..5 are enqueued: above 3000 bytes from the fifth on.
    assert_eq!(values, [0, 0, 0, 0, 1, 1]);
    assert_eq!(dev.stats().ecn_congested, 2);
    assert_eq!(dev.stats().feedback_appended, 6);
    // Non-MTP frames pass untouched.
    let mut other = vec![0u8; 60];
    let before = other.clone();
    dev.admit(t0, 0, &mut other, &line.ch);
    assert_eq!((other, dev.stats().other_frames), (before, 1));
}

#[test]
fn feedback_full_sets_the_flag_and_counts() {
    let mut dev = MtpDevice::new(1)
        .with_pathlet(0, Pathlet::rate(1))
        .with_fair_share(FairShare::new(1 << 20));
    let line = Line::new(LinkConfig::new(GBPS, Duration::ZERO));
    let mut f = mtp(1, 0, 1, 100, 0, &[]);
    // Rate (merged with the share) fills one slot: a second device fills the other.
    dev.admit(Duration::ZERO, 0, &mut f, &line.ch);
    dev.admit(Duration::ZERO, 0, &mut f, &line.ch);
    dev.admit(Duration::ZERO, 0, &mut f, &line.ch);
    assert_eq!(parse_feedback(&f).len(), 2);
    assert_eq!(dev.stats().feedback_full, 1);
    let (p, _) = MtpFrameRepr::parse(&f, true).unwrap();
    assert_ne!(
        p.mtp.device_flags & sluice_mtp::wire::DEVICE_FEEDBACK_FULL,
        0
    );
}

#[test]
fn exclusion_is_honoured_by_every_balancer_but_the_optical_one() {
    let excl = [PathletTc {
        pathlet: 11,
        tc: 255,
    }];
    for balancer in [Balancer::Hash, Balancer::Spray, Balancer::Message] {
        let mut dev = MtpDevice::new(3)
            .with_pathlet(1, Pathlet::ecn(11, 1000))
            .with_pathlet(2, Pathlet::ecn(12, 1000))
            .with_balancer(balancer);
        for i in 0..20u32 {
            let f = mtp(i, 0, 1, 100, 0, &excl);
            let p = dev.choose(Duration::ZERO, &[1, 2], u64::from(i), &f, |_| 0);
            assert_eq!(p, 2, "{balancer:?} message {i}");
        }
        assert!(dev.stats().exclusions_honoured > 0, "{balancer:?}");
    }
    // Every member excluded: the exclusion cannot be honoured, counted.
    let mut dev = MtpDevice::new(2).with_pathlet(1, Pathlet::ecn(11, 1000));
    let f = mtp(1, 0, 1, 100, 0, &excl);
    assert_eq!(dev.choose(Duration::ZERO, &[1], 0, &f, |_| 0), 1);
    assert_eq!(dev.stats().exclusions_unsatisfiable, 1);
}

#[test]
fn a_message_stays_on_one_port_and_the_next_goes_to_the_less_loaded() {
    let mut dev = MtpDevice::new(3).with_balancer(Balancer::Message);
    let group = [1, 2];
    let t = Duration::from_micros;
    // Port 2 has a queue: message 1 (10 packets of 1000 B) goes to port 1.
    let queued = |p: usize| if p == 2 { 5000 } else { 0 };
    let first = dev.choose(t(0), &group, 0, &mtp(1, 0, 10, 1000, 0, &[]), queued);
    assert_eq!(first, 1);
    // Its 9000 expected bytes now load port 1: message 2 goes to port 2.
    assert_eq!(dev.expected_bytes(1), 9000);
    let second = dev.choose(t(1), &group, 0, &mtp(2, 0, 1, 1000, 0, &[]), queued);
    assert_eq!(second, 2);
    // The rest of message 1 stays on port 1 even when port 1 is now the busier.
    for pkt in 1..10 {
        let f = mtp(1, pkt, 10, 1000, 0, &[]);
        assert_eq!(
            dev.choose(t(2), &group, 7, &f, |p| 100_000 * (p == 1) as usize),
            1
        );
    }
    assert_eq!(dev.expected_bytes(1), 0);
    assert_eq!((dev.stats().pins, dev.stats().pin_hits), (2, 9));
}

#[test]
fn messages_on_idle_members_spread_over_the_group() {
    let mut dev = MtpDevice::new(3).with_balancer(Balancer::Message);
    let mut per_port = [0usize; 3];
    // One-packet messages, each gone before the next: every choice is a tie.
    for id in 0..100 {
        let p = dev.choose(
            Duration::ZERO,
            &[1, 2],
            0,
            &mtp(id, 0, 1, 500, 0, &[]),
            |_| 0,
        );
        per_port[p] += 1;
    }
    assert_eq!(per_port, [0, 50, 50]);
}

#[test]
fn the_pin_table_is_bounded() {
    let mut dev = MtpDevice::new(2)
        .with_balancer(Balancer::Message)
        .with_max_pins(8);
    for i in 0..100 {
        dev.choose(
            Duration::from_nanos(i),
            &[0, 1],
            0,
            &mtp(i as u32, 0, 2, 100, 0, &[]),
            |_| 0,
        );
    }
    assert_eq!(dev.stats().pins, 100);
    assert_eq!(dev.stats().pin_evictions, 92);
}

#[test]
fn alternate_switches_every_period_for_every_frame() {
    let mut dev = MtpDevice::new(2).with_balancer(Balancer::Alternate {
        period: Duration::from_micros(384),
    });
    let other = vec![0u8; 60];
    let picks: Vec<usize> = [0, 383, 384, 767, 768, 1200]
        .iter()
        .map(|&us| dev.choose(Duration::from_micros(us), &[0, 1], 99, &other, |_| 0))
        .collect();
    assert_eq!(picks, [0, 0, 1, 1, 0, 1]);
}

#[test]
fn spray_round_robins_packets() {
    let mut dev = MtpDevice::new(3).with_balancer(Balancer::Spray);
    let f = mtp(1, 0, 1, 100, 0, &[]);
    let picks: Vec<usize> = (0..6)
        .map(|_| dev.choose(Duration::ZERO, &[0, 1, 2], 5, &f, |_| 0))
        .collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn fair_share_gives_two_classes_equal_rate_and_drops_the_heavy_ones_excess() {
    // 10 Gbit/s port; class 1 offers 2 Gbit/s, class 2 eight times as much (16 Gbit/s).
    let mut dev = MtpDevice::new(1)
        .with_pathlet(0, Pathlet::ecn(5, 30_000))
        .with_fair_share(FairShare::new(15_000));
    let mut line = Line::new(LinkConfig::new(10 * GBPS, Duration::ZERO).with_queue(200_000));
    let mut rates = [Vec::new(), Vec::new()];
    let mut sent = [0usize; 2];
    // A 1000-byte-payload frame every 4 us for class 1, every 0.5 us for class 2.
    for step in 0..4000u64 {
        let now = Duration::from_nanos(500 * step);
        let classes: &[u8] = if step % 8 == 0 { &[1, 2] } else { &[2] };
        for &tc in classes {
            let mut f = mtp(step as u32, 0, 1, 1000, tc, &[]);
            if let Verdict::Forward { headroom } = dev.admit(now, 0, &mut f, &line.ch) {
                let rate = parse_feedback(&f)
                    .into_iter()
                    .find(|x| x.1 == FeedbackKind::Rate)
                    .map(|x| x.2);
                rates[usize::from(tc - 1)].extend(rate);
                sent[usize::from(tc - 1)] += usize::from(line.offer(now, f, headroom));
            }
        }
    }
    // Both classes are told the same share: 5 Gbit/s.
    assert!(rates
        .iter()
        .all(|r| !r.is_empty() && r[r.len() / 2..].iter().all(|&v| v == 5000)));
    assert_eq!(dev.tc_drops(0, 1), 0, "the light class is under its share");
    assert!(dev.tc_drops(0, 2) > 1000, "drops {}", dev.tc_drops(0, 2));
    assert_eq!(dev.stats().fair_share_drops, dev.tc_drops(0, 2));
    assert_eq!(sent[0], 500);
}

#[test]
fn trimming_keeps_a_valid_header_and_stays_bounded() {
    let mut dev = MtpDevice::new(1).with_trimming(2000);
    let cap = 10_000;
    let mut line = Line::new(LinkConfig::new(GBPS, Duration::ZERO).with_queue(cap));
    let (mut trimmed, mut dropped) = (0, 0);
    for i in 0..100 {
        let mut f = mtp(i, 0, 1, 1400, 0, &[]);
        let full_len = f.len();
        let Verdict::Forward { headroom } = dev.admit(Duration::ZERO, 0, &mut f, &line.ch) else {
            panic!("no fair share: never dropped by the device");
        };
        if f.len() < full_len {
            trimmed += 1;
            let (p, payload) = MtpFrameRepr::parse(&f, true).expect("a valid trimmed packet");
            assert!(payload.is_empty() && p.mtp.device_flags & DEVICE_TRIMMED != 0);
            assert_eq!(p.mtp.pkt_len, 1400);
        }
        dropped += usize::from(!line.offer(Duration::ZERO, f, headroom));
        assert!(line.ch.queued_bytes() <= cap + 2000);
    }
    assert!(
        trimmed > 10 && dropped > 0,
        "trimmed {trimmed} dropped {dropped}"
    );
    assert_eq!(dev.stats().trimmed, trimmed);
}

#[test]
fn class_queues_share_a_link_equally_between_two_backlogged_classes() {
    let mut line = Line::new(
        LinkConfig::new(GBPS, Duration::ZERO)
            .with_queue(100_000)
            .with_class_queues(2),
    );
    // Class 1 offers three times class 0's frames; both stay backlogged.
    for step in 0..2000u64 {
        let now = Duration::from_micros(step);
        line.offer(now, mtp(0, 0, 1, 1000, 0, &[]), 0);
        for _ in 0..3 {
            line.offer(now, mtp(0, 0, 1, 1000, 1, &[]), 0);
        }
    }
    let mut per_class = [0usize; 2];
    for f in &line.sent[line.sent.len() / 2..] {
        per_class[crate::class_of(f, 2)] += 1;
    }
    // Equal frames: DRR alternates, so the classes differ by at most one frame.
    assert!(per_class[0] > 50, "{per_class:?}");
    assert!(per_class[0].abs_diff(per_class[1]) <= 1, "{per_class:?}");
}
