//! OFFLOAD requests between two RDMA stacks (docs/offload.md): a request is received like a
//! SEND and handed out to the offload engine (here a function run by the test), the
//! response lands in the requester's response buffer with the handler's status in `imm`;
//! an opcode no handler registered is NAKed (invalid request) and counted; under loss
//! every request is answered exactly, its handler run once.

mod common;

use common::host::{connect, host, run, Host, Mem, BASE};
use proptest::prelude::*;
use sluice_rdma::qp::{SendOp, SendWr, Sge};
use sluice_rdma::verbs::{QpState, WcOpcode, WcStatus, WorkCompletion};

const OPCODE: u32 = 0x1234;

fn offload_wr(h: &Host, wr_id: u64, req: (u64, u32), resp: (u64, u32), opcode: u32) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Offload {
            opcode,
            resp: Sge {
                addr: resp.0,
                len: resp.1,
                lkey: h.key,
            },
        },
        sge: Sge {
            addr: req.0,
            len: req.1,
            lkey: h.key,
        },
        signaled: true,
        solicited: false,
    }
}

fn at(m: &Mem, addr: u64, len: usize) -> Vec<u8> {
    m.0[(addr - BASE) as usize..(addr - BASE) as usize + len].to_vec()
}

/// The test's handler: the request reversed, then its length.
fn handler(req: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = req.iter().rev().copied().collect();
    out.push(req.len() as u8);
    out
}

/// Hands every waiting request on `b` to [`handler`]; how many ran.
fn serve(b: &mut Host) -> usize {
    let mut n = 0;
    while let Some(r) = b.stack.poll_offload() {
        assert_eq!(r.opcode, OPCODE);
        let mut resp = handler(&r.payload);
        resp.truncate(r.resp_cap as usize);
        assert!(b.stack.complete_offload(r.qpn, r.psn, 0, &resp));
        n += 1;
    }
    n
}

fn poll(h: &mut Host) -> Vec<WorkCompletion> {
    let mut wc = Vec::new();
    h.stack.poll_cq(h.cq, 64, &mut wc).unwrap();
    wc
}

#[test]
fn an_offload_request_is_served_and_its_response_lands_in_the_response_buffer() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (100, 200), &[]);
    connect(&mut b, qa, (200, 100), &[]);
    b.stack.register_offload(b.qpn, OPCODE).unwrap();
    let wr = offload_wr(&a, 7, (BASE, 300), (BASE + 0x1_0000, 512), OPCODE);
    a.stack.post_send(a.qpn, wr).unwrap();
    run(&mut a, &mut b, 1, &mut |_| {});
    // Received like a SEND, not acknowledged yet: the response acknowledges it.
    assert!(poll(&mut a).is_empty());
    assert_eq!(serve(&mut b), 1);
    run(&mut a, &mut b, 1, &mut |_| {});
    let wc = poll(&mut a);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (
            wc[0].wr_id,
            wc[0].status,
            wc[0].opcode,
            wc[0].byte_len,
            wc[0].imm
        ),
        (7, WcStatus::Success, WcOpcode::Offload, 301, Some(0))
    );
    let want = handler(&at(&a.mem, BASE, 300));
    assert_eq!(at(&a.mem, BASE + 0x1_0000, 301), want);
    // No receive was taken on b.
    assert!(poll(&mut b).is_empty());
    let c = b.stack.offload_counters();
    assert_eq!((c.requests, c.responses), (1, 1));
}

#[test]
fn a_handler_error_status_completes_the_request_and_both_qps_stay_up() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (100, 200), &[]);
    connect(&mut b, qa, (200, 100), &[]);
    b.stack.register_offload(b.qpn, OPCODE).unwrap();
    for i in 0..2 {
        let wr = offload_wr(&a, i, (BASE, 8), (BASE + 0x1_0000, 64), OPCODE);
        a.stack.post_send(a.qpn, wr).unwrap();
    }
    run(&mut a, &mut b, 1, &mut |_| {});
    let first = b.stack.poll_offload().unwrap();
    // A body over the capacity the requester gave is refused and counted.
    assert!(!b.stack.complete_offload(b.qpn, first.psn, 0, &[0; 65]));
    assert!(b.stack.complete_offload(b.qpn, first.psn, 3, &[]));
    // The second goes once the first is answered (max_rd_atomic 1: OFFLOADs count as READs).
    run(&mut a, &mut b, 1, &mut |_| {});
    let second = b.stack.poll_offload().unwrap();
    assert!(b.stack.complete_offload(b.qpn, second.psn, 0, b"ok"));
    // Twice is refused.
    assert!(!b.stack.complete_offload(b.qpn, second.psn, 0, b"ok"));
    run(&mut a, &mut b, 1, &mut |_| {});
    let wc = poll(&mut a);
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.imm, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (0, WcStatus::Success, Some(3), 0),
            (1, WcStatus::Success, Some(0), 2)
        ]
    );
    let c = b.stack.offload_counters();
    assert_eq!((c.error_responses, c.bad_completions), (1, 2));
    assert_eq!(a.stack.qp_state(a.qpn), Some(QpState::Rts));
    assert_eq!(b.stack.qp_state(b.qpn), Some(QpState::Rts));
}

