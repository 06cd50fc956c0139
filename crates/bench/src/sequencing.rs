//! `sluice bench sequencing` (issue 20): the cost of the multi-core data-path's sequencing
//! step, in process: ns per frame through a group's `Sequencer` and a `Reorder` buffer when
//! 1, 2 or 4 replicas hand the frames back interleaved (flextoe.txt 3.2), and of one hop of a
//! link (a batch of 32 frames sent, received and given back on one SPSC link).

use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Args;
use sluice_engine::multicore::batch::{FrameMeta, BATCH_FRAMES};
use sluice_engine::multicore::link::link;
use sluice_engine::multicore::{Reorder, Sequencer};

/// `sluice bench sequencing`.
#[derive(Args, Debug)]
pub struct BenchSequencingArgs {
    /// Seconds per row (a fraction of a second is enough for a smoke run).
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
}

/// Frames numbered and reordered per round: what replicas hold between two drains.
const ROUND: usize = 64;

/// Runs `body` in rounds for about `seconds`; returns ns per unit, with `units` per round.
fn time_per_unit(seconds: f64, units: usize, mut body: impl FnMut()) -> f64 {
    let budget = Duration::from_secs_f64(seconds.max(0.001));
    let start = Instant::now();
    let mut rounds: u64 = 0;
    while start.elapsed() < budget {
        // Check the clock every 64 rounds, so reading it is not what is measured.
        for _ in 0..64 {
            body();
        }
        rounds += 64;
    }
    start.elapsed().as_nanos() as f64 / (rounds as f64 * units as f64)
}

/// ns per frame: numbered by the sequencer, dealt round-robin to `replicas`, handed back
/// last replica first (so every replica but one waits in the buffer), released in order.
pub fn sequencing_ns(replicas: usize, seconds: f64) -> f64 {
    let replicas = replicas.max(1);
    let mut seq = Sequencer::new(1);
    let mut reorder: Reorder<u64> = Reorder::new(ROUND);
    let mut lanes: Vec<Vec<u64>> = (0..replicas).map(|_| Vec::with_capacity(ROUND)).collect();
    let mut released: u64 = 0;
    let ns = time_per_unit(seconds, ROUND, || {
        for i in 0..ROUND {
            lanes[i % replicas].push(seq.next(0));
        }
        for lane in lanes.iter_mut().rev() {
            for &n in lane.iter() {
                // Cannot be refused: a round fits the window and numbers only grow.
                let _ = reorder.insert(n, n);
            }
            lane.clear();
            while let Some(n) = reorder.pop() {
                released = black_box(n);
            }
        }
    });
    black_box(released);
    ns
}

/// ns per batch of one link hop: take an empty batch, send it, receive it, give it back.
pub fn link_hop_ns(seconds: f64) -> f64 {
    let (mut tx, mut rx) = link(8, 8);
    // A batch of full length, so the hop moves what a busy data-path moves.
    if let Some(mut b) = tx.take_empty() {
        for _ in 0..BATCH_FRAMES {
            b.push_copy(&[0u8; 64], FrameMeta::default());
        }
        tx.send(b);
        if let Some(b) = rx.recv() {
            rx.give_back(b);
        }
    }
    time_per_unit(seconds, 1, || {
        if let Some(b) = tx.take_empty() {
            tx.send(black_box(b));
        }
        if let Some(b) = rx.recv() {
            rx.give_back(black_box(b));
        }
    })
}

/// The table, as printed.
pub fn table(seconds: f64) -> String {
    let mut s = String::from("sequencing step (Sequencer + Reorder, one group)\n");
    s.push_str(&format!("{:>10}  {:>10}\n", "replicas", "ns/frame"));
    for r in [1, 2, 4] {
        s.push_str(&format!("{:>10}  {:>10.1}\n", r, sequencing_ns(r, seconds)));
    }
    let hop = link_hop_ns(seconds);
    s.push_str("\nlink hop (SPSC rings of batches, both ends on one thread)\n");
    s.push_str(&format!(
        "{:>10}  {:>10}\n{:>10.1}  {:>10.2}\n",
        "ns/batch",
        "ns/frame",
        hop,
        hop / BATCH_FRAMES as f64
    ));
    s
}

/// Runs `sluice bench sequencing`: prints the table.
pub fn run(args: &BenchSequencingArgs) {
    print!("{}", table(args.seconds));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_replica_count_and_the_link_hop() {
        let t = table(0.002);
        for needle in ["replicas", "ns/frame", "link hop", "ns/batch"] {
            assert!(t.contains(needle), "{t}");
        }
        let rows = t
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| ["1", "2", "4"].contains(&w))
            })
            .count();
        assert_eq!(rows, 3, "{t}");
    }
}
