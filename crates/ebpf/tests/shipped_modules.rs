//! The shipped modules of issue 19 item 2 on crafted frames: VLAN insert (tags from its map,
//! VID 0 off, a tagged frame untouched, strip after insert gives the frame back), per-
//! connection counters (both directions in one entry, LRU eviction), and flow classification
//! (exact rule before port, destination port before source, flows recorded and forgotten).

use sluice_ebpf::{programs, Action, Counters, Env, Maps, NoTrace, Program, XdpContext};

const HEADROOM: usize = 32;

/// Ethernet (optionally 802.1Q) + IPv4 + TCP/UDP ports, padded to `len` bytes.
fn frame(proto: u8, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.resize(len.max(f.len()), 0);
    f
}

fn run(p: &Program, maps: &mut Maps, bytes: &[u8]) -> (Action, Vec<u8>) {
    let mut buf = vec![0u8; HEADROOM + bytes.len()];
    buf[HEADROOM..].copy_from_slice(bytes);
    let mut ctx = XdpContext::new(&mut buf, HEADROOM, bytes.len()).unwrap();
    let mut counters = Counters::default();
    let mut env = Env {
        maps,
        now_ns: 0,
        cpu: 0,
        trace: &mut NoTrace,
        counters: &mut counters,
    };
    let action = sluice_ebpf::run(p, &mut ctx, &mut env).expect("a verified program runs");
    (action, ctx.frame().to_vec())
}

fn load(name: &str) -> (Program, Maps) {
    let (bytes, section) = programs::shipped(name).expect("shipped by name");
    sluice_ebpf::load(bytes, section).expect("the verifier accepts it")
}

/// struct vlan_conf: vid (little-endian u16), pcp, pad.
fn vlan_conf(vid: u16, pcp: u8) -> Vec<u8> {
    let mut v = vid.to_le_bytes().to_vec();
    v.extend_from_slice(&[pcp, 0]);
    v
}

#[test]
fn vlan_insert_tags_with_the_map_and_strip_undoes_it() {
    let (p, mut maps) = load("vlan_insert");
    let (strip, mut strip_maps) = load("vlan_strip");
    let vlan = maps.id("vlan").expect("map `vlan`");
    let plain = frame(6, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 60);
    // The map starts zeroed: VID 0, off.
    assert_eq!(run(&p, &mut maps, &plain), (Action::Pass, plain.clone()));
    maps.set(vlan, &0u32.to_le_bytes(), &vlan_conf(100, 5), 0)
        .unwrap();
    let (action, tagged) = run(&p, &mut maps, &plain);
    assert_eq!(action, Action::Pass);
    assert_eq!(tagged.len(), plain.len() + 4);
    assert_eq!(tagged[..12], plain[..12], "MAC addresses kept");
    // TPID 0x8100, TCI = PCP 5 << 13 | VID 100.
    assert_eq!(tagged[12..16], [0x81, 0x00, 0xa0, 0x64]);
    assert_eq!(tagged[16..], plain[12..]);
    // Already tagged: not tagged twice.
    assert_eq!(run(&p, &mut maps, &tagged), (Action::Pass, tagged.clone()));
    // The ingress half takes it back to the frame the core wrote.
    assert_eq!(
        run(&strip, &mut strip_maps, &tagged),
        (Action::Pass, plain.clone())
    );
    // Retagged live; then off again.
    maps.set(vlan, &0u32.to_le_bytes(), &vlan_conf(4094, 0), 0)
        .unwrap();
    assert_eq!(run(&p, &mut maps, &plain).1[14..16], [0x0f, 0xfe]);
    maps.set(vlan, &0u32.to_le_bytes(), &vlan_conf(0, 7), 0)
        .unwrap();
    assert_eq!(run(&p, &mut maps, &plain), (Action::Pass, plain.clone()));
    // Shorter than an Ethernet header: passes untouched.
    maps.set(vlan, &0u32.to_le_bytes(), &vlan_conf(9, 0), 0)
        .unwrap();
    assert_eq!(
        run(&p, &mut maps, &plain[..13]),
        (Action::Pass, plain[..13].to_vec())
    );
}

/// struct four_tuple: the lower (address, port) first, network order; proto; pad.
fn four_tuple(a: [u8; 4], pa: u16, b: [u8; 4], pb: u16, proto: u8) -> Vec<u8> {
    let mut k = a.to_vec();
    k.extend_from_slice(&b);
    k.extend_from_slice(&pa.to_be_bytes());
    k.extend_from_slice(&pb.to_be_bytes());
    k.extend_from_slice(&[proto, 0, 0, 0]);
    k
}

fn counts(maps: &mut Maps, key: &[u8]) -> [u64; 4] {
    let id = maps.id("conns").unwrap();
    let v = maps.get(id, key).unwrap().expect("an entry").to_vec();
    let mut out = [0; 4];
    for (i, w) in v.chunks_exact(8).enumerate() {
        out[i] = u64::from_le_bytes(w.try_into().unwrap());
    }
    out
}

