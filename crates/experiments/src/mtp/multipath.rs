//! `sluice experiment mtp-multipath`: mtp.txt 5.1 / Figure 5. A sender and a receiver joined
//! by two paths, 100 Gbit/s and 10 Gbit/s; the first-hop switch alternates between them every
//! 384 us (an optical switch); 1 us links, 128-frame queues, ECN at 20 frames. One long flow's
//! goodput is sampled every 32 us, for MTP (each path's egress a pathlet with ECN feedback)
//! and for Sluice's TCP with DCTCP. The paper: MTP converges faster, with 33 % more goodput.

use std::time::Duration;

use clap::Args;
use sluice_sim::mtp::Balancer;
use sluice_sim::{Host, Instant, Sim};
use sluice_tcp::Stack;

use crate::error::ExperimentError;
use crate::fabric::host_addr;
use crate::flows::{Class, Flows};
use crate::mtp::host::{MtpHost, MtpMessages};
use crate::mtp::paths::{self, Hop, PathsSpec, TwoPaths};
use crate::mtp::{ecn_device, gbps, tcp, FRAME_BYTES, QUEUE_PACKETS};
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::Common;

/// `sluice experiment mtp-multipath`.
#[derive(Args, Debug)]
pub struct MultipathArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
}

/// How long the first hop stays on one path.
pub const PERIOD: Duration = Duration::from_micros(384);
/// The goodput sampling interval.
pub const BIN: Duration = Duration::from_micros(32);
/// The fast and the slow path, bits per second.
pub const PATH_BPS: [u64; 2] = [100_000_000_000, 10_000_000_000];
/// A period has converged once a bin reaches this fraction of its path's rate.
const CONVERGED: f64 = 0.8;

/// The hosts' links: faster than either path, so the bottleneck is the first hop's egress
/// (the pathlet) and not the sender's own NIC queue.
pub const HOST_BPS: u64 = 400_000_000_000;

/// The topology of mtp.txt 5.1.
pub fn spec() -> PathsSpec {
    let us = Duration::from_micros(1);
    PathsSpec {
        host: Hop {
            bps: HOST_BPS,
            delay: us,
        },
        paths: [
            Hop {
                bps: PATH_BPS[0],
                delay: us,
            },
            Hop {
                bps: PATH_BPS[1],
                delay: us,
            },
        ],
        queue_packets: QUEUE_PACKETS,
        ecn_k_bytes: Some(20 * FRAME_BYTES),
    }
}

/// Periods simulated.
fn periods(quick: bool) -> u32 {
    if quick {
        8
    } else {
        64
    }
}

/// The path (0 fast, 1 slow) the first hop uses in period `p`.
pub fn path_of_period(p: usize) -> usize {
    p % 2
}

/// One system's goodput, bin by bin from time zero.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Gbit/s in each [`BIN`].
    pub gbps: Vec<f64>,
}

/// What a trace says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Mean goodput from the first switch on, Gbit/s.
    pub mean_gbps: f64,
    /// Mean time to converge after a switch to the fast path, us.
    pub converge_fast_us: f64,
    /// Mean time to converge after a switch to the slow path, us.
    pub converge_slow_us: f64,
    /// Periods (after the first) that never reached [`CONVERGED`] of their path's rate.
    pub unconverged: usize,
}

