//! How much work the stack does per packet (issue 17), measured deterministically: N
//! messages between two stacks in virtual time, counting heap allocations, bytes allocated
//! and the stack's own CPU time per data packet (printed, never asserted on time). Run with
//! `cargo test -p sluice-mtp --test work -- --ignored --nocapture`.
//!
//! The allocation counts are exact and repeatable, so one claim is asserted: sending,
//! receiving and acknowledging allocate per message, not per packet.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::{dst, Pair, IP_B};
use sluice_mtp::stack::{Event, SendError, SendOptions};

/// The system allocator, counting (the measurement's only instrument).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed unchanged to the system allocator, which upholds the
// contract; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr came from System.alloc with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as for dealloc; new_size is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What `n` messages of `size` bytes, `window` outstanding, cost once warmed up.
struct Work {
    packets: u64,
    allocs: u64,
    bytes: u64,
    ns: u128,
}

fn measure(size: usize, n: u32, window: usize) -> Work {
    let mut p = Pair::new(3);
    p.rate_bps = 10_000_000_000;
    let ea = p.a.bind(0).unwrap();
    let eb = p.b.bind(7000).unwrap();
    let to = dst(IP_B, &p.b, eb);
    let data = vec![5u8; size];
    let mut frame = Vec::with_capacity(9000);
    let mut once = |p: &mut Pair, count: u32| {
        let (mut sent, mut acked) = (0u32, 0u32);
        while acked < count {
            while sent < count && p.a.usage().outstanding < window {
                match p
                    .a
                    .send_message(p.now, ea, to, &data, SendOptions::default())
                {
                    Ok(_) => sent += 1,
                    Err(SendError::TooManyOutstanding) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            if !p.step() {
                break;
            }
            while let Some(m) = p.b.recv_message(eb) {
                // The application's copy out (kept, so the receive path is whole).
                frame.clear();
                frame.extend_from_slice(&m.data);
            }
            while let Some(e) = p.a.poll_event() {
                if let Event::Delivered { .. } = e {
                    acked += 1;
                }
            }
        }
    };
    // Warm up: tables and queues reach their working size.
    once(&mut p, n / 10 + 1);
    let pkts0 = p.a.counters().data_sent;
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let t = Instant::now();
    once(&mut p, n);
    let ns = t.elapsed().as_nanos();
    Work {
        packets: p.a.counters().data_sent - pkts0,
        allocs: ALLOCS.load(Ordering::Relaxed) - a0,
        bytes: BYTES.load(Ordering::Relaxed) - b0,
        ns,
    }
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn work_per_packet_between_two_stacks() {
    // The rig's own work (its wire keeps each frame in a Vec) is part of the figures: one
    // allocation per frame each way (data and ACK), so 2 per data packet are the rig's.
    for (size, n, window) in [
        (64, 20_000u32, 8usize),
        (65_536, 2_000, 8),
        (65_536, 500, 64),
    ] {
        let w = measure(size, n, window);
        let pk = w.packets.max(1) as f64;
        println!(
            "{size:>6} B x {n:>6}, {window:>2} outstanding: {} data packets; per packet {:.2} \
             allocations ({:.2} of them the rig's), {:.0} bytes allocated, {:.2} us of CPU \
             (both stacks and the rig); per message {:.2} allocations",
            w.packets,
            w.allocs as f64 / pk,
            2.0,
            w.bytes as f64 / pk,
            w.ns as f64 / pk / 1000.0,
            w.allocs as f64 / f64::from(n),
        );
        // Per message: the sender's copy and packet table, the receiver's buffer and
        // bitmap, the scheduler's and tables' nodes; per packet only the rig's two frames.
        let per_packet_beyond_rig = (w.allocs as f64 - 2.0 * pk) / pk;
        let per_message = f64::from(n) * 16.0 / pk;
        assert!(
            per_packet_beyond_rig <= per_message,
            "{:.2} allocations per packet beyond the rig's",
            per_packet_beyond_rig
        );
    }
}
