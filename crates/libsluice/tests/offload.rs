//! Offload handlers through two real engines (docs/offload.md "Through the engine's
//! service"): B's application registers the eBPF list traversal and the example Rust
//! library's batched READ and panicking handler on its QP with its region
//! (`QueuePair::register_offload`); A's application posts `SendOp::Offload` requests and gets
//! the answers in its region; a handler's failure completes REM_OP_ERR with its status and
//! both QPs stay in RTS. No root needed.

mod common;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use common::two_engines::TwoEngines;
use sluice::verbs::{
    access, qp_mask, qp_state, wc_opcode, wc_status, Device, MemoryRegion, OffloadHandler, QpAttrs,
    QpInit, QueuePair, SendData, SendOp, SendWr, Sge, VerbsError, WorkCompletion,
};
use sluice::Sluice;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 13, 0, 2);
const WAIT: Duration = Duration::from_secs(20);
const MR_LEN: usize = 1 << 16;
const LIST: u32 = 0x1234;
const BATCH: u32 = 0x1235;
const PANICS: u32 = 0x1236;

struct Side {
    qp: QueuePair,
    cq: sluice::verbs::CompletionQueue,
    mr: MemoryRegion,
    _app: std::sync::Arc<Sluice>,
}

fn side(socket: &std::path::Path) -> Side {
    let app = Sluice::attach(socket).expect("attach");
    let dev = Device::open(&app).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(
            MR_LEN,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline: 0,
    };
    let qp = pd.create_qp(&cq, &cq, init).unwrap();
    Side {
        qp,
        cq,
        mr,
        _app: app,
    }
}

fn connect(qp: &QueuePair, peer_ip: Ipv4Addr, peer_qpn: u32) {
    let init = QpAttrs {
        qp_state: qp_state::INIT,
        access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttrs::default()
    };
    let m = qp_mask::STATE | qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::ACCESS_FLAGS;
    qp.modify(&init, m).unwrap();
    let rtr = QpAttrs {
        qp_state: qp_state::RTR,
        path_mtu: 3,
        dest_qpn: peer_qpn,
        rq_psn: 100,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        dest_ip: Some(peer_ip),
        ..QpAttrs::default()
    };
    let m = qp_mask::STATE
        | qp_mask::AV
        | qp_mask::PATH_MTU
        | qp_mask::DEST_QPN
        | qp_mask::RQ_PSN
        | qp_mask::MAX_DEST_RD_ATOMIC
        | qp_mask::MIN_RNR_TIMER;
    qp.modify(&rtr, m).unwrap();
    let rts = QpAttrs {
        qp_state: qp_state::RTS,
        sq_psn: 100,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttrs::default()
    };
    let m = qp_mask::STATE
        | qp_mask::SQ_PSN
        | qp_mask::TIMEOUT
        | qp_mask::RETRY_CNT
        | qp_mask::RNR_RETRY
        | qp_mask::MAX_QP_RD_ATOMIC;
    qp.modify(&rts, m).unwrap();
}

fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().join("libsluice_offload_examples.so");
    assert!(p.exists(), "{} (a dev-dependency)", p.display());
    p
}

/// A posts an OFFLOAD of `req` (its region's first bytes) for `opcode`; the completion and
/// the response (at offset 0x8000 of its region).
fn offload(a: &Side, opcode: u32, req: &[u8]) -> (WorkCompletion, Vec<u8>) {
    a.mr.write_at(0, req).unwrap();
    let resp = Sge {
        addr: a.mr.addr() + 0x8000,
        length: 1024,
        lkey: a.mr.key(),
    };
    a.qp.post_send(&[SendWr {
        wr_id: u64::from(opcode),
        op: SendOp::Offload { opcode, resp },
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Sge(Sge {
            addr: a.mr.addr(),
            length: req.len() as u32,
            lkey: a.mr.key(),
        }),
    }])
    .unwrap();
    let mut wc = [WorkCompletion::default(); 1];
    let n = a.cq.wait(&mut wc, Some(WAIT)).expect("wait");
    assert_eq!(n, 1, "no completion in {WAIT:?}");
    let mut body = vec![0u8; wc[0].byte_len as usize];
    a.mr.read_at(0x8000, &mut body).unwrap();
    (wc[0], body)
}

