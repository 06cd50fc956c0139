//! One row's RPCs in the namespace lab: `sluice engine --lab` (with the row's module at
//! ingress) under `sluice run sockperf server` in sluice-a, sockperf ping-pong (64 B, one
//! connection, closed loop) from sluice-b; beside it the row's extension: the firewall's
//! rules written over the engine's admin socket, or a `sluice capture` session.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::apps::process::{run_bounded, Supervised};
use crate::apps::program::SOCKPERF;
use crate::apps::{App, Harness, Running, Side};
use crate::cpu;
use crate::sockperf;

use sluice::admin::{Admin, ModuleRow};

use super::rows::{firewall_rule, Cell, Extension, LabResult, Missing, FIREWALL_RULES};

/// sockperf's message size (flextoe.txt 5.2's RPCs are small; issue 18's 64 B).
pub const MESSAGE_BYTES: u32 = 64;
/// How long `sluice capture` gets to attach.
const CAPTURE_READY: Duration = Duration::from_secs(10);
/// How long it gets to write its last records and exit after SIGTERM.
const CAPTURE_GRACE: Duration = Duration::from_secs(5);

/// How the lab rows run.
#[derive(Clone, Debug)]
pub struct LabSpec {
    /// Seconds of ping-pong per row.
    pub seconds: u32,
    /// `sluice engine` flags every row's engine gets (the idle policy).
    pub engine_args: Vec<String>,
    /// The filtered capture row's tcpdump expression.
    pub filter: String,
    /// Where the pcap files go.
    pub dir: PathBuf,
}

/// Runs row `ext` on a fresh engine; a failure is the row's, the next row still runs.
pub fn measure(h: &mut Harness, ext: Extension, spec: &LabSpec) -> Cell<LabResult> {
    let mut args = spec.engine_args.clone();
    if let Some(name) = ext.module() {
        args.push(format!("--module=ingress={name}"));
    }
    h.set_engine_args(&args);
    let mut run = h
        .start(App::Sockperf, Side::Engine)
        .map_err(|e| Missing::Failed(e.to_string()))?;
    let result = with_engine(h, &mut run, ext, spec);
    let stopped = run.stop().map_err(|e| Missing::Failed(e.to_string()));
    let result = result?;
    stopped?;
    Ok(result)
}

/// The row on a running engine: the extension's setup, the ping-pong with CPU meters, the
/// evidence that the extension ran.
fn with_engine(h: &Harness, run: &mut Running, ext: Extension, spec: &LabSpec) -> Cell<LabResult> {
    let fail = |e: String| Missing::Failed(e);
    let socket = run
        .engine_socket()
        .ok_or_else(|| fail("the engine has no socket".into()))?
        .to_path_buf();
    let session = Admin::open_as(&socket, "sluice-bench").map_err(|e| fail(e.to_string()))?;
    let mut result = LabResult::default();
    if ext == Extension::Firewall {
        result.firewall_rules = Some(write_rules(&session)?);
    }
    if ext == Extension::Tracepoints {
        session
            .trace_set("all", true)
            .map_err(|e| fail(format!("trace on all: {e}")))?;
    }
    let capture = match ext.capture() {
        Some(filtered) => {
            let pcap = spec
                .dir
                .join(format!("{}.pcap", ext.name().replace(' ', "-")));
            let filter = if filtered { spec.filter.as_str() } else { "" };
            Some((start_capture(h, &socket, &pcap, filter)?, pcap))
        }
        None => None,
    };
    let (_, engine) = run.pids();
    let engine = engine.ok_or_else(|| fail("no engine pid".into()))?;
    let (engine0, busy0) = (cpu::process_seconds(engine), cpu::busy_seconds());
    let client = ping_pong(h, run, spec.seconds);
    let (engine1, busy1) = (cpu::process_seconds(engine), cpu::busy_seconds());
    let pp = client?;
    if let Some((mut proc, pcap)) = capture {
        result.pcap_packets = Some(stop_capture(&mut proc, &pcap)?);
    }
    if let Some(name) = ext.module() {
        let m = module(&session, name)?;
        result.module_runs = Some(m.runs);
        result.module_drops = Some(m.dropped);
    }
    if ext == Extension::Tracepoints {
        let (rows, _) = session.traces().map_err(|e| fail(e.to_string()))?;
        if let Some(off) = rows.iter().find(|r| !r.on) {
            return Err(fail(format!("tracepoint {} stayed off", off.name)));
        }
        result.trace_hits = Some(rows.iter().map(|r| r.hits).sum());
    }
    run.check_alive().map_err(|e| fail(e.to_string()))?;
    let per_op = |a: Option<f64>, b: Option<f64>| {
        a.zip(b)
            .filter(|_| pp.round_trips > 0)
            .map(|(a, b)| (b - a).max(0.0) * 1e6 / pp.round_trips as f64)
    };
    result.ops_per_s = pp.round_trips as f64 / pp.run_seconds;
    result.round_trips = pp.round_trips;
    result.engine_us_per_op = per_op(engine0, engine1);
    result.machine_us_per_op = per_op(busy0, busy1);
    if !(result.ops_per_s.is_finite() && result.ops_per_s > 0.0) {
        return Err(fail(format!(
            "sockperf measured {} round trips in {} s",
            pp.round_trips, pp.run_seconds
        )));
    }
    Ok(result)
}

