//! A port's counters as `sluice switch` prints them on SIGTERM, one `key=value` line per
//! port, and the same line read back: the printer and every reader (the experiments, the
//! lab tests) go through [`PortReport`], so the words are spelled in one place.

use std::fmt;

use sluice_device::DeviceStats;

use crate::core::PortStats;

/// What a port did, for the report at the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortReport {
    /// `NETNS:IFACE`.
    pub name: String,
    /// The core's counters.
    pub stats: PortStats,
    /// The device's counters (receive truncations, transmit drops).
    pub device: DeviceStats,
}

/// Every line of the report starts so, followed by the port's name.
const LINE_PREFIX: &str = "sluice switch: port ";
/// The line's last word: derived from `forwarded_bytes` and the run's length, so not read back.
const MEAN_OUT_MBPS: &str = "mean_out_mbps";

/// Reads one counter of a report.
type Get = fn(&PortReport) -> u64;
/// Sets one counter of a report.
type Set = fn(&mut PortReport, u64);

/// One `u64` counter of the report: its key and the field it reads and writes.
macro_rules! counter {
    ($key:literal, $($field:ident).+) => {
        ($key, |r: &PortReport| r.$($field).+, |r: &mut PortReport, v| r.$($field).+ = v)
    };
}

/// The line's counters in the order printed: (key, read, write).
const COUNTERS: [(&str, Get, Set); 21] = [
    counter!("rx", stats.rx_frames),
    counter!("rx_bytes", stats.rx_bytes),
    counter!("forwarded", stats.forwarded),
    counter!("forwarded_bytes", stats.forwarded_bytes),
    counter!("tail_drops", stats.egress.link.queue_drops),
    counter!("ecn_marked", stats.egress.link.ecn_marked),
    counter!("lost", stats.egress.link.lost),
    counter!("lost_random", stats.egress.link.lost_random),
    counter!("lost_burst", stats.egress.link.lost_burst),
    counter!("duplicated", stats.egress.link.duplicated),
    counter!("reordered", stats.egress.link.reordered),
    counter!("corrupted", stats.egress.link.corrupted),
    // The queue depths are usize in the link model; a value beyond usize saturates.
    (
        "max_queue_bytes",
        |r| r.stats.egress.link.max_queue_bytes as u64,
        |r, v| r.stats.egress.link.max_queue_bytes = usize::try_from(v).unwrap_or(usize::MAX),
    ),
    (
        "max_queue_packets",
        |r| r.stats.egress.link.max_queue_packets as u64,
        |r, v| r.stats.egress.link.max_queue_packets = usize::try_from(v).unwrap_or(usize::MAX),
    ),
    counter!("segmented", stats.segmented),
    counter!("oversize_drops", stats.oversize_drops),
    counter!("delay_line_drops", stats.egress.delay_line_drops),
    counter!("tx_errors", stats.tx_errors),
    counter!("tx_error_drops", stats.tx_error_drops),
    counter!("rx_truncated", device.rx_truncated),
    counter!("tx_dropped", device.tx_dropped),
];

/// Why a line is not a port's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReportLineError {
    /// The line does not start with `sluice switch: port NAME`.
    NotAPortLine,
    /// A word is not `key=value`, or names no counter of the report.
    UnknownWord(String),
    /// A counter's value is not a number.
    BadValue {
        /// The counter.
        key: String,
        /// What stood after `=`.
        value: String,
    },
}

impl fmt::Display for ReportLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportLineError::NotAPortLine => write!(f, "not a `{LINE_PREFIX}NAME ...` line"),
            ReportLineError::UnknownWord(w) => write!(f, "no counter {w:?} in a port's report"),
            ReportLineError::BadValue { key, value } => {
                write!(f, "counter {key}: {value:?} is not a number")
            }
        }
    }
}

impl std::error::Error for ReportLineError {}

impl PortReport {
    /// The report's line: `sluice switch: port NAME rx=.. ... mean_out_mbps=..`, with the
    /// mean output rate over a run of `secs` seconds.
    pub fn line(&self, secs: f64) -> String {
        let mbps = if secs > 0.0 {
            self.stats.forwarded_bytes as f64 * 8.0 / secs / 1e6
        } else {
            0.0
        };
        let mut line = format!("{LINE_PREFIX}{}", self.name);
        for (key, get, _) in &COUNTERS {
            line.push_str(&format!(" {key}={}", get(self)));
        }
        line.push_str(&format!(" {MEAN_OUT_MBPS}={mbps:.1}"));
        line
    }

