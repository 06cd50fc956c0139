//! One row each: the program, its arguments on both ends, and its output turned into the
//! row's numbers (with CPU per operation).

use std::time::Duration;

use super::hosts::Hosts;
use super::perftest;
use super::table::Stack;
use crate::apps::program::{Program, IPERF3};
use crate::apps::tools::iperf3;
use crate::op_rows::{cpu_per_op, positive, Bw, Lat};
use crate::sockperf;

/// perftest's devices: the Sluice provider's sluice0, GID index 0.
const PERFTEST_DEVICE: [&str; 5] = ["-d", "sluice0", "-x", "0", "-F"];
/// perftest's tx depth for the bandwidth rows (issue 16).
pub const TX_DEPTH: u32 = 64;
/// Bytes one perftest bandwidth run moves at most (it bounds the iterations of big sizes).
const BW_BYTES: u64 = 1 << 30;
/// The fewest iterations a perftest bandwidth run does (twice the tx depth).
const BW_MIN_ITERS: u64 = 2 * TX_DEPTH as u64;
/// sockperf's smallest message (its header).
pub const SOCKPERF_MIN_BYTES: u64 = 14;
/// sockperf's largest message (its server refuses more: "Message received was larger than
/// expected").
pub const SOCKPERF_MAX_BYTES: u64 = 65507;
/// sockperf's port.
const SOCKPERF_PORT: u16 = 11111;
/// iperf3's port.
const IPERF3_PORT: u16 = 5201;
/// How long a perftest client may take.
const PERFTEST_LIMIT: Duration = Duration::from_secs(90);

/// sockperf (Debian's package).
pub const SOCKPERF: Program = crate::apps::program::SOCKPERF;

