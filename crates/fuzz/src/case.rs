//! One fuzz case: two stacks, a client and a server, joined by the fuzzer's [`Wire`].
//!
//! A case draws everything from its seed: the configurations, the connections, and a
//! sequence of steps that deliver, drop, duplicate, reorder, delay and forge frames, jump
//! the clock and make application calls. After every step the invariants are checked
//! ([`crate::invariants`]). At the end the network heals: clean flows must complete
//! (liveness), and once the applications let go of everything, both stacks must free every
//! connection slot (no leaks).

use std::time::Duration;

use rand::distributions::{Distribution, WeightedIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_tcp::{ConnId, ListenerId, Stack};

use crate::config::{drain_bound, random_config, SERVICE_PORTS};
use crate::flows::Flows;
use crate::frames::{parse_tcp, MAX_FRAME};
use crate::mutate::mutate;
use crate::net::{Packet, Side, Wire};
use crate::violation::{Failure, Violation};

/// Limits of one run of a case.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaseOptions {
    /// Fuzz steps; None draws 50..600 from the seed.
    pub steps: Option<usize>,
    /// Print every step to stderr.
    pub trace: bool,
}

/// What a case did, for the campaign's summary.
#[derive(Clone, Debug, Default)]
pub struct CaseStats {
    /// Fuzz steps run.
    pub steps: usize,
    /// Frames handed to the stacks.
    pub frames: u64,
    /// Forged frames (mutated or injected) handed to the stacks.
    pub forged: u64,
    /// Flows (connections between the stacks).
    pub flows: usize,
    /// Stream directions whose every delivered byte was checked.
    pub checked_dirs: usize,
    /// Bytes checked against the written streams.
    pub checked_bytes: u64,
    /// Flows that passed the liveness check.
    pub live_flows: usize,
    /// Clean rounds run while healing and tearing down.
    pub quiet_rounds: usize,
}

/// An application's handle to a connection, and what the case knows about it.
#[derive(Clone, Debug)]
pub(crate) struct Handle {
    pub side: Side,
    pub id: ConnId,
    /// From `connect` (else from `accept`).
    pub active: bool,
    /// The application closed or aborted it: the core must refuse it from now on.
    pub released: bool,
    /// The flow it is mapped to.
    pub flow: Option<usize>,
    /// Mapping failed (e.g. a forged handshake); its data is not checked.
    pub untracked: bool,
    /// The application shut down its sending side (carried over to the flow on mapping).
    pub shut: bool,
    /// Data was read or written before mapping, so its streams cannot be checked.
    pub io_unmapped: bool,
}

impl Handle {
    pub fn new(side: Side, id: ConnId, active: bool) -> Self {
        Handle {
            side,
            id,
            active,
            released: false,
            flow: None,
            untracked: false,
            shut: false,
            io_unmapped: false,
        }
    }
}

/// The state of a running case.
pub struct Case {
    pub(crate) rng: ChaCha8Rng,
    pub(crate) now: sluice_tcp::Instant,
    pub(crate) stacks: [Stack; 2],
    pub(crate) wire: Wire,
    pub(crate) flows: Flows,
    pub(crate) handles: Vec<Handle>,
    pub(crate) listeners: Vec<(Side, ListenerId)>,
    /// Listeners that were closed: their handles stay around for stale-handle calls.
    pub(crate) old_listeners: Vec<(Side, ListenerId)>,
    /// Each stack's shared log (laminar.txt 5), once the case registered one.
    pub(crate) logs: [Option<sluice_tcp::LogId>; 2],
    /// Mutations and injections happen in this case.
    pub(crate) dirty: bool,
    pub(crate) trace: bool,
    pub(crate) step: usize,
    weights: WeightedIndex<u32>,
    pub(crate) buf: Vec<u8>,
    pub(crate) stats: CaseStats,
}

macro_rules! trace {
    ($case:expr, $($arg:tt)*) => {
        if $case.trace {
            eprintln!("[{:>4}] {:?} {}", $case.step, $case.now, format!($($arg)*));
        }
    };
}
pub(crate) use trace;

/// Runs the case of `seed`.
pub fn run_case(seed: u64, opts: &CaseOptions) -> Result<CaseStats, Failure> {
    let mut case = Case::new(seed, opts.trace);
    let fail = |case: &Case, kind: Violation| Failure {
        seed,
        step: case.step,
        kind,
    };
    let steps = opts
        .steps
        .unwrap_or_else(|| case.rng.gen_range(50..600usize));
    case.setup().map_err(|m| fail(&case, m))?;
    for step in 0..steps {
        case.step = step;
        case.fuzz_step().map_err(|m| fail(&case, m))?;
        case.after_step().map_err(|m| fail(&case, m))?;
    }
    case.step = steps;
    case.heal().map_err(|m| fail(&case, m))?;
    case.step = steps + 1;
    case.teardown().map_err(|m| fail(&case, m))?;
    case.stats.steps = steps;
    case.stats.flows = case.flows.list.len();
    for f in &case.flows.list {
        if f.checkable() {
            case.stats.checked_dirs += f.dirs.iter().filter(|d| !d.data_tainted).count();
            case.stats.checked_bytes += f
                .dirs
                .iter()
                .filter(|d| !d.data_tainted)
                .map(|d| d.read)
                .sum::<u64>();
        }
    }
    Ok(case.stats)
}