    /// Reads a line [`PortReport::line`] wrote back. Counters the line lacks read 0, and
    /// `mean_out_mbps` (derived) is skipped.
    pub fn parse_line(line: &str) -> Result<PortReport, ReportLineError> {
        let rest = line
            .strip_prefix(LINE_PREFIX)
            .ok_or(ReportLineError::NotAPortLine)?;
        let mut words = rest.split_whitespace();
        let name = words.next().ok_or(ReportLineError::NotAPortLine)?;
        let mut report = PortReport {
            name: name.to_owned(),
            ..PortReport::default()
        };
        for word in words {
            let unknown = || ReportLineError::UnknownWord(word.to_owned());
            let (key, value) = word.split_once('=').ok_or_else(unknown)?;
            if key == MEAN_OUT_MBPS {
                continue;
            }
            let (_, _, set) = COUNTERS
                .iter()
                .find(|(k, _, _)| *k == key)
                .ok_or_else(unknown)?;
            let v = value.parse().map_err(|_| ReportLineError::BadValue {
                key: key.to_owned(),
                value: value.to_owned(),
            })?;
            set(&mut report, v);
        }
        Ok(report)
    }

    /// Port `port`'s report in a switch's output: its last counters line (the switch also
    /// prints a configuration line per port at start, which is not one). None if there is
    /// no such line.
    pub fn last_in(output: &str, port: &str) -> Option<Result<PortReport, ReportLineError>> {
        let prefix = format!("{LINE_PREFIX}{port} {}=", COUNTERS[0].0);
        let line = output.lines().rfind(|l| l.starts_with(&prefix))?;
        Some(PortReport::parse_line(line))
    }

    /// The counter named `key` as the line spells it (`tail_drops`, `ecn_marked`, ...).
    pub fn counter(&self, key: &str) -> Option<u64> {
        COUNTERS
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, get, _)| get(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PortReport {
        let mut r = PortReport {
            name: "sluice-s:sw-c1".into(),
            ..PortReport::default()
        };
        for (i, (_, _, set)) in COUNTERS.iter().enumerate() {
            set(&mut r, 100 + i as u64);
        }
        r
    }

    #[test]
    fn the_line_keeps_its_spelling() {
        let mut r = sample();
        r.stats.forwarded_bytes = 1_250_000;
        assert_eq!(
            r.line(2.0),
            "sluice switch: port sluice-s:sw-c1 rx=100 rx_bytes=101 forwarded=102 \
             forwarded_bytes=1250000 tail_drops=104 ecn_marked=105 lost=106 lost_random=107 \
             lost_burst=108 duplicated=109 reordered=110 corrupted=111 max_queue_bytes=112 \
             max_queue_packets=113 segmented=114 oversize_drops=115 delay_line_drops=116 \
             tx_errors=117 tx_error_drops=118 rx_truncated=119 tx_dropped=120 mean_out_mbps=5.0"
        );
        assert_eq!(
            PortReport::default().line(0.0),
            "sluice switch: port  rx=0 rx_bytes=0 forwarded=0 forwarded_bytes=0 tail_drops=0 \
             ecn_marked=0 lost=0 lost_random=0 lost_burst=0 duplicated=0 reordered=0 \
             corrupted=0 max_queue_bytes=0 max_queue_packets=0 segmented=0 oversize_drops=0 \
             delay_line_drops=0 tx_errors=0 tx_error_drops=0 rx_truncated=0 tx_dropped=0 \
             mean_out_mbps=0.0"
        );
    }

    #[test]
    fn a_line_reads_back_as_the_report_that_wrote_it() {
        let r = sample();
        assert_eq!(PortReport::parse_line(&r.line(1.5)), Ok(r.clone()));
        let out = format!(
            "sluice switch: port sluice-s:sw-c1 rate=unlimited queue_bytes=1\n{}\nother\n",
            r.line(1.0)
        );
        assert_eq!(
            PortReport::last_in(&out, "sluice-s:sw-c1"),
            Some(Ok(r.clone()))
        );
        assert_eq!(PortReport::last_in(&out, "sluice-s:sw-c2"), None);
        assert_eq!(r.counter("tail_drops"), Some(104));
        assert_eq!(r.counter("nonsense"), None);
    }

    #[test]
    fn other_lines_are_refused() {
        assert_eq!(
            PortReport::parse_line("garbage"),
            Err(ReportLineError::NotAPortLine)
        );
        assert_eq!(
            PortReport::parse_line("sluice switch: port p rate=unlimited"),
            Err(ReportLineError::UnknownWord("rate=unlimited".into()))
        );
        assert_eq!(
            PortReport::parse_line("sluice switch: port p rx=x"),
            Err(ReportLineError::BadValue {
                key: "rx".into(),
                value: "x".into()
            })
        );
    }
}