/// The perftest program of a latency or bandwidth row.
pub fn perftest_program(stack: Stack, bw: bool) -> Program {
    let name = match (stack, bw) {
        (Stack::VerbsSend, false) => "ib_send_lat",
        (Stack::VerbsSend, true) => "ib_send_bw",
        (_, false) => "ib_write_lat",
        (_, true) => "ib_write_bw",
    };
    Program {
        name,
        package: "perftest",
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `ib_write_lat`/`ib_send_lat -s SIZE -n ITERS` over Sluice's verbs.
pub fn perftest_lat(h: &mut Hosts, stack: Stack, size: u64, iters: u64) -> Result<Lat, String> {
    let mut server = strings(&PERFTEST_DEVICE);
    server.extend([
        "-n".into(),
        iters.to_string(),
        "-s".into(),
        size.to_string(),
    ]);
    let mut client = server.clone();
    client.push(Hosts::server_ip(stack).to_string());
    let prog = perftest_program(stack, false);
    let (out, cpu) = h.measure(stack, prog, &server, &client, PERFTEST_LIMIT)?;
    let row = perftest::parse_lat(&out).map_err(|e| e.to_string())?;
    Ok(Lat {
        p50_us: positive("t_typical", row.typical_us)?,
        p99_us: positive("99%", row.p99_us)?,
        cpu: cpu_per_op(cpu, row.iterations as f64),
    })
}

/// Iterations of a perftest bandwidth run: `iters`, fewer for big transfers, rounded up to
/// a multiple of the tx depth. perftest 4.5-0.17 (Debian bookworm's) hangs with several QPs
/// when the tx depth (its completion moderation here) does not divide the iterations: its
/// total completion count, which adds the moderation for the last short batch too, can
/// reach the total before every QP's own count does, and it stops polling (fixed upstream
/// in perftest commit 5ff3afa, 2023, "fix completion count with special combination of
/// tx_depth/cq_mod/iterations").
pub fn bw_iters(size: u64, qps: u32, iters: u64) -> u64 {
    let by_bytes = BW_BYTES / (size.max(1) * u64::from(qps.max(1)));
    let depth = u64::from(TX_DEPTH);
    iters.min(by_bytes).max(BW_MIN_ITERS).div_ceil(depth) * depth
}

/// `ib_write_bw`/`ib_send_bw -s SIZE -t 64 -q QPS` over Sluice's verbs.
pub fn perftest_bw(
    h: &mut Hosts,
    stack: Stack,
    size: u64,
    qps: u32,
    iters: u64,
) -> Result<Bw, String> {
    let n = bw_iters(size, qps, iters);
    let mut server = strings(&PERFTEST_DEVICE);
    server.extend(
        [
            "-n",
            &n.to_string(),
            "-s",
            &size.to_string(),
            "-t",
            &TX_DEPTH.to_string(),
            "-q",
            &qps.to_string(),
        ]
        .map(String::from),
    );
    let mut client = server.clone();
    client.push(Hosts::server_ip(stack).to_string());
    let prog = perftest_program(stack, true);
    let (out, cpu) = h.measure(stack, prog, &server, &client, PERFTEST_LIMIT)?;
    let row = perftest::parse_bw(&out).map_err(|e| e.to_string())?;
    Ok(Bw {
        gbps: positive("BW average", row.gbps())?,
        msgs_per_s: positive("MsgRate", row.mpps * 1e6)?,
        // perftest prints the iterations of all QPs together (iters x QPs).
        cpu: cpu_per_op(cpu, row.iterations as f64),
    })
}

/// sockperf ping-pong over TCP (`sr --tcp` / `pp --tcp -m SIZE -t SECONDS`); sizes outside
/// sockperf's range are sent as [`SOCKPERF_MIN_BYTES`] or [`SOCKPERF_MAX_BYTES`].
pub fn sockperf_lat(h: &mut Hosts, stack: Stack, size: u64, seconds: u32) -> Result<Lat, String> {
    let ip = Hosts::server_ip(stack).to_string();
    let port = SOCKPERF_PORT.to_string();
    let server = strings(&["sr", "--tcp", "-i", &ip, "-p", &port]);
    let m = sockperf_bytes(size).to_string();
    let t = seconds.max(1).to_string();
    let client = strings(&["pp", "--tcp", "-i", &ip, "-p", &port, "-m", &m, "-t", &t]);
    let limit = Duration::from_secs(u64::from(seconds) + 30);
    let (out, cpu) = h.measure(stack, SOCKPERF, &server, &client, limit)?;
    let pp = sockperf::parse(&out).map_err(|e| e.to_string())?;
    Ok(Lat {
        p50_us: positive("p50", pp.p50_us)?,
        p99_us: positive("p99", pp.p99_us)?,
        cpu: cpu_per_op(cpu, pp.round_trips as f64),
    })
}

/// The message size sockperf sends for `size`.
pub fn sockperf_bytes(size: u64) -> u64 {
    size.clamp(SOCKPERF_MIN_BYTES, SOCKPERF_MAX_BYTES)
}

/// One iperf3 TCP stream (`-s` / `-c -l SIZE -t SECONDS -J`), client to server.
pub fn iperf3_bw(h: &mut Hosts, stack: Stack, size: u64, seconds: u32) -> Result<Bw, String> {
    let ip = Hosts::server_ip(stack).to_string();
    let port = IPERF3_PORT.to_string();
    let server = strings(&["-s", "-1", "-B", &ip, "-p", &port]);
    let t = seconds.max(1).to_string();
    let l = size.to_string();
    let client = strings(&["-c", &ip, "-p", &port, "-4", "-t", &t, "-l", &l, "-J"]);
    let limit = Duration::from_secs(u64::from(seconds) + 30);
    let (out, cpu) = h.measure(stack, IPERF3, &server, &client, limit)?;
    let gbps = positive("Gbit/s", iperf3::parse(&out).map_err(|e| e.to_string())?)?;
    let msgs_per_s = gbps * 1e9 / 8.0 / size as f64;
    Ok(Bw {
        gbps,
        msgs_per_s,
        cpu: cpu_per_op(cpu, msgs_per_s * f64::from(seconds.max(1))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_iterations_are_whole_tx_depths() {
        for (size, qps) in [(64, 1), (64, 8), (4096, 8), (65536, 8), (1 << 20, 1)] {
            for iters in [1, 200, 5000, 5120] {
                let n = bw_iters(size, qps, iters);
                assert_eq!(n % u64::from(TX_DEPTH), 0, "{size} {qps} {iters}: {n}");
                assert!(n >= BW_MIN_ITERS);
            }
        }
        assert_eq!(bw_iters(64, 8, 5000), 5056);
    }
}
