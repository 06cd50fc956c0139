//! The Linux clients of one side: threads of this process inside that side's client
//! namespace, each looping over one workload until told to stop, checking every byte that
//! comes back and counting what completed and every error by kind.

use std::collections::BTreeMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::protocol::{mismatches, pattern_fill, Header, Mode, Verdict, VERDICT_LEN};

/// A read or write that waits this long is a stall, counted as an error. Retransmission
/// timeouts that back off from 200 ms to 1 s reach it only after five or six round trips
/// in a row failed: at 5 % loss each way (about 10 % a round trip) that is one in a
/// million, so a stall in a soak is the transport's, not the dice's.
pub const STALL: Duration = Duration::from_secs(60);
/// A connect that takes longer fails. Linux sends its SYN at 0, 1, 3, 7, 15 and 31 s: six
/// tries fail together about once in a million at 5 % loss each way, where the 4 tries of
/// 15 s would fail once in 10,000 (a few times in a 30-minute soak's churn).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests per RPC connection before it closes and reconnects.
const RPC_PER_CONN: u64 = 500;
/// The first error messages kept, with when they happened.
const KEEP_MESSAGES: usize = 10;

/// What a client thread runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Uploads of `bulk` bytes, checked by the server.
    BulkUp,
    /// Downloads of `bulk` bytes, checked here.
    BulkDown,
    /// Closed-loop echo requests of 64 B to 4 KiB on long connections.
    Rpc,
    /// A connection per 64 B echo request.
    Churn,
}

impl Workload {
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Workload::BulkUp => "bulk up",
            Workload::BulkDown => "bulk down",
            Workload::Rpc => "rpc",
            Workload::Churn => "churn",
        }
    }
}

/// Why an operation failed. None of them is expected, impairment or not: TCP delivers
/// every byte in order or the connection fails, and the soak counts either as an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// A byte differed from what was sent (checked here or by the server).
    Content,
    /// The connection could not be opened (refused, timed out).
    Connect,
    /// The connection was reset or aborted.
    Reset,
    /// No progress for [`STALL`].
    Stall,
    /// The peer closed before the protocol's end, or sent more than it should.
    Protocol,
    /// Any other socket error.
    Io,
}

impl FailureKind {
    /// Its name in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Content => "content",
            FailureKind::Connect => "connect",
            FailureKind::Reset => "reset",
            FailureKind::Stall => "stall",
            FailureKind::Protocol => "protocol",
            FailureKind::Io => "io",
        }
    }
}

/// A failed operation: its kind and what happened.
#[derive(Debug)]
struct Failure {
    kind: FailureKind,
    detail: String,
}

impl Failure {
    fn new(kind: FailureKind, detail: impl Into<String>) -> Self {
        Failure {
            kind,
            detail: detail.into(),
        }
    }

    /// A socket error, classified.
    fn io(what: &str, e: io::Error) -> Self {
        let kind = match e.kind() {
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                FailureKind::Reset
            }
            ErrorKind::WouldBlock | ErrorKind::TimedOut => FailureKind::Stall,
            ErrorKind::UnexpectedEof => FailureKind::Protocol,
            _ => FailureKind::Io,
        };
        let detail = match kind {
            FailureKind::Stall => format!("{what}: nothing moved for {STALL:?}"),
            _ => format!("{what}: {e}"),
        };
        Failure::new(kind, detail)
    }
}

/// One workload's counts on one side.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkloadTally {
    /// Connections that ran to their orderly close with every byte checked.
    pub connections: u64,
    /// Payload bytes checked (by the server for uploads, here otherwise).
    pub bytes_verified: u64,
    /// Echo requests answered and checked (rpc, churn).
    pub requests: u64,
}

/// Everything one side's clients counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tally {
    /// Per workload, by name.
    pub workloads: BTreeMap<&'static str, WorkloadTally>,
    /// Errors by kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// The first few errors: seconds into the run, workload, what happened.
    pub first_errors: Vec<String>,
}

impl Tally {
    /// Bytes checked over every workload.
    pub fn bytes_verified(&self) -> u64 {
        self.workloads.values().map(|w| w.bytes_verified).sum()
    }

    /// Connections completed over every workload.
    pub fn connections(&self) -> u64 {
        self.workloads.values().map(|w| w.connections).sum()
    }

    /// Errors of every kind.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Errors of one kind.
    pub fn errors_of(&self, kind: FailureKind) -> u64 {
        self.errors.get(kind.name()).copied().unwrap_or(0)
    }
}

/// How the clients of one side run.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    /// The client namespace they run in.
    pub netns: String,
    /// The server.
    pub target: SocketAddr,
    /// Bytes per bulk transfer.
    pub bulk: u64,
    /// Threads per workload: bulk up, bulk down, rpc, churn.
    pub threads: [(Workload, usize); 4],
    /// Distinguishes this side's seeds.
    pub seed: u64,
}

