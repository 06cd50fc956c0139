//! Linux's TCP counters in a lab namespace (`/proc/net/netstat` and `/proc/net/snmp`, what
//! `nstat` reads), read before and after a run: with one flow at a time in the namespace, the
//! difference is that flow's, to set beside the engine's counters.

use std::process::Command;

use crate::error::ExperimentError;

/// The counters read, as `GROUP:Name` (the kernel's spelling): recoveries and their undo,
/// retransmissions, reordering seen, out-of-order queueing and checksum errors.
pub const KEYS: [&str; 22] = [
    "Tcp:InSegs",
    "Tcp:OutSegs",
    "Tcp:RetransSegs",
    "Tcp:InCsumErrors",
    "TcpExt:TCPSackRecovery",
    "TcpExt:TCPFastRetrans",
    "TcpExt:TCPLostRetransmit",
    "TcpExt:TCPTimeouts",
    "TcpExt:TCPSpuriousRTOs",
    "TcpExt:TCPLossProbes",
    "TcpExt:TCPLossProbeRecovery",
    "TcpExt:TCPDSACKRecv",
    "TcpExt:TCPDSACKUndo",
    "TcpExt:TCPFullUndo",
    "TcpExt:TCPPartialUndo",
    "TcpExt:TCPSACKReorder",
    "TcpExt:TCPTSReorder",
    "TcpExt:TCPDSACKOldSent",
    "TcpExt:TCPOFOQueue",
    "TcpExt:TCPOFODrop",
    "TcpExt:TCPRcvQDrop",
    "TcpExt:TCPSpuriousRtxHostQueues",
];

/// [`KEYS`]' values in a namespace now (0 for a counter this kernel lacks).
pub fn snapshot(ns: &str) -> Result<Vec<u64>, ExperimentError> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "cat",
            "/proc/net/snmp",
            "/proc/net/netstat",
        ])
        .output()
        .map_err(|e| ExperimentError::Io(format!("read Linux's counters in {ns}"), e))?;
    if !out.status.success() {
        return Err(ExperimentError::Workload(format!(
            "read Linux's counters in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

/// [`KEYS`]' values from the text of `/proc/net/snmp` and `/proc/net/netstat`: each group
/// is a line of names and a line of values, both starting `Group:`.
pub fn parse(text: &str) -> Vec<u64> {
    let lines: Vec<&str> = text.lines().collect();
    let mut values = vec![0; KEYS.len()];
    for pair in lines.windows(2) {
        let (Some((g1, names)), Some((g2, nums))) =
            (pair[0].split_once(':'), pair[1].split_once(':'))
        else {
            continue;
        };
        if g1 != g2
            || names
                .split_whitespace()
                .next()
                .is_some_and(|n| n.parse::<i64>().is_ok())
        {
            continue;
        }
        for (name, num) in names.split_whitespace().zip(nums.split_whitespace()) {
            let key = format!("{g1}:{name}");
            if let (Some(i), Ok(v)) = (KEYS.iter().position(|k| *k == key), num.parse::<u64>()) {
                values[i] = v;
            }
        }
    }
    values
}

/// `after - before`, counter by counter (0 where a counter went backwards).
pub fn delta(before: &[u64], after: &[u64]) -> Vec<u64> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| a.saturating_sub(*b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_name_and_value_lines_of_each_group() {
        let text = "Tcp: RtoAlgorithm InSegs OutSegs RetransSegs InCsumErrors\n\
                    Tcp: 1 100 90 7 2\n\
                    TcpExt: SyncookiesSent TCPSackRecovery TCPOFOQueue\n\
                    TcpExt: 0 5 40\n\
                    IpExt: InNoRoutes\nIpExt: 3\n";
        let v = parse(text);
        let get = |k: &str| v[KEYS.iter().position(|x| *x == k).unwrap()];
        assert_eq!(get("Tcp:InSegs"), 100);
        assert_eq!(get("Tcp:RetransSegs"), 7);
        assert_eq!(get("Tcp:InCsumErrors"), 2);
        assert_eq!(get("TcpExt:TCPSackRecovery"), 5);
        assert_eq!(get("TcpExt:TCPOFOQueue"), 40);
        assert_eq!(get("TcpExt:TCPDSACKUndo"), 0);
        assert_eq!(delta(&[1, 5], &[4, 3]), [3, 0]);
    }
}
