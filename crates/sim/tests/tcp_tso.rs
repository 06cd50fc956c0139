//! The core's large-segment path (TSO/GSO with partial checksums) through a simulated NIC
//! that segments like Linux: bulk transfers verified by SHA-256, clean and impaired, and
//! every frame on the wire within the MTU.

mod support;

use std::time::Duration;

use sluice_apps::BulkTransfer;
use sluice_sim::{Host, Impairment, Instant, LinkConfig, OffloadNic, Sim};
use support::config;

const MB: u64 = 1 << 20;

/// Wraps a NIC and checks every frame it receives fits the MTU (what the wire may carry).
struct WireCheck {
    nic: OffloadNic,
    largest_rx: usize,
}

impl Host for WireCheck {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.largest_rx = self.largest_rx.max(frame.len());
        self.nic.handle_frame(now, frame)
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.nic.poll_transmit(now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.nic.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.nic.handle_timeout(now)
    }
}

struct Outcome {
    large_frames: u64,
    large_segments_tx: u64,
    largest_rx: usize,
    retransmitted: u64,
}

/// Moves `bytes` from a TSO sender (host 1) to a receiver (host 2) over 10 Gbit/s, 10 us.
fn tso_transfer(seed: u64, imp: Impairment, bytes: u64, tso: u32, limit: Duration) -> Outcome {
    let mut a = config(1);
    a.tso_max_payload = tso;
    a.tx_checksum_offload = true;
    // A fixed receive window from the start, so large segments are not held back while
    // the receiver's buffer autotunes up.
    let mut b = config(2);
    b.rx_buffer_initial = b.rx_buffer;
    let mut sim = Sim::new(seed);
    let host = |c| WireCheck {
        nic: OffloadNic::new(sluice_tcp::Stack::new(c).unwrap()),
        largest_rx: 0,
    };
    let from = sim.add_host(host(a));
    let to = sim.add_host(host(b));
    let link = LinkConfig::new(10_000_000_000, Duration::from_micros(10))
        .with_queue(4 << 20)
        .with_impairment(imp);
    sim.connect(from, to, link).unwrap();
    let mut t = BulkTransfer::new(bytes, seed);
    t.listen(&mut sim.host_mut(to).unwrap().nic, 5001).unwrap();
    let now = sim.now();
    let to_ip = sim.host(to).unwrap().nic.config().ip;
    t.connect(now, &mut sim.host_mut(from).unwrap().nic, to_ip, 5001)
        .unwrap();
    let deadline = sim.now() + limit;
    let r = sim.run_until(deadline, |now, hosts| {
        let (s, r) = hosts.get_pair_mut(from, to).expect("two hosts");
        t.step(now, &mut s.nic, &mut r.nic);
        t.done()
    });
    assert!(
        r.is_ok() && t.verified(),
        "{bytes} B with TSO {tso}: {r:?}, sent {} received {}, error {:?}",
        t.sender.bytes,
        t.receiver.bytes,
        t.error
    );
    let sender = sim.host(from).unwrap();
    assert_eq!(sender.nic.malformed, 0);
    let receiver = sim.host(to).unwrap();
    Outcome {
        large_frames: sender.nic.large_frames,
        large_segments_tx: sender.nic.counters().large_segments_tx,
        largest_rx: receiver.largest_rx,
        retransmitted: sender.nic.counters().retransmitted_bytes,
    }
}

#[test]
fn large_segments_carry_a_clean_transfer_within_the_mtu() {
    let o = tso_transfer(
        3,
        Impairment::default(),
        16 * MB,
        64_000,
        Duration::from_millis(200),
    );
    // The window grows once per RTT (the control plane's congestion control), so between
    // iterations ACKs clock out single segments and large frames come from window growth
    // and application writes.
    assert!(o.large_frames > 20, "only {} large frames", o.large_frames);
    assert_eq!(o.large_frames, o.large_segments_tx);
    assert!(
        o.largest_rx <= 1514,
        "a {} B frame on the wire",
        o.largest_rx
    );
    assert_eq!(o.retransmitted, 0);
}

#[test]
fn large_segments_recover_from_loss_and_reordering() {
    for (seed, imp) in [
        (
            4,
            Impairment {
                loss: 0.01,
                ..Impairment::default()
            },
        ),
        (
            5,
            Impairment {
                reorder: 0.02,
                ..Impairment::default()
            },
        ),
    ] {
        let o = tso_transfer(seed, imp, 8 * MB, 64_000, Duration::from_secs(5));
        assert!(o.large_frames > 10, "only {} large frames", o.large_frames);
        assert!(o.largest_rx <= 1514);
    }
}

#[test]
fn tso_size_of_one_mss_sends_single_segments_with_offloaded_checksums() {
    let o = tso_transfer(
        6,
        Impairment::default(),
        MB,
        1460,
        Duration::from_millis(50),
    );
    assert_eq!(o.large_frames, 0);
    assert_eq!(o.large_segments_tx, 0);
}
