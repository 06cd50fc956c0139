//! Data-path cost per segment on one core, driving [`Stack`] directly (no simulator).
//!
//! Cases (one criterion "element" is one segment):
//! - `rx_64B_ack`: an in-order 64-byte data segment is handled, its ACK drained with
//!   `poll_transmit`, and the application releases the bytes with `consume` — all three inside
//!   the timed loop, per segment, so the window never closes.
//! - `rx_1460B_ack`: the same with 1460-byte segments (timestamps are negotiated, so the
//!   1460 payload bytes ride in a 1512-byte IPv4 packet; jumbo MTU 9000 on both hosts).
//! - `rx_64B_ack_batch32`: as `rx_64B_ack`, but 32 frames per `handle_frames` call, then the
//!   32 ACKs drained and the 32 × 64 bytes consumed.
//! - `tx_ack_1mss`: pure ACK processing on a sender with thousands of segments in flight; each
//!   ACK advances snd_una by one MSS. Refilling the send buffer and transmitting the data that
//!   the ACKs acknowledge happens outside the timed region.
//!
//! Frames are captured from a real sending `Stack` (valid checksums, negotiated timestamps)
//! and only their sequence (or acknowledgment) numbers are rewritten, with the checksum
//! recomputed, before each timed chunk. The timed loop measures only the receiving core.
//!
//! Run: `cargo bench -p sluice-tcp --bench datapath` (defaults: 1 s warm-up, 3 s measurement;
//! criterion flags such as `-- --measurement-time 5` or a name filter like `-- rx_64B` work).
//! After the criterion output a summary table prints ns/segment and million segments/s per
//! case: the median over all timed chunks, and the 10th percentile, which on a shared machine
//! is the better estimate of the uncontended cost (chunks slowed by other work sit above it).
//! `DATAPATH_QUANTILES=1` also prints the spread of the chunk figures to stderr.
//! Profiling: `--profile-time 5 <name>` runs one case without analysis (for perf or
//! `valgrind --tool=callgrind` on the binary `cargo bench --no-run` prints).

use std::cell::RefCell;
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant as WallClock};

use criterion::{Criterion, Throughput};
use sluice_tcp::{Config, ConnId, Instant, Stack};
use sluice_wire::tcp::{SeqNumber, TcpSegment};
use sluice_wire::EthernetAddress;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const A_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const B_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const PORT: u16 = 5001;
/// Ethernet (untagged) + IPv4 without options: where the TCP header starts.
const TCP_AT: usize = 14 + 20;
/// Frames prepared per timed chunk (a multiple of the batch size).
const CHUNK: usize = 256;
/// Frames per `handle_frames` call in the batched case (the data-path's batch size).
const BATCH: usize = 32;
/// The core's clock during the timed loops (constant: no timer is due).
const NOW: Instant = Instant::from_millis(1_000);

/// The target of the brief, for the summary.
const TARGET_NS: f64 = 150.0;

fn config(mac: EthernetAddress, ip: Ipv4Addr, seed: u64) -> Config {
    let mut c = Config::new(mac, ip);
    c.seed = seed;
    c
}

/// Two stacks with one established connection A → B (A connected, B accepted).
struct Pair {
    a: Stack,
    b: Stack,
    a_conn: ConnId,
    b_conn: ConnId,
    buf: Vec<u8>,
}

impl Pair {
    fn new(mut ca: Config, mut cb: Config) -> Pair {
        ca.mtu = ca.mtu.max(cb.mtu);
        cb.mtu = ca.mtu;
        let mut a = Stack::new(ca).expect("config A");
        let mut b = Stack::new(cb).expect("config B");
        a.add_neighbor(B_IP, B_MAC);
        b.add_neighbor(A_IP, A_MAC);
        let listener = b.listen(PORT, 16).expect("listen");
        let t0 = Instant::from_millis(1);
        let a_conn = a.connect(t0, B_IP, PORT).expect("connect");
        let mut p = Pair {
            a,
            b,
            a_conn,
            b_conn: a_conn,
            buf: vec![0; 16 * 1024],
        };
        p.shuttle(t0);
        p.b_conn = p.b.accept(listener).expect("accept");
        assert_eq!(p.a.state(p.a_conn), Ok(sluice_tcp::TcpState::Established));
        assert_eq!(p.b.state(p.b_conn), Ok(sluice_tcp::TcpState::Established));
        p
    }

