//! `sluice::admin` against the real engine in-process (tests/common/real_engine.rs): a module
//! loaded from its object counts the frames of a connection an application makes, read by a
//! map dump; map set/get/delete on the classifier's maps; a refused program's reason; the
//! connection listed and its rate set; the counters; unload; an object too big for a message.

mod common;

use std::net::SocketAddrV4;

use common::real_engine::{RealEngine, ECHO_PORT, ENGINE_IP, PEER_IP};
use sluice::admin::{Admin, AdminError, MAX_OBJECT};
use sluice::{Sluice, Socket};
use sluice_ebpf::programs;
use sluice_shm::Layout;

fn load(admin: &Admin, hook: &str, name: &str) -> u32 {
    let (bytes, section) = programs::shipped(name).unwrap();
    admin
        .module_load(hook, name, section, bytes)
        .expect("loaded")
}

#[test]
fn modules_and_maps_of_a_running_engine_from_the_native_api() {
    let e = RealEngine::start("admin", Layout::default(), 100);
    let admin = Admin::open(&e.socket).expect("admin session");
    let counter = load(&admin, "egress", "conn_counter");
    let classify = load(&admin, "ingress", "classify");

    let app = Sluice::attach(&e.socket).unwrap();
    let s = Socket::open(&app).unwrap();
    s.connect(SocketAddrV4::new(PEER_IP, ECHO_PORT)).unwrap();
    let local = s.local_addr().unwrap();
    assert_eq!(s.send(b"hello, admin").unwrap(), 12);
    let mut buf = [0u8; 12];
    let mut got = 0;
    while got < 12 {
        got += s.recv(&mut buf[got..]).unwrap();
    }
    assert_eq!(&buf, b"hello, admin");

    // The engine's frames of the connection, by its 4-tuple (the engine's end is lower).
    let rows = admin.map_dump(counter, "conns").unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (key, value) = &rows[0];
    assert_eq!(key[..4], ENGINE_IP.octets());
    assert_eq!(key[8..10], local.port().to_be_bytes());
    let packets = u64::from_le_bytes(value[..8].try_into().unwrap());
    let bytes = u64::from_le_bytes(value[8..16].try_into().unwrap());
    assert!(packets >= 3 && bytes >= 54 * 2 + 66, "{packets} {bytes}");
    let list = admin.modules().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[0].id, list[0].name.as_str()),
        (counter, "conn_counter")
    );
    assert!(list[0].runs >= packets && list[0].passed == list[0].runs);

    // Maps written and read while traffic flows.
    let class = 3u32.to_le_bytes();
    admin
        .map_set(classify, "class_rate", &class, &7_000_000u64.to_le_bytes())
        .unwrap();
    assert_eq!(
        admin.map_get(classify, "class_rate", &class).unwrap(),
        Some(7_000_000u64.to_le_bytes().to_vec())
    );
    let rule = [1u8; 16];
    assert_eq!(admin.map_get(classify, "rules", &rule).unwrap(), None);
    admin.map_set(classify, "rules", &rule, &class).unwrap();
    assert_eq!(
        admin.map_dump(classify, "rules").unwrap(),
        vec![(rule.to_vec(), class.to_vec())]
    );
    admin.map_delete(classify, "rules", &rule).unwrap();
    assert!(admin.map_dump(classify, "rules").unwrap().is_empty());
    match admin.map_get(classify, "rules", &[1, 2]) {
        Err(AdminError::Refused(r)) => assert!(r.starts_with("EINVAL"), "{r}"),
        other => panic!("a 2-byte key: {other:?}"),
    }

    // A program the verifier refuses: the instruction and the reason.
    match admin.module_load("ingress", "oob", "xdp", programs::bad::OOB_READ) {
        Err(AdminError::Refused(r)) => assert!(r.contains("verifier: insn 6"), "{r}"),
        other => panic!("{other:?}"),
    }
    let too_big = vec![0u8; MAX_OBJECT + 1];
    assert!(matches!(
        admin.module_load("ingress", "big", "xdp", &too_big),
        Err(AdminError::ObjectTooBig(n)) if n == MAX_OBJECT + 1
    ));

    // The connection, its rate set through the same session.
    let conns = admin.conns().unwrap();
    let row = conns
        .iter()
        .find(|c| c.local == local)
        .unwrap_or_else(|| panic!("{conns:?}"));
    admin.set_rate(row.id, 1_000_000).unwrap();
    let row = admin
        .conns()
        .unwrap()
        .into_iter()
        .find(|c| c.local == local)
        .unwrap();
    assert_eq!(row.rate_bps, 1_000_000);
    assert!(admin
        .listeners()
        .unwrap()
        .iter()
        .all(|l| *l.local.ip() == ENGINE_IP || l.local.ip().is_unspecified()));
    let counters = admin.counters().unwrap();
    let loaded = counters
        .iter()
        .find(|(n, _)| n.ends_with("modules_loaded"))
        .unwrap_or_else(|| panic!("{counters:?}"));
    assert_eq!(loaded.1, 2);

    admin.module_unload(counter).unwrap();
    assert!(
        matches!(admin.module_unload(counter), Err(AdminError::Refused(r)) if r.starts_with("ENOENT"))
    );
    assert_eq!(admin.modules().unwrap().len(), 1);
}
