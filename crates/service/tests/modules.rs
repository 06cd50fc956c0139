//! eBPF modules in a running engine (issue 19 items 1b, 1c) through admin requests: the drop
//! program drops and counts, unload restores; the firewall drops a 5-tuple the control plane
//! writes and passes it again after the rule is deleted, while another port works; a VLAN
//! strip lets a tagged SYN go on stripped (a counter after it sees it so) and be answered;
//! Tx at ingress reflects; a refused program's reason and instruction; the per-port counter
//! read by map dump.

mod support;

use sluice_ebpf::programs;
use sluice_shm::admin::{to_hex, AdminReply, AdminRequest, ModuleRow};
use sluice_tcp::TcpState;
use support::{ask_admin, load_shipped, Client, Net, ENGINE_IP, PEER_IP};

fn list(client: &Client) -> Vec<ModuleRow> {
    match ask_admin(client, AdminRequest::ModuleList) {
        Ok(AdminReply::Modules { rows }) => rows,
        other => panic!("list: {other:?}"),
    }
}

/// Pumps the peer for `ms` milliseconds.
fn pump_for(net: &mut Net, ms: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    while std::time::Instant::now() < until {
        net.peer.pump();
    }
}

fn established(net: &mut Net, c: sluice_tcp::ConnId) {
    net.peer.until("the peer's connection is established", |s| {
        (s.state(c).ok() == Some(TcpState::Established)).then_some(())
    });
}

/// The firewall's key for a TCP 5-tuple (struct five_tuple, addresses and ports in network
/// order, then the protocol and padding).
fn five_tuple(sport: u16, dport: u16) -> String {
    let mut k = PEER_IP.octets().to_vec();
    k.extend_from_slice(&ENGINE_IP.octets());
    k.extend_from_slice(&sport.to_be_bytes());
    k.extend_from_slice(&dport.to_be_bytes());
    k.extend_from_slice(&[6, 0, 0, 0]);
    to_hex(&k)
}

#[test]
fn the_drop_program_drops_and_counts_and_unload_restores() {
    let mut net = Net::start("modules-drop");
    let mut server = net.attach("server");
    let sc = server.context();
    server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let id = load_shipped(&admin, "ingress", "drop");
    let c = net.peer.connect(ENGINE_IP, 7);
    pump_for(&mut net, 150);
    assert_eq!(net.peer.stack.state(c).ok(), Some(TcpState::SynSent));
    let rows = list(&admin);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r.id, r.hook.as_str(), r.name.as_str()),
        (id, "ingress", "drop")
    );
    assert!(r.dropped >= 1 && r.dropped == r.runs, "{r:?}");
    assert_eq!(r.passed, 0);
    assert_eq!(
        ask_admin(&admin, AdminRequest::ModuleUnload { id }),
        Ok(AdminReply::Done)
    );
    assert!(list(&admin).is_empty());
    // The SYN's retransmission now reaches the listener.
    established(&mut net, c);
    assert!(ask_admin(&admin, AdminRequest::ModuleUnload { id })
        .unwrap_err()
        .starts_with("ENOENT"));
    net.stop();
}

