//! `sluice experiment parallelism` (issue 20; flextoe.txt Table 3): where the multi-core
//! data-path's throughput comes from. 64 connections with one 2 KB RPC in flight each (Linux
//! clients in sluice-b) against the engine's echo server in sluice-a under each layout
//! (`sluice echo --cores N --layout L`), and Linux's echo in sluice-k in the same run; then
//! the sequencing step's microbenchmark; then rpc (64 B) over 1 to 256 connections on 1 and 2
//! data-path cores against Linux. Ops/s, p50 and p99.99, and CPU per operation (the engine
//! process's threads summed; Linux's echo server process, its softirq time not included).

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use clap::Args;
use sluice_bench::cpu::process_seconds;
use sluice_bench::{run_loadgen_sized, KernelServers, Kind, Measurement, Timing, Workload, PORTS};
use sluice_engine::setup::Backend;
use sluice_lab::{ENGINE_IP, KERNEL_IP, NS_CLIENT, NS_KERNEL};

use crate::error::ExperimentError;
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::{lab_workload, Common, LabRun};

/// `sluice experiment parallelism`.
#[derive(Args, Debug)]
pub struct ParallelismArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
    /// The engine's device backend: af_packet or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub backend: Backend,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// Connections of the parallelism table, one RPC in flight each.
const TABLE3_CONNS: usize = 64;
/// Bytes of the parallelism table's requests and responses.
const TABLE3_BYTES: usize = 2048;
/// Bytes of the scaling table's requests and responses (the bench's rpc).
const RPC_BYTES: usize = 64;

/// Where a row's server runs and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// `sluice echo` on `cores` data-path cores, `layout` as `--layout` spells it (None: the
    /// single-core engine).
    Engine {
        /// `--cores`.
        cores: usize,
        /// `--layout`.
        layout: Option<&'static str>,
    },
    /// Linux's echo server (`sluice kserve echo`) in sluice-k.
    Linux,
}

impl Server {
    /// The row's name in the tables.
    pub fn name(&self) -> String {
        match self {
            Server::Engine {
                cores,
                layout: Some(l),
            } => format!(
                "engine {l} ({cores} core{})",
                if *cores > 1 { "s" } else { "" }
            ),
            Server::Engine {
                cores,
                layout: None,
            } => format!("engine {cores} core{}", if *cores > 1 { "s" } else { "" }),
            Server::Linux => "linux".into(),
        }
    }
}

/// The parallelism table's rows, in order (Linux last).
pub const TABLE3: [Server; 5] = [
    Server::Engine {
        cores: 1,
        layout: Some("run-to-completion"),
    },
    Server::Engine {
        cores: 2,
        layout: Some("pipelined"),
    },
    Server::Engine {
        cores: 2,
        layout: Some("replicated"),
    },
    Server::Engine {
        cores: 2,
        layout: Some("flow-groups"),
    },
    Server::Linux,
];

/// The scaling table's servers (per connection count).
pub const SCALING: [Server; 3] = [
    Server::Engine {
        cores: 1,
        layout: None,
    },
    Server::Engine {
        cores: 2,
        layout: Some("flow-groups"),
    },
    Server::Linux,
];

/// One measured row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Which table: "parallelism" or "scaling".
    pub table: &'static str,
    /// The server.
    pub server: Server,
    /// Connections.
    pub conns: usize,
    /// Request and response bytes.
    pub bytes: usize,
    /// What the clients measured, or why the row failed.
    pub result: Result<(Measurement, f64), String>,
}

/// `sluice echo` in sluice-a as a child process (it enters the namespace itself).
struct EngineEcho {
    child: Child,
}

impl EngineEcho {
    /// Starts it and waits until it has opened its device and printed its assignment.
    fn start(
        exe: &Path,
        backend: Backend,
        cores: usize,
        layout: Option<&str>,
    ) -> Result<Self, ExperimentError> {
        let mut cmd = Command::new(exe);
        cmd.args(["echo", "--lab", "--port", &PORTS.echo.to_string()])
            .args(["--backend", backend_name(backend)])
            .args(["--cores", &cores.to_string(), "--linger", "0"]);
        if let Some(l) = layout {
            cmd.args(["--layout", l]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ExperimentError::Io("start sluice echo".into(), e))?;
        let stderr = child.stderr.take();
        let (tx, rx) = mpsc::channel();
        // Forward its stderr, and say when it is up: the assignment's last line, or the
        // single engine's start line.
        std::thread::spawn(move || {
            let Some(err) = stderr else { return };
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("  {line}");
                if line.starts_with("flow groups:")
                    || (line.starts_with("sluice: engine at") && !line.contains("data-path core"))
                {
                    let _ = tx.send(());
                }
            }
        });
        let mut echo = EngineEcho { child };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let status = echo.child.try_wait().ok().flatten();
            return Err(ExperimentError::Workload(format!(
                "sluice echo --cores {cores} did not start ({status:?})"
            )));
        }
        // Its first poll listens; give ARP and the listener a moment.
        std::thread::sleep(Duration::from_millis(300));
        Ok(echo)
    }

    fn cpu_seconds(&self) -> f64 {
        process_seconds(self.child.id()).unwrap_or(0.0)
    }
}

