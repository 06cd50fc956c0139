//! Rust handlers from shared libraries (docs/offload.md "Rust handlers from a shared
//! library"): the example library (crates/offload-examples, built by cargo beside this test
//! as a dev-dependency) is loaded and its batched READ and list traversal run over two RDMA
//! stacks and the engine's threads; a library of another ABI version and one without the
//! entry point are refused with their reasons; a handler that panics is caught at the
//! boundary, one that loops or reads outside its region is stopped, each with its status,
//! and the QPs survive.

mod common;

use common::{clock, connect, host, Host, BASE, LEN};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use sluice_offload::examples::{batched_read_request, list_node, list_request, NODE_LEN};
use sluice_offload::{
    DylibError, DylibHandler, HandlerError, Limits, OffloadEngine, OffloadEngineBuilder,
    RegionTable, Registration, SharedRegion,
};
use sluice_rdma::qp::{Memory, SendOp, SendWr, Sge, VecMemory};
use sluice_rdma::verbs::{QpState, WcStatus};

/// A cdylib cargo built beside this test (target/<profile>/deps).
fn library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let path = exe.parent().expect("deps/").join(format!("lib{name}.so"));
    assert!(
        path.exists(),
        "{} (built as a dev-dependency)",
        path.display()
    );
    path
}

fn examples() -> PathBuf {
    library("sluice_offload_examples")
}

/// The server's handlers by opcode: names in the example library.
const HANDLERS: [(u32, &str); 5] = [
    (1, "batched_read"),
    (2, "list_traversal"),
    (3, "panics"),
    (4, "spins"),
    (5, "reads_outside"),
];

struct Rig {
    c: Host<VecMemory>,
    s: Host<SharedRegion>,
    e: OffloadEngine,
    regs: Vec<(u32, Arc<Registration>)>,
}

/// Two connected stacks; the example library's handlers registered at run time (each
/// request handed in with its registration, as the engine's service does).
fn rig(mem: SharedRegion) -> Rig {
    let mut c = host(1, VecMemory(vec![0; LEN]));
    let mut s = host(2, mem.clone());
    let (qc, qs) = ((c.qpn, c.addr), (s.qpn, s.addr));
    connect(&mut c, qs);
    connect(&mut s, qc);
    let mut regions = RegionTable::default();
    assert!(regions.register(BASE, LEN as u64, mem));
    let lib = examples();
    let regs = HANDLERS
        .iter()
        .map(|&(op, name)| {
            s.stack.register_offload(s.qpn, op).unwrap();
            let handler = Arc::new(DylibHandler::load(&lib, name).unwrap());
            let reg = Registration {
                handler,
                regions: regions.clone(),
                limits: Limits::default(),
            };
            (op, Arc::new(reg))
        })
        .collect();
    Rig {
        c,
        s,
        e: OffloadEngineBuilder::new().start(2),
        regs,
    }
}

/// One OFFLOAD request through both stacks and the engine: (status, response).
fn call(r: &mut Rig, opcode: u32, req: &[u8]) -> (u32, Vec<u8>) {
    let (c, s) = (&mut r.c, &mut r.s);
    assert!(c.mem.write(0, 0, req));
    let resp = Sge {
        addr: BASE + 0x8000,
        len: 4096,
        lkey: c.key,
    };
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Offload { opcode, resp },
        sge: Sge {
            addr: BASE,
            len: req.len() as u32,
            lkey: c.key,
        },
        signaled: true,
        solicited: false,
    };
    c.stack.post_send(c.qpn, wr).unwrap();
    let mut buf = vec![0u8; 9000];
    for _ in 0..1_000_000 {
        let now = clock();
        c.stack.handle_timeout(now, &mut c.mem);
        while let Some(n) = c.stack.poll_transmit(now, &mut c.mem, &mut buf) {
            s.stack.handle_frame(now, &mut s.mem, &buf[..n]);
        }
        while let Some(q) = s.stack.poll_offload() {
            let reg = r.regs.iter().find(|(op, _)| *op == q.opcode).unwrap();
            r.e.submit_to(q, reg.1.clone()).unwrap();
        }
        while let Some(a) = r.e.poll() {
            assert!(s.stack.complete_offload(a.qpn, a.psn, a.status, &a.body));
        }
        while let Some(n) = s.stack.poll_transmit(now, &mut s.mem, &mut buf) {
            c.stack.handle_frame(now, &mut c.mem, &buf[..n]);
        }
        let mut wc = Vec::new();
        c.stack.poll_cq(c.cq, 4, &mut wc).unwrap();
        if let Some(w) = wc.first() {
            assert_eq!(w.status, WcStatus::Success);
            let mut out = vec![0; w.byte_len as usize];
            assert!(c.mem.read(0, 0x8000, &mut out));
            return (w.imm.unwrap(), out);
        }
        std::thread::yield_now();
    }
    panic!("no completion");
}

