//! What one load generator run measured, and the helpers that measure it: latency
//! histograms, and CPU time from /proc.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Round-trip latency percentiles, in microseconds.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99.99th percentile (0 from a helper that predates it).
    #[serde(default)]
    pub p9999_us: f64,
}

/// One measured run of one workload from one client.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    /// Length of the measured window (after warm-up).
    pub seconds: f64,
    /// Requests answered (rpc) or connections completed (connect).
    pub ops: u64,
    /// Payload bytes moved (stream).
    pub bytes: u64,
    /// Latency percentiles (rpc).
    pub latency: Option<Latency>,
    /// CPU time the client used during the window, in seconds (all its threads).
    pub cpu_seconds: f64,
    /// Payload bytes each connection moved, in connection order (stream workloads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_conn_bytes: Vec<u64>,
}

impl Measurement {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }

    /// Throughput in gigabits per second.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e9
    }
}

/// The byte every bench source sends (`sluice kserve`, and the engine's `BenchServerApp`, which
/// fills its chunk with the same value).
pub const SOURCE_BYTE: u8 = 0x5a;

/// Whether `data` is what a source sends: SOURCE_BYTE only (a receiver's content check).
/// Compared 16 bytes at a time: byte by byte, the check cost a receiving engine's thread
/// more than its TCP processing.
pub fn all_source_bytes(data: &[u8]) -> bool {
    const WIDE: u128 = u128::from_ne_bytes([SOURCE_BYTE; 16]);
    let mut chunks = data.chunks_exact(16);
    let wide = chunks.by_ref().fold(0u128, |diff, c| {
        diff | (u128::from_ne_bytes(c.try_into().unwrap_or([0; 16])) ^ WIDE)
    }) == 0;
    wide && chunks.remainder().iter().all(|&b| b == SOURCE_BYTE)
}

/// A latency histogram in nanoseconds (1 ns to 10 s, three significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static histogram bounds are valid")
}

/// Records one round trip.
pub fn record(h: &mut Histogram<u64>, rtt: Duration) {
    let ns = (rtt.as_nanos() as u64).clamp(1, h.high());
    h.saturating_record(ns);
}

/// The percentiles of `h`, or None if it is empty.
pub fn latency(h: &Histogram<u64>) -> Option<Latency> {
    if h.is_empty() {
        return None;
    }
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Some(Latency {
        p50_us: us(0.50),
        p99_us: us(0.99),
        p999_us: us(0.999),
        p9999_us: us(0.9999),
    })
}

/// Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) from a /proc `stat` file, or 0 if it cannot be read.
pub fn cpu_seconds(stat_path: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat_path) else {
        return 0.0;
    };
    // The command name may hold spaces; fields after it start at "state" (field 3).
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 overall, so 11 and 12 after the state's index 0.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(11) + tick(12)) as f64 / USER_HZ
}

/// The /proc stat path of the calling thread, readable from any thread of the process.
pub fn current_thread_stat() -> String {
    match std::fs::read_link("/proc/thread-self") {
        // The link reads "<pid>/task/<tid>".
        Ok(p) => format!("/proc/{}/stat", p.display()),
        Err(_) => "/proc/self/stat".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_rates() {
        let mut h = histogram();
        for us in 1..=1000u64 {
            record(&mut h, Duration::from_micros(us));
        }
        let l = latency(&h).unwrap();
        assert!((l.p50_us - 500.0).abs() < 2.0, "{l:?}");
        assert!((l.p99_us - 990.0).abs() < 2.0, "{l:?}");
        let m = Measurement {
            seconds: 2.0,
            ops: 10,
            bytes: 250_000_000,
            ..Measurement::default()
        };
        assert_eq!(m.ops_per_sec(), 5.0);
        assert_eq!(m.gbps(), 1.0);
    }

    #[test]
    fn the_content_check_finds_any_wrong_byte() {
        for len in [0, 1, 15, 16, 17, 100, 1448] {
            let mut data = vec![SOURCE_BYTE; len];
            assert!(all_source_bytes(&data), "len {len}");
            for at in 0..len {
                data[at] ^= 1;
                assert!(!all_source_bytes(&data), "len {len}, byte {at}");
                data[at] ^= 1;
            }
        }
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(cpu_seconds("/proc/self/stat") >= 0.0);
        assert!(cpu_seconds(&current_thread_stat()) >= 0.0);
        assert_eq!(cpu_seconds("/nonexistent"), 0.0);
    }
}
