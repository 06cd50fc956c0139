//! NewReno (RFC 5681, RFC 6582) adapted to go-back-N retransmission: after a fast
//! retransmit the sender resends from snd_una, so the window is not inflated per dupack.

use sluice_wire::tcp::SeqNumber;

use super::CongestionControl;

/// NewReno state: 16 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReno {
    cwnd: u32,
    ssthresh: u32,
    /// Bytes acknowledged in congestion avoidance since cwnd last grew.
    acked_in_ca: u32,
    /// snd_max when recovery began; recovery ends when it is acknowledged (RFC 6582).
    recover: SeqNumber,
    in_recovery: bool,
}

impl NewReno {
    /// A connection's initial state: IW = 10 segments (RFC 6928).
    pub fn new(mss: u32) -> Self {
        NewReno {
            cwnd: 10 * mss,
            ssthresh: u32::MAX,
            acked_in_ca: 0,
            recover: SeqNumber(0),
            in_recovery: false,
        }
    }

    /// The slow-start threshold.
    pub fn ssthresh(&self) -> u32 {
        self.ssthresh
    }
}

impl CongestionControl for NewReno {
    fn on_ack(&mut self, ack: SeqNumber, acked: u32, mss: u32) {
        if self.in_recovery {
            if ack.seq_ge(self.recover) {
                // RFC 6582 3.2 step 3: full acknowledgment ends recovery.
                self.in_recovery = false;
                self.cwnd = self.ssthresh.max(2 * mss);
            }
            return;
        }
        if self.cwnd < self.ssthresh {
            // RFC 5681 3.1 with RFC 3465 byte counting, L = 2 SMSS.
            self.cwnd = self.cwnd.saturating_add(acked.min(2 * mss));
        } else {
            self.acked_in_ca = self.acked_in_ca.saturating_add(acked);
            if self.acked_in_ca >= self.cwnd {
                self.acked_in_ca -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(mss);
            }
        }
    }

    fn on_fast_retransmit(&mut self, flight: u32, mss: u32, snd_max: SeqNumber) {
        // RFC 5681 eq. 4: ssthresh = max(FlightSize / 2, 2 * SMSS).
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh;
        self.acked_in_ca = 0;
        self.recover = snd_max;
        self.in_recovery = true;
    }

    fn on_timeout(&mut self, flight: u32, mss: u32) {
        self.ssthresh = (flight / 2).max(2 * mss);
        // RFC 5681 3.1: after a timeout cwnd is the loss window, one segment.
        self.cwnd = mss;
        self.acked_in_ca = 0;
        self.in_recovery = false;
    }

    fn window(&self) -> u32 {
        self.cwnd
    }

    fn may_fast_retransmit(&self, snd_una: SeqNumber) -> bool {
        // RFC 6582 3.2 step 1: not again while the previous recovery's data is unacknowledged.
        !self.in_recovery || snd_una.seq_ge(self.recover)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;

    #[test]
    fn slow_start_then_avoidance() {
        let mut cc = NewReno::new(MSS);
        assert_eq!(cc.window(), 10 * MSS);
        cc.on_ack(SeqNumber(1000), 1000, MSS);
        assert_eq!(cc.window(), 11 * MSS);
        cc.on_timeout(20 * MSS, MSS);
        assert_eq!((cc.window(), cc.ssthresh()), (MSS, 10 * MSS));
        for _ in 0..9 {
            cc.on_ack(SeqNumber(0), 1000, MSS);
        }
        assert_eq!(cc.window(), 10 * MSS, "slow start until ssthresh");
        for _ in 0..10 {
            cc.on_ack(SeqNumber(0), 1000, MSS);
        }
        assert_eq!(cc.window(), 11 * MSS, "one MSS per window in avoidance");
    }

    #[test]
    fn recovery_halves_once_and_ends_on_full_ack() {
        let mut cc = NewReno::new(MSS);
        cc.on_fast_retransmit(40 * MSS, MSS, SeqNumber(50_000));
        assert_eq!(cc.window(), 20 * MSS);
        assert!(!cc.may_fast_retransmit(SeqNumber(20_000)));
        cc.on_ack(SeqNumber(20_000), 5000, MSS); // partial ACK: stays in recovery
        assert_eq!(cc.window(), 20 * MSS);
        cc.on_ack(SeqNumber(50_000), 30_000, MSS);
        assert!(cc.may_fast_retransmit(SeqNumber(50_000)));
    }
}
