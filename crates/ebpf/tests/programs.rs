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
