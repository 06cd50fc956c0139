//! DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015, section 3.1 and Figure 6): the rate controller of one QP.
//! Pure: CNPs, bytes sent and the time are passed in; it answers the current rate and its
//! next timer deadline.
//!
//! - On a CNP: the target rate remembers the current one (`Rt = Rc`), the current rate is
//!   cut (`Rc = Rc (1 - alpha/2)`), alpha grows (`alpha = (1 - g) alpha + g`), and the
//!   increase counters restart.
//! - Every alpha period without a CNP alpha decays (`alpha = (1 - g) alpha`).
//! - Rate increase events come from a timer (every `increase_period`) and a byte counter
//!   (every `byte_counter` bytes sent). Each event sets `Rc = (Rt + Rc) / 2` after moving
//!   `Rt`: not at all while both counters are below F (fast recovery), by `R_AI` while one
//!   is (additive increase), by `i R_HAI` once both passed F by `i` (hyper increase).
//!
//! Alpha is fixed point ([`ALPHA_ONE`] is 1) so that every step is exact and the tests are
//! hand-computed.

use crate::qp::Nanos;

/// Alpha's fixed-point one.
pub const ALPHA_ONE: u32 = 1 << 16;
/// Timer periods elapsed at once that are replayed one by one (after that, the state they
/// converge to: alpha 0, the rate at line rate), so a late call costs bounded work.
const MAX_CATCH_UP: u64 = 4096;

/// DCQCN's parameters (defaults: the paper's, section 5 and Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcqcnParams {
    /// g as a power of two: g = 1 / 2^g_shift (the paper: 1/256).
    pub g_shift: u32,
    /// The alpha update period K (55 us).
    pub alpha_period: Nanos,
    /// The rate increase timer T (55 us).
    pub increase_period: Nanos,
    /// The byte counter B (10 MB).
    pub byte_counter: u64,
    /// Fast recovery steps F (5).
    pub fast_recovery_steps: u32,
    /// Additive increase R_AI (40 Mbit/s).
    pub rate_ai_bps: u64,
    /// Hyper increase R_HAI (400 Mbit/s; ten times R_AI, our choice).
    pub rate_hai_bps: u64,
    /// The floor a cut never goes below (10 Mbit/s).
    pub min_rate_bps: u64,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            g_shift: 8,
            alpha_period: 55_000,
            increase_period: 55_000,
            byte_counter: 10_000_000,
            fast_recovery_steps: 5,
            rate_ai_bps: 40_000_000,
            rate_hai_bps: 400_000_000,
            min_rate_bps: 10_000_000,
        }
    }
}

/// One QP's DCQCN rate controller.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    p: DcqcnParams,
    line_bps: u64,
    /// Current rate Rc.
    rc: u64,
    /// Target rate Rt.
    rt: u64,
    /// Alpha, in units of [`ALPHA_ONE`].
    alpha: u32,
    /// Rate increase events of the timer since the last cut.
    timer_events: u32,
    /// Rate increase events of the byte counter since the last cut.
    byte_events: u32,
    /// Bytes sent toward the next byte counter event.
    bytes: u64,
    alpha_at: Option<Nanos>,
    increase_at: Option<Nanos>,
}

impl Dcqcn {
    /// A controller at line rate, alpha 1 (the paper's initial value), no timer running.
    pub fn new(line_bps: u64, p: DcqcnParams) -> Dcqcn {
        let line_bps = line_bps.max(p.min_rate_bps).max(1);
        Dcqcn {
            p,
            line_bps,
            rc: line_bps,
            rt: line_bps,
            alpha: ALPHA_ONE,
            timer_events: 0,
            byte_events: 0,
            bytes: 0,
            alpha_at: None,
            increase_at: None,
        }
    }

    /// The current rate Rc in bit/s.
    pub fn rate_bps(&self) -> u64 {
        self.rc
    }

    /// The target rate Rt in bit/s.
    pub fn target_bps(&self) -> u64 {
        self.rt
    }

    /// Alpha in units of [`ALPHA_ONE`].
    pub fn alpha(&self) -> u32 {
        self.alpha
    }

