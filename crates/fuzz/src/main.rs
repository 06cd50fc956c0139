//! `sluice-fuzz`: a seeded, coverage-free fuzz campaign against the Sluice TCP core.
//!
//! `cargo run --release -p sluice-fuzz -- --seconds 30` runs cases until the budget is
//! spent; `--cases N` runs N cases instead; `--seed S` replays one case (add `--trace` to
//! see its steps). The exit status is non-zero on a failure, whose seed is printed.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_fuzz::{case_seed, run_case_caught, CaseOptions, CaseStats};

#[derive(Parser, Debug)]
#[command(about = "Seeded fuzz campaign against the Sluice TCP core")]
struct Args {
    /// Time budget in seconds (default 30 unless --cases or --seed is given).
    #[arg(long)]
    seconds: Option<u64>,
    /// Run this many cases instead of a time budget.
    #[arg(long, conflicts_with = "seconds")]
    cases: Option<u64>,
    /// Replay the single case with this seed.
    #[arg(long, conflicts_with_all = ["seconds", "cases"])]
    seed: Option<u64>,
    /// Campaign seed: case i runs with seed mix(base, i). Defaults to the clock.
    #[arg(long)]
    base_seed: Option<u64>,
    /// Fuzz steps per case (default: drawn from the case seed). A failure at step k
    /// usually replays with `--steps k+1`, which shortens its trace.
    #[arg(long)]
    steps: Option<usize>,
    /// Print every step of the case(s).
    #[arg(long)]
    trace: bool,
    /// Report every failing case and go on until the budget is spent (still exits non-zero).
    #[arg(long)]
    keep_going: bool,
}

fn add(totals: &mut CaseStats, s: &CaseStats) {
    totals.steps += s.steps;
    totals.frames += s.frames;
    totals.forged += s.forged;
    totals.flows += s.flows;
    totals.checked_dirs += s.checked_dirs;
    totals.checked_bytes += s.checked_bytes;
    totals.live_flows += s.live_flows;
    totals.quiet_rounds += s.quiet_rounds;
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = CaseOptions {
        steps: args.steps,
        trace: args.trace,
    };
    if let Some(seed) = args.seed {
        return match run_case_caught(seed, &opts) {
            Ok(stats) => {
                println!("seed {seed}: ok {stats:?}");
                ExitCode::SUCCESS
            }
            Err(f) => {
                println!("FAILED {f}");
                ExitCode::FAILURE
            }
        };
    }
    let base = args.base_seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let budget = Duration::from_secs(args.seconds.unwrap_or(30));
    let max_cases = args.cases.unwrap_or(u64::MAX);
    println!("sluice-fuzz: base seed {base}");
    let start = Instant::now();
    let mut totals = CaseStats::default();
    let (mut cases, mut failures) = (0u64, 0u64);
    while cases < max_cases && (args.cases.is_some() || start.elapsed() < budget) {
        let seed = case_seed(base, cases);
        let t0 = Instant::now();
        let r = run_case_caught(seed, &opts);
        if t0.elapsed() > Duration::from_millis(500) {
            println!("slow case: seed {seed} took {:?}", t0.elapsed());
        }
        cases += 1;
        match r {
            Ok(s) => add(&mut totals, &s),
            Err(f) => {
                failures += 1;
                println!("FAILED (case {cases}) {f}");
                println!(
                    "replay: cargo run --release -p sluice-fuzz -- --seed {} --trace",
                    f.seed
                );
                if !args.keep_going {
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{cases} cases in {secs:.1} s ({:.0} cases/s), {failures} failed; {} steps, {} frames \
         ({} forged), {} flows, {} stream directions checked ({} bytes), {} flows passed \
         liveness, {} quiet rounds",
        cases as f64 / secs.max(1e-9),
        totals.steps,
        totals.frames,
        totals.forged,
        totals.flows,
        totals.checked_dirs,
        totals.checked_bytes,
        totals.live_flows,
        totals.quiet_rounds
    );
    if failures > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