impl Trace {
    /// Mean goodput and convergence per period, skipping the first (start-up) period.
    pub fn summary(&self) -> Summary {
        let per = (PERIOD.as_nanos() / BIN.as_nanos()) as usize;
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        let mut unconverged = 0;
        for (p, bins) in self.gbps.chunks(per).enumerate().skip(1) {
            let path = path_of_period(p);
            let target = CONVERGED * PATH_BPS[path] as f64 / 1e9;
            let t = match bins.iter().position(|&g| g >= target) {
                Some(i) => (i + 1) as f64 * BIN.as_secs_f64() * 1e6,
                None => {
                    unconverged += 1;
                    PERIOD.as_secs_f64() * 1e6
                }
            };
            if path == 0 {
                fast.push(t);
            } else {
                slow.push(t);
            }
        }
        let steady = self.gbps.get(per..).unwrap_or(&[]);
        Summary {
            mean_gbps: mean(steady),
            converge_fast_us: mean(&fast),
            converge_slow_us: mean(&slow),
            unconverged,
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Runs the experiment and builds its report.
pub fn run(args: &MultipathArgs) -> Result<Report, ExperimentError> {
    let quick = args.common.quick;
    let seed = args.common.seed;
    let n = periods(quick);
    eprintln!("sluice experiment mtp-multipath: DCTCP");
    let dctcp = run_tcp(seed, n)?;
    eprintln!("sluice experiment mtp-multipath: MTP");
    let mtp = run_mtp(seed, n)?;
    let systems: Vec<(&str, Trace)> = vec![("dctcp", dctcp), ("mtp", mtp)];
    Ok(report(&systems, n, seed))
}

/// The report: a summary table, the time series as CSV, the plot.
fn report(systems: &[(&str, Trace)], periods: u32, seed: u64) -> Report {
    let summaries: Vec<(&str, Summary)> = systems.iter().map(|(s, t)| (*s, t.summary())).collect();
    let dctcp = summaries
        .iter()
        .find(|(s, _)| *s == "dctcp")
        .map_or(f64::NAN, |(_, s)| s.mean_gbps);
    let mut rows = Vec::new();
    for (name, s) in &summaries {
        rows.push(vec![
            name.to_string(),
            fmt_num(s.mean_gbps),
            fmt_ratio(s.mean_gbps, dctcp),
            fmt_num(s.converge_fast_us),
            fmt_num(s.converge_slow_us),
            s.unconverged.to_string(),
        ]);
    }
    let mut data = Vec::new();
    for (name, t) in systems {
        for (i, g) in t.gbps.iter().enumerate() {
            let at = (i as f64 + 1.0) * BIN.as_secs_f64() * 1e6;
            data.push(vec![
                name.to_string(),
                format!("{at:.0}"),
                path_of_period((i as u128 * BIN.as_nanos() / PERIOD.as_nanos()) as usize)
                    .to_string(),
                format!("{g:.3}"),
            ]);
        }
    }
    let series = systems
        .iter()
        .map(|(name, t)| Series {
            name: name.to_string(),
            points: t
                .gbps
                .iter()
                .enumerate()
                .map(|(i, &g)| ((i as f64 + 1.0) * BIN.as_secs_f64() * 1e3, g))
                .collect(),
        })
        .collect();
    Report {
        name: "mtp-multipath".into(),
        setup: vec![
            format!(
                "sluice experiment mtp-multipath: one long flow over two paths ({} and {} Gbit/s), \
                 the first hop alternating every {} us ({} periods, fast path first); 1 us links, \
                 {QUEUE_PACKETS}-frame queues, ECN at 20 frames; goodput every {} us; seed {seed}",
                PATH_BPS[0] / 1_000_000_000,
                PATH_BPS[1] / 1_000_000_000,
                PERIOD.as_micros(),
                periods,
                BIN.as_micros(),
            ),
            format!(
                "  mean from the first switch on; converged = the first bin at {:.0} % of the \
                 path's rate after a switch (a period that never gets there counts {} us)",
                CONVERGED * 100.0,
                PERIOD.as_micros()
            ),
        ],
        columns: [
            "system",
            "goodput Gbit/s",
            "vs dctcp",
            "to fast us",
            "to slow us",
            "unconverged",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows,
        notes: vec![
            "paper (mtp.txt Figure 5): MTP converges faster, 33 % more goodput than DCTCP".into(),
        ],
        plot: Some(Plot {
            title: "One flow over a path alternating 100 / 10 Gbit/s every 384 us".into(),
            x_label: "time (ms)".into(),
            y_label: "goodput (Gbit/s)".into(),
            x_categories: None,
            series,
        }),
        data: Some((
            ["system", "time_us", "path", "gbps"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            data,
        )),
    }
}

/// The first hop alternates between the paths (the optical switch), each path's egress a
/// pathlet with ECN feedback at 20 frames (ids 1 fast, 2 slow).
fn alternate<H: Host>(sim: &mut Sim<H>, topo: &TwoPaths) -> Result<(), ExperimentError> {
    let k = spec().ecn_k_bytes.unwrap_or(20 * FRAME_BYTES);
    let balancer = Balancer::Alternate { period: PERIOD };
    ecn_device(sim, topo.first_hop, &topo.paths, 1, k, balancer)
}

/// Samples goodput bin by bin: `read()` gives the bytes received so far.
fn sample<H: Host>(
    sim: &mut Sim<H>,
    periods: u32,
    mut step: impl FnMut(Instant, &mut sluice_sim::HostsView<'_, H>),
    mut read: impl FnMut() -> Result<u64, ExperimentError>,
) -> Result<Trace, ExperimentError> {
    let bins = (PERIOD.as_nanos() / BIN.as_nanos()) as usize * periods as usize;
    let mut gbps_bins = Vec::with_capacity(bins);
    let mut last = read()?;
    for i in 0..bins {
        let deadline = Instant::ZERO + BIN * (i as u32 + 1);
        let _ = sim.run_until(deadline, |now, hosts| {
            step(now, hosts);
            false
        });
        let now = read()?;
        gbps_bins.push(gbps(now - last, BIN));
        last = now;
    }
    Ok(Trace { gbps: gbps_bins })
}

/// DCTCP: one connection, its sender never short of data.
fn run_tcp(seed: u64, periods: u32) -> Result<Trace, ExperimentError> {
    let mut sim: Sim<Stack> = Sim::new(seed);
    let topo = paths::build(&mut sim, &spec(), |i| {
        tcp::dctcp_stack(i, 2, seed, tcp::BUFFER_100G)
    })?;
    alternate(&mut sim, &topo)?;
    let ips = [host_addr(0).1, host_addr(1).1];
    let mut flows = Flows::new(&mut sim, &[topo.sender, topo.receiver], &ips)?;
    let ch = flows.open(&mut sim, 0, 1)?;
    let _ = sim.run_until(Instant::ZERO + Duration::from_micros(30), |now, hosts| {
        flows.step(now, hosts);
        flows.all_open()
    });
    if !flows.all_open() {
        return Err(ExperimentError::Workload(
            "the connection did not open in 30 us".into(),
        ));
    }
    flows.send(&mut sim, ch, 1 << 50, Class::Background)?;
    let flows = std::cell::RefCell::new(flows);
    let trace = sample(
        &mut sim,
        periods,
        |now, hosts| flows.borrow_mut().step(now, hosts),
        || {
            let f = flows.borrow();
            match f.error() {
                Some(e) => Err(ExperimentError::Workload(e.to_string())),
                None => Ok(f.bytes_read(ch)),
            }
        },
    )?;
    Ok(trace)
}

/// Messages of the MTP flow: small enough to complete within a bin even on the slow path.
const MTP_MESSAGE: u64 = 16 * 1024;
/// Messages the MTP sender keeps queued (a long flow: never short of data).
const MTP_QUEUED: usize = 64;

/// MTP: the sender keeps [`MTP_QUEUED`] messages of [`MTP_MESSAGE`] bytes queued; goodput is
/// the bytes of messages received whole.
fn run_mtp(seed: u64, periods: u32) -> Result<Trace, ExperimentError> {
    let mut sim: Sim<MtpHost> = Sim::new(seed);
    let topo = paths::build(&mut sim, &spec(), |i| MtpHost::new(i, 2, |_| {}))?;
    alternate(&mut sim, &topo)?;
    let msgs = std::cell::RefCell::new(MtpMessages::new(
        &[topo.sender, topo.receiver],
        MTP_MESSAGE as usize,
    ));
    for _ in 0..MTP_QUEUED {
        msgs.borrow_mut().send(&mut sim, 0, 1, MTP_MESSAGE, 0, 0)?;
    }
    let failed = std::cell::RefCell::new(None);
    sample(
        &mut sim,
        periods,
        |now, hosts| {
            let mut m = msgs.borrow_mut();
            m.step(now, hosts);
            let mut failed = failed.borrow_mut();
            while m.outstanding_from(0) < MTP_QUEUED && failed.is_none() {
                if let Err(e) = m.send_within(now, hosts, 0, 1, MTP_MESSAGE, 0, 0) {
                    *failed = Some(e);
                }
            }
        },
        || {
            if let Some(e) = failed.borrow_mut().take() {
                return Err(e);
            }
            let m = msgs.borrow();
            match m.error() {
                Some(e) => Err(ExperimentError::Workload(e.to_string())),
                None => Ok(m.received[1]),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convergence_is_the_first_bin_at_the_paths_rate_after_a_switch() {
        let per = (PERIOD.as_nanos() / BIN.as_nanos()) as usize;
        // Period 0 (start-up, skipped), period 1 slow: 10 Gbit/s from its third bin,
        // period 2 fast: never above 50.
        let mut g = vec![100.0; per];
        g.extend([1.0, 5.0].iter().chain(std::iter::repeat_n(&10.0, per - 2)));
        g.extend(std::iter::repeat_n(50.0, per));
        let s = Trace { gbps: g }.summary();
        assert_eq!(s.converge_slow_us, 96.0);
        assert_eq!(s.converge_fast_us, 384.0);
        assert_eq!(s.unconverged, 1);
        let want = (1.0 + 5.0 + 10.0 * (per - 2) as f64 + 50.0 * per as f64) / (2 * per) as f64;
        assert!((s.mean_gbps - want).abs() < 1e-9);
    }
}
