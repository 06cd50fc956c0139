//! flexins-pipe's second table: 64 B round trips between two applications, one on each
//! engine, driven by one thread (it plays both ends, so no wake-up is measured): the inline
//! QP (the payload inline in the pipe, found by polling its flag, flexins.txt 3.4), a pipe
//! QP's SEND/RECV, Sluice TCP between the two engines, and Linux TCP over loopback.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::time::Instant;

use sluice::verbs::{send_flags, wc_opcode, wc_status, RecvWr, SendData, SendOp, SendWr, Sge};
use sluice::{Sluice, Socket};
use sluice_bench::{cpu_seconds, current_thread_stat};

use super::engines::{Engines, IPS};
use super::verbs_side::{connect_all, Mode, VerbsSide, WAIT};
use crate::error::ExperimentError;
use crate::flows::quantile;

/// Bytes per message.
pub const SIZE: usize = 64;
/// The inline QP's slot in each region (payload, then the 8-byte trailer at its end).
const SLOT: usize = 256;
/// Receives each pipe QP keeps posted.
const RECVS: usize = 4;

/// The transports compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Flagged inline WRITEs (`post_send_inline_flagged` / `poll_inline_recv`).
    InlineQp,
    /// A pipe-mode QP's SEND into a posted RECV.
    PipeSendRecv,
    /// Sluice TCP sockets between the two engines.
    SluiceTcp,
    /// Linux TCP over loopback (std `TcpStream`).
    LinuxTcp,
}

impl Path {
    /// Every path, in table order.
    pub const ALL: [Path; 4] = [
        Path::InlineQp,
        Path::PipeSendRecv,
        Path::SluiceTcp,
        Path::LinuxTcp,
    ];

    /// Its name in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Path::InlineQp => "inline QP",
            Path::PipeSendRecv => "pipe SEND/RECV",
            Path::SluiceTcp => "Sluice TCP",
            Path::LinuxTcp => "Linux TCP",
        }
    }
}

/// One path's round trips.
#[derive(Clone, Debug)]
pub struct RttPoint {
    /// The path.
    pub path: Path,
    /// Round trips made.
    pub trips: u64,
    /// Median round trip, microseconds.
    pub p50_us: f64,
    /// 99th percentile round trip, microseconds.
    pub p99_us: f64,
    /// Round trips per second (one in flight).
    pub per_s: f64,
    /// Both engines' thread CPU per round trip, microseconds (None for Linux).
    pub engine_cpu_us: Option<f64>,
    /// The driving thread's CPU per round trip (for Linux: the kernel's work included).
    pub app_cpu_us: f64,
    /// Every message arrived byte-exact.
    pub exact: bool,
}

/// Message `i`'s bytes in direction `dir`.
fn message(i: u64, dir: u8) -> [u8; SIZE] {
    let mut m = [0u8; SIZE];
    for (j, b) in m.iter_mut().enumerate() {
        *b = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (j % 56)) as u8 ^ j as u8 ^ dir;
    }
    m
}

fn werr(what: &str, e: impl std::fmt::Debug) -> ExperimentError {
    ExperimentError::Workload(format!("{what}: {e:?}"))
}

/// Runs `trips` round trips of `trip` (which says whether both messages were exact) and
/// times them.
fn timed(
    path: Path,
    engines: Option<&Engines>,
    trips: u64,
    mut trip: impl FnMut(u64) -> Result<bool, ExperimentError>,
) -> Result<RttPoint, ExperimentError> {
    // A few untimed trips first: connection set-up, first-touch faults.
    let warm = (trips / 10).min(100);
    let mut exact = true;
    for i in 0..warm {
        exact &= trip(i)?;
    }
    let stat = current_thread_stat();
    let (app0, eng0) = (cpu_seconds(&stat), engines.map(Engines::cpu_both));
    let mut us = Vec::with_capacity(trips as usize);
    let start = Instant::now();
    for i in warm..warm + trips {
        let t0 = Instant::now();
        exact &= trip(i)?;
        us.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let seconds = start.elapsed().as_secs_f64();
    let n = trips.max(1) as f64;
    let engine_cpu_us = engines
        .zip(eng0)
        .map(|(e, c0)| (e.cpu_both() - c0) * 1e6 / n);
    Ok(RttPoint {
        path,
        trips,
        p50_us: quantile(&mut us, 0.5),
        p99_us: quantile(&mut us, 0.99),
        per_s: trips as f64 / seconds.max(1e-9),
        engine_cpu_us,
        app_cpu_us: (cpu_seconds(&stat) - app0) * 1e6 / n,
        exact,
    })
}

/// Busy-polls `f` until it gives something, for at most [`WAIT`].
fn spin<T>(
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>, ExperimentError>,
) -> Result<T, ExperimentError> {
    let start = Instant::now();
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if start.elapsed() > WAIT {
            return Err(ExperimentError::Workload(format!(
                "{what}: nothing in {WAIT:?}"
            )));
        }
        // Yield, not spin: the two engines' threads need the cores this thread shares.
        std::thread::yield_now();
    }
}

