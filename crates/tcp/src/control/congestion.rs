//! The control plane's congestion-control loop (TAS, FlexTOE appendix D, Laminar 4.2.1).
//!
//! Each connection has a control-plane deadline, its `Timer::Congestion`, on the same
//! timer heap as its other timers, so an iteration costs O(log n) and never scans the
//! connection table. An iteration runs about once per smoothed RTT:
//!
//! 1. it takes the post-processor's counters, which resets them (`post::take_cc_counters`:
//!    the one message from the stage that owns them);
//! 2. it runs the connection's [`Policy`], which the control plane owns;
//! 3. it programs the result into the data-path: the congestion window for the transmit
//!    stage, a rate for the flow scheduler (which paces to it with its timing wheel,
//!    datapath/scheduler.rs; a rate fixed through [`Stack::set_rate`] takes precedence),
//!    and CWR after an ECN reaction.
//!
//! Loss is answered at once rather than at the end of the interval: a fast retransmit runs
//! an iteration for that connection before the batch that detected it returns (so the
//! go-back-N resend already goes out under the reduced window), and a retransmission
//! timeout runs one from the timer that detected it. TAS reacts in its next control
//! iteration; in a sans-IO core "next" is immediately, at no extra cost.
//!
//! A connection whose interval acknowledged nothing stops its iterations (Laminar pauses
//! SYNC for idle flows; a stalled flow is the retransmission timer's, which runs an
//! iteration itself); the next acknowledgment of data re-arms them. So an idle or stalled
//! connection costs no timer events.

use std::time::Duration;

use crate::cc::{Algorithm, CcInput, CongestionControl, Policy};
use crate::datapath::ecn;
use crate::datapath::post;
use crate::datapath::scoreboard;
use crate::datapath::state::{post_flags, SchedState};
use crate::error::Error;
use crate::handle::ConnId;
use crate::host::Stack;
use crate::timer::Timer;

impl Stack {
    /// The control interval: one smoothed RTT, at least `Config::cc_interval_min`.
    fn cc_interval(&self, slot: u32) -> Duration {
        let srtt = self.dp.post[slot as usize].srtt_us;
        Duration::from_micros(srtt.into()).max(self.cfg.cc_interval_min)
    }

    /// Starts the connection's policy as the data-path takes it over: the initial window,
    /// no rate, and the receiver's ECN echo mode (RFC 8257 3.2 for DCTCP).
    pub(crate) fn cc_start(&mut self, slot: u32) {
        let s = slot as usize;
        let algorithm = self.conns[s].cc_algorithm;
        let mss = u32::from(self.dp.proto[s].mss);
        self.cc[s] = Policy::new(algorithm, mss);
        // Nothing of an earlier connection in the slot may be undone into this one.
        self.cc_before_rto[s] = None;
        self.cc_before_recovery[s] = None;
        self.dp.proto[s].cwnd = self.cc[s].window();
        self.dp.sched[s] = SchedState::default();
        self.program_rate(slot);
        self.set_echo_mode(slot, algorithm);
        self.conns[s].timers.stop(Timer::Congestion);
    }

    fn set_echo_mode(&mut self, slot: u32, algorithm: Algorithm) {
        let ps = &mut self.dp.proto[slot as usize];
        if algorithm == Algorithm::Dctcp {
            ps.ecn |= ecn::bits::DCTCP_ECHO;
        } else {
            ps.ecn &= !ecn::bits::DCTCP_ECHO;
        }
    }

    /// Data was acknowledged: an iteration is due within one interval, if none is; one that
    /// is overdue (the host has not called `handle_timeout` yet) runs now, so the window
    /// follows the ACK clock however late the timer is served.
    #[inline]
    pub(crate) fn cc_arm(&mut self, slot: u32) {
        match self.conns[slot as usize].timers.get(Timer::Congestion) {
            None => {
                let deadline = self.now + self.cc_interval(slot);
                self.arm_timer(slot, Timer::Congestion, deadline);
            }
            Some(deadline) if deadline <= self.now => self.cc_expire(slot),
            Some(_) => {}
        }
    }

    /// A fast retransmit started: react now, keeping the policy of before to undo the cut
    /// if the recovery proves needless.
    pub(crate) fn cc_on_loss(&mut self, slot: u32) {
        self.cc_before_recovery[slot as usize] = Some(Box::new(self.cc[slot as usize].clone()));
        self.cc_iteration(slot, 0);
    }

