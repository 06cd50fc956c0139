//! What `sluice experiment impair` reads from each run besides goodput: the engines' core
//! and device counters, Linux's, and the switch's; as a line per run (`--verbose`), a CSV
//! row per run (`impair-runs.csv`) and a summary per cell of where the engine's time goes.

use sluice_bench::EngineCounters;
use sluice_device::DeviceStats;
use sluice_tcp::Counters;

use crate::netstat;
use crate::report::{fmt_num, Report};
use crate::switched_bulk::{Outcome, Pairing};

/// A counter's name and how to read it.
type Field<T> = (&'static str, fn(&T) -> u64);

/// One field of a counters struct, named as it is spelled.
macro_rules! fields {
    ($t:ty; $($f:ident),* $(,)?) => {
        &[$((stringify!($f), |c: &$t| c.$f)),*]
    };
}

/// The core counters that say where an impaired transfer goes.
const CORE: &[Field<Counters>] = fields!(Counters;
    frames_rx, frames_tx, bad_checksum, malformed, out_of_window, bad_acks, paws_drops,
    challenge_acks, challenge_acks_suppressed, ooo_stored, ooo_dropped, duplicate_segments,
    timeouts, spurious_timeouts, fast_retransmits, retransmitted_bytes, sack_blocks_rx,
    sack_blocks_invalid, sack_blocks_old, sack_scoreboard_full, sack_recoveries,
    sack_retransmits, sack_lost_retransmissions, rxt_lost_by_timer, large_segments_tx, window_probes,
    rx_buffer_grown, tx_buffer_grown, ecn_ce,
);
/// The device counters that count drops.
const DEVICE: &[Field<DeviceStats>] = fields!(DeviceStats;
    rx_truncated, rx_checksum_incomplete, rx_dropped, tx_dropped, tx_blocked,
);

/// Every (name, value) of an engine's counters worth reading, in a fixed order.
fn engine_fields(c: &EngineCounters) -> Vec<(&'static str, u64)> {
    CORE.iter()
        .map(|(n, f)| (*n, f(&c.core)))
        .chain(DEVICE.iter().map(|(n, f)| (*n, f(&c.device))))
        .collect()
}

/// Linux's counters of a run ([`netstat::KEYS`] without the group), by name.
fn linux_fields(values: &[u64]) -> Vec<(&'static str, u64)> {
    netstat::KEYS
        .iter()
        .map(|k| k.split_once(':').map_or(*k, |(_, n)| n))
        .zip(values.iter().copied())
        .collect()
}

/// Cells of a CSV row: the values, or empty cells when the end was not there.
fn cells_or_empty(fields: &[(&str, u64)], present: bool) -> Vec<String> {
    fields
        .iter()
        .map(|(_, v)| {
            if present {
                v.to_string()
            } else {
                String::new()
            }
        })
        .collect()
}

/// The switch's impaired-port counters of a run, by name.
fn switch_fields(o: &Outcome) -> Vec<(&'static str, u64)> {
    let l = &o.port.egress.link;
    vec![
        ("forwarded", o.port.forwarded),
        ("forwarded_bytes", o.port.forwarded_bytes),
        ("segmented", o.port.segmented),
        ("lost", l.lost),
        ("reordered", l.reordered),
        ("corrupted", l.corrupted),
        ("duplicated", l.duplicated),
        ("other_drops", o.other_drops),
    ]
}

/// A run's nonzero counters on one line (switch, then sender and receiver engines).
pub(super) fn nonzero_line(o: &Outcome) -> String {
    let mut parts = vec![format!("switch: {}", join_nonzero(&switch_fields(o)))];
    for (role, c) in [("sender", &o.sender), ("receiver", &o.receiver)] {
        if let Some(c) = c {
            parts.push(format!(
                "{role} engine: {}",
                join_nonzero(&engine_fields(c))
            ));
        }
    }
    for (role, v) in [("sender", &o.linux_sender), ("receiver", &o.linux_receiver)] {
        if let Some(v) = v {
            parts.push(format!("{role} linux: {}", join_nonzero(&linux_fields(v))));
        }
    }
    parts.join("; ")
}

/// `name value` of each nonzero field.
fn join_nonzero(fields: &[(&str, u64)]) -> String {
    fields
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(n, v)| format!("{n} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every run as a CSV row (the impairments by their labels): the cell, goodput, CPU, the
/// switch's, both engines' and Linux's counters.
pub(super) fn runs_report(
    impairments: &[String],
    pairings: &[Pairing],
    cells: &[Vec<Vec<Outcome>>],
) -> Report {
    let empty = EngineCounters::default();
    let mut columns: Vec<String> = [
        "impairment",
        "pairing",
        "run",
        "Mbit/s",
        "bytes",
        "seconds",
        "wall s",
        "engine ns/B",
    ]
    .map(String::from)
    .to_vec();
    columns.extend(
        switch_fields(&Outcome::default())
            .iter()
            .map(|(n, _)| format!("switch {n}")),
    );
    for role in ["sender", "receiver"] {
        columns.extend(
            engine_fields(&empty)
                .iter()
                .map(|(n, _)| format!("{role} {n}")),
        );
    }
    let no_linux = vec![0; netstat::KEYS.len()];
    for role in ["sender", "receiver"] {
        columns.extend(
            linux_fields(&no_linux)
                .iter()
                .map(|(n, _)| format!("{role} linux {n}")),
        );
    }
    let mut rows = Vec::new();
    for (imp, row) in impairments.iter().zip(cells) {
        for (pairing, runs) in pairings.iter().zip(row) {
            for (k, o) in runs.iter().enumerate() {
                let mut r = vec![
                    imp.clone(),
                    pairing.name().to_string(),
                    (k + 1).to_string(),
                    format!("{:.1}", o.mbps),
                    o.bytes.to_string(),
                    format!("{:.3}", o.seconds),
                    format!("{:.3}", o.wall_s),
                    o.engine_ns_per_byte()
                        .map_or(String::new(), |v| format!("{v:.3}")),
                ];
                r.extend(switch_fields(o).iter().map(|(_, v)| v.to_string()));
                for c in [&o.sender, &o.receiver] {
                    let values = engine_fields(c.as_ref().unwrap_or(&empty));
                    r.extend(cells_or_empty(&values, c.is_some()));
                }
                for v in [&o.linux_sender, &o.linux_receiver] {
                    let values = linux_fields(v.as_deref().unwrap_or(&no_linux));
                    r.extend(cells_or_empty(&values, v.is_some()));
                }
                rows.push(r);
            }
        }
    }
    Report {
        name: "impair-runs".into(),
        columns,
        rows,
        ..Report::default()
    }
}

/// Where a cell's engine time goes: its engines' nonzero counters summed over the runs, per
/// MB that crossed the impaired port, and the share of those bytes sent again.
pub(super) fn where_it_goes(runs: &[Outcome]) -> String {
    let mb: f64 = runs
        .iter()
        .map(|o| o.port.forwarded_bytes as f64)
        .sum::<f64>()
        / 1e6;
    if mb <= 0.0 {
        return "nothing crossed the port".into();
    }
    let mut parts = Vec::new();
    for (role, pick) in [
        (
            "sender",
            (|o: &Outcome| o.sender.clone()) as fn(&Outcome) -> Option<EngineCounters>,
        ),
        ("receiver", |o: &Outcome| o.receiver.clone()),
    ] {
        let counted: Vec<EngineCounters> = runs.iter().filter_map(pick).collect();
        if counted.is_empty() {
            continue;
        }
        let mut sums: Vec<(&str, u64)> = engine_fields(&EngineCounters::default());
        for c in &counted {
            for (s, (_, v)) in sums.iter_mut().zip(engine_fields(c)) {
                s.1 += v;
            }
        }
        let text = sums
            .iter()
            .filter(|(n, v)| *v > 0 && !matches!(*n, "frames_rx" | "frames_tx"))
            .map(|(n, v)| {
                if *n == "retransmitted_bytes" {
                    format!("{n} {:.1} % of port bytes", *v as f64 / (mb * 1e4))
                } else {
                    format!("{n} {}/MB", fmt_num(*v as f64 / mb))
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        if !text.is_empty() {
            parts.push(format!("{role}: {text}"));
        }
    }
    for (role, pick) in [
        (
            "linux sender",
            (|o: &Outcome| o.linux_sender.clone()) as fn(&Outcome) -> Option<Vec<u64>>,
        ),
        ("linux receiver", |o: &Outcome| o.linux_receiver.clone()),
    ] {
        let counted: Vec<Vec<u64>> = runs.iter().filter_map(pick).collect();
        if counted.is_empty() {
            continue;
        }
        let mut sums = vec![0u64; netstat::KEYS.len()];
        for v in &counted {
            for (s, x) in sums.iter_mut().zip(v) {
                *s += x;
            }
        }
        let text = linux_fields(&sums)
            .iter()
            .filter(|(n, v)| *v > 0 && !matches!(*n, "InSegs" | "OutSegs"))
            .map(|(n, v)| format!("{n} {}/MB", fmt_num(*v as f64 / mb)))
            .collect::<Vec<_>>()
            .join(", ");
        if !text.is_empty() {
            parts.push(format!("{role}: {text}"));
        }
    }
    parts.join("; ")
}