/// The inline QP: each side WRITEs the payload and its flag trailer into the other's
/// slot; the other polls the flag. No receive, no completion (unsignaled).
fn inline_qp(engines: &Engines, trips: u64) -> Result<RttPoint, ExperimentError> {
    let a = VerbsSide::open(&engines.sockets[0], Mode::Pipe, 1, 4096)?;
    let b = VerbsSide::open(&engines.sockets[1], Mode::Pipe, 1, 4096)?;
    connect_all(&a, IPS[0], &b, IPS[1])?;
    let mut out = [0u8; SLOT];
    let mut hop = |from: &VerbsSide, to: &VerbsSide, i: u64, dir: u8| {
        let m = message(i, dir);
        // Signaled every 4th so that the send queue's slots are given back.
        let signaled = i % 4 == 3;
        from.qps[0]
            .post_send_inline_flagged(i, &m, to.mr.addr(), SLOT, to.mr.key(), signaled)
            .map_err(|e| werr("inline post", e))?;
        let n = spin("inline flag", || {
            to.mr
                .poll_inline_recv(0, SLOT, &mut out)
                .map_err(|e| werr("inline poll", e))
        })?;
        if signaled {
            let wc = from.next_completion()?;
            if wc.status != wc_status::SUCCESS {
                return Ok(false);
            }
        }
        Ok::<bool, ExperimentError>(n == SIZE && out[..SIZE] == m)
    };
    timed(Path::InlineQp, Some(engines), trips, |i| {
        Ok(hop(&a, &b, i, 0)? & hop(&b, &a, i, 1)?)
    })
}

/// A pipe QP's SEND/RECV: each side keeps [`RECVS`] receives posted and reposts the one a
/// message took.
fn pipe_send_recv(engines: &Engines, trips: u64) -> Result<RttPoint, ExperimentError> {
    let a = VerbsSide::open(&engines.sockets[0], Mode::Pipe, 1, 4096)?;
    let b = VerbsSide::open(&engines.sockets[1], Mode::Pipe, 1, 4096)?;
    connect_all(&a, IPS[0], &b, IPS[1])?;
    let recv = |s: &VerbsSide, slot: usize| RecvWr {
        wr_id: slot as u64,
        sge: Some(Sge {
            addr: s.mr.addr() + (SIZE * slot) as u64,
            length: SIZE as u32,
            lkey: s.mr.key(),
        }),
    };
    for s in [&a, &b] {
        let wrs: Vec<RecvWr> = (0..RECVS).map(|k| recv(s, k)).collect();
        s.qps[0].post_recv(&wrs).map_err(|e| werr("post_recv", e))?;
    }
    // The send buffer lies past the receive slots.
    let send_at = SIZE * RECVS;
    let hop = |from: &VerbsSide, to: &VerbsSide, i: u64, dir: u8| {
        let m = message(i, dir);
        from.mr
            .write_at(send_at, &m)
            .map_err(|e| werr("write_at", e))?;
        // Signaled every 4th so that the send queue's slots are given back.
        let signaled = i % 4 == 3;
        let wr = SendWr {
            wr_id: i,
            op: SendOp::Send,
            flags: if signaled { send_flags::SIGNALED } else { 0 },
            data: SendData::Sge(Sge {
                addr: from.mr.addr() + send_at as u64,
                length: SIZE as u32,
                lkey: from.mr.key(),
            }),
        };
        from.qps[0]
            .post_send(&[wr])
            .map_err(|e| werr("post_send", e))?;
        let wc = to.next_completion()?;
        let mut ok = wc.status == wc_status::SUCCESS
            && wc.opcode == wc_opcode::RECV
            && wc.byte_len == SIZE as u32;
        let slot = (wc.wr_id as usize).min(RECVS - 1);
        let mut got = [0u8; SIZE];
        to.mr
            .read_at(SIZE * slot, &mut got)
            .map_err(|e| werr("read_at", e))?;
        ok &= got == m;
        to.qps[0]
            .post_recv(&[recv(to, slot)])
            .map_err(|e| werr("repost", e))?;
        if signaled {
            // The sender's completion (its CQ holds nothing else: its receives wait).
            let wc = from.next_completion()?;
            ok &= wc.status == wc_status::SUCCESS && wc.opcode == wc_opcode::SEND;
        }
        Ok::<bool, ExperimentError>(ok)
    };
    timed(Path::PipeSendRecv, Some(engines), trips, |i| {
        Ok(hop(&a, &b, i, 0)? & hop(&b, &a, i, 1)?)
    })
}

