//! The teardown stage's timer bitmap wheel (acceltcp.txt 4.2, Figure 6) against the core's
//! timer heap (timer.rs: one lazily-updated deadline per connection slot), per flow, at
//! 65,536 and 1,048,576 flows (issue 15, item 2).
//!
//! Cases (each timed over every flow, reported per flow):
//! - `arm`: every flow gets an RTO at a random time within the horizon (1 to 200 ms).
//! - `rearm`: an ACK moves every flow's RTO later (by 1 to 50 ms), as the core does on
//!   every ACK: the wheel moves the bit; the heap writes the connection's timer table and
//!   arms lazily (a later deadline pushes nothing).
//! - `expire`: after `rearm`, time advances tick by tick (1 ms) until every flow has fired;
//!   the heap pops each stale entry and arms the flow again at its real deadline, as the
//!   core's timer loop does.
//!
//! The wheel has the teardown stage's default shape (256 slots of 1 ms, `Config`'s
//! `teardown_wheel_slots` and `teardown_tick`) and is warmed first (its bitmaps grown), as a
//! stage that has run is. Deadlines come from a fixed seed, the same for both structures.
//!
//! Run alone (the machine is shared): `cargo bench -p sluice-tcp --bench timers`; a name
//! filter picks cases (`-- 65536`, `-- expire/`). After criterion's output a table prints
//! ns per flow (the median and 10th percentile over timed runs) and heap/wheel.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant as WallClock};

use criterion::{BenchmarkId, Criterion, Throughput};
use sluice_tcp::bench_support::{Heap, Wheel};
use sluice_tcp::Instant;

const TICK_NS: u64 = 1_000_000;
const SLOTS: usize = 256;
/// Ticks walked by `expire`: past the latest re-armed deadline (200 + 50 ms).
const END_TICKS: u64 = 251;
const SIZES: [usize; 2] = [1 << 16, 1 << 20];

/// Each flow's first RTO and the one an ACK moves it to, in nanoseconds.
struct Plan {
    arm: Vec<u64>,
    rearm: Vec<u64>,
}

/// splitmix64: deterministic deadlines without a dependency.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn plan(flows: usize) -> Plan {
    let mut s = 15;
    let arm: Vec<u64> = (0..flows)
        .map(|_| TICK_NS + next(&mut s) % (199 * TICK_NS))
        .collect();
    let rearm = arm
        .iter()
        .map(|&a| a + TICK_NS + next(&mut s) % (49 * TICK_NS))
        .collect();
    Plan { arm, rearm }
}

/// A wheel whose bitmaps have held every flow once (empty now).
fn warm_wheel(p: &Plan) -> Wheel {
    let mut w = Wheel::new(SLOTS, TICK_NS, 0);
    for (f, &at) in p.arm.iter().enumerate() {
        w.schedule(f as u32, at);
    }
    for f in 0..p.arm.len() {
        w.cancel(f as u32);
    }
    w
}

/// The heap and, per slot, the deadline the connection's timer table holds.
struct HeapTimers {
    heap: Heap,
    rto: Vec<Instant>,
}

impl HeapTimers {
    fn new(flows: usize) -> Self {
        HeapTimers {
            heap: Heap::new(flows),
            rto: vec![Instant::MAX; flows],
        }
    }

    fn arm(&mut self, slot: u32, at: Instant) {
        self.rto[slot as usize] = at;
        self.heap.arm(slot, at);
    }

