//! Our ICRC against scapy's (`scapy.contrib.roce`, which computes it independently): every
//! sample frame is dissected by scapy, its ICRC recomputed and compared with ours. Skips,
//! with the reason printed, when no python3 with scapy is installed.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

/// Reads hex frames on stdin; prints, per frame, scapy's ICRC and the carried one.
const SCRIPT: &str = r#"
import sys
from scapy.layers.l2 import Ether
from scapy.contrib.roce import BTH
for line in sys.stdin:
    p = Ether(bytes.fromhex(line.strip()))
    b = p[BTH]
    print(b.compute_icrc(None).hex(), bytes.fromhex(line.strip())[-4:].hex(), b.opcode, b.psn, b.dqpn)
"#;

fn python_with_scapy() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import scapy.contrib.roce"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn icrc_matches_scapy() {
    let Some(py) = python_with_scapy() else {
        println!("skipped: no python3 with scapy (apt-get install python3-scapy)");
        return;
    };
    let frames = common::sample_frames();
    let mut child = Command::new(py)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    {
        let mut stdin = child.stdin.take().expect("piped");
        for (_, f) in &frames {
            let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(stdin, "{hex}").expect("write");
        }
    }
    let out = child.wait_with_output().expect("scapy ran");
    assert!(out.status.success(), "scapy failed");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len(), "{text}");
    for ((op, f), line) in frames.iter().zip(&lines) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let ours: String = f[f.len() - 4..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(cols[0], ours, "{op:?}: scapy's ICRC differs from ours");
        assert_eq!(cols[1], ours);
        assert_eq!(cols[2], op.to_u8().to_string(), "scapy reads the opcode");
        assert_eq!(cols[4], common::DST_QP.to_string(), "scapy reads the QP");
    }
    println!("{} frames: ICRC equal to scapy's", frames.len());
}
