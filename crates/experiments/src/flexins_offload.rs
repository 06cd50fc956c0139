//! `sluice experiment flexins-offload`: flexins.txt 5.6 / Figure 16. The programmable
//! offloading engine's two examples against the client doing the work with RDMA READs, a
//! client and a server (RDMA stacks, and the offload engine on its own thread) on threads
//! of this process joined by an in-memory link:
//!
//! - linked-list traversal latency against the hop count to the key (1 to 64): one READ
//!   per hop from the client, against one OFFLOAD request the handler answers;
//! - batched READ throughput (items/s) against the items per request: one 64-byte READ per
//!   item (pipelined, 16 outstanding), against one OFFLOAD request carrying them all.
//!
//! The paper's bar: 1.7x lower latency, 3.5x the throughput.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use sluice_offload::examples::{
    batched_read_request, list_node, list_request, BatchedRead, ListTraversal, NODE_LEN, VALUE_LEN,
};
use sluice_offload::host::{ring_link, Host, Link, BASE};
use sluice_offload::{OffloadEngineBuilder, SharedRegion};
use sluice_rdma::qp::{Memory, VecMemory};

use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::Common;

/// `sluice experiment flexins-offload`.
#[derive(Args, Debug)]
pub struct OffloadArgs {
    /// Size, output directory and seed.
    #[command(flatten)]
    pub common: Common,
}

/// The offload opcodes the server registers (the paper's A.3 uses 0x1234).
pub const BATCH_READ_OPCODE: u32 = 0x1234;
/// The list traversal's offload opcode.
pub const LIST_OPCODE: u32 = 0x1235;
/// Bytes of each host's registered region.
const REGION: u64 = 1 << 20;
/// Where the list's nodes live in the server's region, and the items of batched READs.
const LIST_AT: u64 = 0x1_0000;
const ITEMS_AT: u64 = 0x4_0000;
/// Bytes of one batched READ item (the paper's 64-byte READs).
const ITEM: u32 = 64;
/// The list's length: the longest walk.
const LIST_LEN: usize = 64;

fn err(e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Workload(e.to_string())
}

/// The server's memory: a 64-node list (keys 1..=64 in list order, nodes shuffled in
/// memory) and the items area; the list's head and the values in list order.
pub fn server_memory(seed: u64) -> (SharedRegion, u64, Vec<[u8; VALUE_LEN]>) {
    let mem = SharedRegion::new((0..REGION).map(|i| (i * 131 % 251) as u8).collect());
    let mut slots: Vec<usize> = (0..LIST_LEN).collect();
    let mut r = seed | 1;
    for i in (1..slots.len()).rev() {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        slots.swap(i, (r % (i as u64 + 1)) as usize);
    }
    let addr = |i: usize| BASE + LIST_AT + (slots[i] * NODE_LEN) as u64;
    let mut values = Vec::new();
    for i in 0..LIST_LEN {
        let value = [i as u8 ^ 0x5a; VALUE_LEN];
        let next = if i + 1 < LIST_LEN { addr(i + 1) } else { 0 };
        mem.write_at(addr(i) - BASE, &list_node(i as u64 + 1, next, &value));
        values.push(value);
    }
    (mem, addr(0), values)
}

/// Runs the experiment.
pub fn run(args: &OffloadArgs) -> Result<Report, ExperimentError> {
    let (mem, _, _) = server_memory(args.common.seed);
    let (client_link, server_link) = ring_link(1024);
    let mut client = client_host(1, client_link)?;
    let mut server = Host::new(2, mem.clone(), REGION, server_link).map_err(err)?;
    client.connect(server.qpn, server.addr).map_err(err)?;
    server.connect(client.qpn, client.addr).map_err(err)?;
    start_offload(&mut server, &mem)?;
    let rkey = server.key;
    let stop = Arc::new(AtomicBool::new(false));
    let server_thread = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("flexins-offload-server".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // Idle: give the core away. Three threads (client, server, offload
                    // thread) share fewer cores here; a spinning server would hold the
                    // offload thread off for a scheduler slice (~4 ms) per request.
                    if !server.poll() {
                        std::thread::yield_now();
                    }
                }
            })
            .map_err(err)?
    };
    let result = measure_against(&mut client, rkey, args.common.seed, args.common.quick, 4096);
    stop.store(true, Ordering::Relaxed);
    let _ = server_thread.join();
    result
}

/// A client host: number `n`, an empty region.
pub fn client_host<L: Link>(n: u8, link: L) -> Result<Host<VecMemory, L>, ExperimentError> {
    Host::new(n, VecMemory(vec![0; REGION as usize]), REGION, link).map_err(err)
}

/// The bytes each host registers at [`BASE`].
pub const REGION_LEN: u64 = REGION;

