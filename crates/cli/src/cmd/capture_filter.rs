//! `sluice capture`'s filter: tcpdump's filter language compiled by libpcap's own compiler
//! (for Ethernet frames) into classic BPF, which the engine checks and runs
//! (`sluice_engine::cbpf`).

use std::fmt;

/// One classic BPF instruction as the capture request carries it: code, jt, jf, k.
pub type FilterInsn = (u16, u8, u8, u32);

/// Why a filter expression did not compile.
#[derive(Debug)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "filter: {}", self.0)
    }
}

impl std::error::Error for FilterError {}

/// The compiled form of `expr` (optimized, as tcpdump compiles); an empty or blank
/// expression is no filter at all.
pub fn compile(expr: &str) -> Result<Vec<FilterInsn>, FilterError> {
    if expr.trim().is_empty() {
        return Ok(Vec::new());
    }
    let program = compile_pcap(expr)?;
    program
        .get_instructions()
        .iter()
        .map(|i| parse_insn(&i.to_string()))
        .collect()
}

/// libpcap's program for `expr` on a dead Ethernet handle.
pub fn compile_pcap(expr: &str) -> Result<pcap::BpfProgram, FilterError> {
    let dead = pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .map_err(|e| FilterError(format!("libpcap: {e}")))?;
    dead.compile(expr, true)
        .map_err(|e| FilterError(format!("{expr:?}: {e}")))
}

/// The pcap crate shows an instruction as "code jt jf k" (its fields are private).
fn parse_insn(text: &str) -> Result<FilterInsn, FilterError> {
    let bad = || {
        FilterError(format!(
            "libpcap gave an instruction that does not parse: {text:?}"
        ))
    };
    let mut it = text.split_whitespace();
    let mut next = || it.next().ok_or_else(bad);
    let code = next()?.parse().map_err(|_| bad())?;
    let jt = next()?.parse().map_err(|_| bad())?;
    let jf = next()?.parse().map_err(|_| bad())?;
    let k = next()?.parse().map_err(|_| bad())?;
    Ok((code, jt, jf, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::cbpf::{Insn, Program};

    /// Ethernet (optionally 802.1Q) + IPv4 + TCP, ports and flags as given, `payload` bytes.
    fn tcp(src: [u8; 4], dst: [u8; 4], ports: (u16, u16), flags: u8, vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        f.extend_from_slice(&ip);
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&ports.0.to_be_bytes());
        t[2..4].copy_from_slice(&ports.1.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        f.extend_from_slice(&t);
        f
    }

    fn arp() -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.resize(60, 0);
        f
    }

    fn frames() -> Vec<(&'static str, Vec<u8>)> {
        let a = [10, 77, 0, 1];
        let b = [10, 77, 0, 2];
        vec![
            ("syn to 80", tcp(b, a, (40000, 80), 0x02, false)),
            ("ack from 80", tcp(a, b, (80, 40000), 0x10, false)),
            ("ack 5001", tcp(b, a, (40001, 5001), 0x10, false)),
            ("fin 5001", tcp(a, b, (5001, 40001), 0x11, false)),
            (
                "other hosts",
                tcp([10, 0, 0, 9], [10, 0, 0, 8], (1, 2), 0x02, false),
            ),
            ("vlan syn", tcp(b, a, (40000, 80), 0x02, true)),
            ("arp", arp()),
            ("short", vec![0u8; 10]),
            ("cut ip", tcp(b, a, (40000, 80), 0x02, false)[..30].to_vec()),
        ]
    }

    /// Our interpreter and libpcap's own matcher agree on every frame, for each filter.
    #[test]
    fn the_interpreter_matches_libpcap() {
        let filters = [
            "tcp port 80",
            "host 10.77.0.1",
            "tcp[tcpflags] & tcp-syn != 0",
            "vlan",
            "not arp",
            "tcp port 5001 and tcp[tcpflags] & (tcp-fin|tcp-rst) != 0",
            "ip[2:2] > 30 and len < 100",
            "tcp portrange 5000-5100 or arp",
        ];
        for expr in filters {
            let insns = compile(expr).unwrap();
            assert!(!insns.is_empty());
            let ours = Program::new(
                &insns
                    .iter()
                    .map(|&(code, jt, jf, k)| Insn { code, jt, jf, k })
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
            let theirs = compile_pcap(expr).unwrap();
            for (name, f) in frames() {
                assert_eq!(
                    ours.run(&f, f.len() as u32) != 0,
                    theirs.filter(&f),
                    "{expr} on {name}"
                );
            }
        }
    }

    #[test]
    fn known_frames_match_as_tcpdump_says() {
        let matching = |expr: &str| -> Vec<&'static str> {
            let insns: Vec<Insn> = compile(expr)
                .unwrap()
                .iter()
                .map(|&(code, jt, jf, k)| Insn { code, jt, jf, k })
                .collect();
            let p = Program::new(&insns).unwrap();
            frames()
                .into_iter()
                .filter(|(_, f)| p.run(f, f.len() as u32) != 0)
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(matching("tcp port 80"), ["syn to 80", "ack from 80"]);
        assert_eq!(
            matching("host 10.77.0.1"),
            ["syn to 80", "ack from 80", "ack 5001", "fin 5001"]
        );
        assert_eq!(
            matching("tcp[tcpflags] & tcp-syn != 0"),
            ["syn to 80", "other hosts"]
        );
        assert_eq!(matching("vlan"), ["vlan syn"]);
        assert!(!matching("not arp").contains(&"arp"));
        assert!(matching("not arp").contains(&"vlan syn"));
    }

    #[test]
    fn bad_expressions_and_blank_ones() {
        assert!(compile("").unwrap().is_empty());
        assert!(compile("   ").unwrap().is_empty());
        let e = compile("tcp port eighty").unwrap_err();
        assert!(e.to_string().contains("eighty"), "{e}");
        assert!(parse_insn("1 2 3").is_err());
        assert_eq!(parse_insn("40 0 0 12").unwrap(), (40, 0, 0, 12));
    }
}
