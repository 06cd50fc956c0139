//! BBR, version 1 (Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue
//! 14(5), 2016; draft-cardwell-iccrg-bbr-congestion-control-00), in per-interval form: the
//! control plane's iteration (about once per smoothed RTT, and at once on a loss) stands for
//! BBR's per-ACK update.
//!
//! BBR models the path by two numbers, its bottleneck bandwidth (the largest delivery rate
//! of the last 10 round trips) and its round-trip propagation time (the smallest RTT of the
//! last 10 s), and sends at gain x bandwidth (paced by the flow scheduler) with at most
//! cwnd_gain x BDP in flight. Loss is not read as congestion: on a path that drops a fixed
//! share of packets at random (a lossy link, corruption) it keeps its rate, where a
//! loss-based policy's window shrinks to about 1.2 / sqrt(p) segments. It is Linux's choice
//! on many hosts (and on this project's lab machine), so a side-by-side needs it here too.
//! Like BBR v1 it ignores ECN, and shares a drop-tail bottleneck unevenly with loss-based
//! flows.
//!
//! Delivery rate (draft-cheng-iccrg-delivery-rate-estimation): bytes newly delivered, that
//! is cumulatively acknowledged or newly SACKed, over a span of at least one smoothed RTT.
//! The span replaces the draft's per-packet send/ACK elapsed guard: the receivers this
//! engine meets acknowledge in aggregates (one ACK per receive burst, up to 44 segments), and
//! a span shorter than an RTT would take one aggregate's arrival for the path's rate.

use sluice_wire::tcp::SeqNumber;

use super::{CcInput, CongestionControl};

/// Startup's pacing and window gain, 2 / ln 2: doubles the delivery rate every round.
const HIGH_GAIN: f64 = 2.885;
/// The window gain in ProbeBW: room for delayed and aggregated ACKs.
const CWND_GAIN: f64 = 2.0;
/// ProbeBW's pacing gains, one phase per round-trip propagation time.
const PACING_GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Round trips the bandwidth filter remembers.
const BW_WINDOW_ROUNDS: usize = 10;
/// How long the propagation-time estimate lasts before ProbeRTT refreshes it.
const RT_PROP_WINDOW_US: u64 = 10_000_000;
/// How long ProbeRTT holds the window at its minimum.
const PROBE_RTT_US: u64 = 200_000;
/// The smallest window, in segments.
const MIN_CWND_SEGMENTS: u32 = 4;
/// Rounds without 25 % more bandwidth before Startup ends.
const FULL_BW_ROUNDS: u8 = 3;
/// The largest send the device takes at once (a TSO/GSO aggregate).
const SEND_QUANTUM_MAX: u64 = 64 * 1024;
/// Bytes of headers a full segment's frame carries (Ethernet, IPv4, TCP with timestamps):
/// the flow scheduler paces frames, the model counts payload.
const FRAME_OVERHEAD: u64 = 14 + 20 + 20 + 12;

/// Bytes still in the network: outstanding less what the receiver SACKed (what Linux's
/// packets_in_flight counts, less its lost-packet estimate, which this form does not see).
fn in_network(i: &CcInput) -> u32 {
    i.flight.saturating_sub(i.sacked)
}

/// BBR's state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Exponential search for the bottleneck bandwidth.
    Startup,
    /// Draining the queue Startup built.
    Drain,
    /// Cycling the pacing gain around 1 to probe for more bandwidth.
    ProbeBw,
    /// A minimal window for a moment, to measure the propagation time again.
    ProbeRtt,
}

/// The delivery accumulated toward the next rate sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    /// Bytes delivered since `since_us` (signed: SACKed bytes a timeout forgot come back
    /// negative, so data is not counted twice when it is SACKed again).
    bytes: i64,
    /// When the span began.
    since_us: u64,
    /// The largest flight an ACK of the span found.
    max_flight: u32,
}

