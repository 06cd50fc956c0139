//! Random but valid stack configurations with small bounds, so that tables, interval lists,
//! queues and buffers fill up within a short case and their limits get exercised.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;
use sluice_tcp::{AckPolicy, Config, MemoryLimits, Stack};

use crate::net::Side;

/// Ephemeral ports of each side: disjoint from each other and from the listening ports the
/// case uses, so the two stacks never open towards each other on the same tuple (a
/// simultaneous open the flow bookkeeping does not model).
pub fn ephemeral_ports(side: Side) -> (u16, u16) {
    match side {
        Side::A => (40000, 44999),
        Side::B => (50000, 54999),
    }
}

/// Ports the case listens on and connects to.
pub const SERVICE_PORTS: [u16; 4] = [80, 443, 8080, 9000];

/// A configuration for `side` drawn from `rng`.
pub fn random_config<R: Rng>(rng: &mut R, side: Side) -> Config {
    let mut c = Config::new(side.mac(), side.ip());
    c.seed = rng.gen();
    c.max_connections = rng.gen_range(2..=16);
    c.max_listeners = rng.gen_range(1..=4);
    c.syn_backlog = rng.gen_range(1..=4);
    c.max_accept_queue = rng.gen_range(1..=4);
    // Mostly small; sometimes past 64 KiB, so that window scaling is in play.
    c.rx_buffer = *[4096, 5000, 8192, 16384, 131_072]
        .choose(rng)
        .unwrap_or(&4096);
    c.tx_buffer = *[4096, 8192, 12000, 16384, 65536]
        .choose(rng)
        .unwrap_or(&4096);
    // Send buffers that grow (and shrink back to a share): from 4 KB, within a small
    // shared memory, so that growth, shares and shrinking are all reached.
    c.tx_buffer_initial = *[4096, 8192, 1 << 20].choose(rng).unwrap_or(&4096);
    c.tx_memory = *[4096, 24_000, 65536, 256 << 20]
        .choose(rng)
        .unwrap_or(&65536);
    c.mtu = *[576, 600, 1000, 1500].choose(rng).unwrap_or(&1500);
    c.ooo_intervals = rng.gen_range(0..=4);
    c.ack_policy = if rng.gen() {
        AckPolicy::EverySegment
    } else {
        AckPolicy::Delayed {
            segments: rng.gen_range(1..=3),
            timeout: Duration::from_millis(rng.gen_range(1..200)),
        }
    };
    c.nagle = rng.gen();
    c.rto_min = Duration::from_millis(rng.gen_range(1..300));
    c.rto_max = c.rto_min + Duration::from_millis(rng.gen_range(0..60_000));
    c.rto_initial = c.rto_min + (c.rto_max - c.rto_min) / rng.gen_range(1..8);
    c.user_timeout = Duration::from_secs(rng.gen_range(1..300));
    c.syn_retries = rng.gen_range(0..6);
    c.time_wait = *[
        Duration::ZERO,
        Duration::from_millis(500),
        Duration::from_secs(60),
    ]
    .choose(rng)
    .unwrap_or(&Duration::ZERO);
    c.challenge_ack_limit = rng.gen_range(1..20);
    c.window_scaling = rng.gen_bool(0.7);
    c.timestamps = rng.gen_bool(0.7);
    c.sack = rng.gen_bool(0.7);
    // Mostly verified, so forged frames must carry good checksums to get in; sometimes not,
    // so that corrupted frames reach TCP processing as they would with checksum offload.
    c.verify_checksums = rng.gen_bool(0.9);
    c.control_frame_queue = rng.gen_range(1..=48);
    c.neighbor_cache = rng.gen_range(1..=8);
    c.ephemeral_ports = ephemeral_ports(side);
    // Small wheels, so that paced connections clamp to the horizon and are re-placed.
    c.sched_wheel_slots = *[16, 256, 4096].choose(rng).unwrap_or(&16);
    c.sched_granularity = Duration::from_micros(*[1, 10].choose(rng).unwrap_or(&1));
    // Sometimes a global limit on buffered bytes that a few connections reach: memory
    // pressure (windows held back, rings kept small) and the limit (SYNs and new
    // out-of-order data refused).
    if rng.gen_bool(0.3) {
        let low = rng.gen_range(1024..=32 * 1024);
        c.tcp_mem = Some(MemoryLimits {
            low,
            pressure: low * 2,
            high: low * 3,
        });
    }
    // Teardown offload (closes the campaign asks to offload go to the stage): drawn from
    // the seed's bits rather than the rng, so that earlier seeds replay the same draws.
    let bits = c.seed >> 8;
    c.teardown_flows = [0, 1, 3, 64][bits as usize % 4];
    c.teardown_tail_bytes = [0, 3000, 1 << 20][(bits >> 2) as usize % 3];
    c.teardown_retries = 1 + (bits >> 4) as u8 % 8;
    c.teardown_wheel_slots = [64, 256][(bits >> 7) as usize % 2];
    c.teardown_tick = Duration::from_millis(1 + (bits >> 8) % 20);
    // Memory groups (from the seed's bits too): connections and listeners spread over
    // them (crate::apps), each limited by `group_limits`.
    c.max_memory_groups = [1, 2, 3, 4][(bits >> 12) as usize % 4];
    c
}

/// Limits on every memory group but the ungrouped, from the seed's bits: sometimes none,
/// else thresholds a connection or two reach (the group's SYNs and new out-of-order data
/// refused, its rings kept small, while other groups go on).
pub fn group_limits(s: &mut Stack) {
    let bits = s.config().seed >> 16;
    if bits.is_multiple_of(3) {
        return;
    }
    let low = 2048usize << ((bits >> 2) % 4);
    let limits = MemoryLimits {
        low,
        pressure: low * 2,
        high: low * 3,
    };
    for group in 1..s.config().max_memory_groups {
        // Within max_memory_groups and valid limits: refused only by a bug.
        s.set_group_limit(group as u16, Some(limits))
            .expect("a valid group limit");
    }
}

/// The group a connection or listener joins: spread by `key` over the groups.
pub fn group_of(s: &Stack, key: u32) -> u16 {
    (key % s.config().max_memory_groups as u32) as u16
}

/// Bound on the frames one drain of `poll_transmit` may yield: every queued control frame,
/// and per connection its whole send buffer in segments of the smallest MSS the core
/// accepts (88 - 12 bytes of timestamp option), plus a FIN, an ACK and slack. Going past it
/// means `poll_transmit` does not drain.
pub fn drain_bound(c: &Config) -> usize {
    let tx = c.tx_buffer.next_power_of_two();
    // The teardown stage's flows each send at most a send buffer's tail and a FIN.
    let offloaded = c.teardown_flows * (tx / 64 + 2);
    c.control_frame_queue + c.max_connections * (tx / 64 + 4) + offloaded + 8
}
