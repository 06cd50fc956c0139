//! One row of programs nobody here wrote: the server on one side, its standard client in
//! sluice-b, and the CPU time of both stacks around the run.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use super::memcaslap;
use crate::apps::error::AppsError;
use crate::apps::process::run_bounded;
use crate::apps::program::{MEMCASLAP, SOCKPERF};
use crate::apps::{App, Harness, Side};
use crate::cpu;
use crate::sockperf;

/// sockperf's message size (issue 18: 64 B).
pub const MESSAGE_BYTES: u32 = 64;
/// Pings per second of the wake-up row: 20 ms apart, longer than any side polls by default
/// (the engine's application threads poll 10 ms), so every ping finds both sides asleep.
pub const WAKE_PINGS_PER_SECOND: u32 = 50;
/// memcaslap's connections, as redis-benchmark's 50 clients (one thread drives them all).
pub const MEMCASLAP_CONCURRENCY: u32 = 50;

/// An outside workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// `sockperf pp --tcp -m 64 --full-rtt` against `sockperf server`: round trips.
    SockperfPp,
    /// `sockperf tp --tcp -m 64` against `sockperf server`: one-way messages.
    SockperfTp,
    /// `sockperf pp` at [`WAKE_PINGS_PER_SECOND`]: round trips that find the server's stack
    /// and program asleep, so their latency is the wake-up latency of both.
    SockperfWake,
    /// memcaslap (90 % get, 10 % set) against memcached.
    Memcached,
}

impl Workload {
    /// Every outside workload, in the order they run.
    pub const ALL: [Workload; 4] = [
        Workload::SockperfPp,
        Workload::SockperfTp,
        Workload::SockperfWake,
        Workload::Memcached,
    ];

    /// Its name in `--only`, the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::SockperfPp => "sockperf-pp",
            Workload::SockperfTp => "sockperf-tp",
            Workload::SockperfWake => "sockperf-wake",
            Workload::Memcached => "memcached",
        }
    }

    /// sockperf's mode for a sockperf row (`pp` or `tp`).
    fn sockperf_mode(self) -> &'static str {
        match self {
            Workload::SockperfTp => "tp",
            _ => "pp",
        }
    }

    /// The server program.
    pub fn app(self) -> App {
        match self {
            Workload::SockperfPp | Workload::SockperfTp | Workload::SockperfWake => App::Sockperf,
            Workload::Memcached => App::Memcached,
        }
    }
}

/// CPU time per operation, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CpuPerOp {
    /// The server program's own (all its threads).
    pub app_us: Option<f64>,
    /// The engine's (Sluice rows).
    pub engine_us: Option<f64>,
    /// The machine's softirq time: the kernel's network processing, charged to no process
    /// (the clients' and every other user's included).
    pub softirq_us: Option<f64>,
    /// The whole machine's busy time (clients and other users of the machine included).
    pub busy_us: Option<f64>,
}

impl CpuPerOp {
    /// What the side under test spent: the engine's and the program's on Sluice, the
    /// program's and the softirq time on Linux.
    pub fn own_us(&self, side: Side) -> Option<f64> {
        let other = match side {
            Side::Engine => self.engine_us,
            Side::Linux => self.softirq_us,
        };
        Some(self.app_us? + other?)
    }
}

/// A row's `(metric, value)` pairs, in table order.
pub type Metrics = Vec<(&'static str, f64)>;

/// One side's measured numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measured {
    /// `(metric, value)` in table order; the first is the throughput.
    pub metrics: Metrics,
    /// Operations the CPU time is divided by.
    pub ops: u64,
    /// CPU per operation.
    pub cpu: CpuPerOp,
}

/// CPU counters at one instant.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    app: Option<f64>,
    engine: Option<f64>,
    softirq: Option<f64>,
    busy: Option<f64>,
}

impl Snapshot {
    fn take(app: u32, engine: Option<u32>) -> Snapshot {
        Snapshot {
            app: cpu::process_seconds(app),
            engine: engine.and_then(cpu::process_seconds),
            softirq: cpu::softirq_seconds(),
            busy: cpu::busy_seconds(),
        }
    }

    /// CPU per operation from `before` to `self`.
    fn per_op_since(&self, before: &Snapshot, ops: u64) -> CpuPerOp {
        let per = |a: Option<f64>, b: Option<f64>| {
            a.zip(b)
                .filter(|_| ops > 0)
                .map(|(a, b)| (b - a).max(0.0) * 1e6 / ops as f64)
        };
        CpuPerOp {
            app_us: per(before.app, self.app),
            engine_us: per(before.engine, self.engine),
            softirq_us: per(before.softirq, self.softirq),
            busy_us: per(before.busy, self.busy),
        }
    }
}

/// Runs `w`'s server on `side`, its client in sluice-b for `seconds`, and measures.
pub fn measure(h: &Harness, w: Workload, side: Side, seconds: u32) -> Result<Measured, AppsError> {
    let mut run = h.start(w.app(), side)?;
    let (app, engine) = run.pids();
    let before = Snapshot::take(app, engine);
    let out = client(h, w, run.addr(), seconds).map_err(|e| run.with_server_log(e))?;
    let after = Snapshot::take(app, engine);
    let (metrics, ops) = parse(w, &out).map_err(|e| {
        run.with_server_log(AppsError::client(
            format!("{} client", w.name()),
            format!("{e}; output:\n{out}"),
        ))
    })?;
    run.check_alive()?;
    run.stop()?;
    Ok(Measured {
        metrics,
        ops,
        cpu: after.per_op_since(&before, ops),
    })
}

