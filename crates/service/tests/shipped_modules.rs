//! The shipped modules of issue 19 item 2 in a running engine, through admin requests:
//! VLAN strip at ingress and insert at egress carry a connection over a tagged link both ways
//! (every engine frame tagged with the map's VID, retagged live, untagged at VID 0); the
//! classifier at egress gives new connections, accepted and connected, their class's rate in
//! the flow scheduler (`sluice ctl conns` shows it), and none to an unclassified one; the
//! per-connection counter counts a connection's frames and bytes by map dump.

mod support;

use std::time::Duration;

use sluice_shm::admin::{from_hex, to_hex, AdminReply, AdminRequest, ConnRow};
use sluice_tcp::TcpState;
use support::{ask_admin, load_shipped, pattern, Client, Net, ENGINE_IP, PEER_IP, WAIT};

fn map_set(client: &Client, module: u32, map: &str, key: &[u8], value: &[u8]) {
    let req = AdminRequest::MapSet {
        module,
        map: map.into(),
        key: to_hex(key),
        value: to_hex(value),
    };
    assert_eq!(ask_admin(client, req), Ok(AdminReply::Done));
}

fn dump(client: &Client, module: u32, map: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let req = AdminRequest::MapDump {
        module,
        map: map.into(),
        cursor: 0,
        max: 1000,
    };
    match ask_admin(client, req) {
        Ok(AdminReply::MapEntries { rows, next: None }) => rows
            .iter()
            .map(|(k, v)| (from_hex(k).unwrap(), from_hex(v).unwrap()))
            .collect(),
        other => panic!("dump {map}: {other:?}"),
    }
}

fn conns(client: &Client) -> Vec<ConnRow> {
    match ask_admin(
        client,
        AdminRequest::Conns {
            cursor: 0,
            max: 100,
        },
    ) {
        Ok(AdminReply::Conns { rows, .. }) => rows,
        other => panic!("conns: {other:?}"),
    }
}

/// struct vlan_conf: VID (u16), PCP, pad.
fn vlan_conf(vid: u16, pcp: u8) -> Vec<u8> {
    let mut v = vid.to_le_bytes().to_vec();
    v.extend_from_slice(&[pcp, 0]);
    v
}

/// One round of a peer on a tagged link: its frames go out with an 802.1Q tag of `vid`, the
/// engine's come in through its core (which parses one tag), and the tag each carried, or
/// None, is recorded.
fn tagged_round(net: &mut Net, vid: u16, tags: &mut Vec<Option<u16>>) {
    let now = net.peer.clock();
    sluice_engine::pump::run_due_timers(&mut net.peer.stack, now);
    while let Some(f) = net.peer.take_transmit() {
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00]);
        tagged.extend_from_slice(&vid.to_be_bytes());
        tagged.extend_from_slice(&f[12..]);
        net.peer.send_raw(&tagged);
    }
    for f in net.peer.receive_raw_for(Duration::from_micros(200)) {
        let tag = (f.len() >= 18 && f[12..14] == [0x81, 0x00])
            .then(|| u16::from_be_bytes([f[14], f[15]]));
        tags.push(tag);
        let now = net.peer.clock();
        net.peer.stack.handle_frame(now, &f);
    }
}

#[test]
fn vlan_strip_and_insert_carry_a_connection_over_a_tagged_link() {
    // The pair's slots are 1514 bytes: with a 4-byte tag, frames of a 1496-byte MTU fit
    // (a tagged link's devices take 1518; this one's do not).
    let mut net = Net::start_with_cores("shipped-vlan", |_| {}, |c| c.mtu = 1496);
    let mut server = net.attach("server");
    let sc = server.context();
    let l = server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let strip = load_shipped(&admin, "ingress", "vlan_strip");
    let insert = load_shipped(&admin, "egress", "vlan_insert");
    // PCP 3, VID 100: TCI 0x6064.
    map_set(
        &admin,
        insert,
        "vlan",
        &0u32.to_le_bytes(),
        &vlan_conf(100, 3),
    );
    let mut tags = Vec::new();
    let c = net.peer.connect(ENGINE_IP, 7);
    let rec = server.accept(sc, l, &mut || tagged_round(&mut net, 100, &mut tags));
    let s = rec.slot;
    let up = pattern(100_000, 1);
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    let deadline = std::time::Instant::now() + WAIT;
    while got.len() < up.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck at {}",
            got.len()
        );
        if net.peer.stack.state(c).ok() == Some(TcpState::Established) && sent < up.len() {
            sent += net.peer.stack.send(c, &up[sent..]).unwrap_or(0);
        }
        tagged_round(&mut net, 100, &mut tags);
        let n = server.read_some(sc, s, &mut buf);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == up, "the bytes up arrived intact");
    let down = pattern(100_000, 2);
    let mut back = Vec::new();
    let mut written = 0;
    let deadline = std::time::Instant::now() + WAIT;
    while back.len() < down.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck at {}",
            back.len()
        );
        // The peer reads as the server writes: the TX ring is the send buffer, freed as
        // the peer acknowledges (header-only TX), so more than the peer's window plus the
        // ring is never in flight.
        written += server.write_some(sc, s, &down[written..]);
        tagged_round(&mut net, 100, &mut tags);
        while let Ok(n) = net.peer.stack.recv(c, &mut buf) {
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
    }
    assert!(back == down, "the bytes down arrived intact");
    assert!(tags.len() > 50, "{} frames", tags.len());
    assert!(
        tags.iter().all(|&t| t == Some(0x6064)),
        "every engine frame tagged VID 100 PCP 3"
    );
    let rows = match ask_admin(&admin, AdminRequest::ModuleList) {
        Ok(AdminReply::Modules { rows }) => rows,
        other => panic!("{other:?}"),
    };
    let by = |id: u32| rows.iter().find(|r| r.id == id).unwrap().clone();
    let (s_row, i_row) = (by(strip), by(insert));
    assert!(s_row.runs > 50 && s_row.passed == s_row.runs, "{s_row:?}");
    // Every frame the peer saw went through the insert (an ACK may still be on its way).
    assert!(i_row.runs as usize >= tags.len(), "{i_row:?}");
    assert_eq!(i_row.passed, i_row.runs, "{i_row:?}");
    // Retagged live, then off.
    for (vid, want) in [(200u16, Some(200u16)), (0, None)] {
        map_set(
            &admin,
            insert,
            "vlan",
            &0u32.to_le_bytes(),
            &vlan_conf(vid, 0),
        );
        tags.clear();
        net.peer.stack.send(c, b"x").unwrap();
        let deadline = std::time::Instant::now() + WAIT;
        while !tags.contains(&want) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {want:?} in {tags:?}"
            );
            tagged_round(&mut net, 100, &mut tags);
            let _ = server.read_some(sc, s, &mut buf);
        }
        // Frames already on their way carry the old tag; none after the change does.
        let first = tags.iter().position(|t| *t == want).unwrap();
        assert!(tags[first..].iter().all(|t| *t == want), "{tags:?}");
    }
    net.stop();
}

