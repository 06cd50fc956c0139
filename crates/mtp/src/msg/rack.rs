//! Time-based loss detection across a destination's messages, after RACK (RFC 8985 6.2):
//! a packet is lost when a packet sent to the same destination over the same path more
//! than a reordering window later has been acknowledged. It catches what the per-message
//! SACK gap cannot: the loss of a short message's packets, and of retransmissions. Paths
//! are compared as the ACKs reveal them (devices pin a message to one path), so packets on a
//! longer path are not judged by acknowledgements from a shorter one. A packet of a message
//! none of whose ACKs came back yet may be on any path: it is judged against the path
//! acknowledged least recently (issue 17: judged against the expected path, the packets a
//! balancer put on the longer path were declared lost whenever the shorter path's ACKs came
//! back first).
//!
//! The log holds transmissions in send order; entries for packets acknowledged or sent
//! again go stale and are dropped when they reach the front, so the work is amortised
//! constant per transmission. An entry whose path has seen no acknowledgement since is
//! dropped too (the timeout still covers its packet): the log never waits on a path that
//! went quiet.

use std::collections::VecDeque;

use crate::cc::PathId;
use crate::time::Nanos;

/// One transmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// When it left.
    pub at: Nanos,
    /// The message.
    pub msg: u32,
    /// The packet.
    pub pkt: u16,
    /// The path it was charged to.
    pub path: Option<PathId>,
}

/// The path a logged packet took, as far as the sender knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Took {
    /// This path (an ACK of its message revealed it, or the destination has only one).
    Path(Option<PathId>),
    /// Any of the destination's paths (no ACK of its message came back yet).
    Unknown,
}

/// What the front of the log says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Lost: a packet sent over its path more than the window later was acknowledged.
    Lost(Sent),
    /// Nothing more can be judged now.
    Wait,
    /// Judge the next entry (this one was dropped: stale or on a quiet path).
    Next,
}

/// A destination's transmissions in send order, and per path the latest send time of an
/// acknowledged packet.
#[derive(Debug, Default)]
pub struct SendLog {
    sent: VecDeque<Sent>,
    /// (path, latest send time acknowledged); a destination has a handful of paths.
    latest: Vec<(Option<PathId>, Nanos)>,
}

/// Paths remembered per destination (older ones are forgotten).
const MAX_PATHS: usize = 8;

impl SendLog {
    /// Logs a transmission; false when the log is at `cap` (the packet then relies on the
    /// SACK gap and the timeout).
    pub fn record(&mut self, s: Sent, cap: usize) -> bool {
        if self.sent.len() >= cap {
            return false;
        }
        self.sent.push_back(s);
        true
    }

    /// A packet sent at `at` over `path` was acknowledged.
    pub fn acked(&mut self, path: Option<PathId>, at: Nanos) {
        match self.latest.iter_mut().find(|(p, _)| *p == path) {
            Some((_, t)) => *t = (*t).max(at),
            None => {
                if self.latest.len() >= MAX_PATHS {
                    self.latest.remove(0);
                }
                self.latest.push((path, at));
            }
        }
    }

    /// Judges the front entry; `live` gives the path its packet took ([`Took`]), or None
    /// when the entry is stale (no longer the packet's latest transmission, or not in
    /// flight). A path whose latest acknowledgement is `quiet` older than another's does
    /// not hold back a packet of unknown path.
    pub fn judge(
        &mut self,
        reo_wnd: Nanos,
        quiet: Nanos,
        live: impl FnOnce(&Sent) -> Option<Took>,
    ) -> Verdict {
        let Some(&front) = self.sent.front() else {
            return Verdict::Wait;
        };
        let Some(took) = live(&front) else {
            self.sent.pop_front();
            return Verdict::Next;
        };
        let latest = match took {
            Took::Path(path) => self
                .latest
                .iter()
                .find(|(p, _)| *p == path)
                .map(|&(_, t)| t),
            // Outrun on whichever path it took: on every one still acknowledging (a path
            // whose ACKs lag a timeout behind the others' went quiet).
            Took::Unknown => {
                let newest = self.latest.iter().map(|&(_, t)| t).max().unwrap_or(0);
                let live = newest.saturating_sub(quiet);
                self.latest
                    .iter()
                    .map(|&(_, t)| t)
                    .filter(|&t| t >= live)
                    .min()
            }
        };
        match latest {
            Some(t) if front.at.saturating_add(reo_wnd) < t => {
                self.sent.pop_front();
                Verdict::Lost(front)
            }
            // Nothing sent over its path long enough after it is acknowledged yet.
            Some(_) => Verdict::Wait,
            None => {
                self.sent.pop_front();
                Verdict::Next
            }
        }
    }