    /// Pops what is due at `now`: a flow whose RTO moved later is armed again.
    fn expire(&mut self, now: Instant) -> usize {
        let mut fired = 0;
        while let Some(slot) = self.heap.pop_expired(now) {
            let at = self.rto[slot as usize];
            if at <= now {
                self.rto[slot as usize] = Instant::MAX;
                fired += 1;
            } else {
                self.heap.arm(slot, at);
            }
        }
        fired
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    Arm,
    Rearm,
    Expire,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Arm => "arm",
            Case::Rearm => "rearm",
            Case::Expire => "expire",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Structure {
    Wheel,
    Heap,
}

/// ns per flow of every timed run, by case, size and structure.
type Samples = RefCell<BTreeMap<(Case, usize, Structure), Vec<f64>>>;

/// Times `op` on a fresh `setup()` per run; records ns per flow.
fn timed<S>(
    samples: &Samples,
    key: (Case, usize, Structure),
    iters: u64,
    mut setup: impl FnMut() -> S,
    mut op: impl FnMut(&mut S),
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let mut state = setup();
        let t = WallClock::now();
        op(&mut state);
        let dt = t.elapsed();
        black_box(&state);
        total += dt;
        samples
            .borrow_mut()
            .entry(key)
            .or_default()
            .push(dt.as_nanos() as f64 / key.1 as f64);
    }
    total
}

fn wheel_expire_all(w: &mut Wheel, out: &mut Vec<u32>) -> usize {
    let mut fired = 0;
    for t in 1..=END_TICKS {
        w.expire(t * TICK_NS, out);
        fired += out.len();
        out.clear();
    }
    fired
}

fn heap_expire_all(h: &mut HeapTimers) -> usize {
    (1..=END_TICKS)
        .map(|t| h.expire(Instant::from_nanos(t * TICK_NS)))
        .sum()
}

fn bench(c: &mut Criterion, samples: &Samples) {
    for &n in &SIZES {
        let p = plan(n);
        let flows = 0..n as u32;
        let armed_heap = || {
            let mut h = HeapTimers::new(n);
            for f in flows.clone() {
                h.arm(f, Instant::from_nanos(p.arm[f as usize]));
            }
            h
        };
        let rearmed_heap = || {
            let mut h = armed_heap();
            for f in flows.clone() {
                h.arm(f, Instant::from_nanos(p.rearm[f as usize]));
            }
            h
        };
        let armed_wheel = || {
            let mut w = warm_wheel(&p);
            for f in flows.clone() {
                w.schedule(f, p.arm[f as usize]);
            }
            w
        };
        let rearmed_wheel = || {
            let mut w = armed_wheel();
            for f in flows.clone() {
                w.schedule(f, p.rearm[f as usize]);
            }
            w
        };
        for case in [Case::Arm, Case::Rearm, Case::Expire] {
            let mut g = c.benchmark_group(case.name());
            g.throughput(Throughput::Elements(n as u64));
            g.sample_size(10);
            g.bench_function(BenchmarkId::new("wheel", n), |b| {
                let key = (case, n, Structure::Wheel);
                b.iter_custom(|iters| match case {
                    Case::Arm => timed(
                        samples,
                        key,
                        iters,
                        || warm_wheel(&p),
                        |w| {
                            for f in flows.clone() {
                                w.schedule(f, p.arm[f as usize]);
                            }
                        },
                    ),
                    Case::Rearm => timed(samples, key, iters, armed_wheel, |w| {
                        for f in flows.clone() {
                            w.schedule(f, p.rearm[f as usize]);
                        }
                    }),
                    Case::Expire => {
                        let mut out = Vec::with_capacity(n);
                        timed(samples, key, iters, rearmed_wheel, |w| {
                            assert_eq!(wheel_expire_all(w, &mut out), n, "every flow fires");
                        })
                    }
                })
            });
            g.bench_function(BenchmarkId::new("heap", n), |b| {
                let key = (case, n, Structure::Heap);
                b.iter_custom(|iters| match case {
                    Case::Arm => timed(
                        samples,
                        key,
                        iters,
                        || HeapTimers::new(n),
                        |h| {
                            for f in flows.clone() {
                                h.arm(f, Instant::from_nanos(p.arm[f as usize]));
                            }
                        },
                    ),
                    Case::Rearm => timed(samples, key, iters, armed_heap, |h| {
                        for f in flows.clone() {
                            h.arm(f, Instant::from_nanos(p.rearm[f as usize]));
                        }
                    }),
                    Case::Expire => timed(samples, key, iters, rearmed_heap, |h| {
                        assert_eq!(heap_expire_all(h), n, "every flow fires");
                    }),
                })
            });
            g.finish();
        }
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let samples = Samples::default();
    bench(&mut c, &samples);
    c.final_summary();
    let mut samples = samples.into_inner();
    if samples.is_empty() {
        return;
    }
    println!("\ntimers: ns per flow (median, p10 over timed runs)");
    println!(
        "{:<8} {:>9} {:>17} {:>17} {:>10}",
        "case", "flows", "wheel", "heap", "heap/wheel"
    );
    for case in [Case::Arm, Case::Rearm, Case::Expire] {
        for n in SIZES {
            let mut row = [None, None];
            for (i, s) in [Structure::Wheel, Structure::Heap].into_iter().enumerate() {
                if let Some(v) = samples.get_mut(&(case, n, s)) {
                    row[i] = Some((quantile(v, 0.5), quantile(v, 0.1)));
                }
            }
            if row == [None, None] {
                continue;
            }
            let cell =
                |r: Option<(f64, f64)>| r.map_or("-".into(), |(m, p)| format!("{m:.2} ({p:.2})"));
            let ratio = match row {
                [Some((w, _)), Some((h, _))] => format!("{:.2}", h / w),
                _ => "-".into(),
            };
            println!(
                "{:<8} {:>9} {:>17} {:>17} {:>10}",
                case.name(),
                n,
                cell(row[0]),
                cell(row[1]),
                ratio
            );
        }
    }
}