impl Case {
    fn new(seed: u64, trace: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let stacks = Side::BOTH.map(|side| {
            let cfg = random_config(&mut rng, side);
            let mut s = Stack::new(cfg).expect("random_config yields valid configurations");
            crate::config::group_limits(&mut s);
            s.add_neighbor(side.other().ip(), side.other().mac());
            s
        });
        // Start the clock anywhere up to ~13 days, so that 32-bit millisecond and
        // microsecond truncations of it wrap at different points in different cases.
        let start = if rng.gen() {
            0
        } else {
            rng.gen_range(0..1u64 << 50)
        };
        let dirty = rng.gen_bool(0.75);
        Case {
            now: sluice_tcp::Instant::from_nanos(start),
            stacks,
            wire: Wire::new(512),
            flows: Flows::new(seed),
            handles: Vec::new(),
            listeners: Vec::new(),
            old_listeners: Vec::new(),
            logs: [None, None],
            dirty,
            trace,
            step: 0,
            weights: Self::step_weights(dirty),
            buf: vec![0; MAX_FRAME],
            stats: CaseStats::default(),
            rng,
        }
    }

    pub(crate) fn stack(&mut self, side: Side) -> &mut Stack {
        &mut self.stacks[side.index()]
    }

    /// Listeners and 1-3 connections, established over a clean network.
    fn setup(&mut self) -> Result<(), Violation> {
        let backlog = self.rng.gen_range(1..=4);
        self.listen(Side::B, SERVICE_PORTS[0], backlog)?;
        let reverse = self.rng.gen_bool(0.25);
        if reverse {
            self.listen(Side::A, SERVICE_PORTS[1], backlog)?;
        }
        for _ in 0..self.rng.gen_range(1..=3) {
            self.connect(Side::A, Side::B.ip(), SERVICE_PORTS[0])?;
        }
        if reverse {
            self.connect(Side::B, Side::A.ip(), SERVICE_PORTS[1])?;
        }
        trace!(
            self,
            "setup: {} handles, dirty={}",
            self.handles.len(),
            self.dirty
        );
        for _ in 0..20 {
            self.clean_round(Duration::from_millis(1))?;
        }
        Ok(())
    }

    /// How often each kind of step is drawn; forging kinds only in dirty cases.
    fn step_weights(dirty: bool) -> WeightedIndex<u32> {
        let forge = u32::from(dirty);
        let weights = [
            30,        // deliver one frame
            10,        // deliver a batch
            4,         // drop
            3,         // duplicate
            3,         // reorder
            9 * forge, // mutate a real frame
            7 * forge, // inject a structured segment
            3 * forge, // inject garbage
            10,        // small time step
            4,         // RTO-scale time step
            1,         // huge time jump
            10,        // random application call
            14,        // application data pump
            6,         // drain transmit queues
        ];
        WeightedIndex::new(weights).expect("weights are positive")
    }

    /// One random step.
    fn fuzz_step(&mut self) -> Result<(), Violation> {
        let kind = self.weights.sample(&mut self.rng);
        match kind {
            0 => self.deliver_one(),
            1 => self.deliver_batch(),
            2 => self.drop_frame(),
            3 => self.duplicate_frame(),
            4 => self.reorder(),
            5 => self.mutate_frame(),
            6 => self.inject_segment(),
            7 => self.inject_garbage(),
            8 => {
                let d = Duration::from_micros(self.rng.gen_range(0..50_000));
                self.advance(d)?
            }
            9 => {
                let d = Duration::from_millis(self.rng.gen_range(100..10_000));
                self.advance(d)?
            }
            10 => {
                let d = Duration::from_secs(self.rng.gen_range(60..4 * 3600));
                self.advance(d)?
            }
            11 => self.random_app_call()?,
            12 => self.pump()?,
            _ => {}
        }
        // The core's output is usually collected at once; sometimes it waits, so that the
        // bounded control-frame queues fill up.
        if kind == 13 || self.rng.gen_bool(0.8) {
            self.drain(Side::A)?;
            self.drain(Side::B)?;
        }
        Ok(())
    }

    // ---- the wire ----------------------------------------------------------------------

