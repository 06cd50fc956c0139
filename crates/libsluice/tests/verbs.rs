//! RDMA verbs end to end: two real engines (the service over each end of the in-memory
//! device pair, docs/verbs.md), an application attached to each, one RC QP each, connected
//! to each other; WRITE, READ, SEND/RECV with immediate data and inline, checked byte for
//! byte with their completions; then the errors (a bad lkey, a post on a RESET QP), and the
//! same ping from C. No root needed.

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::two_engines::TwoEngines;
use sluice::verbs::{
    access, qp_mask, qp_state, wc_opcode, wc_status, CompletionQueue, Device, MemoryRegion,
    ProtectionDomain, QpAttrs, QpInit, QueuePair, RecvWr, SendData, SendOp, SendWr, Sge,
    VerbsError, WorkCompletion, WC_WITH_IMM,
};
use sluice::Sluice;
use sluice_shm::EventFd;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 2);
const WAIT: Duration = Duration::from_secs(20);

/// One side: its device, PD, a region, a CQ (with an event) and an RC QP.
struct Side {
    dev: Device,
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    pd: ProtectionDomain,
    _events: EventFd,
    _app: Arc<Sluice>,
}

const MR_LEN: usize = 1 << 16;

/// A side whose CQ and QP are queue-mode (doorbells) or pipe-mode (notification pipes).
fn side_in(socket: &Path, piped: bool) -> Side {
    let app = Sluice::attach(socket).expect("attach");
    let dev = Device::open(&app).expect("open the device");
    let pd = dev.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(
            MR_LEN,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    let events = EventFd::new().unwrap();
    use std::os::fd::AsFd;
    let init = QpInit {
        max_send_wr: 64,
        max_recv_wr: 64,
        // Pipe mode: up to one MTU inline (the inline QP).
        max_inline: if piped { 1024 } else { 256 },
    };
    let (cq, qp) = if piped {
        let cq = dev.create_pipe_cq(256, Some(events.as_fd())).unwrap();
        let qp = pd.create_pipe_qp(&cq, &cq, init).unwrap();
        assert!(qp.is_piped() && cq.is_piped());
        (cq, qp)
    } else {
        let cq = dev.create_cq(256, Some(events.as_fd())).unwrap();
        let qp = pd.create_qp(&cq, &cq, init).unwrap();
        (cq, qp)
    };
    assert_eq!(qp.state(), qp_state::RESET);
    Side {
        dev,
        qp,
        cq,
        mr,
        pd,
        _events: events,
        _app: app,
    }
}

/// RESET -> INIT -> RTR -> RTS towards `peer` (the sequence perftest uses).
fn connect(qp: &QueuePair, peer_ip: Ipv4Addr, peer_qpn: u32) {
    let init = QpAttrs {
        qp_state: qp_state::INIT,
        access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttrs::default()
    };
    qp.modify(
        &init,
        qp_mask::STATE | qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::ACCESS_FLAGS,
    )
    .expect("to INIT");
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
    qp.modify(
        &rtr,
        qp_mask::STATE
            | qp_mask::AV
            | qp_mask::PATH_MTU
            | qp_mask::DEST_QPN
            | qp_mask::RQ_PSN
            | qp_mask::MAX_DEST_RD_ATOMIC
            | qp_mask::MIN_RNR_TIMER,
    )
    .expect("to RTR");
    let rts = QpAttrs {
        qp_state: qp_state::RTS,
        sq_psn: 100,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttrs::default()
    };
    qp.modify(
        &rts,
        qp_mask::STATE
            | qp_mask::SQ_PSN
            | qp_mask::TIMEOUT
            | qp_mask::RETRY_CNT
            | qp_mask::RNR_RETRY
            | qp_mask::MAX_QP_RD_ATOMIC,
    )
    .expect("to RTS");
    assert_eq!(qp.query().unwrap().qp_state, qp_state::RTS);
}

fn pair_up(name: &str) -> (TwoEngines, Side, Side) {
    pair_up_in(name, false)
}

fn pair_up_in(name: &str, piped: bool) -> (TwoEngines, Side, Side) {
    let e = TwoEngines::start("verbs", name, [A_IP, B_IP], 0x5eed, true);
    let a = side_in(&e.sockets[0], piped);
    let b = side_in(&e.sockets[1], piped);
    assert_eq!(a.dev.attrs().ip, A_IP);
    assert_eq!(b.dev.attrs().ip, B_IP);
    connect(&a.qp, B_IP, b.qp.qpn());
    connect(&b.qp, A_IP, a.qp.qpn());
    (e, a, b)
}

/// The next completion of `cq` (waiting on its event).
fn one(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let n = cq.wait(&mut wc, Some(WAIT)).expect("wait");
    assert_eq!(n, 1, "no completion in {WAIT:?}");
    wc[0]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32 % 31) as u8
                ^ seed
        })
        .collect()
}