/// One side's running clients.
pub struct Clients {
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Clients {
    /// Starts every thread of `plan`; `began` is the run's start (error times count from it).
    pub fn start(plan: &ClientPlan, began: Instant) -> io::Result<Clients> {
        let tally = Arc::new(Mutex::new(Tally::default()));
        {
            let mut t = lock(&tally);
            for (w, _) in plan.threads {
                t.workloads.insert(w.name(), WorkloadTally::default());
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for (workload, n) in plan.threads {
            for i in 0..n {
                let worker = Worker {
                    workload,
                    plan: plan.clone(),
                    seed: plan.seed ^ ((workload as u64) << 56) ^ ((i as u64) << 48),
                    tally: Arc::clone(&tally),
                    stop: Arc::clone(&stop),
                    began,
                };
                let h = thread::Builder::new()
                    .name(format!("soak-{}", workload.name()))
                    .spawn(move || worker.run())?;
                handles.push(h);
            }
        }
        Ok(Clients {
            tally,
            stop,
            handles,
        })
    }

    /// What they counted so far.
    pub fn tally(&self) -> Tally {
        lock(&self.tally).clone()
    }

    /// Asks every thread to stop after its current operation.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops every thread after its current operation, waits for them, and returns the
    /// final counts.
    pub fn stop(mut self) -> Tally {
        self.request_stop();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        lock(&self.tally).clone()
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        // A soak that failed half-way must not leave clients running.
        self.request_stop();
    }
}

/// The tally, also after a thread panicked while holding it.
fn lock(t: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// One client thread.
struct Worker {
    workload: Workload,
    plan: ClientPlan,
    seed: u64,
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    began: Instant,
}

impl Worker {
    fn run(self) {
        if let Err(e) = sluice_device::netns::enter(&self.plan.netns) {
            self.fail(Failure::new(
                FailureKind::Io,
                format!("enter {}: {e}", self.plan.netns),
            ));
            return;
        }
        let mut n = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        let mut scratch = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            n += 1;
            let seed = self.seed ^ n;
            let result = match self.workload {
                Workload::BulkUp => self.bulk_up(seed, &mut buf),
                Workload::BulkDown => self.bulk_down(seed, &mut buf, &mut scratch),
                Workload::Rpc | Workload::Churn => self.echo(seed, &mut buf, &mut scratch),
            };
            if let Err(f) = result {
                self.fail(f);
                // Do not spin on a server that is gone.
                thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Counts an error.
    fn fail(&self, f: Failure) {
        let mut t = lock(&self.tally);
        *t.errors.entry(f.kind.name()).or_default() += 1;
        if t.first_errors.len() < KEEP_MESSAGES {
            t.first_errors.push(format!(
                "{:.1} s {}: {} ({})",
                self.began.elapsed().as_secs_f64(),
                self.workload.name(),
                f.detail,
                f.kind.name()
            ));
        }
    }

    /// Adds to this workload's counts.
    fn count(&self, connections: u64, bytes: u64, requests: u64) {
        let mut t = lock(&self.tally);
        let w = t.workloads.entry(self.workload.name()).or_default();
        w.connections += connections;
        w.bytes_verified += bytes;
        w.requests += requests;
    }

    /// A connection that has sent `header`.
    fn open(&self, header: Header) -> Result<TcpStream, Failure> {
        let target = self.plan.target;
        let s = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
            .map_err(|e| Failure::new(FailureKind::Connect, format!("connect to {target}: {e}")))?;
        s.set_nodelay(true)
            .and_then(|_| s.set_read_timeout(Some(STALL)))
            .and_then(|_| s.set_write_timeout(Some(STALL)))
            .map_err(|e| Failure::io("socket options", e))?;
        let mut s = s;
        s.write_all(&header.encode())
            .map_err(|e| Failure::io("send the header", e))?;
        Ok(s)
    }

    /// Closes our side and waits for the server's close, which must bring nothing more.
    fn close(s: &mut TcpStream, buf: &mut [u8]) -> Result<(), Failure> {
        s.shutdown(Shutdown::Write)
            .map_err(|e| Failure::io("shutdown", e))?;
        match s.read(buf) {
            Ok(0) => Ok(()),
            Ok(n) => Err(Failure::new(
                FailureKind::Protocol,
                format!("{n} bytes after the end"),
            )),
            Err(e) => Err(Failure::io("wait for the server's close", e)),
        }
    }

    /// One upload, checked by the server.
    fn bulk_up(&self, seed: u64, buf: &mut [u8]) -> Result<(), Failure> {
        let len = self.plan.bulk;
        let mut s = self.open(Header {
            mode: Mode::Upload,
            seed,
            len,
        })?;
        let r = Self::upload(&mut s, seed, len, buf);
        self.finish(r, &mut s, buf, 1, len)
    }

    /// An upload's bytes and its verdict.
    fn upload(s: &mut TcpStream, seed: u64, len: u64, buf: &mut [u8]) -> Result<(), Failure> {
        let mut offset = 0u64;
        while offset < len {
            let n = (len - offset).min(buf.len() as u64) as usize;
            pattern_fill(seed, offset, &mut buf[..n]);
            s.write_all(&buf[..n])
                .map_err(|e| Failure::io(&format!("upload at byte {offset}"), e))?;
            offset += n as u64;
        }
        let mut v = [0; VERDICT_LEN];
        s.read_exact(&mut v)
            .map_err(|e| Failure::io("read the verdict", e))?;
        let v = Verdict::decode(&v);
        if v.mismatched > 0 {
            return Err(Failure::new(
                FailureKind::Content,
                format!("the server found {} of {len} bytes wrong", v.mismatched),
            ));
        }
        if v.matched != len {
            return Err(Failure::new(
                FailureKind::Protocol,
                format!("the server checked {} of {len} bytes", v.matched),
            ));
        }
        Ok(())
    }

    /// One download, every byte checked here.
    fn bulk_down(&self, seed: u64, buf: &mut [u8], scratch: &mut Vec<u8>) -> Result<(), Failure> {
        let len = self.plan.bulk;
        let mut s = self.open(Header {
            mode: Mode::Download,
            seed,
            len,
        })?;
        let r = Self::download(&mut s, seed, len, buf, scratch);
        self.finish(r, &mut s, buf, 1, len)
    }

    /// A download's bytes, each checked.
    fn download(
        s: &mut TcpStream,
        seed: u64,
        len: u64,
        buf: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        let mut offset = 0u64;
        while offset < len {
            let want = (len - offset).min(buf.len() as u64) as usize;
            let n = s
                .read(&mut buf[..want])
                .map_err(|e| Failure::io(&format!("download at byte {offset}"), e))?;
            if n == 0 {
                return Err(Failure::new(
                    FailureKind::Protocol,
                    format!("the server closed at byte {offset} of {len}"),
                ));
            }
            let bad = mismatches(seed, offset, &buf[..n], scratch);
            if bad > 0 {
                return Err(Failure::new(
                    FailureKind::Content,
                    format!("{bad} wrong bytes at {offset}..{}", offset + n as u64),
                ));
            }
            offset += n as u64;
        }
        Ok(())
    }

    /// One echo connection: RPC's many requests, or churn's one.
    fn echo(&self, seed: u64, buf: &mut [u8], scratch: &mut Vec<u8>) -> Result<(), Failure> {
        let mut s = self.open(Header {
            mode: Mode::Echo,
            seed,
            len: 0,
        })?;
        let r = self.requests(&mut s, seed, buf, scratch);
        self.finish(r, &mut s, buf, 1, 0)
    }

    /// An echo connection's requests, each response checked.
    fn requests(
        &self,
        s: &mut TcpStream,
        seed: u64,
        buf: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        let requests = match self.workload {
            Workload::Churn => 1,
            _ => RPC_PER_CONN,
        };
        let (mut offset, mut done) = (0u64, 0u64);
        let mut request = Vec::new();
        while done < requests && (done == 0 || !self.stop.load(Ordering::Relaxed)) {
            // 64 B to 4 KiB, varying with the request.
            let size = match self.workload {
                Workload::Churn => 64,
                _ => 64 << ((seed ^ done) % 7),
            };
            request.resize(size, 0);
            pattern_fill(seed, offset, &mut request);
            s.write_all(&request)
                .map_err(|e| Failure::io(&format!("request {done}"), e))?;
            let got = &mut buf[..size];
            s.read_exact(got)
                .map_err(|e| Failure::io(&format!("response {done}"), e))?;
            let bad = mismatches(seed, offset, got, scratch);
            if bad > 0 {
                return Err(Failure::new(
                    FailureKind::Content,
                    format!("{bad} wrong bytes in response {done} ({size} B)"),
                ));
            }
            offset += size as u64;
            done += 1;
            self.count(0, size as u64, 1);
        }
        Ok(())
    }

    /// Closes a connection whose exchange went as `result` says and counts it complete;
    /// a failure names the connection's local address, to find it in a capture.
    fn finish(
        &self,
        result: Result<(), Failure>,
        s: &mut TcpStream,
        buf: &mut [u8],
        connections: u64,
        bytes: u64,
    ) -> Result<(), Failure> {
        match result.and_then(|()| Self::close(s, buf)) {
            Ok(()) => {
                self.count(connections, bytes, 0);
                Ok(())
            }
            Err(mut f) => {
                if let Ok(local) = s.local_addr() {
                    f.detail = format!("{local}: {}", f.detail);
                }
                Err(f)
            }
        }
    }
}
