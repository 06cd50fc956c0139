//! The programs that ship in programs/*.c: loaded from clang's objects, verified, and run on
//! crafted frames; their maps read and written through the control-plane API.

use sluice_ebpf::{
    programs, Action, Counters, DropReason, Env, Maps, NoTrace, Program, TraceSink, XdpContext,
};

const HEADROOM: usize = 32;

/// Ethernet (optionally 802.1Q) + IPv4 + UDP/TCP ports, padded to `len` bytes.
fn frame(
    vlan: Option<u16>,
    proto: u8,
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    len: usize,
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if let Some(tci) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.resize(len.max(f.len()), 0);
    f
}

struct Run {
    action: Action,
    frame: Vec<u8>,
}

fn run(p: &Program, maps: &mut Maps, bytes: &[u8], counters: &mut Counters) -> Run {
    let mut buf = vec![0u8; HEADROOM + bytes.len()];
    buf[HEADROOM..].copy_from_slice(bytes);
    let mut ctx = XdpContext::new(&mut buf, HEADROOM, bytes.len()).unwrap();
    let mut trace = NoTrace;
    let mut env = Env {
        maps,
        now_ns: 0,
        cpu: 0,
        trace: &mut trace,
        counters,
    };
    let action = sluice_ebpf::run(p, &mut ctx, &mut env).expect("a verified program runs");
    Run {
        action,
        frame: ctx.frame().to_vec(),
    }
}

#[test]
fn null_passes() {
    let (p, mut maps) = sluice_ebpf::load(programs::NULL, "xdp").unwrap();
    let mut c = Counters::default();
    let f = frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 60);
    assert_eq!(run(&p, &mut maps, &f, &mut c).action, Action::Pass);
    assert_eq!((c.runs, c.passed), (1, 1));
}

#[test]
fn drop_all_drops_by_its_section_name_and_as_xdp() {
    for section in ["xdp/drop_all", "xdp"] {
        let (p, mut maps) = sluice_ebpf::load(programs::DROP, section).unwrap();
        let mut c = Counters::default();
        assert_eq!(
            run(&p, &mut maps, &[0u8; 60], &mut c).action,
            Action::Drop(DropReason::Program)
        );
        assert_eq!(c.dropped, 1);
    }
    let err = sluice_ebpf::load(programs::DROP, "tc").unwrap_err();
    assert_eq!(err.to_string(), "load: no program section \"tc\"");
}

#[test]
fn vlan_strip_removes_the_tag() {
    let (p, mut maps) = sluice_ebpf::load(programs::VLAN_STRIP, "xdp").unwrap();
    let mut c = Counters::default();
    let tagged = frame(Some(5), 17, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 64);
    let untagged = frame(None, 17, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 60);
    let r = run(&p, &mut maps, &tagged, &mut c);
    assert_eq!(r.action, Action::Pass);
    assert_eq!(
        r.frame, untagged,
        "the tag is gone, MACs and payload intact"
    );
    let r = run(&p, &mut maps, &untagged, &mut c);
    assert_eq!((r.action, r.frame), (Action::Pass, untagged.clone()));
    // Too short to hold a tag: passed untouched.
    let r = run(&p, &mut maps, &tagged[..16], &mut c);
    assert_eq!(r.frame, &tagged[..16]);
}

