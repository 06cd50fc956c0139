//! Per-QP congestion control (issue 16; docs/notes/issue-16/congestion.md): RoCEv2's
//! notification point (a CE-marked packet makes the receiving QP send a CNP to its peer,
//! at most one per interval) and DCQCN's reaction point (`dcqcn`: the rate of the QP that
//! receives CNPs), whose rate paces the QP's request packets.

pub mod dcqcn;

pub use dcqcn::{Dcqcn, DcqcnParams};

use crate::qp::Nanos;

/// The congestion state of one QP: both roles, since a QP both receives and sends.
#[derive(Clone, Debug)]
pub struct QpCongestion {
    /// The reaction point; None when pacing is off (a line rate of 0).
    rp: Option<Dcqcn>,
    /// Earliest time the next request packet may go.
    next_send: Nanos,
    /// A CNP waits to go.
    cnp_due: bool,
    /// When the last CNP was scheduled.
    last_cnp: Option<Nanos>,
}

impl QpCongestion {
    /// A QP's state at `line_bps` (0: unpaced).
    pub fn new(line_bps: u64, params: DcqcnParams) -> QpCongestion {
        QpCongestion {
            rp: (line_bps > 0).then(|| Dcqcn::new(line_bps, params)),
            next_send: 0,
            cnp_due: false,
            last_cnp: None,
        }
    }

    /// A CE-marked packet arrived: a CNP is due unless one went less than `interval` ago.
    /// True if this one schedules a CNP.
    pub fn on_ce(&mut self, now: Nanos, interval: Nanos) -> bool {
        if self
            .last_cnp
            .is_some_and(|t| now.saturating_sub(t) < interval)
        {
            return false;
        }
        self.last_cnp = Some(now);
        self.cnp_due = true;
        true
    }

    /// Takes the due CNP, if one is.
    pub fn take_cnp(&mut self) -> bool {
        std::mem::take(&mut self.cnp_due)
    }

    /// A CNP arrived for this QP: the reaction point cuts its rate.
    pub fn on_cnp(&mut self, now: Nanos) {
        if let Some(rp) = self.rp.as_mut() {
            rp.on_cnp(now);
        }
    }

    /// Whether a request packet may go at `now`.
    pub fn may_send(&self, now: Nanos) -> bool {
        self.rp.is_none() || now >= self.next_send
    }

    /// When the next request packet may go (meaningful when pacing is on).
    pub fn next_send(&self) -> Nanos {
        self.next_send
    }

    /// A request packet of `bytes` (the whole frame) went at `now`: the next one waits its
    /// transmission time at the current rate, and the byte counter moves.
    pub fn on_sent(&mut self, now: Nanos, bytes: usize) {
        if let Some(rp) = self.rp.as_mut() {
            self.next_send = self.next_send.max(now) + rp.tx_time(bytes);
            rp.on_sent(bytes);
        }
    }

    /// The reaction point's next timer.
    pub fn deadline(&self) -> Option<Nanos> {
        self.rp.as_ref()?.deadline()
    }

    /// Runs the reaction point's timers due by `now`.
    pub fn on_timeout(&mut self, now: Nanos) {
        if let Some(rp) = self.rp.as_mut() {
            if rp.deadline().is_some_and(|t| t <= now) {
                rp.on_timeout(now);
            }
        }
    }

    /// The current rate, bit/s; None when unpaced.
    pub fn rate_bps(&self) -> Option<u64> {
        self.rp.as_ref().map(Dcqcn::rate_bps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cnp_per_interval() {
        let mut c = QpCongestion::new(10_000_000_000, DcqcnParams::default());
        assert!(c.on_ce(1_000, 50_000));
        assert!(!c.on_ce(2_000, 50_000));
        assert!(!c.on_ce(50_999, 50_000));
        assert!(c.take_cnp());
        assert!(!c.take_cnp(), "taken once");
        assert!(c.on_ce(51_000, 50_000));
        assert!(c.take_cnp());
    }

    #[test]
    fn pacing_spaces_requests_by_the_rate() {
        let mut c = QpCongestion::new(10_000_000_000, DcqcnParams::default());
        assert!(c.may_send(0));
        c.on_sent(0, 1250);
        assert!(!c.may_send(999) && c.may_send(1000));
        c.on_cnp(1000);
        assert_eq!(c.rate_bps(), Some(5_000_000_000));
        c.on_sent(1000, 1250);
        assert_eq!(c.next_send(), 3000);
        // Unpaced: always allowed, no rate.
        let mut u = QpCongestion::new(0, DcqcnParams::default());
        u.on_sent(0, 1 << 20);
        u.on_cnp(0);
        assert!(u.may_send(0) && u.rate_bps().is_none() && u.deadline().is_none());
    }
}
