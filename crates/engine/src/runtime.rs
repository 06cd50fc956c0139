//! The polling loop: receive a burst, run due timers, let the application act, transmit a
//! burst; sleep on the device only after an idle spell, so latency-critical traffic is
//! served by polling and an idle engine costs no CPU. With a virtual clock (the simulated
//! wire) time stands still while the loop polls, so idle means sleep at once: the device's
//! wait is what advances virtual time.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use sluice_device::{Device, DeviceError, DeviceStats};
use sluice_shm::idle::{IdlePolicy, IdleSpell, IdleStep};
use sluice_tcp::{Closing, Instant, Stack};

use crate::clock::Clock;
use crate::hooks::Hooks;
use crate::pump;
use crate::stage_time::Lap;
use crate::transport::Transports;

/// What an application wants after a poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppStatus {
    /// Keep running.
    Running,
    /// Keep running; the application did work this iteration (moved bytes, answered
    /// requests), so the engine keeps polling instead of counting toward its idle spell.
    Busy,
    /// Finished successfully: the engine sends what is queued, lingers until the
    /// connections the application closed have finished closing (at most the engine's
    /// `linger`), and returns.
    Done,
}

/// An application embedded in the engine, driven once per loop iteration.
pub trait App {
    /// Acts on the core (accept, recv, send, close) at time `now`.
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> Result<AppStatus, EngineError>;

    /// A descriptor the engine also sleeps on (readable = the application has work), besides
    /// the device's; None when frames and the core's timers are all that wake it.
    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Called just before the engine sleeps: the application arranges to be woken (through
    /// [`App::wake_fd`]) and returns false if work arrived meanwhile, which cancels the sleep.
    fn prepare_sleep(&mut self) -> bool {
        true
    }

    /// The transports the application owns beside the TCP core (the service's RDMA and
    /// MTP transports): the engine hands each its frames, runs its timers and sends its
    /// frames. None (the default) sends every frame to the core.
    fn transports(&mut self) -> Transports<'_> {
        Transports::none()
    }

    /// The application's control plane attaches and detaches taps at the engine's hook
    /// points (`sluice capture` through the service); called once per loop iteration, after
    /// [`App::poll`]. The default attaches nothing.
    fn control_hooks(&mut self, _hooks: &mut Hooks) {}
    /// The loop's and the device's counters, handed over every [`STATS_EVERY`] iterations
    /// and before each sleep (for `sluice ctl counters`; a device's may cost a syscall, so
    /// not every iteration). Ignored by default.
    fn engine_stats(&mut self, _run: &RunStats, _device: &DeviceStats) {}
}

/// How many loop iterations apart [`App::engine_stats`] is called while the loop is busy.
pub const STATS_EVERY: u64 = 1024;

