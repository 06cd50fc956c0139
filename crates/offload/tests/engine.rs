//! The offload engine end to end: two RDMA stacks, the server's OFFLOAD requests run by
//! handlers on offload threads; the paper's two examples answer right (property tests over
//! random lists and items); a handler that loops, reads outside its region or asks an
//! unbounded response is stopped with an error status, counted, and the QP survives.

mod common;

use common::{clock, connect, host, Host, BASE, LEN};
use std::sync::Arc;

use proptest::prelude::*;
use sluice_offload::api::run_handler;
use sluice_offload::examples::{
    batched_read_request, list_node, list_request, BatchedRead, ListTraversal, NODE_LEN, VALUE_LEN,
};
use sluice_offload::{
    Handler, HandlerError, Limits, OffloadCtx, OffloadEngine, OffloadEngineBuilder, RegionTable,
    SharedRegion,
};
use sluice_rdma::qp::{Memory, SendOp, SendWr, Sge, VecMemory};
use sluice_rdma::verbs::{QpState, WcStatus};

const LIST: u32 = 0x1001;
const BATCH: u32 = 0x1002;
const LOOP: u32 = 0x1003;
const OUTSIDE: u32 = 0x1004;
const HUGE: u32 = 0x1005;

/// A client and a server whose memory is `server_mem`, connected; handlers registered.
fn pair(
    server_mem: SharedRegion,
    limits: Limits,
) -> (Host<VecMemory>, Host<SharedRegion>, OffloadEngine) {
    let mut c = host(1, VecMemory(vec![0; LEN]));
    let mut s = host(2, server_mem.clone());
    let (qc, qs) = ((c.qpn, c.addr), (s.qpn, s.addr));
    connect(&mut c, qs);
    connect(&mut s, qc);
    let mut b = OffloadEngineBuilder::new();
    let handlers: [(u32, Arc<dyn Handler>); 5] = [
        (LIST, Arc::new(ListTraversal)),
        (BATCH, Arc::new(BatchedRead)),
        (LOOP, Arc::new(Looper)),
        (OUTSIDE, Arc::new(Outside)),
        (HUGE, Arc::new(Huge)),
    ];
    for (op, h) in handlers {
        assert!(b.register_opcode(op, h));
        s.stack.register_offload(s.qpn, op).unwrap();
    }
    assert!(b.register_region(BASE, LEN as u64, server_mem));
    b.limits(limits);
    (c, s, b.start(2))
}

/// Posts one OFFLOAD request and drives both stacks and the engine until it completes:
/// (status, response).
fn call(
    c: &mut Host<VecMemory>,
    s: &mut Host<SharedRegion>,
    e: &mut OffloadEngine,
    opcode: u32,
    req: &[u8],
) -> (u32, Vec<u8>) {
    assert!(c.mem.write(0, 0, req));
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Offload {
            opcode,
            resp: Sge {
                addr: BASE + 0x8000,
                len: 4096,
                lkey: c.key,
            },
        },
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
        while let Some(r) = s.stack.poll_offload() {
            e.submit(r).unwrap();
        }
        while let Some(r) = e.poll() {
            assert!(s.stack.complete_offload(r.qpn, r.psn, r.status, &r.body));
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
    panic!(
        "no completion: client {:?} {:?} server {:?} {:?} {:?}\n{}\n{}",
        c.stack.counters,
        c.stack.qp_counters(),
        s.stack.counters,
        s.stack.qp_counters(),
        s.stack.offload_counters(),
        c.stack.describe(),
        s.stack.describe()
    );
}

/// A list of `keys` in the region at `at`, nodes in a shuffled order: (head, values).
fn build_list(
    mem: &SharedRegion,
    at: u64,
    keys: &[u64],
    order: &[usize],
) -> (u64, Vec<[u8; VALUE_LEN]>) {
    let addr = |i: usize| BASE + at + (order[i] * NODE_LEN) as u64;
    let mut values = Vec::new();
    for (i, &k) in keys.iter().enumerate() {
        let v = [(k as u8).wrapping_add(i as u8); VALUE_LEN];
        let next = if i + 1 < keys.len() { addr(i + 1) } else { 0 };
        assert!(mem.write_at(addr(i) - BASE, &list_node(k, next, &v)));
        values.push(v);
    }
    (addr(0), values)
}

struct Looper;
impl Handler for Looper {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        ctx.alloc_resp(8)?;
        loop {
            let id = ctx.submit_read(BASE, 0, 8)?;
            ctx.wait(id)?;
        }
    }
}