/// BBR state.
#[derive(Clone, Debug, PartialEq)]
pub struct Bbr {
    mode: Mode,
    /// Sender MSS: the pacing rate counts each segment's headers.
    mss: u32,
    cwnd: u32,
    /// The window before a timeout or ProbeRTT, restored after it.
    prior_cwnd: u32,
    /// The largest delivery rate of each of the last round trips, bytes per second.
    bw_rounds: [u64; BW_WINDOW_ROUNDS],
    /// Round trips counted so far.
    round: u64,
    /// The round of the latest sample the filter took: slots of rounds since are stale.
    bw_round: u64,
    /// The current round ends when this is acknowledged (snd_max at its start).
    round_end: Option<SeqNumber>,
    /// The smallest RTT seen in the last `RT_PROP_WINDOW_US`, microseconds (0: none yet).
    rt_prop_us: u32,
    rt_prop_stamp_us: u64,
    /// Startup's bandwidth plateau detection.
    full_bw: u64,
    full_bw_rounds: u8,
    filled_pipe: bool,
    /// ProbeBW's phase and when it began.
    cycle_index: usize,
    cycle_stamp_us: u64,
    /// ProbeRTT ends at this time once a round has passed at the minimal window.
    probe_rtt_done_us: Option<u64>,
    probe_rtt_round_end: Option<SeqNumber>,
    /// After a timeout: the window of before comes back once this is acknowledged.
    loss_end: Option<SeqNumber>,
    /// SACKed bytes at the last update.
    sacked: u32,
    span: Option<Span>,
}

impl Bbr {
    /// A connection with `mss`-byte segments starting at `cwnd` bytes, in Startup.
    pub fn new(cwnd: u32, mss: u32) -> Self {
        Bbr {
            mode: Mode::Startup,
            mss: mss.max(1),
            cwnd,
            prior_cwnd: cwnd,
            bw_rounds: [0; BW_WINDOW_ROUNDS],
            round: 0,
            bw_round: 0,
            round_end: None,
            rt_prop_us: 0,
            rt_prop_stamp_us: 0,
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            cycle_index: 0,
            cycle_stamp_us: 0,
            probe_rtt_done_us: None,
            probe_rtt_round_end: None,
            loss_end: None,
            sacked: 0,
            span: None,
        }
    }

    /// The state machine's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The bottleneck bandwidth estimate, bytes per second (0: no sample yet).
    pub fn bandwidth(&self) -> u64 {
        self.bw_rounds.iter().copied().max().unwrap_or(0)
    }

    /// The round-trip propagation time estimate, microseconds (0: no sample yet).
    pub fn rt_prop_us(&self) -> u32 {
        self.rt_prop_us
    }

    /// BBR has no slow-start threshold; the window it would restore stands in for it.
    pub fn ssthresh(&self) -> u32 {
        u32::MAX
    }

