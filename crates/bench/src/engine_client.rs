//! The engine as the bench's client: the same workloads as `sluice loadgen`, driven from
//! inside the engine loop against a Linux server.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant as WallInstant};

use hdrhistogram::Histogram;
use sluice_engine::{App, AppStatus, EngineError};
use sluice_tcp::{ConnId, ConnectError, Error, Instant, Stack, TcpState};

use crate::measure::{self, Measurement};
use crate::plan::{Kind, Timing, Workload, REQUEST_BYTES};

/// How long connections may take to open before the run fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection (or, for connect, one loop of connections).
#[derive(Default)]
struct Slot {
    conn: Option<ConnId>,
    established: bool,
    sent_at: Option<WallInstant>,
    got: usize,
}

/// Runs one workload from the engine and keeps its measurement.
pub struct EngineClient {
    workload: Workload,
    target: (Ipv4Addr, u16),
    timing: Timing,
    slots: Vec<Slot>,
    began: Option<WallInstant>,
    window: Option<(WallInstant, WallInstant)>,
    hist: Histogram<u64>,
    ops: u64,
    bytes: u64,
    cpu_stat: String,
    cpu0: Option<f64>,
    chunk: Vec<u8>,
    buf: Vec<u8>,
    /// The result, once the window closed.
    pub measurement: Option<Measurement>,
}