/// Reads exactly `buf.len()` bytes from a Sluice socket.
fn recv_exact(s: &Socket, buf: &mut [u8]) -> Result<(), ExperimentError> {
    let mut at = 0;
    while at < buf.len() {
        match s.recv(&mut buf[at..]) {
            Ok(0) => return Err(ExperimentError::Workload("Sluice TCP: closed".into())),
            Ok(n) => at += n,
            Err(e) => return Err(werr("Sluice TCP recv", e)),
        }
    }
    Ok(())
}

/// Sends all of `buf` on a Sluice socket.
fn send_all(s: &Socket, buf: &[u8]) -> Result<(), ExperimentError> {
    let mut at = 0;
    while at < buf.len() {
        at += s.send(&buf[at..]).map_err(|e| werr("Sluice TCP send", e))?;
    }
    Ok(())
}

/// Sluice TCP: a connection from an application on engine 0 to one on engine 1.
fn sluice_tcp(engines: &Engines, trips: u64) -> Result<RttPoint, ExperimentError> {
    let a = Sluice::attach(&engines.sockets[0]).map_err(|e| werr("attach", e))?;
    let b = Sluice::attach(&engines.sockets[1]).map_err(|e| werr("attach", e))?;
    let l = Socket::open(&b).map_err(|e| werr("socket", e))?;
    l.bind(SocketAddrV4::new(IPS[1], 0))
        .map_err(|e| werr("bind", e))?;
    l.listen(4).map_err(|e| werr("listen", e))?;
    let addr = l.local_addr().map_err(|e| werr("local_addr", e))?;
    let c = Socket::open(&a).map_err(|e| werr("socket", e))?;
    c.connect(addr).map_err(|e| werr("connect", e))?;
    let (s, _) = l.accept().map_err(|e| werr("accept", e))?;
    for x in [&c, &s] {
        x.set_nodelay(true).map_err(|e| werr("nodelay", e))?;
    }
    let mut got = [0u8; SIZE];
    timed(Path::SluiceTcp, Some(engines), trips, |i| {
        let (m0, m1) = (message(i, 0), message(i, 1));
        send_all(&c, &m0)?;
        recv_exact(&s, &mut got)?;
        let ok = got == m0;
        send_all(&s, &m1)?;
        recv_exact(&c, &mut got)?;
        Ok(ok && got == m1)
    })
}

/// Linux TCP over loopback, both ends in this thread.
fn linux_tcp(trips: u64) -> Result<RttPoint, ExperimentError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| werr("bind", e))?;
    let addr = l.local_addr().map_err(|e| werr("local_addr", e))?;
    let mut c = TcpStream::connect(addr).map_err(|e| werr("connect", e))?;
    let (mut s, _) = l.accept().map_err(|e| werr("accept", e))?;
    for x in [&c, &s] {
        x.set_nodelay(true).map_err(|e| werr("nodelay", e))?;
    }
    let mut got = [0u8; SIZE];
    timed(Path::LinuxTcp, None, trips, |i| {
        let (m0, m1) = (message(i, 0), message(i, 1));
        c.write_all(&m0).map_err(|e| werr("write", e))?;
        s.read_exact(&mut got).map_err(|e| werr("read", e))?;
        let ok = got == m0;
        s.write_all(&m1).map_err(|e| werr("write", e))?;
        c.read_exact(&mut got).map_err(|e| werr("read", e))?;
        Ok(ok && got == m1)
    })
}

/// Measures one path.
pub fn measure(engines: &Engines, path: Path, trips: u64) -> Result<RttPoint, ExperimentError> {
    match path {
        Path::InlineQp => inline_qp(engines, trips),
        Path::PipeSendRecv => pipe_send_recv(engines, trips),
        Path::SluiceTcp => sluice_tcp(engines, trips),
        Path::LinuxTcp => linux_tcp(trips),
    }
}