fn sge(mr: &MemoryRegion, offset: usize, len: usize) -> Sge {
    Sge {
        addr: mr.addr() + offset as u64,
        length: len as u32,
        lkey: mr.key(),
    }
}

#[test]
fn write_read_and_send_move_exact_bytes_between_two_engines() {
    exact_bytes(false);
}

/// The same operations with notification pipes: no doorbell, the QP's work requests in
/// its context's pipe, its completions demultiplexed from the completion pipe.
#[test]
fn write_read_and_send_move_exact_bytes_through_notification_pipes() {
    exact_bytes(true);
}

fn exact_bytes(piped: bool) {
    let (_e, a, b) = pair_up_in(if piped { "ops-pipes" } else { "ops" }, piped);

    // RDMA WRITE: 20000 bytes from A's region to B's at offset 1000.
    let data = pattern(20_000, 1);
    a.mr.write_at(0, &data).unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_addr: b.mr.addr() + 1000,
            rkey: b.mr.key(),
        },
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Sge(sge(&a.mr, 0, data.len())),
    }])
    .unwrap();
    let wc = one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, wc_status::SUCCESS, wc_opcode::RDMA_WRITE)
    );
    let mut got = vec![0u8; data.len()];
    b.mr.read_at(1000, &mut got).unwrap();
    assert!(got == data, "the WRITE's bytes differ");

    // RDMA READ: B's bytes 30000.. back into A's region at 40000.
    let theirs = pattern(5000, 2);
    b.mr.write_at(30_000, &theirs).unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Read {
            remote_addr: b.mr.addr() + 30_000,
            rkey: b.mr.key(),
        },
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Sge(sge(&a.mr, 40_000, theirs.len())),
    }])
    .unwrap();
    let wc = one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, wc_status::SUCCESS, wc_opcode::RDMA_READ)
    );
    assert_eq!(wc.byte_len, theirs.len() as u32);
    let mut got = vec![0u8; theirs.len()];
    a.mr.read_at(40_000, &mut got).unwrap();
    assert!(got == theirs, "the READ's bytes differ");

    // SEND with immediate data into a receive of B's.
    b.qp.post_recv(&[RecvWr {
        wr_id: 77,
        sge: Some(sge(&b.mr, 50_000, 4096)),
    }])
    .unwrap();
    let msg = pattern(3000, 3);
    a.mr.write_at(10_000, &msg).unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::SendWithImm {
            imm: 0x1234_5678u32.to_be(),
        },
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Sge(sge(&a.mr, 10_000, msg.len())),
    }])
    .unwrap();
    let wc = one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (77, wc_status::SUCCESS, wc_opcode::RECV)
    );
    assert_eq!(wc.byte_len, msg.len() as u32);
    assert_eq!(wc.wc_flags & WC_WITH_IMM, WC_WITH_IMM);
    assert_eq!(wc.imm_data, 0x1234_5678u32.to_be());
    assert_eq!(wc.qp_num, b.qp.qpn());
    let mut got = vec![0u8; msg.len()];
    b.mr.read_at(50_000, &mut got).unwrap();
    assert!(got == msg, "the SEND's bytes differ");
    let wc = one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (3, wc_status::SUCCESS, wc_opcode::SEND)
    );

    // Inline SEND gathered from two buffers of any memory, into a heap buffer B registered
    // with reg_mr (its pages become shared, its pointer stays valid).
    // Only in queue mode: reg_mr remaps heap pages process-wide and keeps their spans,
    // so a second test doing the same in this process could meet a partial overlap
    // (EINVAL); pipe mode takes a region from alloc_mr.
    let mut heap = vec![0u8; 3 * 4096];
    let hmr = if piped {
        b.pd.alloc_mr(heap.len(), access::LOCAL_WRITE).unwrap()
    } else {
        // SAFETY: the Vec's buffer stays allocated (and unmoved) while the region exists,
        // and no other thread touches it.
        unsafe {
            b.pd.reg_mr(heap.as_mut_ptr(), heap.len(), access::LOCAL_WRITE)
        }
        .unwrap()
    };
    b.qp.post_recv(&[RecvWr {
        wr_id: 78,
        sge: Some(sge(&hmr, 100, 1000)),
    }])
    .unwrap();
    let head = pattern(150, 4);
    let tail = pattern(90, 5);
    let parts: [&[u8]; 2] = [&head, &tail];
    a.qp.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::Send,
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Inline(&parts),
    }])
    .unwrap();
    let wc = one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (78, wc_status::SUCCESS, 240)
    );
    assert_eq!(wc.wc_flags & WC_WITH_IMM, 0);
    if piped {
        hmr.read_at(0, &mut heap).unwrap();
    }
    assert_eq!(&heap[100..250], &head[..]);
    assert_eq!(&heap[250..340], &tail[..]);
    assert_eq!(one(&a.cq).wr_id, 4);

    // WRITE with immediate: the bytes land and B's receive completes with the immediate.
    b.qp.post_recv(&[RecvWr {
        wr_id: 79,
        sge: None,
    }])
    .unwrap();
    let w = pattern(777, 6);
    a.mr.write_at(0, &w).unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 5,
        op: SendOp::WriteWithImm {
            remote_addr: b.mr.addr() + 60_000,
            rkey: b.mr.key(),
            imm: 9u32.to_be(),
        },
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Sge(sge(&a.mr, 0, w.len())),
    }])
    .unwrap();
    let wc = one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.imm_data),
        (
            79,
            wc_status::SUCCESS,
            wc_opcode::RECV_RDMA_WITH_IMM,
            9u32.to_be()
        )
    );
    let mut got = vec![0u8; w.len()];
    b.mr.read_at(60_000, &mut got).unwrap();
    assert!(got == w);
    assert_eq!(one(&a.cq).wr_id, 5);
    drop(hmr);
}