impl EngineClient {
    /// A client for `workload` against `ip:port`.
    pub fn new(workload: Workload, ip: Ipv4Addr, port: u16, timing: Timing) -> Self {
        EngineClient {
            workload,
            target: (ip, port),
            timing,
            slots: (0..workload.conns.max(1))
                .map(|_| Slot::default())
                .collect(),
            began: None,
            window: None,
            hist: measure::histogram(),
            ops: 0,
            bytes: 0,
            cpu_stat: String::new(),
            cpu0: None,
            chunk: vec![0x5a; 64 * 1024],
            buf: vec![0; 64 * 1024],
            measurement: None,
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> EngineError {
        let (ip, port) = self.target;
        EngineError::App(format!("{} to {ip}:{port}: {what}", self.workload.name()))
    }

    fn open_window(&mut self, now: WallInstant) {
        let start = now + Duration::from_secs_f64(self.timing.warmup);
        self.window = Some((start, start + Duration::from_secs_f64(self.timing.seconds)));
    }

    /// Moves slot `i` forward at wall time `now`.
    fn step(
        &mut self,
        stack: &mut Stack,
        core_now: Instant,
        now: WallInstant,
        i: usize,
    ) -> Result<(), EngineError> {
        let kind = self.workload.kind;
        let target = self.target;
        let Some(c) = self.slots[i].conn else {
            // Only the connect workload gets here after its first connection.
            match stack.connect(core_now, target.0, target.1) {
                Ok(c) => {
                    self.slots[i] = Slot {
                        conn: Some(c),
                        ..Slot::default()
                    };
                }
                // Every port or slot is in TIME-WAIT: try again on a later pass.
                Err(ConnectError::NoResources) => {}
                Err(e) => return Err(self.fail(e)),
            }
            return Ok(());
        };
        if let Some(e) = stack.error(c).map_err(|e| self.fail(e))? {
            return Err(self.fail(e));
        }
        if !self.slots[i].established {
            match stack.state(c).map_err(|e| self.fail(e))? {
                TcpState::SynSent | TcpState::SynReceived => return Ok(()),
                _ => {
                    let _ = stack.set_nagle(c, false);
                    self.slots[i].established = true;
                }
            }
        }
        let Some((start, _)) = self.window else {
            return Ok(());
        };
        let measuring = now >= start;
        match kind {
            Kind::Rpc | Kind::Connect => {
                if self.slots[i].sent_at.is_none() {
                    match stack.send(c, &self.chunk[..REQUEST_BYTES]) {
                        Ok(REQUEST_BYTES) => self.slots[i].sent_at = Some(now),
                        Ok(_) => return Err(self.fail("short send of a 64 B request")),
                        Err(Error::WouldBlock) => return Ok(()),
                        Err(e) => return Err(self.fail(e)),
                    }
                }
                loop {
                    match stack.recv(c, &mut self.buf) {
                        Ok(0) => return Err(self.fail("the server closed")),
                        Ok(n) => self.slots[i].got += n,
                        Err(Error::WouldBlock) => return Ok(()),
                        Err(e) => return Err(self.fail(e)),
                    }
                    if self.slots[i].got < REQUEST_BYTES {
                        continue;
                    }
                    self.slots[i].got -= REQUEST_BYTES;
                    let t0 = self.slots[i].sent_at.take().unwrap_or(now);
                    if t0 >= start {
                        measure::record(&mut self.hist, now.saturating_duration_since(t0));
                        self.ops += 1;
                    }
                    if kind == Kind::Connect {
                        let _ = stack.close(c);
                        self.slots[i] = Slot::default();
                        return Ok(());
                    }
                    // Closed loop: the next request goes out at once.
                    match stack.send(c, &self.chunk[..REQUEST_BYTES]) {
                        Ok(REQUEST_BYTES) => self.slots[i].sent_at = Some(now),
                        Ok(_) | Err(_) => return Err(self.fail("cannot send the next request")),
                    }
                }
            }
            Kind::StreamUp => loop {
                match stack.send(c, &self.chunk) {
                    Ok(n) => {
                        if measuring {
                            self.bytes += n as u64;
                        }
                        if n < self.chunk.len() {
                            return Ok(());
                        }
                    }
                    Err(Error::WouldBlock) => return Ok(()),
                    Err(e) => return Err(self.fail(e)),
                }
            },
            Kind::StreamDown => {
                let (a, b) = stack.peek(c).map_err(|e| self.fail(e))?;
                let n = a.len() + b.len();
                // Every source sends SOURCE_BYTE only: anything else arrived damaged.
                if !measure::all_source_bytes(a) || !measure::all_source_bytes(b) {
                    return Err(self.fail("a stream byte differs from what the source sent"));
                }
                if n > 0 {
                    stack.consume(c, n).map_err(|e| self.fail(e))?;
                    if measuring {
                        self.bytes += n as u64;
                    }
                } else if let Ok(0) = stack.recv(c, &mut self.buf) {
                    return Err(self.fail("the server closed"));
                }
                Ok(())
            }
        }
    }

    /// Closes the window: records the measurement and releases every connection.
    fn finish(&mut self, stack: &mut Stack, now: WallInstant) {
        let (start, _) = self.window.expect("finish only after the window opened");
        let cpu = measure::cpu_seconds(&self.cpu_stat) - self.cpu0.unwrap_or(0.0);
        self.measurement = Some(Measurement {
            seconds: now.saturating_duration_since(start).as_secs_f64(),
            ops: self.ops,
            bytes: self.bytes,
            latency: measure::latency(&self.hist),
            cpu_seconds: cpu.max(0.0),
            per_conn_bytes: Vec::new(),
        });
        for slot in &mut self.slots {
            if let Some(c) = slot.conn.take() {
                let _ = match self.workload.kind {
                    Kind::Rpc => stack.close(c),
                    _ => stack.abort(c),
                };
            }
        }
    }
}

impl App for EngineClient {
    fn poll(&mut self, stack: &mut Stack, core_now: Instant) -> Result<AppStatus, EngineError> {
        let now = WallInstant::now();
        if self.began.is_none() {
            self.began = Some(now);
            self.cpu_stat = measure::current_thread_stat();
            for i in 0..self.slots.len() {
                let (ip, port) = self.target;
                let c = stack
                    .connect(core_now, ip, port)
                    .map_err(|e| self.fail(e))?;
                self.slots[i].conn = Some(c);
            }
            if self.workload.kind == Kind::Connect {
                self.open_window(now);
            }
        }
        for i in 0..self.slots.len() {
            self.step(stack, core_now, now, i)?;
        }
        match self.window {
            None if self.slots.iter().all(|s| s.established) => self.open_window(now),
            None if self.began.is_some_and(|b| now - b > CONNECT_TIMEOUT) => {
                return Err(self.fail("connections did not open in time"))
            }
            None => {}
            Some((start, _)) if self.cpu0.is_none() && now >= start => {
                self.cpu0 = Some(measure::cpu_seconds(&self.cpu_stat));
            }
            Some((_, end)) if now >= end => {
                self.finish(stack, now);
                return Ok(AppStatus::Done);
            }
            Some(_) => {}
        }
        Ok(AppStatus::Running)
    }
}
