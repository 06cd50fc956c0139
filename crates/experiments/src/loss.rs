//! `sluice experiment loss`: goodput of one bulk connection against random loss, for the
//! engine and Linux kernel TCP as sender and receiver, in one run on the switched lab.
//!
//! ```text
//!  senders                                       sluice switch              receivers
//!  engine   sluice-a sl-a 10.77.0.1  ─┐                                 ┌ Linux  sluice-c1 10.77.0.101
//!                                     ├ br0 ── sw-up ═══> sw-c1 (loss=p) ┤
//!  Linux    sluice-k sl-k 10.77.0.3  ─┘       (lossless)                └ engine sluice-c1 10.77.0.201
//! ```
//!
//! Each (pairing, loss) run is one [`crate::switched_bulk`] run: the port towards sluice-c1
//! drops each frame with probability p (independent, `loss=p`), in the data direction only
//! (the ACKs go back through the uplink's lossless egress), and the same port carries every
//! pairing. The engines use the core's default configuration (SACK, `Config::ooo_intervals`,
//! DCTCP; `--ooo-intervals` and `--cc` override); Linux uses its defaults (CUBIC, SACK); the
//! gbn->gbn baseline's engines use go-back-N and no out-of-order intervals (the receiver
//! drops what arrives beyond a hole, the sender goes back to snd_una).

use std::str::FromStr;

use clap::Args;
use sluice_lab::Lab;
use sluice_tcp::cc::Algorithm;

use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::switched_bulk::{configure, run_once, Wire, BACKEND, RECEIVER_CLIENT};
use crate::{lab_workload, Common, LabRun};
use sluice_bench::Timing;

pub use crate::switched_bulk::{Pairing, RECEIVER_ENGINE_IP};

/// The loss rates of a full run, in percent.
pub const FULL_LOSS: [f64; 7] = [0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0];
/// The loss rates of a quick run, in percent.
pub const QUICK_LOSS: [f64; 3] = [0.0, 1.0, 5.0];

/// `sluice experiment loss`.
#[derive(Args, Debug)]
pub struct LossArgs {
    /// Size, output directory and seed (the switch's loss draws).
    #[command(flatten)]
    pub common: Common,
    /// Loss rates in percent (default 0,0.01,0.1,0.5,1,2,5; with --quick 0,1,5).
    #[arg(long, value_delimiter = ',')]
    pub loss: Vec<f64>,
    /// Out-of-order intervals the (SACK) engines track; the engine's default if not given.
    #[arg(long)]
    pub ooo_intervals: Option<usize>,
    /// The engines' congestion control (dctcp, timely, reno, cubic, bbr); DCTCP if not given.
    #[arg(long, value_parser = Algorithm::from_str)]
    pub cc: Option<Algorithm>,
    /// Turn the engines' RACK-TLP (RFC 8985) off, to compare.
    #[arg(long)]
    pub no_rack_tlp: bool,
    /// Run length and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// One run's result.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    mbps: f64,
    /// Frames the lossy port dropped, and frames it forwarded, during the run.
    lost: u64,
    forwarded: u64,
    /// Frames the switch dropped otherwise, on any port: tail drops, oversize, receive
    /// truncation or failure, transmit failure.
    other_drops: u64,
    /// A sending engine's mean SRTT over its congestion-control iterations, usec: at loss,
    /// the goodput of a window-limited sender follows it (Mathis), so a loaded machine shows
    /// here.
    sender_srtt_us: Option<f64>,
}

/// Runs the experiment in the switched lab and builds its report.
pub fn run(args: &LossArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let losses: Vec<f64> = if !args.loss.is_empty() {
        args.loss.clone()
    } else if quick {
        QUICK_LOSS.to_vec()
    } else {
        FULL_LOSS.to_vec()
    };
    if losses.iter().any(|&p| !(0.0..=100.0).contains(&p)) {
        return Err(ExperimentError::Usage(
            "--loss: each a percentage in 0..=100".into(),
        ));
    }
    if args.ooo_intervals.is_some_and(|n| n > 64) {
        return Err(ExperimentError::Usage("--ooo-intervals: at most 64".into()));
    }
    let timing = args.lab.timing(quick);
    let cells = args.lab.in_lab(
        "loss",
        |lab| {
            lab.up_switched(RECEIVER_CLIENT)
                .map_err(|e| lab_workload(&e))
        },
        |lab| measure(lab, args, &losses, timing),
    )?;
    Ok(report(args, &losses, timing, &cells))
}