    /// Entries logged.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: Nanos, pkt: u16) -> Sent {
        Sent {
            at,
            msg: 1,
            pkt,
            path: None,
        }
    }

    #[test]
    fn a_packet_is_lost_once_a_later_one_beyond_the_window_is_acknowledged() {
        let mut log = SendLog::default();
        for i in 0..3 {
            assert!(log.record(s(i * 10, i as u16), 8));
        }
        log.acked(None, 10);
        assert_eq!(
            log.judge(10, 1000, |_| Some(Took::Path(None))),
            Verdict::Wait,
            "within the window"
        );
        log.acked(None, 20);
        assert_eq!(
            log.judge(10, 1000, |_| Some(Took::Path(None))),
            Verdict::Lost(s(0, 0))
        );
        assert_eq!(
            log.judge(10, 1000, |_| Some(Took::Path(None))),
            Verdict::Wait
        );
        assert_eq!(
            log.judge(10, 1000, |_| None),
            Verdict::Next,
            "stale entries go"
        );
        assert_eq!(log.len(), 1);
        assert!(!log.record(s(50, 9), 1), "bounded");
    }

    #[test]
    fn a_quiet_path_does_not_hold_the_log() {
        let mut log = SendLog::default();
        log.record(
            Sent {
                path: Some(PathId(7)),
                ..s(0, 0)
            },
            8,
        );
        log.record(s(10, 1), 8);
        log.acked(None, 10);
        assert_eq!(
            log.judge(1, 1000, |s| Some(Took::Path(s.path))),
            Verdict::Next
        );
        assert_eq!(
            log.judge(1, 1000, |s| Some(Took::Path(s.path))),
            Verdict::Wait
        );
    }

    #[test]
    fn a_packet_on_an_unknown_path_is_lost_only_once_every_path_outran_it() {
        let mut log = SendLog::default();
        let (fast, slow) = (Some(PathId(1)), Some(PathId(2)));
        log.record(s(0, 0), 8);
        log.acked(fast, 100);
        log.acked(slow, 5);
        // The fast path's ACKs alone do not make it lost: it may be on the slow one.
        assert_eq!(log.judge(10, 1000, |_| Some(Took::Unknown)), Verdict::Wait);
        assert_eq!(
            log.judge(10, 1000, |_| Some(Took::Path(fast))),
            Verdict::Lost(s(0, 0))
        );
        log.record(s(20, 1), 8);
        log.acked(slow, 25);
        assert_eq!(log.judge(10, 1000, |_| Some(Took::Unknown)), Verdict::Wait);
        log.acked(slow, 60);
        assert_eq!(
            log.judge(10, 1000, |_| Some(Took::Unknown)),
            Verdict::Lost(s(20, 1))
        );
        // A path silent for longer than `quiet` does not hold it back.
        log.record(s(100, 2), 8);
        log.acked(fast, 2000);
        assert_eq!(log.judge(10, 5000, |_| Some(Took::Unknown)), Verdict::Wait);
        assert_eq!(
            log.judge(10, 1000, |_| Some(Took::Unknown)),
            Verdict::Lost(s(100, 2))
        );
    }
}