    /// The next timer deadline (alpha update or rate increase), if one runs.
    pub fn deadline(&self) -> Option<Nanos> {
        match (self.alpha_at, self.increase_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Nanoseconds `bytes` take at the current rate (the pacing gap after them).
    pub fn tx_time(&self, bytes: usize) -> Nanos {
        let ns = (bytes as u128 * 8 * 1_000_000_000).div_ceil(u128::from(self.rc));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// A CNP arrived: cut the rate, raise alpha, restart the increase stages.
    pub fn on_cnp(&mut self, now: Nanos) {
        self.rt = self.rc;
        let cut = (u128::from(self.rc) * u128::from(self.alpha)) / (2 * u128::from(ALPHA_ONE));
        self.rc = (self.rc - cut as u64).max(self.p.min_rate_bps);
        self.alpha = self.alpha - (self.alpha >> self.p.g_shift) + (ALPHA_ONE >> self.p.g_shift);
        self.timer_events = 0;
        self.byte_events = 0;
        self.bytes = 0;
        self.alpha_at = Some(now + self.p.alpha_period);
        self.increase_at = Some(now + self.p.increase_period);
    }

    /// `bytes` were sent: the byte counter's increase events.
    pub fn on_sent(&mut self, bytes: usize) {
        if self.increase_at.is_none() {
            return;
        }
        self.bytes += bytes as u64;
        while self.bytes >= self.p.byte_counter && self.increase_at.is_some() {
            self.bytes -= self.p.byte_counter;
            self.byte_events = self.byte_events.saturating_add(1);
            self.increase();
        }
    }

    /// Runs the timers due by `now`.
    pub fn on_timeout(&mut self, now: Nanos) {
        if let Some(at) = self.alpha_at.filter(|&at| at <= now) {
            let periods = (now - at) / self.p.alpha_period.max(1) + 1;
            for _ in 0..periods.min(MAX_CATCH_UP) {
                self.alpha -= self.alpha >> self.p.g_shift;
            }
            if periods > MAX_CATCH_UP {
                self.alpha = 0;
            }
            // Once (1 - g) no longer changes alpha, the timer has nothing left to do.
            self.alpha_at = (self.alpha >> self.p.g_shift > 0)
                .then(|| at + periods * self.p.alpha_period.max(1));
        }
        let mut replayed = 0;
        while let Some(at) = self.increase_at.filter(|&at| at <= now) {
            if replayed == MAX_CATCH_UP {
                self.rc = self.line_bps;
                self.rt = self.line_bps;
                self.increase_at = None;
                break;
            }
            replayed += 1;
            self.increase_at = Some(at + self.p.increase_period.max(1));
            self.timer_events = self.timer_events.saturating_add(1);
            self.increase();
        }
    }

    /// One rate increase event (Figure 6's fast recovery, additive and hyper increase).
    fn increase(&mut self) {
        let f = self.p.fast_recovery_steps;
        let (t, b) = (self.timer_events, self.byte_events);
        if t.min(b) > f {
            let i = u64::from(t.min(b) - f);
            self.rt = self
                .rt
                .saturating_add(i.saturating_mul(self.p.rate_hai_bps));
        } else if t.max(b) >= f {
            self.rt = self.rt.saturating_add(self.p.rate_ai_bps);
        }
        self.rt = self.rt.min(self.line_bps);
        self.rc = self.rc / 2 + self.rt / 2 + (self.rc & self.rt & 1);
        // Halving the gap never closes it: within one R_AI of line rate is line rate, and
        // the increase timer stops.
        if self.rt == self.line_bps && self.line_bps - self.rc < self.p.rate_ai_bps {
            self.rc = self.line_bps;
            self.increase_at = None;
            self.byte_events = 0;
            self.timer_events = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G10: u64 = 10_000_000_000;

    #[test]
    fn starts_at_line_rate_with_no_timer() {
        let d = Dcqcn::new(G10, DcqcnParams::default());
        assert_eq!(
            (d.rate_bps(), d.target_bps(), d.alpha()),
            (G10, G10, ALPHA_ONE)
        );
        assert_eq!(d.deadline(), None);
        // 1250 bytes at 10 Gbit/s: 1 us.
        assert_eq!(d.tx_time(1250), 1000);
    }

    #[test]
    fn a_cnp_cuts_by_half_alpha_and_raises_alpha() {
        let mut d = Dcqcn::new(G10, DcqcnParams::default());
        d.on_cnp(1_000);
        // alpha = 1: Rc = 10G (1 - 1/2) = 5G; Rt = 10G; alpha = 1 - 1/256 + 1/256 = 1.
        assert_eq!(
            (d.rate_bps(), d.target_bps(), d.alpha()),
            (5 * G10 / 10, G10, ALPHA_ONE)
        );
        assert_eq!(d.deadline(), Some(56_000));
        d.on_cnp(2_000);
        // Rt = 5G, Rc = 2.5G.
        assert_eq!(
            (d.rate_bps(), d.target_bps()),
            (2_500_000_000, 5_000_000_000)
        );
        // One alpha period without a CNP: alpha = 65536 - 256 = 65280.
        d.on_timeout(57_000);
        assert_eq!(d.alpha(), 65_280);
        // The next cut is by alpha/2 = 65280/131072 of 2.5G ... but the increase timer
        // fired at 57 us too: fast recovery, Rc = (5G + 2.5G)/2 = 3.75G.
        assert_eq!(d.rate_bps(), 3_750_000_000);
        d.on_cnp(60_000);
        // 3.75G * 65280 / 131072 = 1867675781.25 -> cut 1867675781; Rc = 1882324219.
        assert_eq!(d.rate_bps(), 1_882_324_219);
        assert_eq!(d.target_bps(), 3_750_000_000);
        // alpha = 65280 - 255 + 256 = 65281.
        assert_eq!(d.alpha(), 65_281);
    }

    #[test]
    fn fast_recovery_then_additive_then_back_to_line_rate() {
        let p = DcqcnParams::default();
        let mut d = Dcqcn::new(G10, p);
        d.on_cnp(0);
        let mut rates = Vec::new();
        for k in 1..=7 {
            d.on_timeout(k * 55_000);
            rates.push((d.target_bps(), d.rate_bps()));
        }
        // Fast recovery (events 1-4: Rt stays 10G, Rc halves the gap from 5G), then
        // additive (Rt capped at line rate).
        assert_eq!(
            rates[..4],
            [
                (G10, 7_500_000_000),
                (G10, 8_750_000_000),
                (G10, 9_375_000_000),
                (G10, 9_687_500_000),
            ]
        );
        assert_eq!(rates[4], (G10, 9_843_750_000));
        assert_eq!(rates[5], (G10, 9_921_875_000));
        // Event 7 gives 9.9609375G, within R_AI (40M) of line rate: line rate, and the
        // increase timer stops (only alpha's runs on).
        assert_eq!(rates[6], (G10, G10));
        assert_eq!(d.deadline(), Some(8 * 55_000));
        d.on_timeout(8 * 55_000);
        assert_eq!(d.rate_bps(), G10);
    }

    #[test]
    fn additive_increase_moves_the_target_from_a_low_cut() {
        let p = DcqcnParams::default();
        let mut d = Dcqcn::new(G10, p);
        for t in 0..6 {
            d.on_cnp(t * 1000);
        }
        // Six cuts at alpha 1: 10G / 64 = 156.25 Mbit/s; Rt = 312.5 Mbit/s.
        assert_eq!((d.rate_bps(), d.target_bps()), (156_250_000, 312_500_000));
        let t0 = 5000;
        for k in 1..=4 {
            d.on_timeout(t0 + k * 55_000);
        }
        assert_eq!(d.target_bps(), 312_500_000, "fast recovery keeps Rt");
        d.on_timeout(t0 + 5 * 55_000);
        // Event 5 = F: additive, Rt = 312.5M + 40M.
        assert_eq!(d.target_bps(), 352_500_000);
    }

    #[test]
    fn hyper_increase_needs_both_counters_past_f() {
        let p = DcqcnParams {
            byte_counter: 1000,
            ..DcqcnParams::default()
        };
        let mut d = Dcqcn::new(G10, p);
        for t in 0..8 {
            d.on_cnp(t);
        }
        let low = d.rate_bps();
        assert_eq!(low, G10 >> 8);
        // Six timer events (T = 6 > F), then byte events: the sixth byte event finds
        // min(T, BC) = 6 > 5: Rt += 1 * R_HAI.
        for k in 1..=6 {
            d.on_timeout(7 + k * 55_000);
        }
        let rt = d.target_bps();
        for _ in 0..5 {
            d.on_sent(1000);
        }
        // Byte events 1-5: max(T, BC) = 6 >= F, min <= F: additive, +40M each.
        assert_eq!(d.target_bps(), rt + 5 * 40_000_000);
        d.on_sent(1000);
        assert_eq!(d.target_bps(), rt + 5 * 40_000_000 + 400_000_000);
    }

    #[test]
    fn alpha_decays_and_its_timer_stops() {
        let mut d = Dcqcn::new(G10, DcqcnParams::default());
        d.on_cnp(0);
        d.on_timeout(55_000);
        assert_eq!(d.alpha(), 65_280);
        d.on_timeout(110_000);
        // 65280 - 255 = 65025.
        assert_eq!(d.alpha(), 65_025);
        // A very late call replays a bounded number of periods and stops both timers.
        d.on_timeout(10_000_000_000);
        assert!(d.alpha() < 256, "{}", d.alpha());
        assert_eq!(d.deadline(), None);
        assert_eq!(d.rate_bps(), G10);
    }

    #[test]
    fn the_floor_holds() {
        let mut d = Dcqcn::new(G10, DcqcnParams::default());
        for t in 0..100 {
            d.on_cnp(t);
        }
        assert_eq!(d.rate_bps(), 10_000_000);
        assert_eq!(d.tx_time(1250), 1_000_000);
    }
}