/// Runs the client in sluice-b; its stdout and stderr together (sockperf prints on both).
fn client(h: &Harness, w: Workload, addr: SocketAddr, seconds: u32) -> Result<String, AppsError> {
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let (t, m) = (seconds.max(1).to_string(), MESSAGE_BYTES.to_string());
    let (program, args): (_, Vec<String>) = match w {
        Workload::SockperfPp | Workload::SockperfWake | Workload::SockperfTp => {
            let mut args = vec![w.sockperf_mode(), "--tcp", "-i", &ip, "-p", &port, "-m", &m];
            let wake_rate = WAKE_PINGS_PER_SECOND.to_string();
            // The wake-up row: at least 100 pings, even in a quick run.
            let wake_seconds = seconds.max(2).to_string();
            match w {
                Workload::SockperfWake => {
                    args.extend(["-t", &wake_seconds, "--mps", &wake_rate, "--full-rtt"])
                }
                Workload::SockperfPp => args.extend(["-t", &t, "--full-rtt"]),
                _ => args.extend(["-t", &t]),
            }
            (SOCKPERF, args.into_iter().map(String::from).collect())
        }
        Workload::Memcached => (
            MEMCASLAP,
            vec![
                "-s".into(),
                addr.to_string(),
                "-t".into(),
                format!("{t}s"),
                "-T".into(),
                "1".into(),
                "-c".into(),
                MEMCASLAP_CONCURRENCY.to_string(),
            ],
        ),
    };
    let what = format!("{} {} against {addr}", program.name, args.join(" "));
    let mut cmd = h.client(program)?;
    cmd.args(&args);
    let limit = Duration::from_secs(u64::from(seconds) + 30);
    let out = run_bounded(cmd, &what, limit)?;
    Ok(format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// A client's output as the row's metrics and its operation count.
fn parse(w: Workload, out: &str) -> Result<(Metrics, u64), String> {
    let positive = |what: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(format!("{what} measured {v}"))
        }
    };
    match w {
        Workload::SockperfWake => {
            let pp = sockperf::parse(out).map_err(|e| e.to_string())?;
            Ok((
                vec![
                    (
                        "round trips",
                        positive("round trips", pp.round_trips as f64)?,
                    ),
                    ("p50 rtt us", positive("p50", pp.p50_us)?),
                    ("p90 rtt us", positive("p90", pp.p90_us)?),
                    ("p99 rtt us", positive("p99", pp.p99_us)?),
                    ("max rtt us", positive("max", pp.max_us)?),
                ],
                pp.round_trips,
            ))
        }
        Workload::SockperfPp => {
            let pp = sockperf::parse(out).map_err(|e| e.to_string())?;
            let rate = pp.round_trips as f64 / positive("RunTime", pp.run_seconds)?;
            Ok((
                vec![
                    ("round trips/s", positive("round trips", rate)?),
                    ("p50 rtt us", positive("p50", pp.p50_us)?),
                    ("p99 rtt us", positive("p99", pp.p99_us)?),
                    ("p99.9 rtt us", positive("p99.9", pp.p999_us)?),
                    ("p99.99 rtt us", positive("p99.99", pp.p9999_us)?),
                ],
                pp.round_trips,
            ))
        }
        Workload::SockperfTp => {
            let tp = sockperf::parse_tp(out).map_err(|e| e.to_string())?;
            Ok((
                vec![("msgs/s", positive("message rate", tp.msgs_per_s)?)],
                tp.messages,
            ))
        }
        Workload::Memcached => {
            let s = memcaslap::parse(out).map_err(|e| e.to_string())?;
            Ok((vec![("ops/s", positive("TPS", s.tps)?)], s.ops))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_per_operation_and_each_sides_own() {
        let before = Snapshot {
            app: Some(1.0),
            engine: Some(2.0),
            softirq: Some(3.0),
            busy: Some(10.0),
        };
        let after = Snapshot {
            app: Some(1.5),
            engine: Some(3.0),
            softirq: Some(3.25),
            busy: Some(12.0),
        };
        let c = after.per_op_since(&before, 100_000);
        assert_eq!(c.app_us, Some(5.0));
        assert_eq!(c.engine_us, Some(10.0));
        assert_eq!(c.softirq_us, Some(2.5));
        assert_eq!(c.busy_us, Some(20.0));
        assert_eq!(c.own_us(Side::Engine), Some(15.0));
        assert_eq!(c.own_us(Side::Linux), Some(7.5));
        assert_eq!(after.per_op_since(&before, 0), CpuPerOp::default());
        let gone = Snapshot {
            engine: None,
            ..after
        };
        assert_eq!(gone.per_op_since(&before, 10).own_us(Side::Engine), None);
    }

    #[test]
    fn client_output_becomes_metrics() {
        let memc = "Run time: 2.0s Ops: 75757 TPS: 37874 Net_rate: 42.4M/s\n";
        let (m, ops) = parse(Workload::Memcached, memc).unwrap();
        assert_eq!((m, ops), (vec![("ops/s", 37874.0)], 75757));
        let tp = "Total of 1000 messages sent in 1.000 sec\nSummary: Message Rate is 0 [msg/sec]\n";
        assert!(parse(Workload::SockperfTp, tp)
            .unwrap_err()
            .contains("measured 0"));
        assert!(parse(Workload::SockperfPp, memc).is_err());
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        assert_eq!(
            names,
            ["sockperf-pp", "sockperf-tp", "sockperf-wake", "memcached"]
        );
    }
}