struct Outside;
impl Handler for Outside {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        ctx.alloc_resp(8)?;
        let id = ctx.submit_read(BASE + LEN as u64 - 4, 0, 8)?;
        ctx.wait(id)?;
        ctx.submit_resp(8)
    }
}

struct Huge;
impl Handler for Huge {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        ctx.alloc_resp(usize::MAX)?;
        ctx.submit_resp(0)
    }
}

#[test]
fn failing_handlers_are_stopped_with_a_status_and_the_qp_survives() {
    let mem = SharedRegion::new(vec![7; LEN]);
    let (mut c, mut s, mut e) = pair(mem.clone(), Limits::default());
    for (op, want) in [
        (LOOP, HandlerError::BudgetExhausted),
        (OUTSIDE, HandlerError::OutsideRegion),
        (HUGE, HandlerError::ResponseTooLarge),
        (BATCH, HandlerError::BadRequest),
    ] {
        let (status, body) = call(&mut c, &mut s, &mut e, op, b"junk");
        assert_eq!(HandlerError::from_code(status), Some(want), "{op:#x}");
        assert!(body.is_empty());
    }
    let k = e.counters();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(k.budget_stops.load(Relaxed), 1);
    assert_eq!(k.outside_region.load(Relaxed), 1);
    assert_eq!(k.too_large.load(Relaxed), 1);
    assert_eq!(k.errors.load(Relaxed), 4);
    // The QPs are up: a good request after them is answered.
    let (head, values) = build_list(&mem, 0x1000, &[5, 9, 3], &[2, 0, 1]);
    let (status, body) = call(&mut c, &mut s, &mut e, LIST, &list_request(head, 3, 64));
    assert_eq!((status, body), (0, values[2].to_vec()));
    assert_eq!(s.stack.qp_state(s.qpn), Some(QpState::Rts));
    assert_eq!(c.stack.qp_state(c.qpn), Some(QpState::Rts));
}