#[test]
fn a_bad_lkey_and_a_post_in_reset_are_errors() {
    let (_e, a, b) = pair_up("errors");
    // A key this application never registered: the work request completes with
    // LOC_PROT_ERR and the QP goes to ERR.
    a.qp.post_send(&[SendWr {
        wr_id: 11,
        op: SendOp::Write {
            remote_addr: b.mr.addr(),
            rkey: b.mr.key(),
        },
        flags: sluice::verbs::send_flags::SIGNALED,
        data: SendData::Sge(Sge {
            addr: a.mr.addr(),
            length: 64,
            lkey: a.mr.key() ^ 0x5a5a,
        }),
    }])
    .unwrap();
    let wc = one(&a.cq);
    assert_eq!(wc.wr_id, 11);
    assert_eq!(wc.status, wc_status::LOC_PROT_ERR);
    assert_eq!(a.qp.query().unwrap().qp_state, qp_state::ERR);

    // A fresh QP in RESET refuses posts.
    let fresh =
        b.pd.create_qp(
            &b.cq,
            &b.cq,
            QpInit {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_inline: 0,
            },
        )
        .unwrap();
    let e = fresh
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::Send,
            flags: 0,
            data: SendData::Empty,
        }])
        .unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, libc::EINVAL));
    let e = fresh
        .post_recv(&[RecvWr {
            wr_id: 1,
            sge: None,
        }])
        .unwrap_err();
    assert_eq!(e.error.errno(), libc::EINVAL);
    // More receives than the QP and its verbs queue (256 entries) hold: the post
    // stops with ENOMEM at the first that does not fit, the ones before it are posted.
    let many: Vec<RecvWr> = (0..400)
        .map(|i| RecvWr {
            wr_id: i,
            sge: None,
        })
        .collect();
    let held = b.qp.caps().max_recv_wr as usize;
    let e = b.qp.post_recv(&many).unwrap_err();
    assert_eq!(e.error.errno(), libc::ENOMEM);
    assert!(
        (256..=256 + held).contains(&e.index),
        "stopped at {} (the engine takes up to {held}, the queue holds 256)",
        e.index
    );
    // A PD in use cannot go; a CQ in use cannot go.
    assert!(matches!(b.pd.dealloc(), Err(VerbsError::Busy)));
    drop(fresh);
}

