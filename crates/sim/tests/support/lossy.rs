//! A simulated host that loses or reorders chosen frames of its core, deterministically.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_apps::RpcEcho;
use sluice_sim::{Host, LinkConfig, Sim};
use sluice_tcp::{Counters, Instant, Stack};

use super::config;

/// The retransmission timeout's floor of [`armed_rpc`]'s hosts.
pub const RTO_MIN: Duration = Duration::from_millis(5);

/// A core whose next `drop_data` outgoing frames with TCP payload are lost on the wire,
/// and whose next `hold_data` ones are each sent after the frame that follows them.
pub struct Lossy {
    pub stack: Stack,
    pub drop_data: u32,
    pub dropped: u32,
    pub hold_data: u32,
    held: Option<Vec<u8>>,
    release: Option<Vec<u8>>,
}

impl Lossy {
    pub fn new(stack: Stack) -> Self {
        Lossy {
            stack,
            drop_data: 0,
            dropped: 0,
            hold_data: 0,
            held: None,
            release: None,
        }
    }
}

impl Host for Lossy {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack.handle_frame(now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(f) = self.release.take() {
            buf[..f.len()].copy_from_slice(&f);
            return Some(f.len());
        }
        loop {
            let n = self.stack.poll_transmit(now, buf)?;
            let data = tcp_payload_len(&buf[..n]) > 0;
            if self.drop_data > 0 && data {
                self.drop_data -= 1;
                self.dropped += 1;
                continue;
            }
            if self.hold_data > 0 && data && self.held.is_none() {
                self.hold_data -= 1;
                self.held = Some(buf[..n].to_vec());
                continue;
            }
            self.release = self.held.take();
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

/// Echo RPCs of `size` bytes between a client (host 1) and a server (host 2) 10 us apart,
/// both with [`RTO_MIN`] and `rack_tlp`, in a simulation seeded with `seed`: 20 warm-up RPCs,
/// then `arm` sets the server's impairment for the 21st, then two clean ones. Returns the
/// 21st's latency, the server's counters and how many frames the server lost.
pub fn armed_rpc(
    seed: u64,
    size: usize,
    rack_tlp: bool,
    arm: impl Fn(&mut Lossy),
) -> (Duration, Counters, u32) {
    let mut sim: Sim<Lossy> = Sim::new(seed);
    let mut add = |n| {
        let mut c = config(n);
        c.rto_min = RTO_MIN;
        c.rack_tlp = rack_tlp;
        sim.add_host(Lossy::new(Stack::new(c).unwrap()))
    };
    let (a, b) = (add(1), add(2));
    sim.connect(
        a,
        b,
        LinkConfig::new(10_000_000_000, Duration::from_micros(10)),
    )
    .unwrap();
    let mut rpc = RpcEcho::new(23, size);
    rpc.listen(&mut sim.host_mut(b).unwrap().stack, 7).unwrap();
    let now = sim.now();
    rpc.connect(
        now,
        &mut sim.host_mut(a).unwrap().stack,
        Ipv4Addr::new(10, 0, 0, 2),
        7,
    )
    .unwrap();
    let mut armed = false;
    let deadline = sim.now() + Duration::from_secs(5);
    sim.run_until(deadline, |now, hosts| {
        let (c, s) = hosts.get_pair_mut(a, b).expect("two hosts");
        if !armed && rpc.latencies.len() == 20 {
            arm(s);
            armed = true;
        }
        rpc.step(now, &mut c.stack, &mut s.stack);
        rpc.done()
    })
    .expect("the RPCs complete");
    assert!(rpc.error.is_none(), "{:?}", rpc.error);
    let server = sim.host(b).unwrap();
    (
        rpc.latencies[20],
        server.stack.counters().clone(),
        server.dropped,
    )
}

/// TCP payload bytes of an Ethernet + IPv4 + TCP frame (0 for anything else).
pub fn tcp_payload_len(frame: &[u8]) -> usize {
    if frame.len() < 54 || frame[12..14] != [0x08, 0x00] || frame[23] != 6 {
        return 0;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let doff = frame
        .get(14 + ihl + 12)
        .map_or(0, |b| usize::from(b >> 4) * 4);
    total.saturating_sub(ihl + doff)
}