/// Writes [`FIREWALL_RULES`] rules into the firewall's `rules` map over the admin session
/// and counts them back by a map dump.
fn write_rules(session: &Admin) -> Result<u64, Missing> {
    let id = module(session, "firewall")?.id;
    for i in 0..FIREWALL_RULES {
        session
            .map_set(id, "rules", &firewall_rule(i), &0u64.to_le_bytes())
            .map_err(|e| Missing::Failed(format!("rule {i}: {e}")))?;
    }
    let held = session
        .map_dump(id, "rules")
        .map_err(|e| Missing::Failed(e.to_string()))?
        .len() as u64;
    if held != u64::from(FIREWALL_RULES) {
        return Err(Missing::Failed(format!(
            "the firewall's map holds {held} rules, not {FIREWALL_RULES}"
        )));
    }
    Ok(held)
}

/// The loaded module named `name` (the first, if loaded twice), with its counters.
fn module(session: &Admin, name: &str) -> Result<ModuleRow, Missing> {
    session
        .modules()
        .map_err(|e| Missing::Failed(e.to_string()))?
        .into_iter()
        .find(|m| m.name == name)
        .ok_or_else(|| Missing::Failed(format!("no module {name} is loaded")))
}

/// `sluice capture --socket S -w PCAP [FILTER]`, once it says it is listening.
fn start_capture(
    h: &Harness,
    socket: &Path,
    pcap: &Path,
    filter: &str,
) -> Result<Supervised, Missing> {
    let mut cmd = std::process::Command::new(h.sluice());
    cmd.arg("capture")
        .arg("--socket")
        .arg(socket)
        .arg("-w")
        .arg(pcap);
    cmd.args(filter.split_whitespace());
    let stem = pcap.with_extension("capture");
    let mut proc = Supervised::spawn(cmd, "sluice capture", &stem, false)
        .map_err(|e| Missing::Failed(e.to_string()))?;
    let deadline = Instant::now() + CAPTURE_READY;
    loop {
        if proc.stderr_log().contains("listening on") {
            return Ok(proc);
        }
        if let Some(status) = proc.exited() {
            return Err(Missing::Failed(format!(
                "sluice capture exited ({status}): {}",
                proc.log_tail()
            )));
        }
        if Instant::now() >= deadline {
            return Err(Missing::Failed(format!(
                "sluice capture did not attach within {CAPTURE_READY:?}: {}",
                proc.log_tail()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the capture (SIGTERM, as an operator's ^C) and counts the records it wrote.
fn stop_capture(proc: &mut Supervised, pcap: &Path) -> Result<u64, Missing> {
    proc.stop(CAPTURE_GRACE);
    let bytes = std::fs::read(pcap)
        .map_err(|e| Missing::Failed(format!("read {}: {e}", pcap.display())))?;
    pcap_records(&bytes).map_err(|e| Missing::Failed(format!("{}: {e}", pcap.display())))
}

/// Records in a classic pcap file (24-byte file header; each record a 16-byte header whose
/// third word is the bytes kept, then those bytes).
pub fn pcap_records(bytes: &[u8]) -> Result<u64, String> {
    let magic = bytes
        .first_chunk::<4>()
        .map(|m| u32::from_le_bytes(*m))
        .ok_or("shorter than a pcap header")?;
    if magic != 0xa1b2_3c4d && magic != 0xa1b2_c3d4 {
        return Err(format!("not a little-endian pcap file (magic {magic:#x})"));
    }
    let (mut at, mut n) = (24usize, 0u64);
    while at < bytes.len() {
        let incl = bytes
            .get(at + 8..at + 12)
            .and_then(|w| w.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| format!("record {n} cut short"))?;
        at = at
            .checked_add(16 + incl as usize)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| format!("record {n} cut short"))?;
        n += 1;
    }
    Ok(n)
}

/// `sockperf pp --tcp -m 64 -t SECONDS --full-rtt` from sluice-b against the row's server.
fn ping_pong(h: &Harness, run: &Running, seconds: u32) -> Result<sockperf::PingPong, Missing> {
    let addr = run.addr();
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let (t, m) = (seconds.max(1).to_string(), MESSAGE_BYTES.to_string());
    let args = [
        "pp",
        "--tcp",
        "-i",
        &ip,
        "-p",
        &port,
        "-m",
        &m,
        "-t",
        &t,
        "--full-rtt",
    ];
    let mut cmd = h
        .client(SOCKPERF)
        .map_err(|e| Missing::Failed(e.to_string()))?;
    cmd.args(args);
    let what = format!("sockperf {} against {addr}", args.join(" "));
    let out = run_bounded(cmd, &what, Duration::from_secs(u64::from(seconds) + 30))
        .map_err(|e| Missing::Failed(run.with_server_log(e).to_string()))?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    sockperf::parse(&text).map_err(|e| Missing::Failed(format!("{e}; output:\n{text}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_records_are_counted_and_a_cut_file_refused() {
        let mut f = vec![0u8; 24];
        f[..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        assert_eq!(pcap_records(&f), Ok(0));
        for len in [60u32, 74] {
            let mut rec = vec![0u8; 16];
            rec[8..12].copy_from_slice(&len.to_le_bytes());
            f.extend_from_slice(&rec);
            f.extend(std::iter::repeat_n(0xab, len as usize));
        }
        assert_eq!(pcap_records(&f), Ok(2));
        assert!(pcap_records(&f[..f.len() - 1]).is_err());
        assert!(pcap_records(&f[..30]).is_err());
        assert!(pcap_records(b"not a pcap file at all..").is_err());
        assert!(pcap_records(&[]).is_err());
    }
}
