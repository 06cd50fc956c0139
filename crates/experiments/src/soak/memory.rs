//! Memory over the run: the engine process's resident set (VmRSS in /proc/PID/status) and,
//! as Linux's comparison, the kernel's slab and TCP memory (/proc/meminfo's Slab and
//! /proc/net/sockstat's TCP `mem`). Both kernel figures are machine-wide: they include the
//! clients of both sides and anything else the machine runs.

use serde::Serialize;

/// One sample, in KiB; None where the file could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds into the run.
    pub t: f64,
    /// The engine's resident set.
    pub engine_rss_kib: Option<u64>,
    /// The kernel's slab (all caches).
    pub slab_kib: Option<u64>,
    /// Memory the kernel's TCP sockets hold in buffers (sockstat `mem`, in pages).
    pub tcp_mem_kib: Option<u64>,
}

/// Takes a sample of the engine process `pid` at `t` seconds.
pub fn sample(t: f64, pid: u32) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    Sample {
        t,
        engine_rss_kib: kib_field(&status, "VmRSS:"),
        slab_kib: kib_field(&meminfo, "Slab:"),
        tcp_mem_kib: tcp_mem_pages(&sockstat).map(|p| p * page_kib()),
    }
}

/// The value of a `Key:   1234 kB` line.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The `mem` of sockstat's `TCP:` line, in pages.
fn tcp_mem_pages(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("TCP:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "mem")
        .and_then(|w| w[1].parse().ok())
}

/// The page size in KiB (sockstat counts pages), from the kernel's own accounting.
fn page_kib() -> u64 {
    // /proc/self/statm counts pages and status counts KiB: their ratio is the page size.
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let pages: Option<u64> = statm.split_whitespace().next().and_then(|v| v.parse().ok());
    match (pages, kib_field(&status, "VmSize:")) {
        (Some(p), Some(k)) if p > 0 && k >= p => (k / p).max(1),
        _ => 4,
    }
}

/// Start, largest and end of one series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Span {
    /// The first sample.
    pub start_kib: u64,
    /// The largest.
    pub max_kib: u64,
    /// The last.
    pub end_kib: u64,
}

impl Span {
    /// Over the samples that have the value; None if none has.
    pub fn of(samples: &[Sample], f: impl Fn(&Sample) -> Option<u64>) -> Option<Span> {
        let values: Vec<u64> = samples.iter().filter_map(f).collect();
        Some(Span {
            start_kib: *values.first()?,
            max_kib: *values.iter().max()?,
            end_kib: *values.last()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernel_files() {
        let status = "Name:\tsluice\nVmRSS:\t   40960 kB\nVmSwap:\t0 kB\n";
        assert_eq!(kib_field(status, "VmRSS:"), Some(40960));
        assert_eq!(kib_field(status, "VmHWM:"), None);
        let sockstat =
            "sockets: used 120\nTCP: inuse 5 orphan 0 tw 3 alloc 9 mem 17\nUDP: inuse 0 mem 2\n";
        assert_eq!(tcp_mem_pages(sockstat), Some(17));
        let here = sample(0.0, std::process::id());
        assert!(here.engine_rss_kib.is_some_and(|k| k > 0), "{here:?}");
        assert!(here.slab_kib.is_some());
        assert!(page_kib() >= 4);
    }

    #[test]
    fn spans_take_first_max_last() {
        let s = |t, rss| Sample {
            t,
            engine_rss_kib: rss,
            ..Sample::default()
        };
        let samples = [
            s(0.0, Some(10)),
            s(1.0, None),
            s(2.0, Some(30)),
            s(3.0, Some(20)),
        ];
        let span = Span::of(&samples, |s| s.engine_rss_kib).unwrap();
        assert_eq!((span.start_kib, span.max_kib, span.end_kib), (10, 30, 20));
        assert_eq!(Span::of(&samples, |s| s.slab_kib), None);
    }
}
