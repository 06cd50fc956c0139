//! `sluice bench extensions [--quick]`: the in-process hook path and the interpreter first
//! (no lab needed), then one engine per row in the lab, holding the lab lock.

use std::path::PathBuf;

use clap::Args;
use sluice_engine::cbpf::Insn;
use sluice_engine::setup::Backend;

use super::lab::{self, LabSpec, MESSAGE_BYTES};
use super::micro;
use super::rows::{Extension, JitRow, Missing, Row, FIREWALL_RULES};
use super::table::Table;
use crate::apps::error::AppsError;
use crate::apps::Harness;
use crate::lab_run;

/// The filtered capture row's default filter: every frame runs it, the handshakes and
/// closes of sockperf's connection (port 11111) match.
pub const DEFAULT_FILTER: &str = "tcp port 11111 and tcp[tcpflags] & (tcp-syn|tcp-fin) != 0";

/// `sluice bench extensions`.
#[derive(Args, Debug)]
pub struct BenchExtensionsArgs {
    /// Short runs for CI (1 s of ping-pong per row, 20,000 frames per microbenchmark).
    #[arg(long)]
    pub quick: bool,
    /// Seconds of ping-pong per row (default 5, or 1 with --quick).
    #[arg(long)]
    pub seconds: Option<u32>,
    /// Frames per microbenchmark (default 1,000,000, or 20,000 with --quick).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// The engine's device backend: af_packet, af_xdp or tap.
    #[arg(long, default_value = "af_packet")]
    pub backend: Backend,
    /// The engine sleeps on its device after this many microseconds idle (`sluice engine
    /// --idle-us`), as `sluice bench` runs it.
    #[arg(long, default_value_t = 100)]
    pub engine_idle_us: u64,
    /// The filtered capture row's tcpdump filter.
    #[arg(long, default_value = DEFAULT_FILTER)]
    pub filter: String,
    /// Directory for extensions.csv, interp_jit.csv and the capture rows' pcap files.
    #[arg(long, default_value = "bench-extensions")]
    pub out: PathBuf,
    /// Only the in-process measurements (no lab, no root).
    #[arg(long)]
    pub no_lab: bool,
    /// Leave the lab up afterwards.
    #[arg(long)]
    pub keep_lab: bool,
    /// The caller already holds the lab lock (tests holding a LabGuard).
    #[arg(long)]
    pub no_lock: bool,
}

impl BenchExtensionsArgs {
    fn seconds(&self) -> u32 {
        self.seconds
            .unwrap_or(if self.quick { 1 } else { 5 })
            .max(1)
    }

    fn iterations(&self) -> u64 {
        self.iterations
            .unwrap_or(if self.quick { 20_000 } else { 1_000_000 })
            .max(1)
    }
}

/// The command, for progress lines.
const COMMAND: &str = "bench extensions";

fn progress(msg: &str) {
    lab_run::progress(COMMAND, msg);
}

/// Runs the bench; `filter` is [`BenchExtensionsArgs::filter`] compiled by libpcap (the
/// command line compiles it, as `sluice capture` does). Prints the table and writes the
/// CSVs; fails only when the bench could not run (failed rows are printed as such).
pub fn run(args: &BenchExtensionsArgs, filter: &[Insn]) -> Result<(), AppsError> {
    let n = args.iterations();
    let mut micro_rows = Vec::new();
    for ext in Extension::ALL {
        progress(&format!("hook path: {} x {n}", ext.name()));
        let r = micro::hook_path(ext, filter, n);
        if let Err(m) = &r {
            progress(&format!("  {m}"));
        }
        micro_rows.push((ext, r));
    }
    let jit: Vec<JitRow> = micro::JIT_PROGRAMS
        .into_iter()
        .map(|program| {
            progress(&format!("interpreter and JIT: {program} x {n}"));
            JitRow {
                program,
                interp_ns: micro::interpreter(program, n),
                jit_ns: micro::jit(program, n),
            }
        })
        .collect();
    let dir = args.out.clone();
    let lab_rows = if args.no_lab {
        Extension::ALL
            .iter()
            .map(|_| Err(Missing::Failed("not run (--no-lab)".into())))
            .collect()
    } else {
        std::fs::create_dir_all(&dir)
            .map_err(|e| AppsError::io(format!("create {}", dir.display()), e))?;
        lab_run::in_lab(COMMAND, args.no_lock, args.keep_lab, |_| measure_lab(args))?
    };
    let rows: Vec<Row> = micro_rows
        .into_iter()
        .zip(lab_rows)
        .map(|((ext, micro), lab)| Row { ext, lab, micro })
        .collect();
    let table = Table {
        setup: setup_lines(args),
        rows,
        jit,
    };
    print!("{}", table.render());
    let written = table.write_csv(&dir).map_err(|detail| AppsError::Client {
        what: format!("write the CSVs in {}", dir.display()),
        detail,
    })?;
    println!("csv: {}", written.rows.display());
    println!("csv: {}", written.jit.display());
    Ok(())
}

/// Every row in the lab, an engine each.
fn measure_lab(
    args: &BenchExtensionsArgs,
) -> Result<Vec<super::rows::Cell<super::rows::LabResult>>, AppsError> {
    let exe =
        std::env::current_exe().map_err(|e| AppsError::io("find the sluice executable", e))?;
    let mut h = Harness::new(exe, crate::backend_name(args.backend))?;
    let spec = LabSpec {
        seconds: args.seconds(),
        engine_args: vec!["--idle-us".into(), args.engine_idle_us.to_string()],
        filter: args.filter.clone(),
        dir: args.out.clone(),
    };
    Ok(Extension::ALL
        .into_iter()
        .map(|ext| {
            progress(&format!("lab: {}", ext.name()));
            let r = lab::measure(&mut h, ext, &spec);
            if let Err(m) = &r {
                progress(&format!("  {m}"));
            }
            r
        })
        .collect())
}

/// How the run was made, for the table's head.
fn setup_lines(args: &BenchExtensionsArgs) -> Vec<String> {
    vec![
        format!(
            "sluice bench extensions{} (flextoe.txt Table 2's shape); {} shared CPU cores",
            if args.quick { " --quick" } else { "" },
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        format!(
            "  rpc: sockperf pp --tcp -m {MESSAGE_BYTES} -t {} from sluice-b against `sluice run \
             sockperf server` on `sluice engine --lab --backend {} --idle-us {}` (an engine per \
             row, its module at ingress: --module=ingress=NAME)",
            args.seconds(),
            crate::backend_name(args.backend),
            args.engine_idle_us
        ),
        format!(
            "  firewall: {FIREWALL_RULES} rules written over the admin socket and counted back by \
             a map dump; none matches the traffic"
        ),
        format!(
            "  capture: `sluice capture -w FILE` (both hooks) beside the load; filtered: {:?}",
            args.filter
        ),
        "  vlan_strip in the lab runs on the lab's untagged frames (af_packet hands frames up \
         untagged); its hook ns are on tagged frames"
            .into(),
        format!(
            "  hook ns/frame: in-process, {} RPC requests through Hooks::ingress and as many \
             replies through Hooks::egress, 64 B payloads; the capture tap writes a ring, not a \
             socket; engine/machine us/op: /proc CPU over the ping-pong",
            args.iterations()
        ),
    ]
}
