//! Offload handlers through the engine's service (docs/offload.md "Through the engine's
//! service"): an application registers handlers on its QP over its control socket — the
//! eBPF list traversal, and the example Rust library's batched READ and its handler that
//! panics — with its memory region (a memfd it maps); the peer's OFFLOAD requests are run on
//! the engine's offload thread over that memory. A handler's failure reaches the requester
//! as an error status and both QPs stay up. The other way, the application posts
//! IBV_WR_SLUICE_OFFLOAD: the response lands in its memory, a failure is REM_OP_ERR.
//! Registrations that name another's region, a taken opcode or a bad object are refused.

mod support;

use sluice_device::PairConfig;
use sluice_offload::examples::{batched_read_request, list_node, list_request, NODE_LEN};
use sluice_rdma::qp::{SendOp, SendWr, Sge};
use sluice_rdma::stack::PeerAddr;
use sluice_rdma::verbs::{QpState, WcStatus, WorkCompletion};
use sluice_shm::admin::{AdminReply, AdminRequest, OffloadSource};
use sluice_shm::verbs::wqe::send_flags;
use sluice_shm::verbs::{SendWqe, VerbsReply, VerbsRequest, WqeSge, WrOpcode};
use sluice_shm::{admin::to_hex, MappedFile};
use std::os::fd::AsFd;
use support::client::Client;
use support::verbs::*;
use support::*;

const APP_BASE: u64 = 0x7000_0000;
const APP_LEN: u64 = 16384;
const LIST: u32 = 0x1234;
const BATCH: u32 = 0x1235;
const PANICS: u32 = 0x1236;

/// The example handler library cargo built beside this test.
fn examples_library() -> String {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().join("libsluice_offload_examples.so");
    assert!(p.exists(), "{} (a dev-dependency)", p.display());
    p.to_string_lossy().into_owned()
}

struct App {
    ctx: u32,
    key: u32,
    mem: MappedFile,
    cq: AppCq,
    qp: AppQp,
}

fn app(c: &mut Client) -> App {
    let ctx = c.context();
    let VerbsReply::Pd { pd } = ask(c, VerbsRequest::AllocPd, &[]) else {
        panic!("AllocPd");
    };
    let fd = memfd(APP_LEN, true);
    let mem = MappedFile::map(fd.try_clone().unwrap(), 0, APP_LEN).unwrap();
    let reg = VerbsRequest::RegMr {
        pd,
        addr: APP_BASE,
        len: APP_LEN,
        access: ALL_ACCESS,
        file_offset: 0,
    };
    let VerbsReply::Mr { key } = ask(c, reg, &[fd.as_fd()]) else {
        panic!("RegMr");
    };
    let cq = create_cq(c, 64, None);
    let qp = create_qp(c, pd, cq.cq, 0);
    App {
        ctx,
        key,
        mem,
        cq,
        qp,
    }
}

fn load(
    c: &Client,
    qpn: u32,
    opcode: u32,
    handler: OffloadSource,
    mrs: Vec<u32>,
) -> Result<(), String> {
    let req = AdminRequest::OffloadLoad {
        qpn,
        opcode,
        handler,
        mrs,
    };
    ask_admin(c, req).map(|r| assert_eq!(r, AdminReply::Done))
}

/// The peer posts an OFFLOAD of `req` for `opcode` and pumps until it completes.
fn peer_offload(net: &mut Net, opcode: u32, req: &[u8]) -> WorkCompletion {
    let p = &mut net.peer.rdma;
    p.mem.0[..req.len()].copy_from_slice(req);
    let wr = SendWr {
        wr_id: u64::from(opcode),
        op: SendOp::Offload {
            opcode,
            resp: Sge {
                addr: PEER_BASE + 0x8000,
                len: 1024,
                lkey: p.key,
            },
        },
        sge: Sge {
            addr: PEER_BASE,
            len: req.len() as u32,
            lkey: p.key,
        },
        signaled: true,
        solicited: false,
    };
    p.post_send(wr);
    let deadline = std::time::Instant::now() + support::client::WAIT;
    loop {
        net.peer.pump();
        if let Some(w) = net.peer.rdma.poll().pop() {
            return w;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no OFFLOAD completion"
        );
    }
}

fn response(net: &Net, w: &WorkCompletion) -> Vec<u8> {
    net.peer.rdma.mem.0[0x8000..0x8000 + w.byte_len as usize].to_vec()
}