impl Drop for EngineEcho {
    fn drop(&mut self) {
        // SIGTERM ends it cleanly (its device closed, an XDP program detached); kill if not.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::AfXdp => "af_xdp",
        Backend::Tap => "tap",
        Backend::Sim => "sim",
        Backend::AfPacket => "af_packet",
    }
}

/// Runs the clients against `ip` and returns their measurement and the server's CPU
/// seconds over the same window (`cpu` reads the server's total so far).
fn load(
    ip: Ipv4Addr,
    conns: usize,
    bytes: usize,
    timing: Timing,
    cpu: &dyn Fn() -> f64,
) -> Result<(Measurement, f64), String> {
    let target = SocketAddr::V4(SocketAddrV4::new(ip, PORTS.echo));
    let w = Workload {
        kind: Kind::Rpc,
        conns,
    };
    let before = cpu();
    let m = run_loadgen_sized(NS_CLIENT, w, target, timing, bytes).map_err(|e| e.to_string())?;
    // The warm-up is inside the CPU window: scale it to the measured part.
    let whole = timing.seconds + timing.warmup;
    let spent = (cpu() - before) * timing.seconds / whole.max(1e-9);
    if m.ops == 0 {
        return Err("no RPC completed".into());
    }
    Ok((m, spent))
}

/// Runs every row; a failed row is kept (and printed as failed), so the rest still run.
fn measure(
    backend: Backend,
    timing: Timing,
    scaling_conns: &[usize],
) -> Result<Vec<Row>, ExperimentError> {
    let exe = std::env::current_exe()
        .map_err(|e| ExperimentError::Io("find the sluice executable".into(), e))?;
    let mut rows = Vec::new();
    // Each engine row: start its echo, run its loads, stop it.
    let mut engine_rows = |table: &'static str, server: Server, loads: &[(usize, usize)]| {
        let Server::Engine { cores, layout } = server else {
            return;
        };
        eprintln!("sluice experiment parallelism: {}", server.name());
        match EngineEcho::start(&exe, backend, cores, layout) {
            Ok(echo) => {
                for &(conns, bytes) in loads {
                    let result = load(ENGINE_IP, conns, bytes, timing, &|| echo.cpu_seconds());
                    rows.push(Row {
                        table,
                        server,
                        conns,
                        bytes,
                        result,
                    });
                }
            }
            Err(e) => {
                for &(conns, bytes) in loads {
                    rows.push(Row {
                        table,
                        server,
                        conns,
                        bytes,
                        result: Err(e.to_string()),
                    });
                }
            }
        }
    };
    for server in TABLE3.iter().filter(|s| **s != Server::Linux) {
        engine_rows("parallelism", *server, &[(TABLE3_CONNS, TABLE3_BYTES)]);
    }
    let scaling_loads: Vec<(usize, usize)> =
        scaling_conns.iter().map(|&c| (c, RPC_BYTES)).collect();
    for server in SCALING.iter().filter(|s| **s != Server::Linux) {
        engine_rows("scaling", *server, &scaling_loads);
    }
    eprintln!("sluice experiment parallelism: linux");
    let kernel = KernelServers::start(NS_KERNEL).map_err(|e| lab_workload(&e))?;
    let linux = |table: &'static str, conns: usize, bytes: usize| Row {
        table,
        server: Server::Linux,
        conns,
        bytes,
        result: load(KERNEL_IP, conns, bytes, timing, &|| kernel.cpu_seconds()),
    };
    rows.push(linux("parallelism", TABLE3_CONNS, TABLE3_BYTES));
    for &c in scaling_conns {
        rows.push(linux("scaling", c, RPC_BYTES));
    }
    drop(kernel);
    Ok(rows)
}

/// Runs the experiment in the lab and builds its report.
pub fn run(args: &ParallelismArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        return Err(ExperimentError::Usage(
            "sluice experiment parallelism compares 1 and 2 data-path cores: this machine has 1"
                .into(),
        ));
    }
    let timing = if quick && args.lab.seconds.is_none() {
        Timing {
            seconds: 0.3,
            warmup: 0.1,
        }
    } else {
        args.lab.timing(quick)
    };
    let scaling_conns: Vec<usize> = if quick {
        vec![1, 16]
    } else {
        vec![1, 16, 64, 256]
    };
    let rows = args.lab.in_lab(
        "parallelism",
        |lab| {
            lab.up().map_err(|e| lab_workload(&e))?;
            sluice_bench::prepare(lab).map_err(|e| lab_workload(&e))
        },
        |_| measure(args.backend, timing, &scaling_conns),
    )?;
    let sequencing = sluice_bench::sequencing::table(if quick { 0.02 } else { 0.5 });
    Ok(report(args.backend, timing, cores, &rows, &sequencing))
}