/// The classifier's maps: port 7 and 9 in class 3 at 50 Mbit/s.
const RATE: u64 = 50_000_000;

#[test]
fn the_classifier_gives_new_connections_their_class_rate() {
    let mut net = Net::start("shipped-classify");
    let mut server = net.attach("server");
    let sc = server.context();
    let l7 = server.listen(sc, 7, &mut || net.peer.pump());
    let l8 = server.listen(sc, 8, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let id = load_shipped(&admin, "egress", "classify");
    for port in [7u32, 9] {
        map_set(
            &admin,
            id,
            "port_class",
            &port.to_le_bytes(),
            &3u32.to_le_bytes(),
        );
    }
    map_set(
        &admin,
        id,
        "class_rate",
        &3u32.to_le_bytes(),
        &RATE.to_le_bytes(),
    );
    // Accepted by the engine: port 7 classified, port 8 not.
    let c7 = net.peer.connect(ENGINE_IP, 7);
    server.accept(sc, l7, &mut || net.peer.pump());
    let c8 = net.peer.connect(ENGINE_IP, 8);
    server.accept(sc, l8, &mut || net.peer.pump());
    // Connected by an application: to the peer's port 9.
    net.peer.stack.listen(9, 8).unwrap();
    let (_, local9) = server.connect(sc, PEER_IP, 9, &mut || net.peer.pump());
    let mut admin_rows = Vec::new();
    net.until_counters("three connections classified or not", |c| {
        c.flows_classified >= 2
    });
    let deadline = std::time::Instant::now() + WAIT;
    while admin_rows.len() < 3 {
        assert!(std::time::Instant::now() < deadline);
        net.peer.pump();
        admin_rows = conns(&admin);
    }
    let port = |c| net.peer.stack.endpoints(c).unwrap().0.port();
    let rate_of = |remote: u16, local: u16| {
        admin_rows
            .iter()
            .find(|r| r.remote.port() == remote || (remote == 0 && r.local.port() == local))
            .unwrap_or_else(|| panic!("no row for {remote}/{local}: {admin_rows:?}"))
            .rate_bps
    };
    assert_eq!(rate_of(port(c7), 0), RATE, "accepted, class 3");
    assert_eq!(rate_of(port(c8), 0), 0, "accepted, no class");
    assert_eq!(rate_of(0, local9), RATE, "connected, class 3");
    // The classifier's record of the flows: 5-tuples (engine -> peer at egress), class 3.
    let flows = dump(&admin, id, "flows");
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert!(flows
        .iter()
        .all(|(k, v)| k[..4] == ENGINE_IP.octets() && v[..] == 3u32.to_le_bytes()));
    let c = net.stop();
    assert_eq!((c.flows_classified, c.classify_overflow), (2, 0));
}

#[test]
fn the_conn_counter_counts_a_connections_frames_and_bytes() {
    let mut net = Net::start("shipped-conn-counter");
    let mut server = net.attach("server");
    let sc = server.context();
    let l = server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let id = load_shipped(&admin, "ingress", "conn_counter");
    let c = net.peer.connect(ENGINE_IP, 7);
    let rec = server.accept(sc, l, &mut || net.peer.pump());
    net.peer.send_all(c, &pattern(20_000, 3));
    let mut buf = vec![0u8; 32 << 10];
    let mut got = 0;
    while got < 20_000 {
        net.peer.pump();
        got += server.read_some(sc, rec.slot, &mut buf);
    }
    let rows = dump(&admin, id, "conns");
    assert_eq!(rows.len(), 1, "one connection: {rows:?}");
    let (k, v) = &rows[0];
    let local = net.peer.stack.endpoints(c).unwrap().0;
    // The key: the lower endpoint first (10.9.0.1:7 is the engine's), network order.
    let mut want = ENGINE_IP.octets().to_vec();
    want.extend_from_slice(&PEER_IP.octets());
    want.extend_from_slice(&7u16.to_be_bytes());
    want.extend_from_slice(&local.port().to_be_bytes());
    want.extend_from_slice(&[6, 0, 0, 0]);
    assert_eq!(k, &want);
    let n = |i: usize| u64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
    // At ingress only the peer's frames (b -> a of the key): SYN, ACK and the data at least.
    assert_eq!((n(0), n(1)), (0, 0));
    assert!(n(2) >= 2 + 20_000 / 1448, "{} frames", n(2));
    assert!(n(3) >= 20_000 + 54 * n(2), "{} bytes", n(3));
    net.stop();
}
