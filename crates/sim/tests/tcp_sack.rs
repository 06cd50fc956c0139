//! SACK loss recovery (RFC 2018, RFC 6675) between two TCP cores over the simulator, against
//! the papers' go-back-N baseline. A deterministic drop filter on the sender's NIC loses
//! chosen data segments (their first transmission only) so each scenario is exact; the
//! goodput table under random loss is an ignored test:
//!
//!     cargo test --release -p sluice-sim --test tcp_sack -- --ignored --nocapture

mod support;

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Host, Impairment, LinkConfig, Sim};
use sluice_tcp::{Config, Counters, Instant, Recovery, Stack};
use sluice_wire::ethernet::EthernetRepr;
use sluice_wire::ipv4::Ipv4Repr;
use sluice_wire::tcp::{ChecksumCheck, SeqNumber, TcpFlags, TcpHeader};
use support::*;

const MB: u64 = 1 << 20;

/// A core behind a NIC that drops the first transmission of chosen data segments and keeps
/// a log of data sent and ACKs received (sequence numbers relative to the ISN + 1).
struct Filtered {
    stack: Stack,
    /// Ordinals (0-based, in order of first transmission) of data segments to lose.
    drop_nth: Vec<u64>,
    /// Data segments sent for the first time so far.
    new_segments: u64,
    /// Highest relative sequence number sent + 1.
    high: u32,
    isn: Option<SeqNumber>,
    peer_isn: Option<SeqNumber>,
    /// (relative seq, len) of each dropped segment.
    dropped: Vec<(u32, u32)>,
    /// (when, relative seq, len) of each retransmitted data segment.
    retransmitted: Vec<(Instant, u32, u32)>,
    /// (when, relative ACK, SACK block count) of each ACK received.
    acks: Vec<(Instant, u32, usize)>,
}

impl Filtered {
    fn new(stack: Stack, drop_nth: &[u64]) -> Self {
        Filtered {
            stack,
            drop_nth: drop_nth.to_vec(),
            new_segments: 0,
            high: 0,
            isn: None,
            peer_isn: None,
            dropped: Vec::new(),
            retransmitted: Vec::new(),
            acks: Vec::new(),
        }
    }
}

impl Deref for Filtered {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl DerefMut for Filtered {
    fn deref_mut(&mut self) -> &mut Stack {
        &mut self.stack
    }
}

fn tcp_of(frame: &[u8]) -> Option<(TcpHeader, usize)> {
    let (_, l3) = EthernetRepr::parse(frame).ok()?;
    let (ip, l4) = Ipv4Repr::parse(l3, false).ok()?;
    let (tcp, payload) = TcpHeader::parse(l4, ip.src, ip.dst, ChecksumCheck::Skip).ok()?;
    Some((tcp, payload.len()))
}

impl Host for Filtered {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        if let Some((tcp, _)) = tcp_of(frame) {
            if tcp.flags.contains(TcpFlags::SYN) {
                self.peer_isn = Some(tcp.seq);
            } else if let (Some(isn), true) = (self.isn, tcp.flags.contains(TcpFlags::ACK)) {
                let rel = tcp.ack.diff(isn + 1u32) as u32;
                self.acks.push((now, rel, tcp.options.sacks().len()));
            }
        }
        self.stack.handle_frame(now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        loop {
            let n = self.stack.poll_transmit(now, buf)?;
            let Some((tcp, len)) = tcp_of(&buf[..n]) else {
                return Some(n);
            };
            if tcp.flags.contains(TcpFlags::SYN) {
                self.isn = Some(tcp.seq);
                return Some(n);
            }
            let Some(isn) = self.isn else { return Some(n) };
            if len == 0 {
                return Some(n);
            }
            let rel = tcp.seq.diff(isn + 1u32) as u32;
            if rel < self.high {
                self.retransmitted.push((now, rel, len as u32));
                return Some(n);
            }
            self.high = rel + len as u32;
            let nth = self.new_segments;
            self.new_segments += 1;
            if self.drop_nth.contains(&nth) {
                self.dropped.push((rel, len as u32));
                continue; // lost on the wire
            }
            return Some(n);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now)
    }
}

/// A sender (host 1) and a receiver (host 2) on one link: 10 Gbps, 10 us each way.
fn run(
    sender: Config,
    receiver: Config,
    drop_nth: &[u64],
    imp: Impairment,
    seed: u64,
    bytes: u64,
    limit: Duration,
) -> (Sim<Filtered>, BulkTransfer, Duration) {
    let mut sim = Sim::new(seed);
    let a = sim.add_host(Filtered::new(Stack::new(sender).unwrap(), drop_nth));
    let b = sim.add_host(Filtered::new(Stack::new(receiver).unwrap(), &[]));
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(10))
        .with_queue(4 << 20)
        .with_impairment(imp);
    sim.connect(a, b, link).unwrap();
    let mut t = BulkTransfer::new(bytes, 42);
    t.listen(sim.host_mut(b).unwrap(), 5001).unwrap();
    let start = sim.now();
    t.connect(start, sim.host_mut(a).unwrap(), B_IP, 5001)
        .unwrap();
    let r = sim.run_until(start + limit, |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).expect("two hosts");
        t.step(now, s, r);
        t.done()
    });
    assert!(
        r.is_ok() && t.verified(),
        "transfer of {bytes} B: {r:?}, error {:?}, received {}",
        t.error,
        t.receiver.bytes
    );
    let took = t.finished_at.unwrap() - start;
    (sim, t, took)
}