/// examples/c/rdma_ping.c, compiled against sluice.h: a server and a client process, each
/// attached to one of the engines, WRITE then an inline SEND with immediate data.
#[test]
fn the_c_ping_writes_and_sends_between_two_processes() {
    c_ping(&[]);
}

/// rdma_ping.c in notification-pipe mode: pipe CQs and QPs from C, the same WRITE and
/// SEND, then a flagged inline message the server finds by polling its slot; the new C
/// calls' error paths (NULL, too long, bad handle) are checked on both sides.
#[test]
fn the_c_ping_in_pipe_mode_sends_a_flagged_inline_message() {
    c_ping(&["pipe"]);
}

/// Runs rdma_ping.c's server and client, with `extra` arguments on both.
fn c_ping(extra: &[&str]) {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let tag = if extra.is_empty() { "c" } else { "cpipe" };
    let e = TwoEngines::start("verbs", tag, [A_IP, B_IP], 0x5eed, true);
    let dir = std::env::temp_dir().join(format!("libsluice-verbs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("rdma_ping");
    common::c::compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/rdma_ping.c"),
        &exe,
    );
    let spawn = |args: &[&str], socket: &Path| {
        common::c::command(&exe)
            .args(args)
            .args(extra)
            .env("SLUICE_SOCKET", socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut server = spawn(&["server"], &e.sockets[1]);
    let mut s_out = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = s_out.next().expect("the server said nothing").unwrap();
    let f: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{first:?}");
    assert_eq!(f[0], "server");
    let b_ip = B_IP.to_string();
    let mut client = spawn(&["client", &b_ip, f[1], f[2], f[3]], &e.sockets[0]);
    let mut c_out = BufReader::new(client.stdout.take().unwrap()).lines();
    let line = c_out.next().expect("the client said nothing").unwrap();
    let rest = line.strip_prefix("client ").expect("client line");
    assert!(rest.starts_with(&A_IP.to_string()), "{line:?}");
    let mut s_in = server.stdin.take().unwrap();
    writeln!(s_in, "{rest}").unwrap();
    s_in.flush().unwrap();
    assert_eq!(s_out.next().unwrap().unwrap(), "ready");
    let mut c_in = client.stdin.take().unwrap();
    writeln!(c_in, "go").unwrap();
    c_in.flush().unwrap();
    let c_rest: Vec<String> = c_out.map(|l| l.unwrap()).collect();
    let s_rest: Vec<String> = s_out.map(|l| l.unwrap()).collect();
    assert!(client.wait().unwrap().success(), "client: {c_rest:?}");
    assert!(server.wait().unwrap().success(), "server: {s_rest:?}");
    assert_eq!(c_rest, ["ok"]);
    assert_eq!(s_rest, ["ok"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Posts until the pipe takes them all (ENOMEM while the engine has not drained it yet).
fn post_all<T>(wrs: &[T], post: impl Fn(&[T]) -> Result<(), sluice::verbs::PostError>) {
    let mut at = 0;
    let start = std::time::Instant::now();
    while at < wrs.len() {
        match post(&wrs[at..]) {
            Ok(()) => return,
            Err(e) if e.error.errno() == libc::ENOMEM => {
                at += e.index;
                assert!(start.elapsed() < WAIT, "the pipe never drained");
                std::thread::yield_now();
            }
            Err(e) => panic!("post: {e:?}"),
        }
    }
}

/// Every completion `cq` gives until `n` came (or the wait ends).
fn completions(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::with_capacity(n);
    let mut buf = [WorkCompletion::default(); 64];
    while out.len() < n {
        let k = cq.wait(&mut buf, Some(WAIT)).expect("wait");
        assert!(k > 0, "{} of {n} completions in {WAIT:?}", out.len());
        out.extend_from_slice(&buf[..k]);
    }
    out
}

/// Completions of one CQ through the pipes keep the order of each QP's work requests; the
/// receives' `wr_id`s (tags in the pipe, four receives to a line) come back as posted.
#[test]
fn pipe_completions_keep_each_qps_order_and_receive_ids() {
    let (_e, a, b) = pair_up_in("order-pipes", true);
    const N: usize = 50;
    let recvs: Vec<RecvWr> = (0..N)
        .map(|i| RecvWr {
            wr_id: 0xabc0_0000 + 7 * i as u64,
            sge: Some(sge(&b.mr, 128 * i, 128)),
        })
        .collect();
    post_all(&recvs, |w| b.qp.post_recv(w));
    for i in 0..N {
        a.mr.write_at(128 * i, &pattern(100, i as u8)).unwrap();
    }
    let sends: Vec<SendWr> = (0..N)
        .map(|i| SendWr {
            wr_id: i as u64,
            op: SendOp::Send,
            flags: sluice::verbs::send_flags::SIGNALED,
            data: SendData::Sge(sge(&a.mr, 128 * i, 100)),
        })
        .collect();
    post_all(&sends, |w| a.qp.post_send(w));
    let sent = completions(&a.cq, N);
    let got = completions(&b.cq, N);
    for (i, (s, r)) in sent.iter().zip(&got).enumerate() {
        assert_eq!(
            (s.wr_id, s.status, s.opcode),
            (i as u64, 0, wc_opcode::SEND)
        );
        assert_eq!(r.wr_id, 0xabc0_0000 + 7 * i as u64, "receive {i} in order");
        assert_eq!((r.status, r.opcode, r.byte_len), (0, wc_opcode::RECV, 100));
        let mut buf = vec![0u8; 100];
        b.mr.read_at(128 * i, &mut buf).unwrap();
        assert!(buf == pattern(100, i as u8), "message {i} byte-exact");
    }
    assert_eq!(a.cq.overruns() + b.cq.overruns(), 0);
}

/// 2,000 QPs in one context (one thread), all sharing its one work-request pipe and one
/// completion pipe per side: each sends one message to its peer QP, byte-exact. The
/// number of QPs is bounded by the device's limits, not by the region's verbs queues (16
/// in this rig).
#[test]
fn two_thousand_qps_share_one_contexts_pipes() {
    const QPS: usize = 2000;
    const MSG: usize = 64;
    let e = TwoEngines::start("verbs", "qps-2000", [A_IP, B_IP], 0x5eed, true);
    let mut sides = Vec::new();
    for socket in &e.sockets {
        let app = Sluice::attach(socket).unwrap();
        let dev = Device::open(&app).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let mr = pd.alloc_mr(QPS * MSG, access::LOCAL_WRITE).unwrap();
        let cq = dev.create_pipe_cq(4096, None).unwrap();
        let init = QpInit {
            max_send_wr: 2,
            max_recv_wr: 2,
            max_inline: 0,
        };
        let qps: Vec<QueuePair> = (0..QPS)
            .map(|_| pd.create_pipe_qp(&cq, &cq, init).unwrap())
            .collect();
        sides.push((app, dev, pd, mr, cq, qps));
    }
    let (a, b) = (&sides[0], &sides[1]);
    for k in 0..QPS {
        connect(&a.5[k], B_IP, b.5[k].qpn());
        connect(&b.5[k], A_IP, a.5[k].qpn());
    }
    for (k, qp) in b.5.iter().enumerate() {
        post_all(
            &[RecvWr {
                wr_id: k as u64,
                sge: Some(sge(&b.3, MSG * k, MSG)),
            }],
            |w| qp.post_recv(w),
        );
    }
    for (k, qp) in a.5.iter().enumerate() {
        a.3.write_at(MSG * k, &pattern(MSG, k as u8 ^ (k >> 8) as u8))
            .unwrap();
        post_all(
            &[SendWr {
                wr_id: k as u64,
                op: SendOp::Send,
                flags: sluice::verbs::send_flags::SIGNALED,
                data: SendData::Sge(sge(&a.3, MSG * k, MSG)),
            }],
            |w| qp.post_send(w),
        );
    }
    let qpn_a: std::collections::HashMap<u32, usize> =
        a.5.iter().enumerate().map(|(k, q)| (q.qpn(), k)).collect();
    let qpn_b: std::collections::HashMap<u32, usize> =
        b.5.iter().enumerate().map(|(k, q)| (q.qpn(), k)).collect();
    let mut seen = vec![false; QPS];
    for wc in completions(&a.4, QPS) {
        assert_eq!(wc.status, wc_status::SUCCESS);
        assert_eq!(Some(&(wc.wr_id as usize)), qpn_a.get(&wc.qp_num));
        seen[wc.wr_id as usize] = true;
    }
    assert!(seen.iter().all(|&s| s), "every send completed once");
    let mut seen = vec![false; QPS];
    for wc in completions(&b.4, QPS) {
        assert_eq!((wc.status, wc.byte_len), (wc_status::SUCCESS, MSG as u32));
        let k = wc.wr_id as usize;
        assert_eq!(Some(&k), qpn_b.get(&wc.qp_num), "the receive's own QP");
        let mut buf = vec![0u8; MSG];
        b.3.read_at(MSG * k, &mut buf).unwrap();
        assert!(
            buf == pattern(MSG, k as u8 ^ (k >> 8) as u8),
            "QP {k} byte-exact"
        );
        seen[k] = true;
    }
    assert!(seen.iter().all(|&s| s), "every receive completed once");
    assert_eq!(a.4.overruns() + b.4.overruns(), 0);
}

/// The inline QP: a 64-byte and a 1,000-byte payload carried inline in the pipe, placed
/// in the peer's slot with the trailer last; the peer sees them by polling the flag, with
/// no receive posted and no completion; the slot is reused; too long is refused.
#[test]
fn the_inline_qp_places_payloads_the_peer_finds_by_its_flag() {
    let (_e, a, b) = pair_up_in("inline-qp", true);
    const SLOT: usize = 2048;
    let slot_addr = b.mr.addr() + 4096;
    let mut out = vec![0u8; SLOT];
    assert_eq!(b.mr.poll_inline_recv(4096, SLOT, &mut out).unwrap(), None);
    for (round, len) in [64usize, 1000, 64].into_iter().enumerate() {
        let data = pattern(len, 40 + round as u8);
        a.qp.post_send_inline_flagged(round as u64, &data, slot_addr, SLOT, b.mr.key(), true)
            .unwrap();
        let start = std::time::Instant::now();
        let got = loop {
            if let Some(n) = b.mr.poll_inline_recv(4096, SLOT, &mut out).unwrap() {
                break n;
            }
            assert!(start.elapsed() < WAIT, "round {round}: no flag");
            std::hint::spin_loop();
        };
        assert_eq!(got, len);
        assert!(out[..len] == data[..], "round {round} byte-exact");
        let wc = one(&a.cq);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (round as u64, 0, wc_opcode::RDMA_WRITE)
        );
        assert_eq!(
            b.mr.poll_inline_recv(4096, SLOT, &mut out).unwrap(),
            None,
            "flag cleared"
        );
    }
    assert!(
        !b.cq.has_completion(),
        "no completion on the receiver's path"
    );
    let too_long = vec![0u8; 1024 - 8 + 1];
    let e =
        a.qp.post_send_inline_flagged(9, &too_long, slot_addr, SLOT, b.mr.key(), true)
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
}