/// Registers both handlers and `mem` as their region, on the host's QP and a one-thread
/// offload engine beside it (Table 2's register_opcode and register_dma_region).
pub fn start_offload<L: Link>(
    server: &mut Host<SharedRegion, L>,
    mem: &SharedRegion,
) -> Result<(), ExperimentError> {
    let mut builder = OffloadEngineBuilder::new();
    builder.register_opcode(BATCH_READ_OPCODE, Arc::new(BatchedRead));
    builder.register_opcode(LIST_OPCODE, Arc::new(ListTraversal));
    builder.register_region(BASE, REGION, mem.clone());
    for op in [BATCH_READ_OPCODE, LIST_OPCODE] {
        server.stack.register_offload(server.qpn, op).map_err(err)?;
    }
    server.engine = Some(builder.start(1));
    Ok(())
}

/// Measures both examples from `c` (the `--quick` sizes if `quick`) against a server whose
/// memory is `server_memory(seed)` and whose region key is `rkey`; the report. Batches
/// whose response would not fit the path MTU (`mtu` bytes) are left out.
pub fn measure_against<L: Link>(
    c: &mut Host<VecMemory, L>,
    rkey: sluice_rdma::verbs::Key,
    seed: u64,
    quick: bool,
    mtu: u32,
) -> Result<Report, ExperimentError> {
    let (mem, head, values) = server_memory(seed);
    let (hops, batches, reps): (&[usize], &[usize], usize) = if quick {
        (&[1, 8, 64], &[8, 64], 40)
    } else {
        (&[1, 2, 4, 8, 16, 32, 64], &[1, 2, 4, 8, 16, 32, 64], 400)
    };
    let batches: Vec<usize> = batches
        .iter()
        .copied()
        .filter(|&n| n as u32 * ITEM <= mtu)
        .collect();
    let (lists, batch_rows) = measure(c, rkey, head, &values, &mem, hops, &batches, reps)?;
    Ok(report(&lists, &batch_rows, reps, quick))
}

const WAIT: Duration = Duration::from_secs(5);

/// (hops, client us, handler us) and (items, client items/s, handler items/s).
type Rows = (Vec<(usize, f64, f64)>, Vec<(usize, f64, f64)>);