#[test]
fn the_example_library_serves_both_examples_over_the_wire() {
    let mem = SharedRegion::new((0..LEN).map(|i| (i * 31 % 251) as u8).collect());
    let mut r = rig(mem.clone());
    let items: Vec<(u64, u32)> = (0..20).map(|i| (BASE + 0x4000 + i * 200, 48)).collect();
    let (status, body) = call(&mut r, 1, &batched_read_request(&items));
    assert_eq!(status, 0);
    let want: Vec<u8> = items
        .iter()
        .flat_map(|&(a, l)| {
            let mut v = vec![0; l as usize];
            assert!(mem.read_at(a - BASE, &mut v));
            v
        })
        .collect();
    assert_eq!(body, want);
    // A list of 40 nodes laid out backwards.
    let node = |i: u64| BASE + 0x8000 + (39 - i) * NODE_LEN as u64;
    for i in 0..40u64 {
        let next = if i < 39 { node(i + 1) } else { 0 };
        let value = [i as u8 ^ 0x5a; 64];
        assert!(mem.write_at(node(i) - BASE, &list_node(1000 + i, next, &value)));
    }
    for i in [0u64, 17, 39] {
        let (status, body) = call(&mut r, 2, &list_request(node(0), 1000 + i, 64));
        assert_eq!((status, body), (0, vec![i as u8 ^ 0x5a; 64]), "key {i}");
    }
    let (status, _) = call(&mut r, 2, &list_request(node(0), 1039, 10));
    assert_eq!(
        HandlerError::from_code(status),
        Some(HandlerError::NotFound)
    );
}

#[test]
fn misbehaving_library_handlers_are_stopped_and_the_qp_survives() {
    let mem = SharedRegion::new(vec![3; LEN]);
    let mut r = rig(mem);
    for (op, want) in [
        (3, HandlerError::Panicked),
        (4, HandlerError::BudgetExhausted),
        (5, HandlerError::OutsideRegion),
        (1, HandlerError::BadRequest),
    ] {
        let (status, body) = call(&mut r, op, b"junk");
        assert_eq!(HandlerError::from_code(status), Some(want), "opcode {op}");
        assert!(body.is_empty());
    }
    let k = r.e.counters();
    assert_eq!(k.panics.load(Relaxed), 1);
    assert_eq!(k.budget_stops.load(Relaxed), 1);
    assert_eq!(k.outside_region.load(Relaxed), 1);
    assert_eq!(k.errors.load(Relaxed), 4);
    // A panic again, then a good request: the offload threads and both QPs go on.
    assert_eq!(call(&mut r, 3, b"again").0, HandlerError::Panicked.code());
    let (status, body) = call(&mut r, 1, &batched_read_request(&[(BASE + 8, 16)]));
    assert_eq!((status, body), (0, vec![3; 16]));
    assert_eq!(r.s.stack.qp_state(r.s.qpn), Some(QpState::Rts));
    assert_eq!(r.c.stack.qp_state(r.c.qpn), Some(QpState::Rts));
}

#[test]
fn wrong_libraries_are_refused_with_their_reason() {
    let err =
        DylibHandler::load(&library("sluice_offload_fixture_wrong_version"), "x").unwrap_err();
    assert_eq!(err, DylibError::WrongVersion { found: 2 });
    assert!(err.to_string().contains("ABI version 2"), "{err}");
    let err = DylibHandler::load(&library("sluice_offload_fixture_no_entry"), "x").unwrap_err();
    assert!(matches!(err, DylibError::MissingEntry(_)), "{err}");
    assert!(
        err.to_string().contains("sluice_offload_handler_v1"),
        "{err}"
    );
    let err = DylibHandler::load(&examples(), "no_such").unwrap_err();
    match &err {
        DylibError::NoSuchHandler { available, .. } => {
            assert!(available.contains(&"list_traversal".to_string()), "{err}")
        }
        e => panic!("{e}"),
    }
    let err = DylibHandler::load(std::path::Path::new("/nonexistent/lib.so"), "x").unwrap_err();
    assert!(matches!(err, DylibError::Open(_)), "{err}");
    let names = DylibHandler::list(&examples()).unwrap();
    assert_eq!(
        names,
        [
            "batched_read",
            "list_traversal",
            "panics",
            "spins",
            "reads_outside"
        ]
    );
}