/// Every pairing at every loss rate: `cells[pairing][loss]`.
fn measure(
    lab: &Lab,
    args: &LossArgs,
    losses: &[f64],
    timing: Timing,
) -> Result<Vec<Vec<Cell>>, ExperimentError> {
    let wire = Wire::of(lab)?;
    let kernel =
        sluice_bench::KernelServers::start(sluice_lab::NS_KERNEL).map_err(|e| lab_workload(&e))?;
    let mut cells = Vec::new();
    for pairing in Pairing::ALL {
        let config = configure(pairing, args.ooo_intervals, args.cc, !args.no_rack_tlp);
        let mut row = Vec::new();
        for (i, &p) in losses.iter().enumerate() {
            let seed = args.common.seed.wrapping_add(i as u64);
            eprintln!("sluice experiment loss: {} at {p} % loss", pairing.name());
            let impairment = format!("loss={}", p / 100.0);
            let idle = std::time::Duration::from_micros(100);
            let run = run_once(&wire, pairing, &config, &impairment, seed, timing, idle)?;
            row.push(Cell {
                mbps: run.mbps,
                lost: run.port.egress.link.lost,
                forwarded: run.port.forwarded,
                other_drops: run.other_drops,
                sender_srtt_us: run
                    .sender
                    .as_ref()
                    .filter(|c| c.core.cc_iterations > 0)
                    .map(|c| c.core.cc_srtt_us_sum as f64 / c.core.cc_iterations as f64),
            });
        }
        cells.push(row);
    }
    drop(kernel);
    Ok(cells)
}

/// Goodput as a percentage of the same pairing's no-loss goodput (NaN without a 0 % run).
fn percent_of_lossless(losses: &[f64], row: &[Cell], i: usize) -> f64 {
    match losses.iter().position(|&p| p == 0.0) {
        Some(z) if row[z].mbps > 0.0 => row[i].mbps / row[z].mbps * 100.0,
        _ => f64::NAN,
    }
}