#[allow(clippy::too_many_arguments)]
fn measure<L: Link>(
    c: &mut Host<VecMemory, L>,
    rkey: sluice_rdma::verbs::Key,
    head: u64,
    values: &[[u8; VALUE_LEN]],
    mem: &SharedRegion,
    hops: &[usize],
    batches: &[usize],
    reps: usize,
) -> Result<Rows, ExperimentError> {
    let mut lists = Vec::new();
    let node_buf = BASE + 0x1000;
    let resp_buf = BASE + 0x2_0000;
    for &h in hops {
        let key = h as u64;
        let want = &values[h - 1];
        let (mut base_t, mut off_t) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            // The client walks the list: one READ per node.
            let t = Instant::now();
            let mut addr = head;
            let mut node = [0u8; NODE_LEN];
            loop {
                c.post_read(1, addr, rkey, node_buf, NODE_LEN as u32)
                    .map_err(err)?;
                c.complete(1, WAIT).map_err(err)?;
                c.mem.read(0, node_buf - BASE, &mut node);
                if u64::from_le_bytes(node[..8].try_into().unwrap_or_default()) == key {
                    break;
                }
                addr = u64::from_le_bytes(node[8..16].try_into().unwrap_or_default());
                if addr == 0 {
                    return Err(err("the client's walk ran off the list"));
                }
            }
            base_t.push(t.elapsed().as_secs_f64() * 1e6);
            if &node[16..] != want {
                return Err(err("the client's walk found a wrong value"));
            }
            // The handler walks it: one OFFLOAD request.
            let req = list_request(head, key, LIST_LEN as u32);
            c.mem.write(0, 0, &req);
            let t = Instant::now();
            c.post_offload(
                2,
                LIST_OPCODE,
                (BASE, req.len() as u32),
                (resp_buf, VALUE_LEN as u32),
            )
            .map_err(err)?;
            let wc = c.complete(1, WAIT).map_err(err)?;
            off_t.push(t.elapsed().as_secs_f64() * 1e6);
            let mut got = [0u8; VALUE_LEN];
            c.mem.read(0, resp_buf - BASE, &mut got);
            if wc[0].imm != Some(0) || &got != want {
                return Err(err(format!("list handler: status {:?}", wc[0].imm)));
            }
        }
        lists.push((h, median(&mut base_t), median(&mut off_t)));
    }
    let mut batch_rows = Vec::new();
    for &n in batches {
        let items: Vec<(u64, u32)> = (0..n as u64)
            .map(|i| (BASE + ITEMS_AT + (i * 7919 % 4096) * u64::from(ITEM), ITEM))
            .collect();
        let want: Vec<u8> = items
            .iter()
            .flat_map(|&(a, l)| {
                let mut v = vec![0; l as usize];
                mem.read_at(a - BASE, &mut v);
                v
            })
            .collect();
        // One READ per item, all posted, 16 outstanding at the server.
        let t = Instant::now();
        for _ in 0..reps {
            for (i, &(a, l)) in items.iter().enumerate() {
                c.post_read(i as u64, a, rkey, resp_buf + i as u64 * u64::from(ITEM), l)
                    .map_err(err)?;
            }
            c.complete(n, WAIT).map_err(err)?;
        }
        let base_rate = (n * reps) as f64 / t.elapsed().as_secs_f64();
        let mut got = vec![0; want.len()];
        c.mem.read(0, resp_buf - BASE, &mut got);
        if got != want {
            return Err(err("the client's READs brought wrong bytes"));
        }
        let req = batched_read_request(&items);
        c.mem.write(0, 0, &req);
        let resp_len = n as u32 * ITEM;
        c.mem.write(0, resp_buf - BASE, &vec![0; want.len()]);
        let t = Instant::now();
        for _ in 0..reps {
            c.post_offload(
                3,
                BATCH_READ_OPCODE,
                (BASE, req.len() as u32),
                (resp_buf, resp_len),
            )
            .map_err(err)?;
            let wc = c.complete(1, WAIT).map_err(err)?;
            if wc[0].imm != Some(0) {
                return Err(err(format!("batched READ handler: status {:?}", wc[0].imm)));
            }
        }
        let off_rate = (n * reps) as f64 / t.elapsed().as_secs_f64();
        c.mem.read(0, resp_buf - BASE, &mut got);
        if got != want {
            return Err(err("the batched READ handler answered wrong bytes"));
        }
        batch_rows.push((n, base_rate, off_rate));
    }
    Ok((lists, batch_rows))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn report(
    lists: &[(usize, f64, f64)],
    batches: &[(usize, f64, f64)],
    reps: usize,
    quick: bool,
) -> Report {
    let mut rows = Vec::new();
    for &(h, b, o) in lists {
        rows.push(vec![
            "list-traversal".into(),
            h.to_string(),
            "us".into(),
            fmt_num(b),
            fmt_num(o),
            fmt_ratio(b, o),
        ]);
    }
    for &(n, b, o) in batches {
        rows.push(vec![
            "batched-read".into(),
            n.to_string(),
            "items/s".into(),
            fmt_num(b),
            fmt_num(o),
            fmt_ratio(o, b),
        ]);
    }
    let best_list = lists
        .iter()
        .map(|&(_, b, o)| b / o)
        .fold(f64::NAN, f64::max);
    let best_batch = batches
        .iter()
        .map(|&(_, b, o)| o / b)
        .fold(f64::NAN, f64::max);
    let notes = vec![
        format!(
            "  list traversal: up to x{best_list:.2} lower latency with the handler (paper: x1.7 {})",
            if best_list >= 1.7 { "met" } else { "not met" }
        ),
        format!(
            "  batched READ: up to x{best_batch:.2} the items/s with the handler (paper: x3.5 {})",
            if best_batch >= 3.5 { "met" } else { "not met" }
        ),
        "  ratio: client / handler latency; handler / client items/s. Both sides are software \
         here (one process, an in-memory link): the gain is round trips saved, not NIC DMA."
            .into(),
    ];
    let series = vec![
        Series {
            name: "list traversal: latency client / handler (x = hops)".into(),
            points: lists.iter().map(|&(h, b, o)| (h as f64, b / o)).collect(),
        },
        Series {
            name: "batched READ: items/s handler / client (x = items)".into(),
            points: batches.iter().map(|&(n, b, o)| (n as f64, o / b)).collect(),
        },
    ];
    Report {
        name: "flexins-offload".into(),
        setup: vec![
            format!(
                "sluice experiment flexins-offload{}: a client and a server RDMA stack on two \
                 threads over an in-memory link, the offload engine on a third; MTU 4096",
                if quick { " --quick" } else { "" }
            ),
            format!(
                "  list: {LIST_LEN} nodes of 8-byte keys and {VALUE_LEN}-byte values; median of \
                 {reps} lookups per hop count. batched READ: {ITEM}-byte items, {reps} batches"
            ),
        ],
        columns: ["test", "x", "unit", "client", "handler", "ratio"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        notes,
        plot: Some(Plot {
            title: "flexins-offload: the handler against the client doing it (Figure 16)".into(),
            x_label: "hops / items per request".into(),
            y_label: "gain (x)".into(),
            x_categories: None,
            series,
        }),
        data: None,
    }
}