#[test]
fn the_firewall_drops_a_five_tuple_until_the_rule_is_deleted() {
    let mut net = Net::start("modules-firewall");
    let mut server = net.attach("server");
    let sc = server.context();
    server.listen(sc, 7, &mut || net.peer.pump());
    server.listen(sc, 8, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let id = load_shipped(&admin, "ingress", "firewall");
    let blocked = net.peer.connect(ENGINE_IP, 7);
    let (local, _) = net.peer.stack.endpoints(blocked).unwrap();
    let key = five_tuple(local.port(), 7);
    let set = AdminRequest::MapSet {
        module: id,
        map: "rules".into(),
        key: key.clone(),
        value: to_hex(&0u64.to_le_bytes()),
    };
    assert_eq!(ask_admin(&admin, set), Ok(AdminReply::Done));
    pump_for(&mut net, 150);
    assert_eq!(net.peer.stack.state(blocked).ok(), Some(TcpState::SynSent));
    // Another port goes through meanwhile.
    let other = net.peer.connect(ENGINE_IP, 8);
    established(&mut net, other);
    let hits = match ask_admin(
        &admin,
        AdminRequest::MapGet {
            module: id,
            map: "rules".into(),
            key: key.clone(),
        },
    ) {
        Ok(AdminReply::MapValue { value }) => value,
        other => panic!("{other:?}"),
    };
    assert_ne!(
        hits,
        to_hex(&0u64.to_le_bytes()),
        "the rule counted its hits"
    );
    let dump = ask_admin(
        &admin,
        AdminRequest::MapDump {
            module: id,
            map: "rules".into(),
            cursor: 0,
            max: 100,
        },
    );
    assert_eq!(
        dump,
        Ok(AdminReply::MapEntries {
            rows: vec![(key.clone(), hits)],
            next: None
        })
    );
    let delete = AdminRequest::MapDelete {
        module: id,
        map: "rules".into(),
        key,
    };
    assert_eq!(ask_admin(&admin, delete.clone()), Ok(AdminReply::Done));
    established(&mut net, blocked);
    assert!(ask_admin(&admin, delete).unwrap_err().starts_with("EINVAL"));
    let r = &list(&admin)[0];
    assert!(r.dropped >= 1 && r.passed >= 3, "{r:?}");
    net.stop();
}

#[test]
fn a_vlan_tagged_syn_goes_on_stripped_and_is_answered() {
    let mut net = Net::start("modules-vlan");
    let mut server = net.attach("server");
    let sc = server.context();
    server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    load_shipped(&admin, "ingress", "vlan_strip");
    // The core parses one 802.1Q tag itself; the per-port counter after the strip does
    // not (it wants IPv4 right after the MAC addresses), so its count shows that the frame
    // went on stripped.
    let counter = load_shipped(&admin, "ingress", "port_counter");
    let c = net.peer.connect(ENGINE_IP, 7);
    let syn = net.peer.take_transmit().expect("the peer's SYN");
    let mut tagged = syn[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
    tagged.extend_from_slice(&syn[12..]);
    net.peer.send_raw(&tagged);
    // Read raw, so the peer's core never retransmits the SYN untagged: the engine's answer
    // is to the tagged one.
    let (local, _) = net.peer.stack.endpoints(c).unwrap();
    let answered = net.peer.receive_raw().iter().any(|f| {
        f.len() >= 54
            && f[12..14] == [0x08, 0x00]
            && f[36..38] == local.port().to_be_bytes()
            && f[47] & 0x12 == 0x12
    });
    assert!(answered, "no SYN-ACK to the tagged SYN");
    let r = &list(&admin)[0];
    assert_eq!((r.runs, r.passed), (1, 1), "{r:?}");
    let value = match ask_admin(
        &admin,
        AdminRequest::MapGet {
            module: counter,
            map: "port_counts".into(),
            key: to_hex(&7u32.to_le_bytes()),
        },
    ) {
        Ok(AdminReply::MapValue { value }) => sluice_shm::admin::from_hex(&value).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        value[..8],
        1u64.to_le_bytes(),
        "the counter saw the SYN untagged"
    );
    // As long as the SYN itself, without its tag.
    assert_eq!(value[8..16], (syn.len() as u64).to_le_bytes());
    net.stop();
}

#[test]
fn tx_at_ingress_reflects_the_frame() {
    let mut net = Net::start("modules-reflect");
    let admin = net.attach("admin");
    load_shipped(&admin, "ingress", "reflect");
    let mut frame = vec![0u8; 60];
    frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    frame[14..18].copy_from_slice(b"ping");
    net.peer.send_raw(&frame);
    let back = net.peer.receive_raw();
    let want: Vec<u8> = [&frame[6..12], &frame[..6], &frame[12..]].concat();
    assert!(back.contains(&want), "{back:?}");
    assert_eq!(list(&admin)[0].tx, 1);
    net.stop();
}

#[test]
fn a_refused_program_gives_the_reason_and_instruction() {
    let mut net = Net::start("modules-refused");
    let admin = net.attach("admin");
    let e = ask_admin(
        &admin,
        AdminRequest::ModuleLoad {
            hook: "ingress".into(),
            name: "oob_read.o".into(),
            section: "xdp".into(),
            object: to_hex(programs::bad::OOB_READ),
        },
    )
    .unwrap_err();
    assert!(e.contains("verifier: insn "), "{e}");
    let e = ask_admin(
        &admin,
        AdminRequest::ModuleLoad {
            hook: "nowhere".into(),
            name: "null".into(),
            section: "xdp".into(),
            object: to_hex(programs::NULL),
        },
    )
    .unwrap_err();
    assert!(e.contains("no hook point"), "{e}");
    assert!(list(&admin).is_empty());
    let c = net.stop();
    assert_eq!((c.modules_refused, c.modules_loaded), (2, 0));
}

#[test]
fn the_port_counter_counts_what_the_peer_sent() {
    let mut net = Net::start("modules-counter");
    let mut server = net.attach("server");
    let sc = server.context();
    server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let id = load_shipped(&admin, "ingress", "port_counter");
    let c = net.peer.connect(ENGINE_IP, 7);
    established(&mut net, c);
    let rows = match ask_admin(
        &admin,
        AdminRequest::MapDump {
            module: id,
            map: "port_counts".into(),
            cursor: 0,
            max: 1000,
        },
    ) {
        Ok(AdminReply::MapEntries { rows, next: None }) => rows,
        other => panic!("{other:?}"),
    };
    // Array entries never written are left out: only port 7's.
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, to_hex(&7u32.to_le_bytes()));
    let value = sluice_shm::admin::from_hex(&rows[0].1).unwrap();
    let frames = u64::from_le_bytes(value[..8].try_into().unwrap());
    let bytes = u64::from_le_bytes(value[8..16].try_into().unwrap());
    // The SYN and the ACK at least, each at least 54 bytes.
    assert!(frames >= 2 && bytes >= 54 * frames, "{frames} {bytes}");
    net.stop();
}

/// A module's counters from the list.
fn row(admin: &Client, id: u32) -> ModuleRow {
    list(admin)
        .into_iter()
        .find(|r| r.id == id)
        .expect("the module is listed")
}

#[test]
fn a_drop_module_at_established_lets_the_handshake_through_but_not_data_until_unloaded() {
    let mut net = Net::start("modules-established-drop");
    let mut server = net.attach("server");
    let sc = server.context();
    let l = server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let id = load_shipped(&admin, "established", "drop");
    assert_eq!(row(&admin, id).hook, "established");
    let c = net.peer.connect(ENGINE_IP, 7);
    // The SYN and the handshake's last ACK are no established connection's segments.
    let rec = server.accept(sc, l, &mut || net.peer.pump());
    established(&mut net, c);
    assert_eq!(row(&admin, id).runs, 0);
    net.peer.send_all(c, b"hello");
    pump_for(&mut net, 150);
    let mut buf = [0u8; 64];
    assert_eq!(server.read_some(sc, rec.slot, &mut buf), 0, "dropped");
    let r = row(&admin, id);
    assert!(r.dropped >= 1 && r.dropped == r.runs, "{r:?}");
    assert_eq!(
        ask_admin(&admin, AdminRequest::ModuleUnload { id }),
        Ok(AdminReply::Done)
    );
    // Dropped before the protocol stage: as if lost, so the peer's retransmission (and its
    // FIN) arrive.
    net.peer.stack.close(c).unwrap();
    let got = server.read_to_fin(sc, rec.slot, &mut || net.peer.pump());
    assert_eq!(got, b"hello");
    net.stop();
}

#[test]
fn a_counter_at_established_counts_established_segments_only() {
    let mut net = Net::start("modules-established-count");
    let mut server = net.attach("server");
    let sc = server.context();
    let l = server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let ingress = load_shipped(&admin, "ingress", "port_counter");
    let est = load_shipped(&admin, "established", "port_counter");
    let frames = |admin: &Client, id: u32| -> u64 {
        match ask_admin(
            admin,
            AdminRequest::MapGet {
                module: id,
                map: "port_counts".into(),
                key: to_hex(&7u32.to_le_bytes()),
            },
        ) {
            Ok(AdminReply::MapValue { value }) => {
                let v = sluice_shm::admin::from_hex(&value).unwrap();
                u64::from_le_bytes(v[..8].try_into().unwrap())
            }
            other => panic!("{other:?}"),
        }
    };
    let c = net.peer.connect(ENGINE_IP, 7);
    let rec = server.accept(sc, l, &mut || net.peer.pump());
    established(&mut net, c);
    // The SYN and the ACK that completed the handshake: seen at ingress only.
    assert!(frames(&admin, ingress) >= 2);
    assert_eq!(frames(&admin, est), 0);
    assert_eq!(row(&admin, est).runs, 0);
    net.peer.send_all(c, b"counted");
    net.peer.stack.close(c).unwrap();
    let got = server.read_to_fin(sc, rec.slot, &mut || net.peer.pump());
    assert_eq!(got, b"counted");
    let (i, e) = (frames(&admin, ingress), frames(&admin, est));
    // The data (with the FIN, or after it), and every segment ingress saw but the
    // handshake's two: the SYN and the ACK that completed it.
    assert!(e >= 1 && i == e + 2, "established {e}, ingress {i}");
    assert_eq!(row(&admin, est).runs, e);
    net.stop();
}
