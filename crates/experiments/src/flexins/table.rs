//! The rows, notes and plot series flexins-tx and flexins-rx share: each compares a path
//! (header-only TX, direct RX) against a staging copy at every x, one side's counters.

use sluice_rdma::stack::Touched;

use super::rig::RunResult;
use crate::plot::Series;
use crate::report::{fmt_num, fmt_ratio};

/// Which side of the transfer a table reads: its bytes touched and its CPU per message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The requester's transmit path.
    Tx,
    /// The responder's receive path.
    Rx,
}

impl Side {
    fn touch(self, r: &RunResult) -> Touched {
        match self {
            Side::Tx => r.tx_touch(),
            Side::Rx => r.rx_touch(),
        }
    }

    fn cpu_us_per_msg(self, r: &RunResult) -> f64 {
        match self {
            Side::Tx => r.tx_cpu_us_per_msg(),
            Side::Rx => r.rx_cpu_us_per_msg(),
        }
    }
}

/// One measured point as the table shows it.
pub struct Point<'a> {
    /// Its x (a size).
    pub x: String,
    /// Its path's name.
    pub path: &'static str,
    /// What the run did.
    pub result: &'a RunResult,
}

/// The table's rows (x, path, messages, Gbit/s, CPU, touched/B, staging/B, ICRC/B, retx,
/// exact), its notes (each pair's ratios, the path over staging: `points` come in pairs,
/// the path first), and one plot series per path name in `paths`.
pub fn rows_notes_series(
    side: Side,
    points: &[Point<'_>],
    pair_name: &str,
    paths: [&'static str; 2],
) -> (Vec<Vec<String>>, Vec<String>, Vec<Series>) {
    let rows = points
        .iter()
        .map(|p| {
            let t = side.touch(p.result);
            let per = |v: u64| fmt_num(v as f64 / t.payload.max(1) as f64);
            vec![
                p.x.clone(),
                p.path.into(),
                p.result.messages.to_string(),
                fmt_num(p.result.gbps()),
                fmt_num(side.cpu_us_per_msg(p.result)),
                fmt_num(t.per_payload_byte()),
                per(t.staging),
                per(t.icrc),
                p.result.requester_qps.retransmits.to_string(),
                if p.result.exact { "yes" } else { "NO" }.into(),
            ]
        })
        .collect();
    let notes = points
        .chunks(2)
        .filter_map(|pair| match pair {
            [a, s] => Some(format!(
                "{}: {pair_name} throughput {}, bytes touched per payload byte {}",
                a.x,
                fmt_ratio(a.result.gbps(), s.result.gbps()),
                fmt_ratio(
                    side.touch(a.result).per_payload_byte(),
                    side.touch(s.result).per_payload_byte()
                ),
            )),
            _ => None,
        })
        .collect();
    let series = paths
        .into_iter()
        .map(|name| Series {
            name: name.into(),
            points: points
                .iter()
                .filter(|p| p.path == name)
                .enumerate()
                .map(|(i, p)| (i as f64, p.result.gbps()))
                .collect(),
        })
        .collect();
    (rows, notes, series)
}