    /// D-SACKs showed the latest fast recovery needless (RFC 3708): the window and threshold
    /// of before it come back if larger than today's (as Linux's tcp_undo_cwnd_reduction).
    pub(crate) fn cc_undo_recovery(&mut self, slot: u32) {
        let s = slot as usize;
        let Some(before) = self.cc_before_recovery[s].take() else {
            return;
        };
        self.counters.spurious_recoveries += 1;
        if before.window() > self.cc[s].window() {
            self.cc[s] = *before;
            let cwnd = self.cc[s].window().max(u32::from(self.dp.proto[s].mss));
            self.dp.proto[s].cwnd = cwnd;
            self.program_rate(slot);
            self.dp.ready.push(slot);
        }
    }

    /// The retransmission timer expired: react now.
    pub(crate) fn cc_on_timeout(&mut self, slot: u32) {
        self.cc_iteration(slot, 1);
    }

    /// The last timeout was spurious (RFC 3522): the window and threshold it cut come back
    /// (RFC 4015 3.2; as Linux's undo, the whole policy state of before the timeout).
    pub(crate) fn cc_undo_timeout(&mut self, slot: u32) {
        let s = slot as usize;
        let Some(before) = self.cc_before_rto[s].take() else {
            return;
        };
        self.counters.spurious_timeouts += 1;
        self.cc[s] = *before;
        let cwnd = self.cc[s].window().max(u32::from(self.dp.proto[s].mss));
        self.dp.proto[s].cwnd = cwnd;
        self.program_rate(slot);
    }

    /// The connection's control deadline passed.
    pub(crate) fn cc_expire(&mut self, slot: u32) {
        self.conns[slot as usize].timers.stop(Timer::Congestion);
        self.cc_iteration(slot, 0);
    }

    /// One control iteration for one connection.
    fn cc_iteration(&mut self, slot: u32, timeouts: u32) {
        let s = slot as usize;
        if !self.dp.pre[s].active {
            self.conns[s].timers.stop(Timer::Congestion);
            return;
        }
        let counters = post::take_cc_counters(&mut self.dp.post[s], &mut self.dp.post_cold[s]);
        let ps = &self.dp.proto[s];
        let sacked = scoreboard::sacked_bytes(ps, self.dp.sacked_of(slot));
        let input = CcInput {
            counters,
            timeouts,
            srtt_us: self.dp.post[s].srtt_us,
            flight: ps.snd_max.diff(ps.snd_una).max(0) as u32,
            mss: u32::from(ps.mss),
            snd_una: ps.snd_una,
            snd_max: ps.snd_max,
            in_recovery: self.dp.post[s].has(post_flags::IN_RECOVERY),
            now_us: self.now.as_micros(),
            sacked,
        };
        let before = ps.cwnd;
        let policy = &mut self.cc[s];
        policy.update(&input);
        let cwnd = policy.window().max(input.mss);
        self.program_rate(slot);
        let ps = &mut self.dp.proto[s];
        ps.cwnd = cwnd;
        if counters.ecn_bytes > 0 && ps.ecn & ecn::bits::ON != 0 {
            // RFC 3168 6.1.2: the window was answered for the echo; tell the receiver with
            // CWR on the next new data segment.
            ps.ecn |= ecn::bits::CWR_PENDING;
        }
        self.counters.cc_iterations += 1;
        self.counters.cc_srtt_us_sum += u64::from(input.srtt_us);
        if cwnd < before {
            crate::trace::record::tracepoint! { self, Some(slot), CwndReduction { cause: reduction_cause(timeouts, counters.fast_retransmits, counters.ecn_bytes), before, after: cwnd } }
        }
        if cwnd > before {
            self.dp.ready.push(slot);
        }
        // Another iteration one interval on if data flowed, or after a loss reaction (whose
        // retransmission the next ACKs answer: the first of them, overdue, runs it at once).
        if counters.acked_bytes > 0 || timeouts > 0 || counters.fast_retransmits > 0 {
            let deadline = self.now + self.cc_interval(slot);
            self.arm_timer(slot, Timer::Congestion, deadline);
        } else {
            self.conns[s].timers.stop(Timer::Congestion);
        }
    }

