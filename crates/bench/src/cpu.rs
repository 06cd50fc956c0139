//! CPU time over a measured run: machine-wide busy time from /proc/stat (all cores:
//! user+nice+system+irq+softirq) and one process's own (/proc/PID/stat utime+stime).

/// Clock ticks per second of /proc's counters (USER_HZ, fixed at 100 in Linux's ABI).
const USER_HZ: f64 = 100.0;

/// Machine-wide busy CPU seconds since boot, or None when /proc/stat is unreadable.
pub fn busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_busy(&stat)
}

/// Busy seconds from /proc/stat's `cpu` line (fields: user nice system idle iowait irq
/// softirq ...).
pub fn parse_busy(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let busy = [0usize, 1, 2, 5, 6]
        .iter()
        .map(|&i| f.get(i).copied())
        .sum::<Option<u64>>()?;
    Some(busy as f64 / USER_HZ)
}

/// Machine-wide softirq CPU seconds since boot (all cores), or None when /proc/stat is
/// unreadable: the kernel's receive and transmit processing, which no process is charged.
pub fn softirq_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_softirq(&stat)
}

/// The softirq field (the seventh) of /proc/stat's `cpu` line, in seconds.
pub fn parse_softirq(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(7)?.parse().ok()?;
    Some(ticks as f64 / USER_HZ)
}

/// A process's user+system CPU seconds, or None when it is gone.
pub fn process_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_process(&stat)
}

/// utime+stime (fields 14 and 15) from /proc/PID/stat; the command name may hold spaces,
/// so fields are counted after its closing parenthesis.
pub fn parse_process(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// CPU seconds spent during one measured run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUse {
    /// Machine-wide busy seconds.
    pub busy: Option<f64>,
    /// The engines' own seconds (Sluice rows), summed.
    pub engines: Option<f64>,
}

impl CpuUse {
    /// Microseconds of machine-wide busy CPU per operation.
    pub fn busy_us_per_op(&self, ops: f64) -> Option<f64> {
        per_op(self.busy, ops)
    }

    /// Microseconds of the engines' CPU per operation.
    pub fn engines_us_per_op(&self, ops: f64) -> Option<f64> {
        per_op(self.engines, ops)
    }
}

fn per_op(secs: Option<f64>, ops: f64) -> Option<f64> {
    secs.filter(|_| ops > 0.0).map(|s| s * 1e6 / ops)
}

/// Samples taken at the start of a run.
#[derive(Debug)]
pub struct CpuMeter {
    busy: Option<f64>,
    engines: Vec<(u32, Option<f64>)>,
}

impl CpuMeter {
    /// Starts measuring, machine-wide and for the processes `engines`.
    pub fn start(engines: &[u32]) -> CpuMeter {
        CpuMeter {
            busy: busy_seconds(),
            engines: engines.iter().map(|&p| (p, process_seconds(p))).collect(),
        }
    }

    /// What was spent since [`CpuMeter::start`].
    pub fn stop(&self) -> CpuUse {
        let busy = self.busy.zip(busy_seconds()).map(|(a, b)| (b - a).max(0.0));
        let engines = if self.engines.is_empty() {
            None
        } else {
            self.engines
                .iter()
                .map(|&(pid, before)| before.zip(process_seconds(pid)).map(|(a, b)| b - a))
                .sum::<Option<f64>>()
        };
        CpuUse { busy, engines }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_busy_and_process_times() {
        let stat = "cpu  100 5 50 1000 7 3 2 0 0 0\ncpu0 50 2 25 500 3 1 1 0 0 0\n";
        // (100+5+50+3+2) ticks = 1.6 s; idle and iowait are not busy.
        assert_eq!(parse_busy(stat), Some(1.6));
        assert_eq!(parse_busy("intr 1 2\n"), None);
        // softirq is the seventh value: 2 ticks.
        assert_eq!(parse_softirq(stat), Some(0.02));
        assert_eq!(parse_softirq("cpu  1 2 3\n"), None);
        let pid = "4242 (sluice engine) S 1 4242 4242 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 \
                   3 0 100 0 0";
        assert_eq!(parse_process(pid), Some(3.0));
        assert_eq!(parse_process("4242 (x) S 1"), None);
        let me = process_seconds(std::process::id());
        assert!(me.is_some_and(|s| s >= 0.0), "{me:?}");
        assert!(busy_seconds().is_some_and(|s| s > 0.0));
    }
}