/// Why the engine stopped with an error.
#[derive(Debug)]
pub enum EngineError {
    /// The device failed.
    Device(DeviceError),
    /// A core API call failed.
    Core(sluice_tcp::Error),
    /// The application reported a failure.
    App(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Device(e) => write!(f, "device: {e}"),
            EngineError::Core(e) => write!(f, "{e}"),
            EngineError::App(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<DeviceError> for EngineError {
    fn from(e: DeviceError) -> Self {
        EngineError::Device(e)
    }
}

impl From<sluice_tcp::Error> for EngineError {
    fn from(e: sluice_tcp::Error) -> Self {
        EngineError::Core(e)
    }
}

/// Loop counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    /// Loop iterations.
    pub iterations: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames transmitted.
    pub tx_frames: u64,
    /// Times the loop slept on the device.
    pub sleeps: u64,
    /// Times the idle loop gave up its core between polls.
    pub yields: u64,
    /// Idle spells cut short because another thread held the engine's core
    /// ([`sluice_shm::idle`]).
    pub preemptions: u64,
}

/// How long an idle engine polls before it starts yielding its core between polls
/// ([`sluice_shm::idle`]): about one round trip through a peer on the same machine, so a reply
/// that comes back at once is met by pure polling.
pub const DEFAULT_SPIN_BEFORE_YIELD: Duration = Duration::from_micros(20);

/// How long an engine whose application finished keeps driving the core, by default, for the
/// connections it closed to finish closing.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(10);

/// Drives nothing: the core alone runs while the engine lingers.
struct Idle;

impl App for Idle {
    fn poll(&mut self, _stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
        Ok(AppStatus::Running)
    }
}

/// The core and a device, driven by the real clock (or a virtual one, see [`Engine::with_clock`]).
pub struct Engine<D: Device> {
    /// The TCP core.
    pub stack: Stack,
    /// The device backend.
    pub device: D,
    clock: Clock,
    /// Poll at most this long with nothing to do before sleeping on the device (less while
    /// the core is contended: [`sluice_shm::idle`]).
    pub idle_before_sleep: Duration,
    /// Of an idle spell, poll this long without giving up the core; after it, yield the
    /// core between polls ([`DEFAULT_SPIN_BEFORE_YIELD`]).
    pub spin_before_yield: Duration,
    /// After the application is done, drive the core at most this long for the connections
    /// it closed to finish closing ([`DEFAULT_LINGER`]; zero returns at once; see
    /// [`Engine::finish_closing`]).
    pub linger: Duration,
    /// The hook points of the frames' path ([`crate::hooks`]).
    pub hooks: Hooks,
    stats: RunStats,
}

impl<D: Device> Engine<D> {
    /// Joins a core and a device, on the real clock.
    pub fn new(stack: Stack, device: D) -> Self {
        Self::with_clock(stack, device, Clock::start())
    }

    /// Joins a core and a device on the given clock (a virtual one shared with a simulated
    /// wire makes the run deterministic).
    pub fn with_clock(stack: Stack, device: D, clock: Clock) -> Self {
        Engine {
            stack,
            device,
            clock,
            idle_before_sleep: Duration::from_millis(10),
            spin_before_yield: DEFAULT_SPIN_BEFORE_YIELD,
            linger: DEFAULT_LINGER,
            hooks: Hooks::new(),
            stats: RunStats::default(),
        }
    }

    /// The engine's clock.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// Loop counters so far.
    pub fn stats(&self) -> RunStats {
        self.stats
    }

    /// One loop iteration. Returns whether anything happened (frames in or out, or the
    /// application reported [`AppStatus::Busy`]).
    pub fn poll_once(&mut self, app: &mut dyn App) -> Result<(bool, AppStatus), EngineError> {
        self.stats.iterations += 1;
        let now = self.clock.now();
        let mut lap = Lap::start(&self.stack, &self.clock);
        let received = pump::receive_hooked(
            &mut self.stack,
            &mut app.transports(),
            &mut self.hooks,
            &mut self.device,
            now,
        )?;
        self.stats.rx_frames += received as u64;
        lap.mark(&mut self.stack, &self.clock, "rx");
        pump::run_due_timers(&mut self.stack, now);
        pump::run_due_transport_timers(&mut app.transports(), now);
        lap.mark(&mut self.stack, &self.clock, "timers");
        if self.stats.iterations % STATS_EVERY == 1 {
            app.engine_stats(&self.stats, &self.device.stats());
        }
        let status = app.poll(&mut self.stack, now)?;
        lap.mark(&mut self.stack, &self.clock, "app");
        app.control_hooks(&mut self.hooks);
        lap.mark(&mut self.stack, &self.clock, "hooks");
        let mut sent = self.transmit(now)?;
        let n = pump::transmit_transports_hooked(
            &mut app.transports(),
            &mut self.hooks,
            &mut self.device,
            now,
        )?;
        self.stats.tx_frames += n as u64;
        sent += n;
        lap.mark(&mut self.stack, &self.clock, "tx");
        Ok((
            received > 0 || sent > 0 || status == AppStatus::Busy,
            status,
        ))
    }

    /// Moves every frame the core has ready onto the device, flushing full bursts.
    fn transmit(&mut self, now: Instant) -> Result<usize, EngineError> {
        let sent = pump::transmit_hooked(&mut self.stack, &mut self.hooks, &mut self.device, now)?;
        self.stats.tx_frames += sent as u64;
        Ok(sent)
    }

    /// Drives the core alone (frames in, timers, frames out: a lost FIN is retransmitted on
    /// the RTO) until no close is under way or `limit` passes; returns what is still closing.
    pub fn finish_closing(&mut self, limit: Duration) -> Result<Closing, EngineError> {
        let until = self.clock.now() + limit;
        self.linger_until(until)
    }

    fn linger_until(&mut self, until: Instant) -> Result<Closing, EngineError> {
        loop {
            let left = self.stack.closing();
            let now = self.clock.now();
            if left.is_empty() || now >= until {
                return Ok(left);
            }
            let (busy, _) = self.poll_once(&mut Idle)?;
            if busy {
                continue;
            }
            // Nothing moved: sleep until a frame, the core's next deadline or the end.
            let mut wait = self.clock.until(until).min(Duration::from_millis(100));
            if let Some(t) = self.stack.poll_timeout() {
                wait = wait.min(self.clock.until(t));
            }
            self.stats.sleeps += 1;
            self.device.wait(Some(wait))?;
        }
    }

    /// Runs until the application is done or `deadline` (wall time from now) passes.
    pub fn run(
        &mut self,
        app: &mut dyn App,
        deadline: Option<Duration>,
    ) -> Result<AppStatus, EngineError> {
        let stop = deadline.map(|d| self.clock.now() + d);
        let mut policy = IdlePolicy::new(self.idle_before_sleep, self.spin_before_yield);
        // The idle spell under way, if the last poll found nothing to do.
        let mut spell: Option<IdleSpell> = None;
        // The last sleep brought no work: sleep again without polling first.
        let mut slept_idle = false;
        loop {
            let (busy, status) = self.poll_once(app)?;
            if status == AppStatus::Done {
                // Let the core send what the application's last calls queued.
                self.transmit(self.clock.now())?;
                // Then finish the closes, so that a lost FIN is retransmitted (RFC 9293 3.6)
                // rather than leaving the peer in FIN-WAIT-2 when this process exits.
                let own = self.clock.now() + self.linger;
                let until = stop.map_or(own, |s| s.min(own));
                let left = self.linger_until(until)?;
                if !left.is_empty() && stop.is_none_or(|s| own <= s) {
                    eprintln!(
                        "sluice: the linger of {:.1} s expired with {} connection(s) whose FIN \
                         is unacknowledged and {} still waiting for the peer's FIN",
                        self.linger.as_secs_f64(),
                        left.fin_unacked,
                        left.awaiting_peer_fin
                    );
                }
                return Ok(status);
            }
            let now = self.clock.now();
            if stop.is_some_and(|s| now >= s) {
                return Ok(AppStatus::Running);
            }
            if busy {
                if let Some(done) = spell.take() {
                    policy.end(&done, std::time::Instant::now());
                }
                slept_idle = false;
                continue;
            }
            // Virtual time does not pass while polling: waiting on the device advances it.
            if !self.clock.is_virtual() && !slept_idle {
                let wall = std::time::Instant::now();
                let idle = spell.get_or_insert_with(|| policy.begin(wall));
                match policy.step(idle, wall) {
                    IdleStep::Spin => continue,
                    IdleStep::Yield => {
                        self.stats.yields += 1;
                        std::thread::yield_now();
                        continue;
                    }
                    IdleStep::Sleep => {}
                }
            }
            app.engine_stats(&self.stats, &self.device.stats());
            if !app.prepare_sleep() {
                // Work arrived while going to sleep (docs/service.md "Sleeping and
                // waking": re-check after announcing the sleep).
                if let Some(done) = spell.take() {
                    policy.end(&done, std::time::Instant::now());
                }
                slept_idle = false;
                continue;
            }
            // Sleep until a frame arrives or the cores' next deadline.
            let mut wait = Duration::from_millis(100);
            let transport_due = app.transports().poll_timeout();
            for t in [self.stack.poll_timeout(), transport_due]
                .into_iter()
                .flatten()
            {
                wait = wait.min(self.clock.until(t));
            }
            if let Some(s) = stop {
                wait = wait.min(self.clock.until(s));
            }
            self.stats.sleeps += 1;
            self.stats.preemptions = policy.preemptions;
            match app.wake_fd() {
                Some(fd) => self.device.wait_also(fd, Some(wait))?,
                None => self.device.wait(Some(wait))?,
            }
            // The spell goes on until work arrives: its length teaches the policy.
            slept_idle = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Transport;
    use sluice_device::{pair, PairConfig, TxFrame};
    use sluice_wire::EthernetAddress;

    /// A transport that keeps the frames it is given and, once its deadline passes, sends
    /// one frame.
    struct Toy {
        got: Vec<Vec<u8>>,
        deadline: Option<Instant>,
        fired: u32,
        to_send: usize,
    }

    impl Transport for Toy {
        fn handle_frame(&mut self, _now: Instant, frame: &[u8]) {
            self.got.push(frame.to_vec());
        }
        fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
            if self.to_send == 0 {
                return None;
            }
            self.to_send -= 1;
            buf[..60].fill(0xab);
            Some(60)
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.deadline
        }
        fn handle_timeout(&mut self, now: Instant) {
            assert!(self.deadline.is_some_and(|d| d <= now));
            self.deadline = None;
            self.fired += 1;
            self.to_send += 1;
        }
    }

    /// An application with two toy transports: RDMA's and MTP's.
    struct ToyApp {
        rdma: Toy,
        mtp: Toy,
    }

    impl App for ToyApp {
        fn poll(&mut self, _stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
            Ok(AppStatus::Running)
        }
        fn transports(&mut self) -> Transports<'_> {
            Transports {
                rdma: Some(&mut self.rdma),
                mtp: Some(&mut self.mtp),
            }
        }
    }

    fn toy(deadline_ms: u64) -> Toy {
        Toy {
            got: Vec::new(),
            deadline: Some(Instant::from_millis(deadline_ms)),
            fired: 0,
            to_send: 0,
        }
    }

    /// Ethernet + IPv4 + UDP to `dport`, 60 bytes.
    fn udp_frame(dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    /// Ethernet + IPv4 protocol 253, 60 bytes.
    fn mtp_ip_frame() -> Vec<u8> {
        let mut f = udp_frame(0);
        f[23] = 253;
        f
    }

    #[test]
    fn the_loop_feeds_times_and_drains_each_transport() {
        let mac = |b| EthernetAddress([2, 0, 0, 0, 0, b]);
        let (a, mut b) = pair(PairConfig {
            macs: [mac(1), mac(2)],
            ..PairConfig::default()
        })
        .unwrap();
        let cfg = sluice_tcp::Config::new(mac(1), std::net::Ipv4Addr::new(10, 0, 0, 1));
        let clock = Clock::virtual_time();
        let mut engine = Engine::with_clock(Stack::new(cfg).unwrap(), a, clock.clone());
        let mut app = ToyApp {
            rdma: toy(5),
            mtp: toy(7),
        };
        for f in [
            udp_frame(4791),
            udp_frame(53),
            udp_frame(9919),
            mtp_ip_frame(),
        ] {
            assert!(b
                .transmit_with(&mut |buf| {
                    buf[..f.len()].copy_from_slice(&f);
                    Some(TxFrame::plain(f.len()))
                })
                .unwrap());
        }
        b.flush().unwrap();
        let before = engine.stack.counters().clone();
        engine.poll_once(&mut app).unwrap();
        assert_eq!(app.rdma.got, [udp_frame(4791)], "RoCEv2 to RDMA");
        assert_eq!(
            app.mtp.got,
            [udp_frame(9919), mtp_ip_frame()],
            "UDP 9919 and protocol 253 to MTP"
        );
        assert_ne!(
            &before,
            engine.stack.counters(),
            "the other frame went to the core"
        );
        assert_eq!((app.rdma.fired, app.mtp.fired), (0, 0), "not due yet");
        // At each deadline that transport's timer runs and its frame goes out.
        clock.advance_to(Instant::from_millis(5));
        let (busy, _) = engine.poll_once(&mut app).unwrap();
        assert!(busy);
        assert_eq!((app.rdma.fired, app.mtp.fired), (1, 0));
        clock.advance_to(Instant::from_millis(7));
        engine.poll_once(&mut app).unwrap();
        assert_eq!((app.rdma.fired, app.mtp.fired), (1, 1));
        let mut out = Vec::new();
        b.receive(&mut |f, _| out.push(f.to_vec())).unwrap();
        assert_eq!(out, [vec![0xab; 60], vec![0xab; 60]]);
        assert_eq!(engine.stats().tx_frames, 2);
    }
}