/// The table, the CSV rows and the plot.
fn report(args: &LossArgs, losses: &[f64], timing: Timing, cells: &[Vec<Cell>]) -> Report {
    let mut columns = vec!["loss %".to_string()];
    for p in Pairing::ALL {
        columns.push(format!("{} Mbit/s", p.name()));
        columns.push(format!("{} %", p.name()));
    }
    columns.extend([
        "engine/gbn".to_string(),
        "frames lost".to_string(),
        "lost %".to_string(),
        "other drops".to_string(),
    ]);
    let index = |p: Pairing| Pairing::ALL.iter().position(|&q| q == p).unwrap_or(0);
    let (engine, gbn) = (index(Pairing::EngineToEngine), index(Pairing::GoBackN));
    let mut rows = Vec::new();
    for (i, &p) in losses.iter().enumerate() {
        let mut row = vec![format!("{p}")];
        for pairing_row in cells {
            row.push(fmt_num(pairing_row[i].mbps));
            row.push(fmt_num(percent_of_lossless(losses, pairing_row, i)));
        }
        row.push(fmt_ratio(cells[engine][i].mbps, cells[gbn][i].mbps));
        let lost: u64 = cells.iter().map(|r| r[i].lost).sum();
        let sent: u64 = cells.iter().map(|r| r[i].lost + r[i].forwarded).sum();
        row.push(lost.to_string());
        row.push(if sent > 0 {
            format!("{:.3}", lost as f64 / sent as f64 * 100.0)
        } else {
            "n/a".into()
        });
        row.push(
            cells
                .iter()
                .map(|r| r[i].other_drops)
                .sum::<u64>()
                .to_string(),
        );
        rows.push(row);
    }
    let mut notes = vec![
        "%: goodput as a percentage of the same pairing's goodput without loss; engine/gbn: \
         engine->engine over the go-back-N, zero-interval baseline; frames lost / lost %: what \
         the lossy port dropped of the frames it was given, over all pairings' runs; other drops: \
         what the switch dropped besides (tail drops, device errors; its sockets' own receive \
         overruns are not counted)"
            .to_string(),
        "targets: goodput >= 95 % of the no-loss figure up to 0.1 % loss; at 2 % loss >= 2x \
         the go-back-N, zero-interval baseline"
            .to_string(),
    ];
    for pairing in [Pairing::EngineToLinux, Pairing::EngineToEngine] {
        let row = &cells[index(pairing)];
        let worst = losses
            .iter()
            .enumerate()
            .filter(|(_, &p)| p > 0.0 && p <= 0.1)
            .map(|(i, _)| percent_of_lossless(losses, row, i))
            .fold(f64::NAN, f64::min);
        if worst.is_finite() {
            notes.push(format!(
                "  {}: worst up to 0.1 % loss {} % of no loss ({})",
                pairing.name(),
                fmt_num(worst),
                if worst >= 95.0 { "met" } else { "missed" }
            ));
        }
    }
    for (pairing, row) in Pairing::ALL.iter().zip(cells) {
        let srtts: Vec<String> = losses
            .iter()
            .zip(row)
            .filter_map(|(p, c)| c.sender_srtt_us.map(|us| format!("{p} %: {us:.0}")))
            .collect();
        if !srtts.is_empty() {
            notes.push(format!(
                "  {} sender's mean SRTT, us: {}",
                pairing.name(),
                srtts.join(", ")
            ));
        }
    }
    if let Some(i) = losses.iter().position(|&p| p == 2.0) {
        let (e, g) = (cells[engine][i].mbps, cells[gbn][i].mbps);
        notes.push(format!(
            "  engine->engine at 2 % loss: {} the baseline ({})",
            fmt_ratio(e, g),
            if g > 0.0 && e >= 2.0 * g {
                "met"
            } else {
                "missed"
            }
        ));
    }
    let series = Pairing::ALL
        .iter()
        .zip(cells)
        .map(|(p, row)| Series {
            name: p.name().into(),
            points: row
                .iter()
                .enumerate()
                .map(|(i, c)| (i as f64, c.mbps))
                .collect(),
        })
        .collect();
    Report {
        name: "loss".into(),
        setup: vec![
            format!(
                "sluice experiment loss: one bulk connection per run from a server in the default \
                 lab to a receiver in sluice-c1, through sluice switch; the port towards sluice-c1 \
                 drops each data frame with probability p (ACKs are not dropped); {} s after {} s warm-up",
                timing.seconds, timing.warmup
            ),
            format!(
                "  engine: {BACKEND:?} backend, {}; linux: sluice kserve / sluice loadgen, kernel \
                 defaults; {} shared CPU cores",
                format!(
                    "SACK with {} out-of-order intervals, {}",
                    args.ooo_intervals
                        .map_or_else(|| "the default number of".into(), |n| n.to_string()),
                    args.cc.map_or("DCTCP".into(), |a| a.to_string())
                ),
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        ],
        columns,
        rows,
        notes,
        plot: Some(Plot {
            title: "Goodput of one connection against random loss".into(),
            x_label: "loss %".into(),
            y_label: "Mbit/s".into(),
            x_categories: Some(losses.iter().map(|p| format!("{p}")).collect()),
            series,
        }),
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(mbps: &[&[f64]]) -> Vec<Vec<Cell>> {
        mbps.iter()
            .map(|row| {
                row.iter()
                    .map(|&g| Cell {
                        mbps: g,
                        lost: 1,
                        forwarded: 99,
                        other_drops: 0,
                        sender_srtt_us: None,
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn report_has_a_row_per_loss_and_two_columns_per_pairing() {
        let args = LossArgs {
            common: Common {
                quick: true,
                out: "x".into(),
                seed: 1,
            },
            loss: Vec::new(),
            ooo_intervals: None,
            cc: None,
            no_rack_tlp: false,
            lab: LabRun::default(),
        };
        let losses = [0.0, 0.1, 2.0];
        let mut c = cells(&[
            &[2.0, 1.96, 1.0],
            &[2.0, 1.0, 0.5],
            &[4.0, 3.9, 1.2],
            &[1.0, 1.0, 0.2],
            &[4.0, 2.0, 0.4],
        ]);
        for (cell, us) in c[0].iter_mut().zip([120.0, 150.4, 800.0]) {
            cell.sender_srtt_us = Some(us);
        }
        let timing = Timing {
            seconds: 1.0,
            warmup: 0.5,
        };
        let r = report(&args, &losses, timing, &c);
        assert_eq!(r.columns.len(), 1 + 2 * Pairing::ALL.len() + 4);
        assert_eq!(r.rows.len(), 3);
        assert_eq!(r.rows[1][1..3], ["1.96".to_string(), "98.0".to_string()]);
        // engine->engine over gbn at 2 %: 1.2 / 0.4.
        assert_eq!(r.rows[2][11], "x3.00");
        assert_eq!(r.rows[2][12], "5");
        assert_eq!(r.rows[2][13], "1.000");
        assert_eq!(r.rows[2][14], "0");
        let text = r.notes.join("\n");
        assert!(text.contains("engine->linux: worst up to 0.1 % loss 98.0 % of no loss (met)"));
        assert!(text.contains("engine->engine: worst up to 0.1 % loss 97.5 % of no loss (met)"));
        assert!(
            text.contains("at 2 % loss: x3.00 the baseline (met)"),
            "{text}"
        );
        let srtt = format!(
            "{} sender's mean SRTT, us: 0 %: 120, 0.1 %: 150, 2 %: 800",
            Pairing::ALL[0].name()
        );
        assert!(text.contains(&srtt), "{text}");
        assert_eq!(text.matches("mean SRTT").count(), 1, "{text}");
        let plot = r.plot.unwrap();
        assert_eq!(plot.series.len(), Pairing::ALL.len());
        assert!(percent_of_lossless(&[1.0], &c[0][..1], 0).is_nan());
    }
}