    /// Moves frames both ways until both stacks are quiet.
    fn shuttle(&mut self, now: Instant) {
        loop {
            let mut moved = false;
            while let Some(n) = self.a.poll_transmit(now, &mut self.buf) {
                self.b.handle_frame(now, &self.buf[..n]);
                moved = true;
            }
            while let Some(n) = self.b.poll_transmit(now, &mut self.buf) {
                self.a.handle_frame(now, &self.buf[..n]);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }
}

/// A captured frame whose TCP sequence (or acknowledgment) number is rewritten per copy.
struct FrameSet {
    frames: Vec<Vec<u8>>,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

impl FrameSet {
    fn new(template: &[u8], count: usize, src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        FrameSet {
            frames: vec![template.to_vec(); count],
            src,
            dst,
        }
    }

    /// Sets frame `i`'s sequence number (`ack == false`) or acknowledgment number, with a
    /// valid checksum.
    fn set(&mut self, i: usize, value: SeqNumber, ack: bool) {
        let mut seg = TcpSegment::new_checked(&mut self.frames[i][TCP_AT..]).expect("tcp");
        if ack {
            seg.set_ack(value);
        } else {
            seg.set_seq(value);
        }
        seg.fill_checksum(self.src, self.dst);
    }
}

/// ns/segment of every timed chunk of one case (criterion's warm-up and samples alike).
/// Chunks are short (`CHUNK` segments, tens of microseconds), so a chunk in which the
/// thread was preempted on the shared cores is an outlier that the quantiles ignore.
struct Samples(RefCell<Vec<f64>>);

impl Samples {
    fn new() -> Self {
        Samples(RefCell::new(Vec::new()))
    }
    fn record(&self, segments: usize, elapsed: Duration) {
        if segments > 0 {
            self.0
                .borrow_mut()
                .push(elapsed.as_nanos() as f64 / segments as f64);
        }
    }
    /// The `q` quantile (0.5: median) of the per-chunk figures.
    fn quantile(&self, q: f64) -> Option<f64> {
        let mut v = self.0.borrow().clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        if std::env::var_os("DATAPATH_QUANTILES").is_some() && q == 0.5 {
            let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
            eprintln!(
                "n={} p1={:.1} p10={:.1} p25={:.1} p50={:.1} p75={:.1} p90={:.1} p99={:.1}",
                v.len(),
                at(0.01),
                at(0.1),
                at(0.25),
                at(0.5),
                at(0.75),
                at(0.9),
                at(0.99)
            );
        }
        Some(v[((v.len() - 1) as f64 * q) as usize])
    }
}

// ---- receiver: in-order data, ACK generated -----------------------------------------------

/// A receiver B with an established connection, and frames of `size`-byte in-order segments
/// from A to inject.
struct RxBench {
    p: Pair,
    frames: FrameSet,
    next_seq: SeqNumber,
    size: usize,
    out: Vec<u8>,
    fast_path_before: u64,
    exceptions_before: u64,
    segments: u64,
}

impl RxBench {
    fn new(size: usize) -> Self {
        let mut ca = config(A_MAC, A_IP, 1);
        let mut cb = config(B_MAC, B_IP, 2);
        if size > 1448 {
            // 1460 payload bytes plus 32 header bytes (with timestamps) need MTU > 1500.
            ca.mtu = 9000;
            cb.mtu = 9000;
        }
        let mut p = Pair::new(ca, cb);
        p.a.set_nagle(p.a_conn, false).unwrap();
        let data = vec![0x5a; size];
        assert_eq!(p.a.send(p.a_conn, &data), Ok(size));
        let n = p.a.poll_transmit(NOW, &mut p.buf).expect("data frame");
        let template = p.buf[..n].to_vec();
        let seg = TcpSegment::new_checked(&template[TCP_AT..]).unwrap();
        assert_eq!(seg.payload().len(), size, "one segment carries the payload");
        // B takes the captured frame itself, so the timed frames continue its sequence.
        p.b.handle_frame(NOW, &template);
        let mut out = vec![0; 16 * 1024];
        while p.b.poll_transmit(NOW, &mut out).is_some() {}
        p.b.consume(p.b_conn, size).unwrap();
        let next_seq = seg.seq() + size;
        assert_eq!(p.b.info(p.b_conn).unwrap().rcv_nxt, next_seq);
        let fast_path_before = p.b.counters().fast_path;
        let exceptions_before = p.b.counters().exceptions;
        RxBench {
            p,
            frames: FrameSet::new(&template, CHUNK, A_IP, B_IP),
            next_seq,
            size,
            out,
            fast_path_before,
            exceptions_before,
            segments: 0,
        }
    }

    /// Rewrites the first `k` frames to carry the next `k` segments.
    fn prepare(&mut self, k: usize) {
        for i in 0..k {
            let seq = self.next_seq + i * self.size;
            self.frames.set(i, seq, false);
        }
        self.next_seq += k * self.size;
        self.segments += k as u64;
    }

    /// One segment at a time: handle, drain the ACK, consume.
    fn run_single(&mut self, k: usize) -> Duration {
        self.prepare(k);
        let (b, conn, size) = (&mut self.p.b, self.p.b_conn, self.size);
        let out = &mut self.out;
        let start = WallClock::now();
        for frame in &self.frames.frames[..k] {
            b.handle_frame(NOW, black_box(frame));
            while let Some(n) = b.poll_transmit(NOW, out) {
                black_box(n);
            }
            let _ = b.consume(conn, size);
        }
        start.elapsed()
    }

    /// Batches of `BATCH`: handle_frames, drain the ACKs, consume the batch.
    fn run_batched(&mut self, k: usize) -> Duration {
        self.prepare(k);
        let refs: Vec<&[u8]> = self.frames.frames[..k].iter().map(Vec::as_slice).collect();
        let (b, conn, size) = (&mut self.p.b, self.p.b_conn, self.size);
        let out = &mut self.out;
        let start = WallClock::now();
        for batch in refs.chunks(BATCH) {
            b.handle_frames(NOW, black_box(batch));
            while let Some(n) = b.poll_transmit(NOW, out) {
                black_box(n);
            }
            let _ = b.consume(conn, size * batch.len());
        }
        start.elapsed()
    }

    /// Checks every timed segment took the fast path and was delivered and acknowledged.
    fn verify(&self, name: &str) {
        let b = &self.p.b;
        let info = b.info(self.p.b_conn).unwrap();
        assert_eq!(info.rcv_nxt, self.next_seq, "{name}: all data accepted");
        assert_eq!(info.readable, 0, "{name}: all data consumed");
        assert_eq!(
            b.counters().fast_path - self.fast_path_before,
            self.segments,
            "{name}: every segment took the fast path"
        );
        assert_eq!(
            b.counters().exceptions,
            self.exceptions_before,
            "{name}: no exception"
        );
        assert_eq!(b.counters().bad_checksum, 0, "{name}: checksums valid");
    }
}

// ---- sender: ACK processing ------------------------------------------------------------

/// A sender A with thousands of MSS-sized segments in flight, and ACK frames from B to
/// inject, each acknowledging one more MSS.
struct AckBench {
    p: Pair,
    frames: FrameSet,
    mss: u32,
    data: Vec<u8>,
    acks: u64,
    fast_path_before: u64,
    exceptions_before: u64,
    /// The sender's clock: the warm-up lets time pass, so that the control plane's
    /// congestion-control iterations (on the timer heap, about once per RTT) grow cwnd.
    now: Instant,
}

impl AckBench {
    fn new() -> Self {
        let mut ca = config(A_MAC, A_IP, 3);
        ca.tx_buffer = 8 << 20;
        // A fixed send buffer: this measures ACK processing, not send-buffer autotuning.
        ca.tx_buffer_initial = ca.tx_buffer;
        let mut cb = config(B_MAC, B_IP, 4);
        cb.rx_buffer = 8 << 20; // offers an 8 MB window, so the flight is not window-limited
        let mut p = Pair::new(ca, cb);
        let mss = p.a.info(p.a_conn).unwrap().mss as u32;
        let data = vec![0xa5; 256 * 1024];
        // One data segment to B, whose pure ACK becomes the template.
        p.a.send(p.a_conn, &data[..mss as usize]).unwrap();
        let n = p.a.poll_transmit(NOW, &mut p.buf).expect("data frame");
        let first = p.buf[..n].to_vec();
        p.b.handle_frame(NOW, &first);
        let n = p.b.poll_transmit(NOW, &mut p.buf).expect("ACK frame");
        let template = p.buf[..n].to_vec();
        let seg = TcpSegment::new_checked(&template[TCP_AT..]).unwrap();
        assert!(seg.payload().is_empty(), "a pure ACK");
        p.a.handle_frame(NOW, &template);
        let mut bench = AckBench {
            frames: FrameSet::new(&template, CHUNK, B_IP, A_IP),
            p,
            mss,
            data,
            acks: 0,
            fast_path_before: 0,
            exceptions_before: 0,
            now: NOW,
        };
        // Slow start grows cwnd with each congestion-control iteration: run, letting time
        // pass, until the flight covers a chunk.
        for _ in 0..1000 {
            let k = bench.prepare(CHUNK);
            bench.run(k);
            bench.now += Duration::from_millis(1);
            bench.p.a.handle_timeout(bench.now);
        }
        let info = bench.p.a.info(bench.p.a_conn).unwrap();
        assert!(
            info.snd_max.diff(info.snd_una) as u32 >= (CHUNK as u32) * mss,
            "flight covers a chunk"
        );
        bench.acks = 0;
        bench.fast_path_before = bench.p.a.counters().fast_path;
        bench.exceptions_before = bench.p.a.counters().exceptions;
        bench
    }

    /// Puts at least `k` MSS in flight (refilling the send buffer) and rewrites the first
    /// `k` ACK frames to acknowledge one MSS each. Returns how many ACKs are ready (fewer
    /// than `k` only while cwnd is still small).
    fn prepare(&mut self, k: usize) -> usize {
        let (a, conn) = (&mut self.p.a, self.p.a_conn);
        let want = k as u32 * self.mss;
        loop {
            let info = a.info(conn).unwrap();
            if info.snd_max.diff(info.snd_una) as u32 >= want {
                break;
            }
            while a.send(conn, &self.data).is_ok() {}
            let mut sent = false;
            while a.poll_transmit(self.now, &mut self.p.buf).is_some() {
                sent = true;
            }
            if !sent {
                break;
            }
        }
        let info = a.info(conn).unwrap();
        let flight = info.snd_max.diff(info.snd_una) as u32 / self.mss;
        let k = k.min(flight as usize);
        assert!(k > 0, "tx_ack: nothing in flight to acknowledge");
        for i in 0..k {
            self.frames
                .set(i, info.snd_una + (i as u32 + 1) * self.mss, true);
        }
        self.acks += k as u64;
        k
    }

    fn run(&mut self, k: usize) -> Duration {
        let (a, now) = (&mut self.p.a, self.now);
        let start = WallClock::now();
        for frame in &self.frames.frames[..k] {
            a.handle_frame(now, black_box(frame));
        }
        start.elapsed()
    }

    fn verify(&self) {
        let a = &self.p.a;
        assert_eq!(
            a.counters().fast_path - self.fast_path_before,
            self.acks,
            "tx_ack: every ACK took the fast path"
        );
        assert_eq!(
            a.counters().exceptions,
            self.exceptions_before,
            "tx_ack: no exception"
        );
        assert_eq!(a.counters().bad_acks, 0, "tx_ack: no bad ACK");
    }
}

// ---- driver -----------------------------------------------------------------------------

struct Row {
    name: &'static str,
    what: &'static str,
    /// Median ns/segment over the timed chunks.
    ns: Option<f64>,
    /// 10th percentile: the steady state with little interference from other work.
    ns_p10: Option<f64>,
}

/// Runs `chunk(k)` (which prepares k segments untimed and returns the timed duration) for
/// `iters` segments in total.
fn timed(
    iters: u64,
    samples: &Samples,
    mut chunk: impl FnMut(usize) -> (usize, Duration),
) -> Duration {
    let mut left = iters;
    let mut total = Duration::ZERO;
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let (done, t) = chunk(want);
        if done == CHUNK {
            samples.record(done, t);
        }
        total += t;
        left -= done as u64;
    }
    total
}

fn bench_rx(c: &mut Criterion, rows: &mut Vec<Row>) {
    let mut g = c.benchmark_group("datapath");
    g.throughput(Throughput::Elements(1));
    for (name, what, size, batched) in [
        (
            "rx_64B_ack",
            "(a) 64 B in-order segment + ACK",
            64usize,
            false,
        ),
        (
            "rx_1460B_ack",
            "(b) 1460 B in-order segment + ACK",
            1460,
            false,
        ),
        (
            "rx_64B_ack_batch32",
            "(a) batched, handle_frames x32",
            64,
            true,
        ),
    ] {
        // Built on first use, so a case filtered out on the command line costs nothing.
        let mut bench: Option<RxBench> = None;
        let samples = Samples::new();
        g.bench_function(name, |bch| {
            let bench = bench.get_or_insert_with(|| RxBench::new(size));
            bch.iter_custom(|iters| {
                timed(iters, &samples, |k| {
                    let t = if batched {
                        bench.run_batched(k)
                    } else {
                        bench.run_single(k)
                    };
                    (k, t)
                })
            })
        });
        if let Some(bench) = &bench {
            bench.verify(name);
        }
        rows.push(Row {
            name,
            what,
            ns: samples.quantile(0.5),
            ns_p10: samples.quantile(0.1),
        });
    }
    g.finish();
}

fn bench_tx_ack(c: &mut Criterion, rows: &mut Vec<Row>) {
    let mut g = c.benchmark_group("datapath");
    g.throughput(Throughput::Elements(1));
    let name = "tx_ack_1mss";
    let mut bench: Option<AckBench> = None;
    let samples = Samples::new();
    g.bench_function(name, |bch| {
        let bench = bench.get_or_insert_with(AckBench::new);
        bch.iter_custom(|iters| {
            timed(iters, &samples, |k| {
                let k = bench.prepare(k);
                (k, bench.run(k))
            })
        })
    });
    g.finish();
    if let Some(bench) = &bench {
        bench.verify();
    }
    rows.push(Row {
        name,
        what: "(c) pure ACK, snd_una += 1 MSS",
        ns: samples.quantile(0.5),
        ns_p10: samples.quantile(0.1),
    });
}

fn print_summary(rows: &[Row]) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!("Sluice data-path, one core, per segment (over timed chunks of {CHUNK} segments):");
    println!(
        "{:<20} {:<36} {:>11} {:>9} {:>11} {:>9}",
        "case", "what", "median ns", "Mseg/s", "p10 ns", "Mseg/s"
    );
    for r in rows {
        let (ns, p10) = (r.ns.unwrap_or(f64::NAN), r.ns_p10.unwrap_or(f64::NAN));
        println!(
            "{:<20} {:<36} {:>11.1} {:>9.2} {:>11.1} {:>9.2}",
            r.name,
            r.what,
            ns,
            1e3 / ns,
            p10,
            1e3 / p10
        );
    }
    let judge = |ns: Option<f64>| match ns {
        Some(ns) if ns <= TARGET_NS => format!("{ns:.1} ns, met"),
        Some(ns) => format!("{ns:.1} ns, NOT met"),
        None => "not measured".to_string(),
    };
    let rx64 = rows.iter().find(|r| r.name == "rx_64B_ack");
    println!(
        "target: <= {TARGET_NS:.0} ns per 64 B segment incl. ACK (>= {:.1} M seg/s): \
         p10 {}; median {}",
        1e3 / TARGET_NS,
        judge(rx64.and_then(|r| r.ns_p10)),
        judge(rx64.and_then(|r| r.ns)),
    );
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut rows = Vec::new();
    bench_rx(&mut c, &mut rows);
    bench_tx_ack(&mut c, &mut rows);
    c.final_summary();
    // Cases filtered out on the command line ran no sample; leave them out of the table.
    rows.retain(|r| r.ns.is_some());
    print_summary(&rows);
}