fn sender_config(recovery: Recovery) -> Config {
    let mut c = config(1);
    c.recovery = recovery;
    c
}

fn receiver_config(ooo_intervals: usize) -> Config {
    let mut c = config(2);
    c.ooo_intervals = ooo_intervals;
    c
}

/// The three data segments lost in one window: segments 60, 64 and 68 (slow start has
/// opened the window well past 68 by then; cwnd starts at 10 and doubles per RTT).
const BURST: [u64; 3] = [60, 64, 68];

#[test]
fn rfc6675_sack_recovers_three_losses_in_one_window_within_about_one_rtt_without_timeout() {
    let (sim, _, _) = run(
        sender_config(Recovery::Sack),
        receiver_config(4),
        &BURST,
        Impairment::default(),
        1,
        2 * MB,
        Duration::from_secs(1),
    );
    let a = sim.host(sluice_sim::NodeId(0)).unwrap();
    let c: &Counters = a.counters();
    assert_eq!(a.dropped.len(), 3);
    // No retransmission timeout: SACK recovery did all of it, in one recovery episode.
    assert_eq!(c.timeouts, 0, "{c:?}");
    assert_eq!((c.fast_retransmits, c.sack_recoveries), (1, 1), "{c:?}");
    assert!(c.sack_blocks_rx > 0);
    assert_eq!(c.sack_blocks_invalid, 0);
    // Only the lost segments went again, once each.
    let resent: Vec<(u32, u32)> = a.retransmitted.iter().map(|&(_, s, l)| (s, l)).collect();
    assert_eq!(resent, a.dropped, "retransmitted exactly the lost segments");
    assert_eq!(c.sack_retransmits, 3);
    let lost_bytes: u32 = a.dropped.iter().map(|d| d.1).sum();
    assert_eq!(c.retransmitted_bytes, u64::from(lost_bytes));
    // Timing: the first duplicate ACK (acknowledging up to the first loss, with SACK
    // blocks) to the cumulative ACK past the last loss.
    let first_loss = a.dropped[0].0;
    let (last_seq, last_len) = a.dropped[2];
    let first_dupack = a
        .acks
        .iter()
        .find(|&&(_, ack, sacks)| ack == first_loss && sacks > 0)
        .expect("a duplicate ACK with SACK blocks")
        .0;
    let done = a
        .acks
        .iter()
        .find(|&&(_, ack, _)| ack >= last_seq + last_len)
        .expect("the losses were repaired")
        .0;
    // The path's RTT at that moment, measured on the first retransmission: sent, then
    // acknowledged (the queue the flow has built is part of it).
    let (rxt_at, _, _) = a.retransmitted[0];
    let rxt_acked = a
        .acks
        .iter()
        .find(|&&(t, ack, _)| t > rxt_at && ack > first_loss)
        .expect("retransmission acknowledged")
        .0;
    let rtt = rxt_acked - rxt_at;
    let recovery = done - first_dupack;
    assert!(
        recovery <= rtt * 2,
        "recovery took {recovery:?}, RTT {rtt:?}: more than two RTTs"
    );
    // The last retransmission left before the first was acknowledged: all three holes
    // were repaired in the same round trip.
    assert!(a.retransmitted[2].0 <= rxt_acked);
}

#[test]
fn go_back_n_recovers_the_same_burst_by_resending_more() {
    let (sim, _, _) = run(
        sender_config(Recovery::GoBackN),
        receiver_config(4),
        &BURST,
        Impairment::default(),
        1,
        2 * MB,
        Duration::from_secs(1),
    );
    let a = sim.host(sluice_sim::NodeId(0)).unwrap();
    let c = a.counters();
    let lost_bytes: u64 = a.dropped.iter().map(|d| u64::from(d.1)).sum();
    assert_eq!(c.sack_recoveries + c.sack_retransmits, 0, "go-back-N");
    assert!(
        c.retransmitted_bytes > 3 * lost_bytes,
        "go-back-N resends what followed the losses too: {} bytes for {lost_bytes} lost",
        c.retransmitted_bytes
    );
}

#[test]
fn sack_falls_back_to_go_back_n_when_the_peer_does_not_permit_it() {
    let mut receiver = receiver_config(4);
    receiver.sack = false; // RFC 2018 2: no SACK-permitted, no SACK blocks
    let (sim, _, _) = run(
        sender_config(Recovery::Sack),
        receiver,
        &BURST,
        Impairment::default(),
        1,
        2 * MB,
        Duration::from_secs(1),
    );
    let c = sim.host(sluice_sim::NodeId(0)).unwrap().counters();
    assert_eq!((c.sack_recoveries, c.sack_blocks_rx), (0, 0));
    assert!(c.fast_retransmits >= 1);
}