    /// Collects everything `side` has to send, checking that it drains.
    pub(crate) fn drain(&mut self, side: Side) -> Result<(), Violation> {
        let bound = drain_bound(self.stacks[side.index()].config());
        let now = self.now;
        for _ in 0..=bound {
            let Some(n) = self.stacks[side.index()].poll_transmit(now, &mut self.buf) else {
                return Ok(());
            };
            if n > self.buf.len() {
                return Err(Violation::TransmitOverBuffer { side, len: n });
            }
            let bytes = self.buf[..n].to_vec();
            self.check_frame_size(side, &bytes)?;
            if let Some(seg) = parse_tcp(&bytes, side.other().ip(), true) {
                self.flows.observe(side, &seg);
            }
            self.wire.push(Packet {
                to: side.other(),
                bytes,
                pristine: true,
            });
        }
        Err(Violation::EndlessTransmit { side, bound })
    }

    /// Hands frames to `to` as one batch, accounting for forged ones first.
    pub(crate) fn deliver(&mut self, to: Side, frames: Vec<Packet>) {
        let verify = self.stacks[to.index()].config().verify_checksums;
        for p in &frames {
            self.stats.frames += 1;
            if !p.pristine {
                self.stats.forged += 1;
                if let Some(seg) = parse_tcp(&p.bytes, to.ip(), verify) {
                    self.flows.on_forged(to, &seg);
                }
            }
        }
        if self.trace {
            for p in &frames {
                let what = match parse_tcp(&p.bytes, to.ip(), verify) {
                    Some(s) => format!(
                        "{}->{} flags {:#04x} seq {} ack {} win {} len {}{}",
                        s.tcp.src_port,
                        s.tcp.dst_port,
                        s.tcp.flags.0,
                        s.tcp.seq,
                        s.tcp.ack,
                        s.tcp.window,
                        s.payload.len(),
                        if s.tcp.options.sack_count > 0 {
                            format!(" sack {:?}", s.tcp.options.sacks())
                        } else {
                            String::new()
                        }
                    ),
                    None => format!("{} bytes, dropped by the parser", p.bytes.len()),
                };
                let kind = if p.pristine { "" } else { "forged " };
                trace!(self, "  -> {to:?}: {kind}{what}");
            }
        }
        let refs: Vec<&[u8]> = frames.iter().map(|p| p.bytes.as_slice()).collect();
        let now = self.now;
        self.stacks[to.index()].handle_frames(now, &refs);
    }

    /// Mostly the oldest frame (in-order delivery), sometimes any (reordering).
    fn pick_index(&mut self) -> Option<usize> {
        let n = self.wire.len();
        if n == 0 {
            return None;
        }
        Some(if self.rng.gen_bool(0.7) {
            0
        } else {
            self.rng.gen_range(0..n)
        })
    }

    fn deliver_one(&mut self) {
        if let Some(p) = self.pick_index().and_then(|i| self.wire.take(i)) {
            trace!(self, "deliver to {:?} ({} bytes)", p.to, p.bytes.len());
            let to = p.to;
            self.deliver(to, vec![p]);
        }
    }

    /// Up to 40 frames for one side (more than the core's batch of 32, so batches split).
    fn deliver_batch(&mut self) {
        let to = if self.rng.gen() { Side::A } else { Side::B };
        let want = self.rng.gen_range(1..=40);
        let mut batch = Vec::new();
        let mut i = 0;
        while batch.len() < want && i < self.wire.len() {
            if self.wire.get(i).is_some_and(|p| p.to == to) {
                batch.extend(self.wire.take(i));
            } else {
                i += 1;
            }
        }
        trace!(self, "deliver batch of {} to {to:?}", batch.len());
        self.deliver(to, batch);
    }

    fn drop_frame(&mut self) {
        if let Some(i) = self.pick_index() {
            trace!(self, "drop frame {i}");
            self.wire.take(i);
        }
    }

    fn duplicate_frame(&mut self) {
        if let Some(p) = self.pick_index().and_then(|i| self.wire.get(i).cloned()) {
            trace!(self, "duplicate a frame to {:?}", p.to);
            self.wire.push(p);
        }
    }

    fn reorder(&mut self) {
        let n = self.wire.len();
        if n >= 2 {
            let (i, j) = (self.rng.gen_range(0..n), self.rng.gen_range(0..n));
            trace!(self, "swap frames {i} and {j}");
            self.wire.swap(i, j);
        }
    }

    /// A damaged copy of a real frame, delivered now or left on the wire.
    fn mutate_frame(&mut self) {
        let Some(mut p) = self.pick_index().and_then(|i| self.wire.get(i).cloned()) else {
            return;
        };
        let m = mutate(&mut self.rng, &mut p.bytes, 0.75);
        p.pristine = false;
        trace!(self, "mutate ({m:?}) a frame to {:?}", p.to);
        if self.rng.gen_bool(0.7) {
            let to = p.to;
            self.deliver(to, vec![p]);
        } else {
            self.wire.push(p);
        }
    }