#[test]
fn an_unknown_offload_opcode_is_nakked_invalid_request_and_the_responder_survives() {
    let (mut a, mut b) = (host(1), host(2));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (100, 200), &[]);
    connect(&mut b, qa, (200, 100), &[(BASE, 4096)]);
    b.stack.register_offload(b.qpn, OPCODE).unwrap();
    let wr = offload_wr(&a, 1, (BASE, 8), (BASE + 0x1_0000, 64), 0x9999);
    a.stack.post_send(a.qpn, wr).unwrap();
    run(&mut a, &mut b, 1, &mut |_| {});
    assert!(b.stack.poll_offload().is_none());
    assert_eq!(b.stack.offload_counters().unknown_opcode, 1);
    // The requester hears REM_INV_REQ and, as IBA 9.9.5 says for that NAK, fails.
    let wc = poll(&mut a);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RemInvReqErr)]
    );
    // The responder was not touched: still RTS, its receive still posted, its expected
    // PSN where it was (a fresh requester at the same PSN is served).
    assert_eq!(b.stack.qp_state(b.qpn), Some(QpState::Rts));
    let mut a2 = host(1);
    connect(&mut a2, (b.qpn, b.addr), (100, 200), &[]);
    let wr = offload_wr(&a2, 2, (BASE, 8), (BASE + 0x1_0000, 64), OPCODE);
    a2.stack.post_send(a2.qpn, wr).unwrap();
    run(&mut a2, &mut b, 1, &mut |_| {});
    assert_eq!(serve(&mut b), 1);
    run(&mut a2, &mut b, 1, &mut |_| {});
    let wc = poll(&mut a2);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::Success)]
    );
}

/// Runs both stacks in virtual time over a link that drops frames with `loss` (seeded),
/// serving offload requests as they arrive, until `a` has `want` completions.
fn run_lossy(
    a: &mut Host,
    b: &mut Host,
    loss: f64,
    seed: u64,
    want: usize,
) -> (Vec<WorkCompletion>, usize) {
    let mut rng = seed | 1;
    let mut drop = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % 10_000) as f64 / 10_000.0 < loss
    };
    let mut now = 1u64;
    let mut buf = vec![0u8; 2048];
    let mut wcs = Vec::new();
    let mut served = 0;
    for _ in 0..100_000 {
        let mut moved = false;
        while let Some(n) = a.stack.poll_transmit(now, &mut a.mem, &mut buf) {
            moved = true;
            if !drop() {
                b.stack.handle_frame(now, &mut b.mem, &buf[..n]);
            }
        }
        served += serve(b);
        while let Some(n) = b.stack.poll_transmit(now, &mut b.mem, &mut buf) {
            moved = true;
            if !drop() {
                a.stack.handle_frame(now, &mut a.mem, &buf[..n]);
            }
        }
        wcs.extend(poll(a));
        if wcs.len() >= want {
            break;
        }
        if !moved {
            let next = [a.stack.poll_timeout(), b.stack.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .expect("something is outstanding, so a timer is set");
            now = now.max(next);
            a.stack.handle_timeout(now, &mut a.mem);
            b.stack.handle_timeout(now, &mut b.mem);
        }
    }
    (wcs, served)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn under_loss_every_request_is_answered_exactly_once_and_in_order(
        seed in any::<u64>(),
        lens in proptest::collection::vec(0u32..1024, 1..16),
        sends in proptest::collection::vec(any::<bool>(), 16),
    ) {
        let (mut a, mut b) = (host(1), host(2));
        let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
        connect(&mut a, qb, (0xFF_FFF0, 0x100), &[]);
        let recvs: Vec<(u64, u32)> = (0..24).map(|i| (BASE + 0x8_0000 + i * 4096, 4096)).collect();
        connect(&mut b, qa, (0x100, 0xFF_FFF0), &recvs);
        b.stack.register_offload(b.qpn, OPCODE).unwrap();
        // Offload requests interleaved with SENDs, so responses and ACKs mix.
        let mut want = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let i = i as u64;
            let req = (BASE + i * 2048, len);
            let resp = (BASE + 0x4_0000 + i * 2048, 1024);
            a.stack.post_send(a.qpn, offload_wr(&a, i, req, resp, OPCODE)).unwrap();
            want.push((i, WcOpcode::Offload, handler(&at(&a.mem, req.0, len as usize))));
            if sends[i as usize] {
                let wr = SendWr {
                    wr_id: 1000 + i,
                    op: SendOp::Send { imm: None },
                    sge: Sge { addr: BASE + 0x6_0000, len: 1500, lkey: a.key },
                    signaled: true,
                    solicited: false,
                };
                a.stack.post_send(a.qpn, wr).unwrap();
                want.push((1000 + i, WcOpcode::Send, Vec::new()));
            }
        }
        let (wcs, served) = run_lossy(&mut a, &mut b, 0.1, seed, want.len());
        prop_assert_eq!(wcs.len(), want.len());
        for (wc, (id, op, body)) in wcs.iter().zip(&want) {
            prop_assert_eq!((wc.wr_id, wc.status, wc.opcode), (*id, WcStatus::Success, *op));
            if *op == WcOpcode::Offload {
                prop_assert_eq!(wc.byte_len as usize, body.len());
                prop_assert_eq!(wc.imm, Some(0));
                let resp = BASE + 0x4_0000 + id * 2048;
                prop_assert_eq!(&at(&a.mem, resp, body.len()), body);
            }
        }
        // Each handler ran once: duplicates were answered from the replay cache.
        prop_assert_eq!(served, lens.len());
        prop_assert_eq!(b.stack.qp_state(b.qpn), Some(QpState::Rts));
    }
}