/// The rows as one table (a column says which), the sequencing table below it.
pub fn report(
    backend: Backend,
    timing: Timing,
    cores: usize,
    rows: &[Row],
    sequencing: &str,
) -> Report {
    let ops = |r: &Row| r.result.as_ref().ok().map(|(m, _)| m.ops_per_sec());
    let find = |table: &str, server: Server, conns: usize| {
        rows.iter()
            .find(|r| r.table == table && r.server == server && r.conns == conns)
            .and_then(ops)
    };
    // The parallelism table in TABLE3's order (Linux last), then scaling by connections.
    let rank = |r: &Row| match r.table {
        "parallelism" => (0, 0, TABLE3.iter().position(|s| *s == r.server)),
        _ => (1, r.conns, SCALING.iter().position(|s| *s == r.server)),
    };
    let mut ordered: Vec<&Row> = rows.iter().collect();
    ordered.sort_by_key(|r| rank(r));
    let mut out = Vec::new();
    for r in ordered {
        let base = match r.table {
            "parallelism" => find("parallelism", TABLE3[0], r.conns),
            _ => find("scaling", SCALING[0], r.conns),
        };
        let linux = find(r.table, Server::Linux, r.conns);
        let cells = match &r.result {
            Ok((m, cpu)) => {
                let lat = m.latency;
                vec![
                    fmt_num(m.ops_per_sec()),
                    lat.map_or("n/a".into(), |l| fmt_num(l.p50_us)),
                    lat.map_or("n/a".into(), |l| fmt_num(l.p9999_us)),
                    fmt_num(cpu * 1e6 / m.ops.max(1) as f64),
                    fmt_ratio(m.ops_per_sec(), base.unwrap_or(f64::NAN)),
                    fmt_ratio(m.ops_per_sec(), linux.unwrap_or(f64::NAN)),
                ]
            }
            Err(e) => {
                eprintln!(
                    "sluice experiment parallelism: {} {} conns failed: {e}",
                    r.server.name(),
                    r.conns
                );
                let mut c = vec!["failed".to_string()];
                c.extend(std::iter::repeat_n("n/a".to_string(), 5));
                c
            }
        };
        let mut row = vec![
            r.table.to_string(),
            r.server.name(),
            r.conns.to_string(),
            r.bytes.to_string(),
        ];
        row.extend(cells);
        out.push(row);
    }
    let mut notes = vec![String::new()];
    notes.extend(sequencing.lines().map(str::to_string));
    notes.push(String::new());
    notes.push(
        "x base: against run-to-completion (parallelism) or the single-core engine (scaling), \
         same connections; CPU: the engine process's threads summed, Linux's echo process \
         (its softirq time is not charged to it)"
            .into(),
    );
    Report {
        name: "parallelism".into(),
        setup: vec![
            format!(
                "sluice experiment parallelism: closed-loop RPC clients (sluice loadgen rpc, a \
                 thread per connection, one request in flight) in sluice-b, {} s after {} s warm-up",
                timing.seconds, timing.warmup
            ),
            format!(
                "  engine: sluice echo --cores N --layout L in sluice-a, {backend:?} backend; \
                 linux: sluice kserve echo in sluice-k; {cores} shared CPU cores"
            ),
        ],
        columns: [
            "table",
            "server",
            "conns",
            "bytes",
            "ops/s",
            "p50 us",
            "p99.99 us",
            "CPU us/op",
            "x base",
            "x linux",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows: out,
        notes,
        ..Report::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bench::Latency;

    fn row(table: &'static str, server: Server, conns: usize, ops: u64) -> Row {
        Row {
            table,
            server,
            conns,
            bytes: 64,
            result: Ok((
                Measurement {
                    seconds: 1.0,
                    ops,
                    latency: Some(Latency {
                        p50_us: 10.0,
                        p99_us: 20.0,
                        p999_us: 30.0,
                        p9999_us: 40.0,
                    }),
                    ..Measurement::default()
                },
                0.5,
            )),
        }
    }

    #[test]
    fn rows_carry_ratios_to_their_base_and_to_linux_and_failures_show() {
        let rows = vec![
            row("parallelism", TABLE3[0], 64, 1000),
            row("parallelism", TABLE3[3], 64, 1500),
            row("parallelism", Server::Linux, 64, 2000),
            Row {
                result: Err("boom".into()),
                ..row("scaling", SCALING[1], 16, 0)
            },
        ];
        let r = report(
            Backend::AfPacket,
            Timing {
                seconds: 1.0,
                warmup: 0.1,
            },
            2,
            &rows,
            "seq\n",
        );
        assert_eq!(r.rows.len(), 4);
        assert_eq!(r.rows[0][8], "x1.00");
        assert_eq!(r.rows[1][8], "x1.50");
        assert_eq!(r.rows[1][9], "x0.75");
        assert_eq!(r.rows[1][6], "40.0", "p99.99");
        assert_eq!(r.rows[0][7], "500", "0.5 s of CPU over 1000 ops");
        assert_eq!(r.rows[3][4], "failed");
        assert_eq!(r.rows[1][1], "engine flow-groups (2 cores)");
        assert!(r.render().contains("seq"));
    }
}