fn five_tuple(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> Vec<u8> {
    let mut k = Vec::new();
    k.extend_from_slice(&src);
    k.extend_from_slice(&dst);
    k.extend_from_slice(&sport.to_be_bytes());
    k.extend_from_slice(&dport.to_be_bytes());
    k.extend_from_slice(&[proto, 0, 0, 0]);
    k
}

#[test]
fn firewall_drops_the_5_tuple_the_control_plane_wrote() {
    let (p, mut maps) = sluice_ebpf::load(programs::FIREWALL, "xdp").unwrap();
    let rules = maps.id("rules").expect("BTF map `rules`");
    let def = maps.map(rules).unwrap().def().clone();
    assert_eq!(
        (def.key_size, def.value_size, def.max_entries),
        (16, 8, 16384)
    );
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    maps.set(
        rules,
        &five_tuple(a, b, 4000, 80, 6),
        &0u64.to_le_bytes(),
        0,
    )
    .unwrap();
    let mut c = Counters::default();
    let blocked = frame(None, 6, a, b, 4000, 80, 60);
    assert_eq!(
        run(&p, &mut maps, &blocked, &mut c).action,
        Action::Drop(DropReason::Program)
    );
    assert_eq!(
        run(&p, &mut maps, &blocked, &mut c).action,
        Action::Drop(DropReason::Program)
    );
    for other in [
        frame(None, 6, a, b, 4000, 81, 60),
        frame(None, 17, a, b, 4000, 80, 60),
        frame(None, 6, b, a, 4000, 80, 60),
        frame(Some(1), 6, a, b, 4000, 80, 60),
    ] {
        assert_eq!(run(&p, &mut maps, &other, &mut c).action, Action::Pass);
    }
    let hits = maps
        .get(rules, &five_tuple(a, b, 4000, 80, 6))
        .unwrap()
        .unwrap();
    assert_eq!(
        u64::from_le_bytes(hits.try_into().unwrap()),
        2,
        "the program's counter, read back"
    );
    maps.delete(rules, &five_tuple(a, b, 4000, 80, 6)).unwrap();
    assert_eq!(run(&p, &mut maps, &blocked, &mut c).action, Action::Pass);
    assert_eq!((c.dropped, c.passed), (2, 5));
}

#[test]
fn port_counter_counts_what_was_sent() {
    let (p, mut maps) = sluice_ebpf::load(programs::PORT_COUNTER, "xdp").unwrap();
    let id = maps.id("port_counts").expect("legacy map `port_counts`");
    assert_eq!(maps.map(id).unwrap().def().max_entries, 65536);
    let mut c = Counters::default();
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    for len in [60, 100, 1500] {
        run(&p, &mut maps, &frame(None, 17, a, b, 1, 80, len), &mut c);
    }
    run(&p, &mut maps, &frame(None, 6, a, b, 1, 443, 70), &mut c);
    run(&p, &mut maps, &frame(None, 1, a, b, 1, 443, 70), &mut c); // ICMP: not counted
    let read = |maps: &mut Maps, port: u32| {
        let v = maps.get(id, &port.to_le_bytes()).unwrap().unwrap().to_vec();
        (
            u64::from_le_bytes(v[..8].try_into().unwrap()),
            u64::from_le_bytes(v[8..].try_into().unwrap()),
        )
    };
    assert_eq!(read(&mut maps, 80), (3, 60 + 100 + 1500));
    assert_eq!(read(&mut maps, 443), (1, 70));
    assert_eq!(read(&mut maps, 22), (0, 0));
    let nonzero = maps
        .iter(id)
        .unwrap()
        .filter(|(_, v)| v.iter().any(|&b| b != 0))
        .count();
    assert_eq!(nonzero, 2);
}

#[test]
fn bad_objects_are_refused_with_instruction_and_reason() {
    let cases: [(&[u8], &str); 3] = [
        (programs::bad::OOB_READ, "insn 6: packet read of 1 bytes at offset 23 not proven within data_end (14 bytes proven)"),
        (programs::bad::NULL_UNCHECKED, "insn 7: r0 may be NULL (map lookup result not checked)"),
        (programs::bad::VALUE_TOO_SMALL, "insn 9: map value access of 8 bytes at offset 8..=8 outside its 8 bytes"),
    ];
    for (obj, want) in cases {
        match sluice_ebpf::load(obj, "xdp") {
            Err(sluice_ebpf::ModuleError::Verify(e)) => assert_eq!(e.to_string(), want),
            other => panic!("expected a refusal ({want}), got {other:?}"),
        }
    }
    match sluice_ebpf::load(programs::bad::UNBOUNDED_LOOP, "xdp") {
        Err(sluice_ebpf::ModuleError::Verify(e)) => {
            assert!(
                matches!(e.reason, sluice_ebpf::Reason::Complexity(_)),
                "{e}"
            );
            assert!(e.insn >= 7 && e.insn <= 22, "inside the loop: {e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    match sluice_ebpf::load(programs::bad::UNKNOWN_HELPER, "xdp") {
        Err(sluice_ebpf::ModuleError::Verify(e)) => {
            assert_eq!(
                e.to_string(),
                "insn 0: call to helper 12, which is not allowed"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn malformed_objects_are_errors_not_panics() {
    assert!(matches!(
        sluice_ebpf::load(b"not an elf", "xdp"),
        Err(sluice_ebpf::ModuleError::Load(_))
    ));
    // Every truncation and a flipped byte of a real object: an error or a program, never a panic.
    let obj = programs::FIREWALL;
    for cut in (0..obj.len()).step_by(7) {
        let _ = sluice_ebpf::load(&obj[..cut], "xdp");
    }
    for at in (0..obj.len()).step_by(3) {
        let mut o = obj.to_vec();
        o[at] ^= 0xff;
        let _ = sluice_ebpf::load(&o, "xdp");
    }
}

struct Lines(Vec<(Vec<u8>, [u64; 3])>);

impl TraceSink for Lines {
    fn print(&mut self, fmt: &[u8], args: [u64; 3]) {
        self.0.push((fmt.to_vec(), args));
    }
}

#[test]
fn maps_are_shared_by_two_programs_of_one_set() {
    // The firewall's verified program runs against any Maps with the same declarations.
    let obj = sluice_ebpf::Object::parse(programs::FIREWALL).unwrap();
    let p = Program::from_object(&obj, "xdp").unwrap();
    let mut maps = Maps::new(&obj.maps).unwrap();
    let mut wrong = Maps::new(&[]).unwrap();
    let mut c = Counters::default();
    let mut buf = [0u8; 64];
    let mut ctx = XdpContext::new(&mut buf, 0, 64).unwrap();
    let mut t = Lines(Vec::new());
    let mut env = Env {
        maps: &mut wrong,
        now_ns: 0,
        cpu: 0,
        trace: &mut t,
        counters: &mut c,
    };
    assert_eq!(
        sluice_ebpf::run(&p, &mut ctx, &mut env),
        Err(sluice_ebpf::RunError::MapMismatch(0))
    );
    assert_eq!(c.run_errors, 1);
    let mut env = Env {
        maps: &mut maps,
        now_ns: 0,
        cpu: 0,
        trace: &mut t,
        counters: &mut c,
    };
    assert_eq!(sluice_ebpf::run(&p, &mut ctx, &mut env), Ok(Action::Pass));
}

/// The Internet checksum of `parts` (RFC 1071): 0 over data that includes a right one.
fn ones_complement(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for p in parts {
        for w in p.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet/IPv4/TCP frame with correct checksums: ACK (and `flags`), `opts` (a multiple
/// of 4 bytes), `payload`.
fn tcp_segment(flags: u8, seq: u32, ack: u32, window: u16, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let tcp_len = 20 + opts.len() + payload.len();
    let total = (20 + tcp_len) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
    let c = ones_complement(&[&f[14..34]]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.push((((20 + opts.len()) / 4) << 4) as u8);
    f.push(0x10 | flags);
    f.extend_from_slice(&window.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(opts);
    f.extend_from_slice(payload);
    tcp_checksum(&mut f);
    f
}

fn tcp_pseudo(f: &[u8]) -> Vec<u8> {
    let mut p = f[26..34].to_vec();
    p.extend_from_slice(&[0, 6]);
    p.extend_from_slice(&((f.len() - 34) as u16).to_be_bytes());
    p
}

fn tcp_checksum(f: &mut [u8]) {
    f[50..52].copy_from_slice(&[0, 0]);
    let c = ones_complement(&[&tcp_pseudo(f), &f[34..]]);
    f[50..52].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn splice_rewrites_for_the_other_connection_with_checksums_and_passes_control_segments() {
    let (p, mut maps) = sluice_ebpf::load(programs::SPLICE, "xdp").unwrap();
    let id = maps.id("splices").expect("BTF map `splices`");
    let def = maps.map(id).unwrap().def().clone();
    assert_eq!((def.key_size, def.value_size), (12, 72));
    let key = |ip: [u8; 4], sport: u16| {
        let mut k = ip.to_vec();
        k.extend_from_slice(&[10, 0, 0, 1]);
        k.extend_from_slice(&sport.to_be_bytes());
        k.extend_from_slice(&80u16.to_be_bytes());
        k
    };
    // 10.0.0.2:40000 -> us:80 leaves as us:50000 -> 10.0.0.3:8080.
    let mut v = vec![0x02, 0, 0, 0, 0, 3, 0x02, 0, 0, 0, 0, 1, 10, 0, 0, 3];
    v.extend_from_slice(&50000u16.to_be_bytes());
    v.extend_from_slice(&8080u16.to_be_bytes());
    for d in [1000u32, 2000, 300, 40] {
        v.extend_from_slice(&d.to_ne_bytes());
    }
    v.extend_from_slice(&[7, 2, 0, 0]);
    v.extend_from_slice(&key([10, 0, 0, 3], 8080));
    v.resize(72, 0);
    maps.set(id, &key([10, 0, 0, 2], 40000), &v, 0).unwrap();
    let mut partner = v.clone();
    partner[40..52].copy_from_slice(&key([10, 0, 0, 2], 40000));
    maps.set(id, &key([10, 0, 0, 3], 8080), &partner, 0)
        .unwrap();

    let mut c = Counters::default();
    let ts = [1, 1, 8, 10, 0, 0, 0, 100, 0, 0, 0, 90];
    for (opts, payload) in [
        (&[][..], &b"hello"[..]),
        (&ts[..], &b"with timestamps!"[..]),
    ] {
        let f = tcp_segment(0, 5000, 7000, 100, opts, payload);
        let r = run(&p, &mut maps, &f, &mut c);
        assert_eq!(r.action, Action::Tx);
        let o = r.frame;
        assert_eq!(o[..12], [0x02, 0, 0, 0, 0, 3, 0x02, 0, 0, 0, 0, 1]);
        assert_eq!(o[26..34], [10, 0, 0, 1, 10, 0, 0, 3]);
        assert_eq!(o[34..38], [0xc3, 0x50, 0x1f, 0x90]);
        assert_eq!(o[38..42], 6000u32.to_be_bytes());
        assert_eq!(o[42..46], 9000u32.to_be_bytes());
        // 100 << 7 >> 2.
        assert_eq!(o[48..50], 3200u16.to_be_bytes());
        assert_eq!(ones_complement(&[&o[14..34]]), 0, "IPv4 checksum");
        assert_eq!(
            ones_complement(&[&tcp_pseudo(&o), &o[34..]]),
            0,
            "TCP checksum"
        );
        if !opts.is_empty() {
            assert_eq!(o[58..62], 400u32.to_be_bytes(), "TSval + 300");
            assert_eq!(o[62..66], 50u32.to_be_bytes(), "TSecr - 40");
        }
        assert_eq!(o[o.len() - payload.len()..], *payload);
    }
    let counts = |maps: &mut Maps| {
        let v = maps.get(id, &key([10, 0, 0, 2], 40000)).unwrap().unwrap();
        (
            u64::from_ne_bytes(v[56..64].try_into().unwrap()),
            u64::from_ne_bytes(v[64..72].try_into().unwrap()),
            v[38],
        )
    };
    assert_eq!(counts(&mut maps), (2, 5 + 16, 0));
    // A large (GSO) frame: the core cuts it.
    let f = tcp_segment(0, 5000, 7000, 100, &[], &[7; 1500]);
    assert_eq!(run(&p, &mut maps, &f, &mut c).action, Action::Pass);
    // SACK blocks: left to the core.
    let sack = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    let f = tcp_segment(0, 5000, 7000, 100, &sack, b"x");
    assert_eq!(run(&p, &mut maps, &f, &mut c).action, Action::Pass);
    // A FIN goes to the core and marks both directions closing: the close is the core's.
    let fin = tcp_segment(0x01, 5005, 7000, 100, &[], b"");
    assert_eq!(run(&p, &mut maps, &fin, &mut c).action, Action::Pass);
    assert_eq!(counts(&mut maps), (2, 21, 1));
    let other = maps.get(id, &key([10, 0, 0, 3], 8080)).unwrap().unwrap();
    assert_eq!(other[38], 1, "the partner is closing too");
    let f = tcp_segment(0, 5005, 7000, 100, &[], b"late");
    assert_eq!(run(&p, &mut maps, &f, &mut c).action, Action::Pass);
    // Not spliced: passes untouched.
    maps.delete(id, &key([10, 0, 0, 2], 40000)).unwrap();
    let f = tcp_segment(0, 1, 1, 100, &[], b"");
    let r = run(&p, &mut maps, &f, &mut c);
    assert_eq!((r.action, r.frame), (Action::Pass, f));
}
