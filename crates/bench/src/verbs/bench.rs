//! `sluice bench verbs`: one run, holding the lab lock: Linux TCP rows first (no engine
//! running), then the two engines and Sluice TCP, then perftest over Sluice's verbs.

use clap::Args;

use super::hosts::{tcp_setup_lines, Hosts};
use super::rows::{self, TX_DEPTH};
use super::table::{BwRow, LatRow, Stack, Table};
use crate::apps::error::AppsError;
use crate::apps::workdir::WorkDir;
use crate::lab_run;

/// Latency sizes, bytes (issue 16: 2 B to 64 KB).
const LAT_SIZES: [u64; 5] = [2, 64, 1024, 4096, 65536];
/// Latency sizes with --quick.
const LAT_SIZES_QUICK: [u64; 2] = [2, 4096];
/// Bandwidth sizes, bytes (64 B to 1 MB).
const BW_SIZES: [u64; 4] = [64, 4096, 65536, 1 << 20];
/// Bandwidth sizes with --quick.
const BW_SIZES_QUICK: [u64; 1] = [65536];
/// Queue pairs of the verbs bandwidth rows.
const QPS: [u32; 2] = [1, 8];

/// `sluice bench verbs`.
#[derive(Args, Debug)]
pub struct BenchVerbsArgs {
    /// Fewer sizes (latency 2 B and 4 KB, bandwidth 64 KB) and 1 s TCP runs.
    #[arg(long)]
    quick: bool,
    /// perftest iterations per run (bandwidth runs of big sizes do fewer, at most 1 GiB).
    #[arg(long, default_value_t = 5000)]
    iters: u64,
    /// Seconds per sockperf and iperf3 run (default 3, or 1 with --quick).
    #[arg(long)]
    seconds: Option<u32>,
    /// Leave the lab up afterwards.
    #[arg(long)]
    keep_lab: bool,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long)]
    no_lock: bool,
}

/// The command, for progress lines.
const COMMAND: &str = "bench verbs";

/// A progress line on stderr.
fn progress(msg: &str) {
    lab_run::progress(COMMAND, msg);
}

/// Runs `sluice bench verbs` and prints the table; fails only when the bench could not run
/// (rows that failed are printed as such).
pub fn run(args: &BenchVerbsArgs) -> Result<(), AppsError> {
    if args.iters == 0 {
        return Err(AppsError::Usage("--iters must be at least 1".into()));
    }
    let result = lab_run::in_lab(COMMAND, args.no_lock, args.keep_lab, |_| measure_all(args));
    print!("{}", result?.render());
    Ok(())
}

/// Every row: Linux TCP, then Sluice TCP and verbs on the two engines.
fn measure_all(args: &BenchVerbsArgs) -> Result<Table, AppsError> {
    let exe =
        std::env::current_exe().map_err(|e| AppsError::io("find the sluice executable", e))?;
    let dir = WorkDir::create("sluice-bench-verbs")?;
    let mut h = Hosts::new(exe, dir.path().to_path_buf());
    let (lat_sizes, bw_sizes): (&[u64], &[u64]) = if args.quick {
        (&LAT_SIZES_QUICK, &BW_SIZES_QUICK)
    } else {
        (&LAT_SIZES, &BW_SIZES)
    };
    let seconds = args
        .seconds
        .unwrap_or(if args.quick { 1 } else { 3 })
        .max(1);
    let mut setup = vec![
        format!(
            "sluice bench verbs: perftest -n {} (bandwidth: at most 1 GiB per run), sockperf and \
             iperf3 -t {seconds} s; {} shared CPU cores",
            args.iters,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        "  verbs:      perftest -d sluice0 -x 0 -F under `sluice run --verbs`, server on engine \
         E (sluice-e, 10.77.0.4), client on engine A (sluice-a)"
            .into(),
    ];
    setup.extend(tcp_setup_lines());
    let mut t = Table {
        setup,
        ..Table::default()
    };
    tcp_rows(
        &mut h,
        Stack::LinuxTcp,
        lat_sizes,
        bw_sizes,
        seconds,
        &mut t,
    );
    progress("starting engines A and E");
    match h.start_engines() {
        Ok(()) => {
            tcp_rows(
                &mut h,
                Stack::SluiceTcp,
                lat_sizes,
                bw_sizes,
                seconds,
                &mut t,
            );
            verbs_rows(&mut h, lat_sizes, bw_sizes, args.iters, &mut t);
        }
        Err(e) => {
            let why = e.to_string();
            progress(&format!("engines unavailable: {why}"));
            for stack in [Stack::SluiceTcp, Stack::VerbsWrite, Stack::VerbsSend] {
                fail_stack(&mut t, stack, lat_sizes, bw_sizes, &why);
            }
        }
    }
    h.stop_engines();
    t.lat.sort_by_key(|r| (r.size, r.stack));
    t.bw.sort_by_key(|r| (r.size, r.stack, r.qps));
    Ok(t)
}

/// sockperf latency and iperf3 bandwidth rows of a TCP stack.
fn tcp_rows(h: &mut Hosts, stack: Stack, lat: &[u64], bw: &[u64], secs: u32, t: &mut Table) {
    for &size in lat {
        progress(&format!("{} sockperf ping-pong {size} B", stack.name()));
        let result = rows::sockperf_lat(h, stack, size, secs);
        report(&result);
        let sent = rows::sockperf_bytes(size);
        let note = if sent != size {
            format!("sockperf sends {sent} B (its limit)")
        } else {
            String::new()
        };
        t.lat.push(LatRow {
            size,
            stack,
            result,
            note,
        });
    }
    for &size in bw {
        progress(&format!("{} iperf3 {size} B writes", stack.name()));
        let result = rows::iperf3_bw(h, stack, size, secs);
        report(&result);
        t.bw.push(BwRow {
            size,
            qps: 1,
            stack,
            result,
        });
    }
}

/// perftest latency and bandwidth rows over Sluice's verbs.
fn verbs_rows(h: &mut Hosts, lat: &[u64], bw: &[u64], iters: u64, t: &mut Table) {
    for stack in [Stack::VerbsWrite, Stack::VerbsSend] {
        for &size in lat {
            let prog = rows::perftest_program(stack, false).name;
            progress(&format!("{prog} {size} B"));
            let result = rows::perftest_lat(h, stack, size, iters);
            report(&result);
            t.lat.push(LatRow {
                size,
                stack,
                result,
                note: String::new(),
            });
        }
        for &size in bw {
            for qps in QPS {
                let prog = rows::perftest_program(stack, true).name;
                progress(&format!("{prog} {size} B -t {TX_DEPTH} -q {qps}"));
                let result = rows::perftest_bw(h, stack, size, qps, iters);
                report(&result);
                t.bw.push(BwRow {
                    size,
                    qps,
                    stack,
                    result,
                });
            }
        }
    }
}

/// Every row of `stack` failed for `why`.
fn fail_stack(t: &mut Table, stack: Stack, lat: &[u64], bw: &[u64], why: &str) {
    for &size in lat {
        t.lat.push(LatRow {
            size,
            stack,
            result: Err(why.to_string()),
            note: String::new(),
        });
    }
    let qps: &[u32] = if stack == Stack::SluiceTcp {
        &[1]
    } else {
        &QPS
    };
    for &size in bw {
        for &qps in qps {
            t.bw.push(BwRow {
                size,
                qps,
                stack,
                result: Err(why.to_string()),
            });
        }
    }
}

/// A failed row on stderr as it happens.
fn report<T>(result: &Result<T, String>) {
    lab_run::report(COMMAND, result);
}