fn list_request(head: u64, key: u64, hops: u32) -> Vec<u8> {
    let mut r = head.to_le_bytes().to_vec();
    r.extend_from_slice(&key.to_le_bytes());
    r.extend_from_slice(&hops.to_le_bytes());
    r
}

#[test]
fn handlers_registered_through_libsluice_serve_offloads_between_two_engines() {
    let e = TwoEngines::start("offload", "serve", [A_IP, B_IP], 0x0ff1, true);
    let a = side(&e.sockets[0]);
    let b = side(&e.sockets[1]);
    connect(&a.qp, B_IP, b.qp.qpn());
    connect(&b.qp, A_IP, a.qp.qpn());

    // B's memory: a list of 12 nodes (key 100 + i, value i + 1), and bytes to batch-read.
    let base = b.mr.addr();
    let node = |i: u64| base + 0x1000 + i * 80;
    for i in 0..12u64 {
        let mut n = (100 + i).to_le_bytes().to_vec();
        let next = if i < 11 { node(i + 1) } else { 0 };
        n.extend_from_slice(&next.to_le_bytes());
        n.extend_from_slice(&[i as u8 + 1; 64]);
        b.mr.write_at((node(i) - base) as usize, &n).unwrap();
    }
    let bytes: Vec<u8> = (0..2048u32).map(|i| (i * 7 % 251) as u8).collect();
    b.mr.write_at(0x4000, &bytes).unwrap();

    let ebpf = OffloadHandler::Ebpf {
        name: "offload_list.o",
        object: sluice_ebpf::programs::OFFLOAD_LIST,
    };
    b.qp.register_offload(LIST, ebpf, &[&b.mr]).unwrap();
    let lib = library();
    let rust = |handler| OffloadHandler::Rust {
        path: &lib,
        handler,
    };
    b.qp.register_offload(BATCH, rust("batched_read"), &[&b.mr])
        .unwrap();
    b.qp.register_offload(PANICS, rust("panics"), &[&b.mr])
        .unwrap();
    match b.qp.register_offload(LIST, ebpf, &[&b.mr]) {
        Err(e @ VerbsError::OffloadRefused(_)) => assert_eq!(e.errno(), libc::EEXIST, "{e}"),
        other => panic!("{other:?}"),
    }

    for i in [0u64, 5, 11] {
        let (wc, body) = offload(&a, LIST, &list_request(node(0), 100 + i, 64));
        assert_eq!(
            (wc.status, wc.opcode, wc.offload_status()),
            (wc_status::SUCCESS, wc_opcode::SLUICE_OFFLOAD, Some(0))
        );
        assert_eq!(body, vec![i as u8 + 1; 64]);
    }
    let mut req = 3u32.to_le_bytes().to_vec();
    for k in 0..3u64 {
        req.extend_from_slice(&(base + 0x4000 + k * 500).to_le_bytes());
        req.extend_from_slice(&100u32.to_le_bytes());
    }
    let (wc, body) = offload(&a, BATCH, &req);
    assert_eq!(wc.status, wc_status::SUCCESS);
    let want: Vec<u8> = (0..3)
        .flat_map(|k| bytes[k * 500..k * 500 + 100].to_vec())
        .collect();
    assert_eq!(body, want);
    // A handler that panics: REM_OP_ERR with status 9; the QPs stay up.
    let (wc, _) = offload(&a, PANICS, b"boom");
    assert_eq!(
        (wc.status, wc.offload_status()),
        (wc_status::REM_OP_ERR, Some(9))
    );
    let (wc, body) = offload(&a, LIST, &list_request(node(0), 102, 64));
    assert_eq!((wc.status, body), (wc_status::SUCCESS, vec![3; 64]));
    assert_eq!(a.qp.query().unwrap().qp_state, qp_state::RTS);
    assert_eq!(b.qp.query().unwrap().qp_state, qp_state::RTS);

    let rows = b.qp.offload_handlers().unwrap();
    let counts: Vec<(u32, u64, u64)> = rows
        .iter()
        .map(|r| (r.opcode, r.requests, r.errors))
        .collect();
    assert_eq!(counts, [(LIST, 4, 0), (BATCH, 1, 0), (PANICS, 1, 1)]);
    b.qp.unregister_offload(PANICS).unwrap();
    assert_eq!(b.qp.offload_handlers().unwrap().len(), 2);
}