#[test]
fn conn_counter_counts_both_directions_of_a_connection_in_one_entry() {
    let (p, mut maps) = load("conn_counter");
    let id = maps.id("conns").unwrap();
    let def = maps.map(id).unwrap().def().clone();
    assert_eq!((def.key_size, def.value_size), (16, 32));
    let (lo, hi) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    // hi:80 -> lo:5000 is the b_to_a direction of the key (lo:5000, hi:80).
    run(&p, &mut maps, &frame(6, lo, hi, 5000, 80, 100));
    run(&p, &mut maps, &frame(6, lo, hi, 5000, 80, 60));
    run(&p, &mut maps, &frame(6, hi, lo, 80, 5000, 1500));
    // Another connection, and UDP on the same ports: entries of their own.
    run(&p, &mut maps, &frame(6, lo, hi, 5001, 80, 70));
    run(&p, &mut maps, &frame(17, lo, hi, 5000, 80, 80));
    // Not TCP/UDP: not counted.
    run(&p, &mut maps, &frame(1, lo, hi, 5000, 80, 90));
    assert_eq!(
        counts(&mut maps, &four_tuple(lo, 5000, hi, 80, 6)),
        [2, 160, 1, 1500]
    );
    assert_eq!(
        counts(&mut maps, &four_tuple(lo, 5001, hi, 80, 6)),
        [1, 70, 0, 0]
    );
    assert_eq!(
        counts(&mut maps, &four_tuple(lo, 5000, hi, 80, 17)),
        [1, 80, 0, 0]
    );
    // Equal addresses order by port.
    run(&p, &mut maps, &frame(6, lo, lo, 9, 3, 64));
    assert_eq!(
        counts(&mut maps, &four_tuple(lo, 3, lo, 9, 6)),
        [0, 0, 1, 64]
    );
    assert_eq!(maps.map(id).unwrap().len(), 4);
}

#[test]
fn conn_counter_evicts_the_least_recent_connection_when_full() {
    let (p, mut maps) = load("conn_counter");
    let id = maps.id("conns").unwrap();
    let max = maps.map(id).unwrap().def().max_entries as usize;
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    for i in 0..=max {
        let port = 1024 + i as u32;
        let f = frame(17, a, b, (port >> 16) as u16 + 1, port as u16, 60);
        run(&p, &mut maps, &f);
    }
    // Bounded: the first connection made room for the last.
    assert_eq!(maps.map(id).unwrap().len(), max);
    let first = four_tuple(a, 1, b, 1024, 17);
    assert!(maps.get(id, &first).unwrap().is_none());
}

fn five_tuple(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> Vec<u8> {
    let mut k = src.to_vec();
    k.extend_from_slice(&dst);
    k.extend_from_slice(&sport.to_be_bytes());
    k.extend_from_slice(&dport.to_be_bytes());
    k.extend_from_slice(&[proto, 0, 0, 0]);
    k
}

fn flow_class(maps: &mut Maps, key: &[u8]) -> Option<u32> {
    let id = maps.id("flows").unwrap();
    maps.get(id, key)
        .unwrap()
        .map(|v| u32::from_le_bytes(v.try_into().unwrap()))
}

#[test]
fn classify_records_each_flows_class_by_rule_then_port() {
    let (p, mut maps) = load("classify");
    let (rules, ports) = (maps.id("rules").unwrap(), maps.id("port_class").unwrap());
    assert!(maps.id("class_rate").is_some());
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    maps.set(ports, &5001u32.to_le_bytes(), &1u32.to_le_bytes(), 0)
        .unwrap();
    maps.set(ports, &5002u32.to_le_bytes(), &2u32.to_le_bytes(), 0)
        .unwrap();
    maps.set(ports, &22u32.to_le_bytes(), &3u32.to_le_bytes(), 0)
        .unwrap();
    // An exact rule beats the port's class; out-of-range classes count as none.
    maps.set(rules, &five_tuple(a, b, 7, 5001, 6), &9u32.to_le_bytes(), 0)
        .unwrap();
    maps.set(
        rules,
        &five_tuple(a, b, 8, 5001, 6),
        &64u32.to_le_bytes(),
        0,
    )
    .unwrap();
    let cases = [
        (five_tuple(a, b, 40000, 5001, 6), Some(1)),
        (five_tuple(a, b, 40000, 5002, 6), Some(2)),
        // The destination port first, then the source port.
        (five_tuple(a, b, 5002, 5001, 6), Some(1)),
        (five_tuple(a, b, 22, 40000, 6), Some(3)),
        (five_tuple(a, b, 7, 5001, 6), Some(9)),
        (five_tuple(a, b, 8, 5001, 6), Some(1)),
        (five_tuple(a, b, 40000, 80, 6), None),
        (five_tuple(a, b, 40000, 5001, 17), Some(1)),
    ];
    for (key, want) in &cases {
        let f = frame(
            key[12],
            a,
            b,
            u16::from_be_bytes([key[8], key[9]]),
            u16::from_be_bytes([key[10], key[11]]),
            60,
        );
        assert_eq!(run(&p, &mut maps, &f).0, Action::Pass, "it only classifies");
        assert_eq!(flow_class(&mut maps, key), *want, "{key:?}");
    }
    // Reclassified live: the port's class changes, the flow's record follows; unclassified,
    // the record goes.
    let key = five_tuple(a, b, 40000, 5002, 6);
    let f = frame(6, a, b, 40000, 5002, 60);
    maps.set(ports, &5002u32.to_le_bytes(), &5u32.to_le_bytes(), 0)
        .unwrap();
    run(&p, &mut maps, &f);
    assert_eq!(flow_class(&mut maps, &key), Some(5));
    maps.set(ports, &5002u32.to_le_bytes(), &0u32.to_le_bytes(), 0)
        .unwrap();
    run(&p, &mut maps, &f);
    assert_eq!(flow_class(&mut maps, &key), None);
}

#[test]
fn every_shipped_program_loads_by_name() {
    for (name, bytes, section) in programs::SHIPPED {
        assert!(
            sluice_ebpf::load(bytes, section).is_ok(),
            "{name} is refused"
        );
    }
    for name in ["vlan_insert", "conn_counter", "classify"] {
        assert!(programs::shipped(name).is_some(), "{name} not in SHIPPED");
    }
}
