//! The experiment's one table: the parallelism rows in TABLE3's order, then scaling and
//! redis by connections, each with its ratio to its base and to Linux; notes below it.

use sluice_bench::Timing;
use sluice_engine::setup::Backend;

use super::redis::REDIS;
use super::rows::{Row, RowError, Server, SCALING, TABLE3};
use crate::report::{fmt_num, fmt_ratio, Report};

/// The rows as one table (a column says which), the sequencing table below it.
pub fn report(
    backend: Backend,
    timing: Timing,
    cores: usize,
    redis_requests: u64,
    rows: &[Row],
    sequencing: &str,
) -> Report {
    let ops = |r: &Row| r.result.as_ref().ok().map(|(m, _)| m.ops_per_sec());
    let find = |table: &str, server: Server, conns: usize| {
        rows.iter()
            .find(|r| r.table == table && r.server == server && r.conns == conns)
            .and_then(ops)
    };
    // The parallelism table in TABLE3's order (Linux last), then scaling by connections,
    // then redis's SET and GET in REDIS's order.
    let rank = |r: &Row| match r.table {
        "parallelism" => (0, 0, TABLE3.iter().position(|s| *s == r.server)),
        "scaling" => (1, r.conns, SCALING.iter().position(|s| *s == r.server)),
        "redis-set" => (2, 0, REDIS.iter().position(|s| *s == r.server)),
        _ => (3, 0, REDIS.iter().position(|s| *s == r.server)),
    };
    let mut ordered: Vec<&Row> = rows.iter().collect();
    ordered.sort_by_key(|r| rank(r));
    let mut out = Vec::new();
    for r in ordered {
        let base = match r.table {
            "parallelism" => find("parallelism", TABLE3[0], r.conns),
            "scaling" => find("scaling", SCALING[0], r.conns),
            table => find(table, REDIS[0], r.conns),
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
                    "sluice experiment parallelism: {} {} {} conns: {e}",
                    r.table,
                    r.server.name(),
                    r.conns
                );
                // The reason goes below the table (a long cell would widen every row).
                let first = match e {
                    RowError::Failed(_) => "failed",
                    RowError::Refused(_) => "refused",
                };
                let mut c = vec![first.to_string()];
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
        "x base: against run-to-completion (parallelism) or the single-core engine (scaling, \
         redis), same connections; CPU: the engine process's threads summed, Linux's echo \
         process (its softirq time is not charged to it); redis rows: the engine's, \
         redis-server's and redis-benchmark's, and p99.99 n/a (redis-benchmark stops at p99)"
            .into(),
    );
    // What redis itself counted (every request answered, no error reply), and why an
    // engine refused its row.
    for r in rows {
        match (&r.answered, &r.result) {
            (Some(a), _) => notes.push(format!("{} {}: {a}", r.table, r.server.name())),
            (None, Err(e @ RowError::Refused(_))) => {
                notes.push(format!("{} {}: {e}", r.table, r.server.name()))
            }
            _ => {}
        }
    }
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
            format!(
                "  redis: redis-benchmark -c 50 -n {redis_requests} -t set, then -t get, in \
                 sluice-b; redis-server through sluice run over sluice engine --cores N \
                 [--layout L] in sluice-a, and in sluice-k on Linux"
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
    use crate::parallelism::rows::Answered;
    use sluice_bench::{Latency, Measurement};

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
            answered: None,
        }
    }

    #[test]
    fn rows_carry_ratios_to_their_base_and_to_linux_and_failures_show() {
        let rows = vec![
            row("parallelism", TABLE3[0], 64, 1000),
            row("parallelism", TABLE3[3], 64, 1500),
            row("parallelism", Server::Linux, 64, 2000),
            Row {
                result: Err(RowError::Failed("boom".into())),
                ..row("scaling", SCALING[1], 16, 0)
            },
            // Redis, given out of order: it sorts after scaling, SET before GET.
            row("redis-get", REDIS[0], 50, 4000),
            Row {
                answered: Some(Answered {
                    requests: 2000,
                    calls: 2000,
                    errors: 0,
                }),
                ..row("redis-set", Server::Linux, 50, 1000)
            },
            Row {
                result: Err(RowError::Refused("--layout flow-groups: one queue".into())),
                ..row("redis-set", REDIS[2], 50, 0)
            },
            row("redis-set", REDIS[0], 50, 500),
        ];
        let r = report(
            Backend::AfPacket,
            Timing {
                seconds: 1.0,
                warmup: 0.1,
            },
            2,
            2000,
            &rows,
            "seq\n",
        );
        assert_eq!(r.rows.len(), 8);
        assert_eq!(r.rows[0][8], "x1.00");
        assert_eq!(r.rows[1][8], "x1.50");
        assert_eq!(r.rows[1][9], "x0.75");
        assert_eq!(r.rows[1][6], "40.0", "p99.99");
        assert_eq!(r.rows[0][7], "500", "0.5 s of CPU over 1000 ops");
        assert_eq!(r.rows[3][4], "failed");
        assert_eq!(r.rows[1][1], "engine flow-groups (2 cores)");
        let text = r.render();
        assert!(text.contains("seq"));
        let redis: Vec<(&str, &str)> = r.rows[4..]
            .iter()
            .map(|r| (r[0].as_str(), r[1].as_str()))
            .collect();
        assert_eq!(
            redis,
            [
                ("redis-set", "engine 1 core"),
                ("redis-set", "engine flow-groups (2 cores)"),
                ("redis-set", "linux"),
                ("redis-get", "engine 1 core"),
            ]
        );
        assert_eq!(r.rows[5][4], "refused");
        assert!(
            text.contains(
                "redis-set engine flow-groups (2 cores): refused: --layout flow-groups: one queue"
            ),
            "{text}"
        );
        assert_eq!(r.rows[6][8], "x2.00", "Linux against the 1-core engine");
        assert_eq!(r.rows[4][9], "x0.50", "the 1-core engine against Linux");
        assert_eq!(r.rows[7][9], "n/a", "no Linux GET row");
        assert!(
            text.contains("redis-set linux: 2000 requests, 2000 answered, 0 errors"),
            "{text}"
        );
        assert!(text.contains("-n 2000 -t set"), "{text}");
    }
}