#[test]
fn both_examples_answer_over_the_wire() {
    let mem = SharedRegion::new((0..LEN).map(|i| (i * 31 % 251) as u8).collect());
    let (mut c, mut s, mut e) = pair(mem.clone(), Limits::default());
    let items: Vec<(u64, u32)> = (0..20).map(|i| (BASE + 0x4000 + i * 200, 64)).collect();
    let (status, body) = call(&mut c, &mut s, &mut e, BATCH, &batched_read_request(&items));
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
    let keys: Vec<u64> = (100..164).collect();
    let order: Vec<usize> = (0..64).rev().collect();
    let (head, values) = build_list(&mem, 0x8000, &keys, &order);
    for (i, &k) in keys.iter().enumerate().step_by(9) {
        let (status, body) = call(&mut c, &mut s, &mut e, LIST, &list_request(head, k, 64));
        assert_eq!((status, body), (0, values[i].to_vec()));
    }
    // Beyond the hop limit: not found.
    let (status, _) = call(&mut c, &mut s, &mut e, LIST, &list_request(head, 163, 10));
    assert_eq!(
        HandlerError::from_code(status),
        Some(HandlerError::NotFound)
    );
    // The link loses nothing: every request is answered by its first response, none by
    // the replay cache after the requester's retransmission timer.
    assert_eq!(c.stack.qp_counters().retransmits, 0);
    assert_eq!(s.stack.offload_counters().replayed, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn list_traversal_finds_the_first_node_with_the_key_within_the_hop_limit(
        keys in proptest::collection::vec(0u64..40, 1..60),
        shuffle in any::<u64>(),
        probe in 0u64..45,
        hops in 0u32..70,
    ) {
        let mem = SharedRegion::new(vec![0; LEN]);
        let mut order: Vec<usize> = (0..keys.len()).collect();
        let mut r = shuffle | 1;
        for i in (1..order.len()).rev() {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            order.swap(i, (r % (i as u64 + 1)) as usize);
        }
        let (head, values) = build_list(&mem, 0x100, &keys, &order);
        let mut regions = RegionTable::default();
        prop_assert!(regions.register(BASE, LEN as u64, mem));
        let got = run_handler(&ListTraversal, &list_request(head, probe, hops), 4096, &regions, Limits::default());
        let want = keys.iter().take(hops as usize).position(|&k| k == probe);
        match want {
            Some(i) => prop_assert_eq!(got, Ok(values[i].to_vec())),
            None => prop_assert_eq!(got, Err(HandlerError::NotFound)),
        }
    }

    #[test]
    fn batched_read_answers_every_item_in_order(
        items in proptest::collection::vec((0u64..(LEN as u64 + 64), 0u32..100), 0..40),
    ) {
        let mem = SharedRegion::new((0..LEN).map(|i| (i * 7 % 253) as u8).collect());
        let mut regions = RegionTable::default();
        prop_assert!(regions.register(BASE, LEN as u64, mem.clone()));
        let items: Vec<(u64, u32)> = items.iter().map(|&(o, l)| (BASE + o, l)).collect();
        let got = run_handler(&BatchedRead, &batched_read_request(&items), 4096, &regions, Limits::default());
        let total: usize = items.iter().map(|&(_, l)| l as usize).sum();
        let outside = items.iter().any(|&(a, l)| a - BASE + u64::from(l) > LEN as u64);
        if total > 4096 {
            prop_assert_eq!(got, Err(HandlerError::ResponseTooLarge));
        } else if outside {
            prop_assert_eq!(got, Err(HandlerError::OutsideRegion));
        } else {
            let want: Vec<u8> = items.iter().flat_map(|&(a, l)| {
                let mut v = vec![0; l as usize];
                mem.read_at(a - BASE, &mut v);
                v
            }).collect();
            prop_assert_eq!(got, Ok(want));
        }
    }
}

fn ebpf_list() -> sluice_offload::EbpfHandler {
    sluice_offload::EbpfHandler::load(sluice_ebpf::programs::OFFLOAD_LIST)
        .expect("the shipped offload program verifies")
}

#[test]
fn the_ebpf_list_handler_serves_over_the_wire_and_is_bounded() {
    let mem = SharedRegion::new(vec![0; LEN]);
    let keys: Vec<u64> = (1..=64).collect();
    let order: Vec<usize> = (0..64).map(|i| (i * 37) % 64).collect();
    let (head, values) = build_list(&mem, 0x200, &keys, &order);
    let mut c = host(1, VecMemory(vec![0; LEN]));
    let mut s = host(2, mem.clone());
    let (qc, qs) = ((c.qpn, c.addr), (s.qpn, s.addr));
    connect(&mut c, qs);
    connect(&mut s, qc);
    let mut b = OffloadEngineBuilder::new();
    assert!(b.register_opcode(LIST, Arc::new(ebpf_list())));
    s.stack.register_offload(s.qpn, LIST).unwrap();
    assert!(b.register_region(BASE, LEN as u64, mem));
    // 24 steps (a read per hop, and the response): a walk of 40 hops is stopped.
    b.limits(Limits {
        max_steps: 24,
        ..Limits::default()
    });
    let mut e = b.start(1);
    for k in [1u64, 7, 20] {
        let (status, body) = call(&mut c, &mut s, &mut e, LIST, &list_request(head, k, 64));
        assert_eq!(
            (status, body),
            (0, values[k as usize - 1].to_vec()),
            "key {k}"
        );
    }
    let (status, _) = call(&mut c, &mut s, &mut e, LIST, &list_request(head, 40, 64));
    assert_eq!(
        HandlerError::from_code(status),
        Some(HandlerError::BudgetExhausted)
    );
    let (status, _) = call(&mut c, &mut s, &mut e, LIST, &list_request(head, 9, 5));
    assert_eq!(
        HandlerError::from_code(status),
        Some(HandlerError::NotFound)
    );
    // A head outside the region: the read is refused, the program aborts.
    let (status, _) = call(
        &mut c,
        &mut s,
        &mut e,
        LIST,
        &list_request(BASE + LEN as u64, 1, 64),
    );
    assert_eq!(
        HandlerError::from_code(status),
        Some(HandlerError::OutsideRegion)
    );
    assert_eq!(c.stack.qp_state(c.qpn), Some(QpState::Rts));
    assert_eq!(s.stack.qp_state(s.qpn), Some(QpState::Rts));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_ebpf_list_handler_answers_as_the_rust_one(
        keys in proptest::collection::vec(0u64..40, 1..70),
        probe in 0u64..45,
        hops in 0u32..80,
    ) {
        let mem = SharedRegion::new(vec![0; LEN]);
        let order: Vec<usize> = (0..keys.len()).rev().collect();
        let (head, _) = build_list(&mem, 0x100, &keys, &order);
        let mut regions = RegionTable::default();
        prop_assert!(regions.register(BASE, LEN as u64, mem));
        let req = list_request(head, probe, hops);
        let rust = run_handler(&ListTraversal, &req, 4096, &regions, Limits::default());
        let ebpf = run_handler(&ebpf_list(), &req, 4096, &regions, Limits::default());
        // The program's loop is bounded at 64 hops whatever the request asks.
        if hops <= 64 {
            prop_assert_eq!(ebpf, rust);
        } else {
            let capped = run_handler(&ListTraversal, &list_request(head, probe, 64), 4096, &regions, Limits::default());
            prop_assert_eq!(ebpf, capped);
        }
    }
}