#[test]
fn an_application_serves_offload_handlers_on_its_qp() {
    let mut net = Net::start("offload-serve");
    let mut c = net.attach("offload");
    let a = app(&mut c);
    let peer_qpn = net.peer.rdma.qpn;
    for to in 1..=3 {
        assert_eq!(
            modify(&c, a.qp.qpn, to, peer_qpn, PEER_IP),
            VerbsReply::Done
        );
    }
    let engine = PeerAddr {
        ip: ENGINE_IP,
        mac: PairConfig::default().macs[0],
    };
    net.peer.rdma.connect(a.qp.qpn, engine);

    // The application's memory: a list of 20 nodes, backwards, and bytes to batch-read.
    let node = |i: u64| APP_BASE + 0x1000 + (19 - i) * NODE_LEN as u64;
    for i in 0..20u64 {
        let next = if i < 19 { node(i + 1) } else { 0 };
        let n = list_node(500 + i, next, &[i as u8 + 1; 64]);
        assert!(a.mem.write_at(node(i) - APP_BASE, &n));
    }
    let bytes = pattern(4096, 7);
    assert!(a.mem.write_at(0x3000, &bytes));

    // Registrations: eBPF (any application), the Rust library (this uid is the engine's).
    let ebpf = OffloadSource::Ebpf {
        name: "offload_list.o".into(),
        object: to_hex(sluice_ebpf::programs::OFFLOAD_LIST),
    };
    load(&c, a.qp.qpn, LIST, ebpf.clone(), vec![a.key]).unwrap();
    let rust = |handler: &str| OffloadSource::Rust {
        path: examples_library(),
        handler: handler.into(),
    };
    load(&c, a.qp.qpn, BATCH, rust("batched_read"), vec![a.key]).unwrap();
    load(&c, a.qp.qpn, PANICS, rust("panics"), vec![a.key]).unwrap();
    // Refused: a taken opcode, a region that is not this application's, a bad object, a
    // library without that handler, a relative path.
    let taken = load(&c, a.qp.qpn, LIST, ebpf.clone(), vec![a.key]).unwrap_err();
    assert!(taken.starts_with("EEXIST"), "{taken}");
    let not_ours = load(&c, a.qp.qpn, 7, ebpf, vec![a.key + 1000]).unwrap_err();
    assert!(not_ours.starts_with("ENOENT"), "{not_ours}");
    let junk = OffloadSource::Ebpf {
        name: "junk".into(),
        object: to_hex(b"not an ELF object"),
    };
    assert!(load(&c, a.qp.qpn, 8, junk, vec![])
        .unwrap_err()
        .starts_with("EINVAL"));
    let missing = load(&c, a.qp.qpn, 9, rust("no_such"), vec![]).unwrap_err();
    assert!(missing.contains("no handler"), "{missing}");
    let relative = OffloadSource::Rust {
        path: "libx.so".into(),
        handler: "x".into(),
    };
    assert!(load(&c, a.qp.qpn, 10, relative, vec![])
        .unwrap_err()
        .contains("absolute"));

    // The peer asks; the handlers answer from the application's memory.
    for i in [0u64, 7, 19] {
        let w = peer_offload(&mut net, LIST, &list_request(node(0), 500 + i, 64));
        assert_eq!((w.status, w.imm), (WcStatus::Success, Some(0)), "key {i}");
        assert_eq!(response(&net, &w), vec![i as u8 + 1; 64]);
    }
    let items: Vec<(u64, u32)> = (0..10).map(|k| (APP_BASE + 0x3000 + k * 300, 40)).collect();
    let w = peer_offload(&mut net, BATCH, &batched_read_request(&items));
    assert_eq!(w.imm, Some(0));
    let want: Vec<u8> = items
        .iter()
        .flat_map(|&(addr, len)| {
            let at = (addr - APP_BASE - 0x3000) as usize;
            bytes[at..at + len as usize].to_vec()
        })
        .collect();
    assert_eq!(response(&net, &w), want);
    // Outside the region, a panic: error statuses; the QPs stay up and serve again.
    let w = peer_offload(
        &mut net,
        BATCH,
        &batched_read_request(&[(APP_BASE + APP_LEN, 8)]),
    );
    assert_eq!(w.imm, Some(1), "OutsideRegion");
    let w = peer_offload(&mut net, PANICS, b"boom");
    assert_eq!(w.imm, Some(9), "Panicked: {w:?}");
    let w = peer_offload(&mut net, LIST, &list_request(node(0), 503, 64));
    assert_eq!((w.imm, response(&net, &w)), (Some(0), vec![4; 64]));
    assert_eq!(
        net.peer.rdma.stack.qp_state(net.peer.rdma.qpn),
        Some(QpState::Rts)
    );
    let VerbsReply::QpAttrs(q) = ask(&c, VerbsRequest::QueryQp { qpn: a.qp.qpn }, &[]) else {
        panic!("QueryQp");
    };
    assert_eq!(q.qp_state, 3, "the application's QP is in RTS");

    // The list: three handlers with their counts.
    let Ok(AdminReply::Offloads { rows }) = ask_admin(&c, AdminRequest::OffloadList) else {
        panic!("OffloadList");
    };
    let counts: Vec<(u32, &str, u64, u64)> = rows
        .iter()
        .map(|r| (r.opcode, r.kind.as_str(), r.requests, r.errors))
        .collect();
    assert_eq!(
        counts,
        [
            (LIST, "ebpf", 4, 0),
            (BATCH, "rust", 2, 1),
            (PANICS, "rust", 1, 1)
        ]
    );
    assert_eq!(rows[0].regions, [(APP_BASE, APP_LEN)]);
    let k = net.until_counters("offload counters", |k| k.verbs_offload_requests == 7);
    assert_eq!(k.verbs_offload_errors, 2);
    assert_eq!(k.verbs_offload_loads_refused, 5);
    // Unloaded: gone from the list.
    let unload = AdminRequest::OffloadUnload {
        qpn: a.qp.qpn,
        opcode: PANICS,
    };
    assert_eq!(ask_admin(&c, unload.clone()), Ok(AdminReply::Done));
    assert!(ask_admin(&c, unload).unwrap_err().starts_with("ENOENT"));
    let Ok(AdminReply::Offloads { rows }) = ask_admin(&c, AdminRequest::OffloadList) else {
        panic!("OffloadList");
    };
    assert_eq!(rows.len(), 2);
}

