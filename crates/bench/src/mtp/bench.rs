//! `sluice bench mtp`: one run, holding the lab lock, on the standard lab: Linux TCP rows
//! first (no engine running), then engines A and E with Sluice TCP and MTP.

use std::path::PathBuf;

use clap::Args;

use super::rows;
use super::table::{Row, Stack, Table};
use crate::apps::error::AppsError;
use crate::apps::workdir::WorkDir;
use crate::lab_run;
use crate::verbs::hosts::{tcp_setup_lines, Hosts};
use crate::verbs::rows as tcp;
use crate::verbs::table::Stack as TcpStack;

/// The RPC size, bytes (issue 17: 64 B).
const RPC_SIZE: u64 = 64;
/// Throughput sizes, bytes.
const BW_SIZES: [u64; 2] = [64, 65536];

/// `sluice bench mtp`.
#[derive(Args, Debug)]
pub struct BenchMtpArgs {
    /// Fewer round trips and messages, and 1 s TCP runs.
    #[arg(long)]
    quick: bool,
    /// Seconds per sockperf and iperf3 run (default 3, or 1 with --quick).
    #[arg(long)]
    seconds: Option<u32>,
    /// Also write the table, as Markdown, to this file (e.g. docs/notes/issue-17/bench.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Leave the lab up afterwards.
    #[arg(long)]
    keep_lab: bool,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long)]
    no_lock: bool,
}

impl BenchMtpArgs {
    /// MTP round trips per run.
    fn rpcs(&self) -> u64 {
        if self.quick {
            2_000
        } else {
            20_000
        }
    }

    /// MTP messages of `size` bytes per throughput run (about 128 MB of 64 KB ones).
    fn messages(&self, size: u64) -> u64 {
        match (self.quick, size <= 1024) {
            (true, true) => 20_000,
            (false, true) => 200_000,
            (true, false) => 500,
            (false, false) => 2_000,
        }
    }
}

/// The command, for progress lines.
const COMMAND: &str = "bench mtp";

/// A progress line on stderr.
fn progress(msg: &str) {
    lab_run::progress(COMMAND, msg);
}

/// Runs `sluice bench mtp` and prints the table; fails only when the bench could not run
/// (rows that failed are printed as such).
pub fn run(args: &BenchMtpArgs) -> Result<(), AppsError> {
    let result = lab_run::in_lab(COMMAND, args.no_lock, args.keep_lab, |_| measure_all(args));
    let table = result?.render();
    print!("{table}");
    if let Some(path) = &args.out {
        let md = format!(
            "# `sluice bench mtp{}` (issue 17)\n\nWritten by the bench; the figures of one run.\n\n```\n{table}```\n",
            if args.quick { " --quick" } else { "" }
        );
        std::fs::write(path, md)
            .map_err(|e| AppsError::io(format!("write {}", path.display()), e))?;
    }
    Ok(())
}

/// Every row: Linux TCP, then Sluice TCP and MTP on the two engines.
fn measure_all(args: &BenchMtpArgs) -> Result<Table, AppsError> {
    let exe =
        std::env::current_exe().map_err(|e| AppsError::io("find the sluice executable", e))?;
    let dir = WorkDir::create("sluice-bench-mtp")?;
    let mut h = Hosts::new(exe, dir.path().to_path_buf());
    let seconds = args
        .seconds
        .unwrap_or(if args.quick { 1 } else { 3 })
        .max(1);
    let mut setup = vec![
        format!(
            "sluice bench mtp: {} MTP round trips of {RPC_SIZE} B; MTP messages {} x 64 B, {} x \
             64 KB; sockperf and iperf3 -t {seconds} s; {} shared CPU cores",
            args.rpcs(),
            args.messages(64),
            args.messages(65536),
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        "  MTP:        `sluice mtp rpc|send --window 64` on engine A (sluice-a) against `sluice \
         mtp recv --echo|--quiet --buffers 64` on engine E (sluice-e, 10.77.0.4), through br0"
            .into(),
    ];
    setup.extend(tcp_setup_lines());
    let mut t = Table {
        setup,
        ..Table::default()
    };
    tcp_rows(&mut h, Stack::LinuxTcp, seconds, &mut t);
    progress("starting engines A and E");
    match h.start_engines() {
        Ok(()) => {
            tcp_rows(&mut h, Stack::SluiceTcp, seconds, &mut t);
            mtp_rows(&mut h, args, &mut t);
        }
        Err(e) => {
            let why = e.to_string();
            progress(&format!("engines unavailable: {why}"));
            for stack in [Stack::SluiceTcp, Stack::Mtp] {
                t.rtt.push(failed(RPC_SIZE, stack, &why));
                for size in BW_SIZES {
                    t.bw.push(failed(size, stack, &why));
                }
            }
        }
    }
    h.stop_engines();
    t.rtt.sort_by_key(|r| (r.size, r.stack));
    t.bw.sort_by_key(|r| (r.size, r.stack));
    Ok(t)
}

fn failed<T>(size: u64, stack: Stack, why: &str) -> Row<T> {
    Row {
        size,
        stack,
        result: Err(why.to_string()),
    }
}

/// sockperf ping-pong (doubled into a round trip) and iperf3 rows of a TCP stack.
fn tcp_rows(h: &mut Hosts, stack: Stack, secs: u32, t: &mut Table) {
    let on = if stack == Stack::LinuxTcp {
        TcpStack::LinuxTcp
    } else {
        TcpStack::SluiceTcp
    };
    progress(&format!("{} sockperf ping-pong {RPC_SIZE} B", stack.name()));
    let result = tcp::sockperf_lat(h, on, RPC_SIZE, secs).map(|mut l| {
        // sockperf prints half the round trip.
        l.p50_us *= 2.0;
        l.p99_us *= 2.0;
        l
    });
    report(&result);
    t.rtt.push(Row {
        size: RPC_SIZE,
        stack,
        result,
    });
    for size in BW_SIZES {
        progress(&format!("{} iperf3 {size} B writes", stack.name()));
        let result = tcp::iperf3_bw(h, on, size, secs);
        report(&result);
        t.bw.push(Row {
            size,
            stack,
            result,
        });
    }
}

/// MTP round trips and throughput on the engines.
fn mtp_rows(h: &mut Hosts, args: &BenchMtpArgs, t: &mut Table) {
    progress(&format!("MTP rpc {RPC_SIZE} B x {}", args.rpcs()));
    let result = rows::mtp_rpc(h, RPC_SIZE, args.rpcs());
    report(&result);
    t.rtt.push(Row {
        size: RPC_SIZE,
        stack: Stack::Mtp,
        result,
    });
    for size in BW_SIZES {
        let n = args.messages(size);
        progress(&format!("MTP send {size} B x {n}"));
        let result = rows::mtp_throughput(h, size, n);
        report(&result);
        t.bw.push(Row {
            size,
            stack: Stack::Mtp,
            result,
        });
    }
}

/// A failed row on stderr as it happens.
fn report<T>(result: &Result<T, String>) {
    lab_run::report(COMMAND, result);
}