    // ---- time --------------------------------------------------------------------------

    /// Moves the clock and runs the timers that are due (sometimes on one stack only, so a
    /// stack may see frames with overdue timers).
    pub(crate) fn advance(&mut self, d: Duration) -> Result<(), Violation> {
        self.now += d;
        trace!(self, "time +{d:?}");
        for side in Side::BOTH {
            if self.rng.gen_bool(0.9) {
                self.run_timers(side)?;
            }
        }
        Ok(())
    }

    pub(crate) fn run_timers(&mut self, side: Side) -> Result<(), Violation> {
        let now = self.now;
        let s = &mut self.stacks[side.index()];
        if s.poll_timeout().is_some_and(|t| t <= now) || self.rng.gen_bool(0.2) {
            s.handle_timeout(now);
            self.check_timers_done(side)?;
        }
        Ok(())
    }

    // ---- clean phases ------------------------------------------------------------------

    /// A round over a perfect network: collect, deliver everything in order (batched), run
    /// due timers and the applications, then let `d` pass.
    pub(crate) fn clean_round(&mut self, d: Duration) -> Result<(), Violation> {
        self.drain(Side::A)?;
        self.drain(Side::B)?;
        while !self.wire.is_empty() {
            let to = self.wire.get(0).map_or(Side::A, |p| p.to);
            let mut batch = Vec::new();
            while self.wire.get(0).is_some_and(|p| p.to == to) && batch.len() < 40 {
                batch.extend(self.wire.take(0));
            }
            self.deliver(to, batch);
        }
        self.drain(Side::A)?;
        self.drain(Side::B)?;
        self.pump_apps(true)?;
        self.after_step()?;
        self.now += d;
        for side in Side::BOTH {
            let now = self.now;
            let s = &mut self.stacks[side.index()];
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
                self.check_timers_done(side)?;
            }
        }
        Ok(())
    }

    /// The earliest timer of either stack.
    pub(crate) fn next_deadline(&self) -> Option<sluice_tcp::Instant> {
        self.stacks.iter().filter_map(Stack::poll_timeout).min()
    }

    /// Heals the network and lets the applications finish their streams; flows nobody
    /// tampered with must then be complete.
    fn heal(&mut self) -> Result<(), Violation> {
        trace!(self, "heal");
        let shut_at_end = self.rng.gen_bool(0.5);
        const HEALING: Duration = Duration::from_secs(3600);
        let mut limit = self.now + HEALING;
        for _ in 0..20_000 {
            let d = self.quiet_step()?;
            self.clean_round(d)?;
            // A FIN sent now gets the whole healing time to arrive: a round may jump the
            // clock to a far timer (once a congestion-control tick after an RTT sampled
            // across an outage, which the core no longer takes; a stale timer-queue entry
            // still may), and a shutdown made after such a jump must not find the time
            // already spent (issue 24's simultaneous-close failures).
            if shut_at_end && self.shutdown_finished_senders()? > 0 {
                limit = limit.max(self.now + HEALING);
            }
            if self.quiescent()? || self.now >= limit {
                break;
            }
        }
        self.check_liveness()
    }

    /// How far to move the clock in a clean round: a millisecond while frames fly, else
    /// straight to the next timer.
    fn quiet_step(&mut self) -> Result<Duration, Violation> {
        self.stats.quiet_rounds += 1;
        // The logs' applications keep up, so their connections' windows open again.
        self.log_serve(Side::A, true)?;
        self.log_serve(Side::B, true)?;
        self.drain(Side::A)?;
        self.drain(Side::B)?;
        if !self.wire.is_empty() {
            return Ok(Duration::from_millis(1));
        }
        Ok(match self.next_deadline() {
            Some(t) if t > self.now => t - self.now,
            _ => Duration::from_millis(1),
        })
    }

    /// Nothing in flight, nothing to send, no timer: the network has settled. Collects what
    /// the applications' last calls queued first, so that it is not mistaken for quiet.
    fn quiescent(&mut self) -> Result<bool, Violation> {
        self.drain(Side::A)?;
        self.drain(Side::B)?;
        Ok(self.wire.is_empty() && self.next_deadline().is_none())
    }

    /// The applications let go of everything; after enough quiet time both stacks must
    /// have freed every connection slot.
    fn teardown(&mut self) -> Result<(), Violation> {
        trace!(self, "teardown");
        let limit = self.now + Duration::from_secs(6 * 3600);
        for _ in 0..50_000 {
            self.release_all()?;
            let d = self.quiet_step()?;
            self.clean_round(d)?;
            self.release_all()?;
            if self.quiescent()? || self.now >= limit {
                break;
            }
        }
        self.check_no_leaks()
    }
}