#[test]
fn sack_with_one_receiver_interval_repairs_the_burst_without_timeout() {
    // Laminar's and TAS's receiver keeps one out-of-order interval: what arrives beyond a
    // second gap is dropped, so SACK blocks show one range at a time. Recovery still ends
    // without a timeout, retransmitting what the receiver dropped.
    let (sim, _, _) = run(
        sender_config(Recovery::Sack),
        receiver_config(1),
        &BURST,
        Impairment::default(),
        1,
        2 * MB,
        Duration::from_secs(1),
    );
    let c = sim.host(sluice_sim::NodeId(0)).unwrap().counters();
    assert_eq!(c.timeouts, 0, "{c:?}");
    assert_eq!(c.sack_recoveries, 1, "{c:?}");
}

#[test]
fn a_receiver_with_no_out_of_order_intervals_still_completes_under_loss() {
    // ooo_intervals = 0: every out-of-order segment is dropped and answered with a
    // duplicate ACK; both recovery modes must still deliver everything.
    for recovery in [Recovery::Sack, Recovery::GoBackN] {
        let (sim, _, _) = run(
            sender_config(recovery),
            receiver_config(0),
            &BURST,
            Impairment::default().with_loss(0.005),
            3,
            2 * MB,
            Duration::from_secs(10),
        );
        let b = sim.host(sluice_sim::NodeId(1)).unwrap().counters();
        assert_eq!(b.ooo_stored, 0, "{recovery:?}");
        assert!(b.ooo_dropped > 0, "{recovery:?}");
    }
}

#[test]
fn random_loss_1_percent_sack_beats_go_back_n() {
    let imp = || Impairment::default().with_loss(0.01);
    let limit = Duration::from_secs(20);
    let (sim, _, sack) = run(
        sender_config(Recovery::Sack),
        receiver_config(4),
        &[],
        imp(),
        5,
        4 * MB,
        limit,
    );
    let cs = sim.host(sluice_sim::NodeId(0)).unwrap().counters().clone();
    let (sim, _, gbn) = run(
        sender_config(Recovery::GoBackN),
        receiver_config(0),
        &[],
        imp(),
        5,
        4 * MB,
        limit,
    );
    let cg = sim.host(sluice_sim::NodeId(0)).unwrap().counters().clone();
    assert!(cs.sack_recoveries > 0 && cs.sack_retransmits > 0);
    assert!(
        cs.retransmitted_bytes < cg.retransmitted_bytes,
        "SACK resent {} B, go-back-N {} B",
        cs.retransmitted_bytes,
        cg.retransmitted_bytes
    );
    assert!(sack < gbn, "SACK took {sack:?}, go-back-N {gbn:?}");
}

/// Goodput of one bulk flow under random loss (both directions), SACK against go-back-N.
#[test]
#[ignore = "measurement: prints a table"]
fn goodput_table_under_random_loss() {
    let variants: [(&str, Recovery, usize); 5] = [
        ("go-back-N, 0 intervals", Recovery::GoBackN, 0),
        ("go-back-N, 1 interval", Recovery::GoBackN, 1),
        ("SACK, 1 interval", Recovery::Sack, 1),
        ("SACK, 4 intervals", Recovery::Sack, 4),
        ("SACK, 16 intervals", Recovery::Sack, 16),
    ];
    println!("| loss | variant | goodput (Gbit/s) | retransmitted | timeouts |");
    println!("|---|---|---|---|---|");
    for loss in [0.0, 0.001, 0.01, 0.02, 0.05] {
        let bytes = if loss >= 0.05 { 8 * MB } else { 32 * MB };
        for (name, recovery, ooo) in variants {
            let mut gbps = Vec::new();
            let mut rexmit = 0;
            let mut timeouts = 0;
            for seed in 1..=3 {
                let (sim, _, took) = run(
                    sender_config(recovery),
                    receiver_config(ooo),
                    &[],
                    Impairment::default().with_loss(loss),
                    seed,
                    bytes,
                    Duration::from_secs(600),
                );
                let c = sim.host(sluice_sim::NodeId(0)).unwrap().counters();
                rexmit += c.retransmitted_bytes;
                timeouts += c.timeouts;
                gbps.push(bytes as f64 * 8.0 / took.as_secs_f64() / 1e9);
            }
            let mean = gbps.iter().sum::<f64>() / gbps.len() as f64;
            println!(
                "| {:.1} % | {name} | {mean:.3} | {:.1} % | {:.1} |",
                loss * 100.0,
                rexmit as f64 / (3 * bytes) as f64 * 100.0,
                timeouts as f64 / 3.0
            );
        }
    }
}