    /// Chooses the connection's congestion-control algorithm (Linux's TCP_CONGESTION).
    /// Before the handshake completes it takes effect at establishment (and an active open
    /// not yet answered asks for ECN in a retransmitted SYN only if the new algorithm does
    /// and every earlier SYN asked too, RFC 3168 6.1.1);
    /// afterwards the new policy takes over at the connection's current window. ECN, once
    /// negotiated, stays on: every policy answers echoes (RFC 3168 6.1.2).
    pub fn set_congestion_control(
        &mut self,
        id: ConnId,
        algorithm: Algorithm,
    ) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        let s = slot as usize;
        self.conns[s].cc_algorithm = algorithm;
        if self.dp.pre[s].active && self.cc[s].algorithm() != algorithm {
            let ps = &self.dp.proto[s];
            let ssthresh = self.cc[s].ssthresh();
            self.cc[s] = Policy::with_window(algorithm, u32::from(ps.mss), ps.cwnd, ssthresh);
            // An undo must not bring the previous algorithm back.
            self.cc_before_rto[s] = None;
            self.cc_before_recovery[s] = None;
            self.program_rate(slot);
            self.set_echo_mode(slot, algorithm);
        }
        Ok(())
    }

    /// Fixes the connection's sending rate in bits per second of Ethernet frames handed to
    /// the device; the flow scheduler paces it with its timing wheel (Carousel, flextoe.txt
    /// 3.4). The window still applies as a cap. 0 removes the fixed rate: the policy's own
    /// rate applies again (TIMELY's; none, so unlimited, for the window-based policies).
    /// Set before the handshake completes, it applies from establishment.
    pub fn set_rate(&mut self, id: ConnId, bits_per_sec: u64) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        self.conns[slot as usize].fixed_rate_bps = bits_per_sec;
        if self.dp.pre[slot as usize].active {
            self.program_rate(slot);
        }
        Ok(())
    }

    /// Programs the flow scheduler's rate for `slot`: the fixed rate, else the policy's.
    fn program_rate(&mut self, slot: u32) {
        let s = slot as usize;
        let fixed = self.conns[s].fixed_rate_bps;
        let rate = if fixed != 0 {
            fixed
        } else {
            self.cc[s].rate_bps()
        };
        let old = self.dp.sched[s].rate_bps;
        self.dp.sched[s].rate_bps = rate;
        if rate == 0 && self.dp.wheel.contains(slot) {
            // Unlimited now: no reason to wait for its old send time.
            self.dp.wheel.remove(slot);
            self.dp.ready.push(slot);
        } else if old != 0 && rate > old {
            // A raised rate also shortens the wait already charged at the old one: a
            // connection slowed to a crawl must not keep a send time seconds away.
            let now_ns = self.now.as_nanos();
            let sched = &mut self.dp.sched[s];
            let wait = sched.next_tx_ns.saturating_sub(now_ns);
            if wait == 0 {
                return;
            }
            let scaled = u128::from(wait) * u128::from(old) / u128::from(rate);
            sched.next_tx_ns = now_ns.saturating_add(scaled as u64);
            if self.dp.wheel.contains(slot) {
                self.dp.wheel.remove(slot);
                let due = sched.next_tx_ns;
                if self.dp.wheel.eligible(due, now_ns) {
                    self.dp.ready.push(slot);
                } else {
                    self.dp.wheel.insert(slot, due, now_ns);
                }
            }
        }
    }

    /// The connection's congestion-control algorithm.
    pub fn congestion_control(&self, id: ConnId) -> Result<Algorithm, Error> {
        Ok(self.conns[self.slot_of(id)? as usize].cc_algorithm)
    }

    /// Whether ECN would be asked for in the SYN of this connection (RFC 3168 6.1.1): the
    /// configuration allows it and the algorithm wants it.
    pub(crate) fn ecn_wanted(&self, slot: u32) -> bool {
        self.cfg.ecn && self.conns[slot as usize].cc_algorithm.ecn_capable()
    }

    /// Whether a passive open whose connection will run `algorithm` (the listener's)
    /// accepts the ECN a SYN asks for: an ECN-setup SYN has both ECE and CWR (RFC 3168
    /// 6.1.1).
    pub(crate) fn ecn_accepted(
        &self,
        syn: &sluice_wire::tcp::TcpHeader,
        algorithm: Algorithm,
    ) -> bool {
        use sluice_wire::tcp::TcpFlags;
        self.cfg.ecn && algorithm.ecn_capable() && syn.flags.contains(TcpFlags::ECE | TcpFlags::CWR)
    }
}

/// What an iteration that cut the window answered: a timeout, a fast retransmit, ECN
/// echoes, or the policy's own model (BBR, TIMELY's RTT gradient).
fn reduction_cause(timeouts: u32, fast_retransmits: u32, ecn_bytes: u32) -> &'static str {
    if timeouts > 0 {
        "rto"
    } else if fast_retransmits > 0 {
        "fast_recovery"
    } else if ecn_bytes > 0 {
        "ecn"
    } else {
        "policy"
    }
}