    /// The pacing gain of the current mode.
    fn pacing_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => HIGH_GAIN,
            Mode::Drain => 1.0 / HIGH_GAIN,
            Mode::ProbeBw => PACING_GAIN_CYCLE[self.cycle_index],
            Mode::ProbeRtt => 1.0,
        }
    }

    /// `gain` x the estimated bandwidth-delay product in bytes (None before both estimates).
    fn bdp(&self, gain: f64) -> Option<u32> {
        let bw = self.bandwidth();
        if bw == 0 || self.rt_prop_us == 0 {
            return None;
        }
        let bytes = bw as f64 * f64::from(self.rt_prop_us) / 1e6 * gain;
        Some(bytes.min(f64::from(u32::MAX)) as u32)
    }

    /// Bytes delivered since the last update, and a rate sample when the span since the
    /// last one reached an RTT: (rate in bytes per second, whether the sender was
    /// application-limited, i.e. had less than one estimated BDP in flight).
    fn deliver(&mut self, i: &CcInput) -> (u32, Option<(u64, bool)>) {
        let delivered =
            i64::from(i.counters.acked_bytes) + i64::from(i.sacked) - i64::from(self.sacked);
        self.sacked = i.sacked;
        let span = self.span.get_or_insert(Span {
            since_us: i.now_us,
            ..Span::default()
        });
        span.bytes += delivered;
        span.max_flight = span.max_flight.max(i.counters.max_flight);
        let elapsed = i.now_us.saturating_sub(span.since_us);
        let min_span = u64::from(i.srtt_us.max(self.rt_prop_us)).max(1);
        let sample = if elapsed >= min_span {
            let s = *span;
            self.span = Some(Span {
                since_us: i.now_us,
                ..Span::default()
            });
            let rate = (s.bytes.max(0) as u64).saturating_mul(1_000_000) / elapsed;
            let app_limited = self.bdp(1.0).is_some_and(|bdp| s.max_flight < bdp);
            Some((rate, app_limited))
        } else {
            None
        };
        (delivered.clamp(0, i64::from(u32::MAX)) as u32, sample)
    }

    /// Counts round trips: a round ends when the data in flight at its start is
    /// acknowledged. Returns whether one began.
    fn advance_round(&mut self, i: &CcInput) -> bool {
        let ended = self.round_end.is_none_or(|end| i.snd_una.seq_ge(end));
        if ended {
            self.round += 1;
            self.round_end = Some(i.snd_max);
        }
        ended
    }

    /// The windowed maximum over the last `BW_WINDOW_ROUNDS` rounds. As Linux's minmax, the
    /// window moves only when a sample is taken: while every sample is application-limited
    /// the estimate stands.
    fn take_bw_sample(&mut self, rate: u64) {
        let stale = self
            .round
            .saturating_sub(self.bw_round)
            .min(BW_WINDOW_ROUNDS as u64);
        for r in 0..stale {
            self.bw_rounds[((self.round - r) % BW_WINDOW_ROUNDS as u64) as usize] = 0;
        }
        self.bw_round = self.round;
        let slot = &mut self.bw_rounds[(self.round % BW_WINDOW_ROUNDS as u64) as usize];
        *slot = (*slot).max(rate);
    }

    /// Startup ends when three rounds in a row did not raise the bandwidth by 25 %.
    fn check_full_pipe(&mut self, round_start: bool, app_limited: bool) {
        if self.filled_pipe || !round_start || app_limited {
            return;
        }
        let bw = self.bandwidth();
        if bw >= self.full_bw.saturating_add(self.full_bw / 4) {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            return;
        }
        self.full_bw_rounds += 1;
        self.filled_pipe = self.full_bw_rounds >= FULL_BW_ROUNDS;
    }

    /// Enters ProbeBW at a pseudo-random phase other than the draining one, so flows that
    /// start together do not probe together (v1 draws it at random; the time and sequence
    /// space stand in for a random source in a deterministic core).
    fn enter_probe_bw(&mut self, i: &CcInput) {
        self.mode = Mode::ProbeBw;
        let draw = (i.now_us ^ u64::from(i.snd_max.0)) % (PACING_GAIN_CYCLE.len() as u64 - 1);
        // Phases 2..=7 and 0: never start in phase 1 (the 0.75 drain).
        self.cycle_index = (draw as usize + 2) % PACING_GAIN_CYCLE.len();
        self.cycle_stamp_us = i.now_us;
    }

    /// ProbeBW's next phase once the current one has lasted a propagation time (a probing
    /// phase also until it filled its 1.25 BDP or saw loss, or lasted twice as long: this
    /// form sees the flight once per iteration, and a receive window can keep it below;
    /// the draining one ends early once the flight is down to one BDP).
    fn advance_cycle(&mut self, i: &CcInput) {
        let gain = PACING_GAIN_CYCLE[self.cycle_index];
        let elapsed = i.now_us.saturating_sub(self.cycle_stamp_us);
        let rt_prop = u64::from(self.rt_prop_us);
        let full_length = elapsed >= rt_prop;
        let next = if gain > 1.0 {
            full_length
                && (i.loss()
                    || elapsed >= 2 * rt_prop
                    || self
                        .bdp(gain)
                        .is_none_or(|target| i.counters.max_flight >= target))
        } else if gain < 1.0 {
            full_length || self.bdp(1.0).is_some_and(|bdp| in_network(i) <= bdp)
        } else {
            full_length
        };
        if next {
            self.cycle_index = (self.cycle_index + 1) % PACING_GAIN_CYCLE.len();
            self.cycle_stamp_us = i.now_us;
        }
    }

    /// The propagation-time filter; its expiry sends the flow to ProbeRTT.
    fn update_rt_prop(&mut self, i: &CcInput) -> bool {
        let expired = self.rt_prop_us != 0
            && i.now_us > self.rt_prop_stamp_us.saturating_add(RT_PROP_WINDOW_US);
        let rtt = i.counters.rtt_min_us;
        if rtt != 0 && (self.rt_prop_us == 0 || rtt <= self.rt_prop_us || expired) {
            self.rt_prop_us = rtt;
            self.rt_prop_stamp_us = i.now_us;
        }
        expired
    }

    /// The window to keep for later: the current one, or the larger saved one while a
    /// timeout's or ProbeRTT's reduction is in force.
    fn save_cwnd(&mut self) {
        self.prior_cwnd = if self.loss_end.is_some() || self.mode == Mode::ProbeRtt {
            self.prior_cwnd.max(self.cwnd)
        } else {
            self.cwnd
        };
    }

    fn update_mode(&mut self, i: &CcInput, rt_prop_expired: bool) {
        if self.mode == Mode::Startup && self.filled_pipe {
            self.mode = Mode::Drain;
        }
        if self.mode == Mode::Drain && self.bdp(1.0).is_some_and(|bdp| in_network(i) <= bdp) {
            self.enter_probe_bw(i);
        }
        if self.mode == Mode::ProbeBw {
            self.advance_cycle(i);
        }
        if rt_prop_expired && self.mode != Mode::ProbeRtt {
            self.save_cwnd();
            self.mode = Mode::ProbeRtt;
            self.probe_rtt_done_us = None;
            self.probe_rtt_round_end = None;
        }
        if self.mode == Mode::ProbeRtt {
            self.probe_rtt(i);
        }
    }

    /// ProbeRTT: once the flight is down to the minimal window, hold it for
    /// `PROBE_RTT_US` and at least one round, then restore the window and go on.
    fn probe_rtt(&mut self, i: &CcInput) {
        let min_cwnd = MIN_CWND_SEGMENTS * i.mss;
        match self.probe_rtt_done_us {
            None if in_network(i) <= min_cwnd => {
                self.probe_rtt_done_us = Some(i.now_us.saturating_add(PROBE_RTT_US));
                self.probe_rtt_round_end = Some(i.snd_max);
            }
            Some(done) => {
                let round_done = self.probe_rtt_round_end.is_none_or(|e| i.snd_una.seq_ge(e));
                if round_done && i.now_us >= done {
                    self.rt_prop_stamp_us = i.now_us;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    if self.filled_pipe {
                        self.enter_probe_bw(i);
                    } else {
                        self.mode = Mode::Startup;
                    }
                }
            }
            None => {}
        }
    }

    /// The size of one send at the pacing rate: a millisecond's worth, at least two
    /// segments, at most one device aggregate (Linux's bbr_tso_segs_goal).
    fn send_quantum(&self, mss: u32) -> u32 {
        let per_ms = (self.bandwidth() as f64 * self.pacing_gain() / 1000.0) as u64;
        per_ms.clamp(2 * u64::from(mss), SEND_QUANTUM_MAX.max(2 * u64::from(mss))) as u32
    }

    /// The window: grows by what was delivered up to cwnd_gain x BDP (Startup: without a
    /// cap until the pipe is full), at least four segments; a timeout drops it to the
    /// minimum until what was in flight then is acknowledged (the policy does not take
    /// random loss for congestion, but a timeout means the ACK clock stopped).
    fn set_cwnd(&mut self, i: &CcInput, delivered: u32) {
        let min_cwnd = MIN_CWND_SEGMENTS * i.mss;
        if i.timeouts > 0 {
            self.save_cwnd();
            self.cwnd = min_cwnd;
            self.loss_end = Some(i.snd_max);
            return;
        }
        if self.loss_end.is_some_and(|end| i.snd_una.seq_ge(end)) {
            self.loss_end = None;
            self.cwnd = self.cwnd.max(self.prior_cwnd);
        }
        let cwnd_gain = match self.mode {
            Mode::Startup | Mode::Drain => HIGH_GAIN,
            Mode::ProbeBw | Mode::ProbeRtt => CWND_GAIN,
        };
        match self.bdp(cwnd_gain) {
            Some(bdp) => {
                // Room for three sends of the size the sender batches at this rate (Linux's
                // bbr_quantization_budget): a window of two BDP at a 100 us propagation
                // time holds less than one 64 KB aggregate.
                let target = bdp.saturating_add(3 * self.send_quantum(i.mss));
                if self.filled_pipe {
                    self.cwnd = self.cwnd.saturating_add(delivered).min(target);
                } else if self.cwnd < target {
                    self.cwnd = self.cwnd.saturating_add(delivered);
                }
            }
            // No model yet: grow as slow start does.
            None => self.cwnd = self.cwnd.saturating_add(delivered),
        }
        self.cwnd = self.cwnd.max(min_cwnd);
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(min_cwnd);
        }
    }
}