#[test]
fn an_application_posts_offload_requests_and_sees_a_failure_as_rem_op_err() {
    let mut net = Net::start("offload-post");
    let mut c = net.attach("offload");
    let mut a = app(&mut c);
    let peer_qpn = net.peer.rdma.qpn;
    for to in 1..=3 {
        assert_eq!(
            modify(&c, a.qp.qpn, to, peer_qpn, PEER_IP),
            VerbsReply::Done
        );
    }
    let engine = PeerAddr {
        ip: ENGINE_IP,
        mac: PairConfig::default().macs[0],
    };
    net.peer.rdma.connect(a.qp.qpn, engine);
    net.peer
        .rdma
        .stack
        .register_offload(peer_qpn, 0x77)
        .unwrap();
    assert!(a.mem.write_at(0, b"ping"));
    let post = |a: &mut App, c: &mut Client, wr_id: u64| {
        let w = SendWqe {
            wr_id,
            opcode: WrOpcode::SluiceOffload,
            flags: send_flags::SIGNALED,
            sge: Some(WqeSge {
                addr: APP_BASE,
                length: 4,
                lkey: a.key,
            }),
            inline_len: 0,
            remote_addr: APP_BASE + 0x2000,
            rkey: a.key,
            imm: 0x77,
            resp_len: 256,
        };
        post_send(&mut a.qp, w, &[]);
        ring(c, a.ctx, a.qp.qpn);
    };
    // The peer's "handler": answers the first with a body, the second with status 5.
    let mut answered = 0;
    let mut serve = |net: &mut Net| {
        net.peer.pump();
        while let Some(r) = net.peer.rdma.stack.poll_offload() {
            assert_eq!((r.opcode, r.payload.as_slice()), (0x77, &b"ping"[..]));
            let (status, body): (u32, &[u8]) = if answered == 0 {
                (0, b"pong!")
            } else {
                (5, b"")
            };
            answered += 1;
            assert!(net
                .peer
                .rdma
                .stack
                .complete_offload(r.qpn, r.psn, status, body));
        }
    };
    post(&mut a, &mut c, 1);
    let e = next_cqe(&mut a.cq, &mut || serve(&mut net));
    assert_eq!((e.wr_id, e.status, e.opcode, e.byte_len), (1, 0, 64, 5));
    let mut got = [0u8; 5];
    assert!(a.mem.read_at(0x2000, &mut got));
    assert_eq!(&got, b"pong!");
    post(&mut a, &mut c, 2);
    let e = next_cqe(&mut a.cq, &mut || serve(&mut net));
    assert_eq!((e.wr_id, e.status, e.opcode), (2, 11, 64), "REM_OP_ERR");
    assert_eq!(u32::from_be(e.imm), 5, "the handler's status");
    // The QP is still up: a third request is answered (status 5 again).
    post(&mut a, &mut c, 3);
    let e = next_cqe(&mut a.cq, &mut || serve(&mut net));
    assert_eq!((e.wr_id, e.status), (3, 11));
    let VerbsReply::QpAttrs(q) = ask(&c, VerbsRequest::QueryQp { qpn: a.qp.qpn }, &[]) else {
        panic!("QueryQp");
    };
    assert_eq!(q.qp_state, 3);
}
