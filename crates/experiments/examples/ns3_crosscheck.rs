//! Sluice's core in Sluice's simulator on the ns-3 cross-check's scenarios (the (a) column
//! of `scripts/ns3.sh crosscheck`): prints the run and writes the CSV the ns-3 scenarios'
//! `--csv` share with it.
//!
//!     cargo run --release -p sluice-experiments --example ns3_crosscheck -- dumbbell --flows 8
//!     cargo run --release -p sluice-experiments --example ns3_crosscheck -- leaf-spine --ms 20
//!     cargo run --release -p sluice-experiments --example ns3_crosscheck -- dumbbell --ooo 64 --nagle false

use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use sluice_experiments::ns3_crosscheck::{self, DumbbellSpec, LeafSpineSpec};

/// The cross-check's scenarios in Sluice's simulator.
#[derive(Parser, Debug)]
struct Args {
    #[command(subcommand)]
    scenario: Scenario,
    /// Congestion control: dctcp or newreno.
    #[arg(long, global = true, default_value = "dctcp")]
    cc: String,
    /// Seed of the run.
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// Write the CSV here (else to stdout after the summary).
    #[arg(long, global = true)]
    csv: Option<std::path::PathBuf>,
    /// Nagle's algorithm on the hosts: true (the core's default) or false (as ns-3's TCP,
    /// `TcpNoDelay`).
    #[arg(long, global = true, default_value_t = true, action = clap::ArgAction::Set)]
    nagle: bool,
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// ns3/scenarios/dumbbell.cc's topology and flows.
    Dumbbell {
        /// Sender/receiver pairs.
        #[arg(long, default_value_t = 4)]
        flows: usize,
        /// Bytes per flow.
        #[arg(long, default_value_t = 1_000_000)]
        bytes: u64,
        /// Bottleneck rate, Mbit/s.
        #[arg(long, default_value_t = 1000)]
        mbps: u64,
        /// Bottleneck one-way delay, us.
        #[arg(long, default_value_t = 10)]
        delay_us: u64,
        /// Bottleneck queue, packets.
        #[arg(long, default_value_t = 200)]
        queue: usize,
        /// ECN marking threshold K, packets.
        #[arg(long, default_value_t = 20)]
        ecn_k: usize,
        /// Out-of-order intervals per connection (the core's default 1; ns-3's TCP keeps
        /// every out-of-order segment).
        #[arg(long, default_value_t = 1)]
        ooo: usize,
        /// Simulated seconds allowed.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
    },
    /// ns3/scenarios/leaf_spine.cc's fabric and workload (the `ooo` experiment's).
    LeafSpine {
        /// ooo's --quick size (2 spines, 2 leaves, 4 hosts each, fan-in 4, 2000 queries/s).
        #[arg(long)]
        quick: bool,
        /// Arrivals for this many ms.
        #[arg(long, default_value_t = 100)]
        ms: u64,
        /// Spines (default: ooo's).
        #[arg(long)]
        spines: Option<usize>,
        /// Leaves (default: ooo's).
        #[arg(long)]
        leaves: Option<usize>,
        /// Hosts per leaf (default: ooo's).
        #[arg(long)]
        hosts_per_leaf: Option<usize>,
        /// Out-of-order intervals per connection.
        #[arg(long, default_value_t = 64)]
        ooo: usize,
        /// SACK scoreboard ranges per connection (the core's default 8).
        #[arg(long, default_value_t = 8)]
        scoreboard: usize,
        /// Write the channels and arrivals drawn here (leaf_spine.cc's --workload).
        #[arg(long)]
        workload: Option<std::path::PathBuf>,
    },
}

fn main() {
    let args = Args::parse();
    let wall = Instant::now();
    let result = match args.scenario {
        Scenario::Dumbbell {
            flows,
            bytes,
            mbps,
            delay_us,
            queue,
            ecn_k,
            ooo,
            seconds,
        } => ns3_crosscheck::dumbbell(&DumbbellSpec {
            flows,
            bytes,
            bottleneck_bps: mbps * 1_000_000,
            bottleneck_delay: Duration::from_micros(delay_us),
            access_bps: 10_000_000_000,
            access_delay: Duration::from_micros(1),
            queue_packets: queue,
            ecn_k_packets: ecn_k,
            cc: args.cc.clone(),
            ooo_intervals: ooo,
            nagle: args.nagle,
            seed: args.seed,
            seconds,
        }),
        Scenario::LeafSpine {
            quick,
            ms,
            spines,
            leaves,
            hosts_per_leaf,
            ooo,
            scoreboard,
            workload,
        } => {
            let mut spec = LeafSpineSpec::ooo(quick, ms, args.seed);
            spec.fabric.spines = spines.unwrap_or(spec.fabric.spines);
            spec.fabric.leaves = leaves.unwrap_or(spec.fabric.leaves);
            spec.fabric.hosts_per_leaf = hosts_per_leaf.unwrap_or(spec.fabric.hosts_per_leaf);
            spec.ooo_intervals = ooo;
            spec.sack_scoreboard = scoreboard;
            spec.nagle = args.nagle;
            spec.cc = args.cc.clone();
            spec.keep_workload = workload.is_some();
            let result = ns3_crosscheck::leaf_spine(&spec);
            if let (Some(path), Ok(o)) = (&workload, &result) {
                let text = o.workload.as_deref().unwrap_or_default();
                if let Err(e) = std::fs::write(path, text) {
                    eprintln!("ns3_crosscheck: cannot write {}: {e}", path.display());
                    std::process::exit(2);
                }
            }
            result
        }
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ns3_crosscheck: {e}");
            std::process::exit(1);
        }
    };
    let secs = wall.elapsed().as_secs_f64();
    // A closed stdout (a pipe to `head`) is not worth a panic: writes are best effort.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "sluice sim: {} of {} completed, fct p50 {:.4} ms p99 {:.4} ms, {:.3} Gbit/s, {} RTOs, \
         {} bytes retransmitted, {} tail drops, {} ECN marks; {:.2} s wall, {} events, \
         {:.0} events/s",
        outcome.fct_ms.len(),
        outcome.messages,
        outcome.fct(0.5),
        outcome.fct(0.99),
        outcome.gbps,
        outcome.rtos,
        outcome.retransmitted_bytes,
        outcome.tail_drops,
        outcome.ecn_marks,
        secs,
        outcome.events,
        outcome.events as f64 / secs.max(1e-9),
    );
    // A few flows (the dumbbells): each one's time, since a percentile of four is one flow.
    if outcome.fct_ms.len() <= 16 {
        let mut each = outcome.fct_ms.clone();
        each.sort_by(f64::total_cmp);
        let each: Vec<String> = each.iter().map(|t| format!("{t:.3}")).collect();
        let _ = writeln!(stdout, "flows' fct ms, sorted: {}", each.join(" "));
    }
    match args.csv {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, outcome.csv()) {
                eprintln!("ns3_crosscheck: cannot write {}: {e}", path.display());
                std::process::exit(2);
            }
        }
        None => {
            let _ = write!(stdout, "{}", outcome.csv());
        }
    }
    let complete = outcome.fct_ms.len() == outcome.messages;
    std::process::exit(if complete { 0 } else { 1 });
}