impl CongestionControl for Bbr {
    fn update(&mut self, i: &CcInput) {
        let (delivered, sample) = self.deliver(i);
        let round_start = self.advance_round(i);
        let mut app_limited = false;
        if let Some((rate, limited)) = sample {
            app_limited = limited;
            // An application-limited sample says only that the path carries at least it.
            if !limited || rate >= self.bandwidth() {
                self.take_bw_sample(rate);
            }
        }
        self.check_full_pipe(round_start, app_limited);
        let expired = self.update_rt_prop(i);
        self.update_mode(i, expired);
        self.set_cwnd(i, delivered);
    }

    fn window(&self) -> u32 {
        self.cwnd
    }

    fn rate_bps(&self) -> u64 {
        let bw = self.bandwidth();
        if bw == 0 {
            // No sample yet: the window alone paces the first round.
            return 0;
        }
        let mss = u64::from(self.mss);
        let frames = bw as f64 * (mss + FRAME_OVERHEAD) as f64 / mss as f64;
        ((frames * 8.0 * self.pacing_gain()) as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::CcCounters;

    const MSS: u32 = 1000;
    const RTT: u64 = 100;

    /// A sender driving the policy one RTT per step: `acked` bytes acknowledged in the step,
    /// everything sent at the step's start acknowledged by its end.
    struct Flow {
        bbr: Bbr,
        now_us: u64,
        una: u32,
        max: u32,
    }

    impl Flow {
        fn new() -> Self {
            Flow {
                bbr: Bbr::new(10 * MSS, MSS),
                now_us: 0,
                una: 1,
                max: 1,
            }
        }

        fn input(&self, acked: u32, rtt_us: u32) -> CcInput {
            CcInput {
                counters: CcCounters {
                    acked_bytes: acked,
                    rtt_samples: u32::from(rtt_us != 0),
                    rtt_last_us: rtt_us,
                    rtt_min_us: rtt_us,
                    max_flight: self.max - self.una + acked,
                    ..Default::default()
                },
                srtt_us: RTT as u32,
                flight: self.max - self.una,
                mss: MSS,
                snd_una: SeqNumber(self.una),
                snd_max: SeqNumber(self.max),
                now_us: self.now_us,
                ..Default::default()
            }
        }

        /// One RTT: the window sent at the start (capped to `limit` bytes, the path's
        /// capacity per RTT) is acknowledged; returns it.
        fn round(&mut self, limit: u32) -> u32 {
            let sent = self.bbr.window().min(limit);
            self.max += sent;
            self.now_us += RTT;
            self.una += sent;
            let i = self.input(sent, RTT as u32);
            self.bbr.update(&i);
            sent
        }
    }

    #[test]
    fn startup_doubles_then_drains_into_probe_bw_at_the_bottleneck() {
        let mut f = Flow::new();
        // A path of 50 segments per RTT (500 MB/s at 100 us).
        let limit = 50 * MSS;
        let mut windows = vec![];
        for _ in 0..4 {
            f.round(limit);
            windows.push(f.bbr.window() / MSS);
        }
        assert_eq!(f.bbr.mode(), Mode::Startup);
        // Each round delivers the whole window and the window grows by it: doubling.
        assert_eq!(&windows[..3], &[20, 40, 80], "{windows:?}");
        for _ in 0..6 {
            f.round(limit);
        }
        assert_eq!(f.bbr.bandwidth(), 500_000_000, "50 segments per 100 us");
        assert_eq!(f.bbr.rt_prop_us(), 100);
        assert_eq!(
            f.bbr.mode(),
            Mode::ProbeBw,
            "three rounds without 25 % more"
        );
        // ProbeBW: 2 x BDP + three 64 KB sends (a millisecond at this rate is more).
        assert_eq!(f.bbr.window(), 2 * 50 * MSS + 3 * 65536);
        // The pacing rate is a gain of the bandwidth, in frame bits.
        let frame_bits = 500_000_000.0 * 8.0 * (MSS as f64 + 66.0) / MSS as f64;
        let gain = f.bbr.rate_bps() as f64 / frame_bits;
        assert!(
            PACING_GAIN_CYCLE.iter().any(|g| (g - gain).abs() < 1e-6),
            "{gain}"
        );
    }

    fn steady() -> Flow {
        let mut f = Flow::new();
        for _ in 0..20 {
            f.round(50 * MSS);
        }
        assert_eq!(f.bbr.mode(), Mode::ProbeBw);
        f
    }

    #[test]
    fn probe_bw_cycles_its_gains_once_per_propagation_time() {
        let mut f = steady();
        let mut gains = vec![];
        for _ in 0..18 {
            f.round(50 * MSS);
            gains.push(f.bbr.pacing_gain());
        }
        // Nine rounds a cycle: the path here cannot take 1.25 BDP, so probing lasts two
        // propagation times; draining one; six at 1.
        assert_eq!(gains.iter().filter(|&&g| g == 0.75).count(), 2, "{gains:?}");
        assert_eq!(gains.iter().filter(|&&g| g == 1.25).count(), 4, "{gains:?}");
        for w in gains.windows(2) {
            assert!(w[1] != 0.75 || w[0] == 1.25, "{gains:?}");
        }
    }

    #[test]
    fn random_loss_does_not_cut_the_window_or_the_rate() {
        let mut f = steady();
        let (cwnd, bw) = (f.bbr.window(), f.bbr.bandwidth());
        for _ in 0..30 {
            f.max += 50 * MSS;
            f.now_us += RTT;
            f.una += 50 * MSS;
            let mut i = f.input(50 * MSS, RTT as u32);
            // 5 % of the round was lost and repaired: a fast retransmit every round.
            i.counters.fast_retransmits = 1;
            i.in_recovery = true;
            f.bbr.update(&i);
        }
        assert_eq!(f.bbr.window(), cwnd);
        assert_eq!(f.bbr.bandwidth(), bw);
    }

    #[test]
    fn a_timeout_drops_the_window_until_what_was_in_flight_is_acknowledged() {
        let mut f = steady();
        let cwnd = f.bbr.window();
        f.max += 20 * MSS;
        f.now_us += 5_000;
        let mut i = f.input(0, 0);
        i.timeouts = 1;
        f.bbr.update(&i);
        assert_eq!(f.bbr.window(), 4 * MSS);
        // Partly acknowledged: the window grows by what was delivered, no more.
        f.now_us += RTT;
        f.una += 4 * MSS;
        f.bbr.update(&f.input(4 * MSS, RTT as u32));
        assert_eq!(f.bbr.window(), 8 * MSS);
        // All of it: the window of before is back.
        f.now_us += RTT;
        f.una = f.max;
        f.bbr.update(&f.input(16 * MSS, RTT as u32));
        assert_eq!(f.bbr.window(), cwnd);
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_lower_rtt() {
        let mut f = steady();
        let cwnd = f.bbr.window();
        // Ten seconds at a queue-inflated RTT: the 100 us sample expires.
        while f.now_us < RT_PROP_WINDOW_US + 10_000 {
            f.max += 50 * MSS;
            f.now_us += 1_000;
            f.una += 50 * MSS;
            f.bbr.update(&f.input(50 * MSS, 150));
        }
        assert_eq!(f.bbr.mode(), Mode::ProbeRtt);
        assert_eq!(f.bbr.window(), 4 * MSS);
        // The flight drains to 4 segments; 200 ms later ProbeRTT ends with the window back.
        let start = f.now_us;
        while f.now_us < start + PROBE_RTT_US + 2 * RTT {
            f.round(50 * MSS);
        }
        assert_eq!(f.bbr.mode(), Mode::ProbeBw);
        assert_eq!(f.bbr.rt_prop_us(), 100, "the refreshed minimum");
        assert!(f.bbr.window() >= cwnd, "{} < {cwnd}", f.bbr.window());
    }

    #[test]
    fn an_ack_aggregate_inside_one_rtt_is_not_a_bandwidth_sample() {
        let mut f = steady();
        let bw = f.bbr.bandwidth();
        // A loss-triggered iteration 10 us after the last, with 44 segments acknowledged at
        // once: no sample until the span reaches an RTT.
        f.now_us += 10;
        f.max += 44 * MSS;
        f.una += 44 * MSS;
        f.bbr.update(&f.input(44 * MSS, RTT as u32));
        assert_eq!(f.bbr.bandwidth(), bw);
    }

    #[test]
    fn sacked_bytes_count_as_delivered_once() {
        let mut f = steady();
        let bw = f.bbr.bandwidth();
        // A hole at snd_una: the round's data arrives but is only SACKed...
        f.max += 50 * MSS;
        f.now_us += RTT;
        let mut i = f.input(0, RTT as u32);
        i.sacked = 49 * MSS;
        f.bbr.update(&i);
        // ...then the repair acknowledges all 50 segments cumulatively.
        f.now_us += RTT;
        f.una += 50 * MSS;
        f.bbr.update(&f.input(50 * MSS, RTT as u32));
        assert_eq!(
            f.bbr.bandwidth(),
            bw,
            "50 segments in two RTTs is no new maximum"
        );
        assert!(f.bbr.window() >= 2 * 50 * MSS);
    }

    #[test]
    fn drain_ends_on_what_is_in_the_network_not_on_what_was_sacked() {
        // A path of 50 segments per RTT that Startup overfills: the queue grows.
        let mut f = Flow::new();
        while f.bbr.mode() == Mode::Startup {
            f.max += f.bbr.window();
            f.now_us += RTT;
            let acked = (f.max - f.una).min(50 * MSS);
            f.una += acked;
            f.bbr.update(&f.input(acked, RTT as u32));
        }
        assert_eq!(f.bbr.mode(), Mode::Drain);
        let queued = f.max - f.una;
        assert!(queued > 50 * MSS, "{queued}");
        // The receiver SACKed all but 10 segments of it (a hole at snd_una): Drain is over.
        let mut drained = f.bbr.clone();
        let mut i = f.input(0, RTT as u32);
        i.now_us += RTT;
        i.sacked = queued - 10 * MSS;
        drained.update(&i);
        assert_eq!(drained.mode(), Mode::ProbeBw);
        // Nothing SACKed: still draining.
        let mut i = f.input(0, RTT as u32);
        i.now_us += RTT;
        f.bbr.update(&i);
        assert_eq!(f.bbr.mode(), Mode::Drain);
    }

    #[test]
    fn application_limited_samples_do_not_lower_the_estimate() {
        let mut f = steady();
        let bw = f.bbr.bandwidth();
        // Five segments per RTT for 20 rounds: less than a BDP in flight every time.
        for _ in 0..20 {
            f.round(5 * MSS);
        }
        assert_eq!(f.bbr.bandwidth(), bw);
    }
}
