//! The local link as a resource the sender schedules itself: with `link_bps` known, data
//! leaves no more than `line_backlog` bytes ahead of the line, so the order the scheduler
//! picks (priority, then fewest remaining bytes) is the order on the wire rather than being
//! flattened by a FIFO in the NIC that no pathlet reports on.

use super::config::Nanos;
use super::MtpStack;

impl MtpStack {
    /// Nanoseconds the line needs for `bytes`.
    fn line_time(&self, bytes: usize) -> Nanos {
        (bytes as u128 * 8 * 1_000_000_000 / u128::from(self.cfg.link_bps.max(1))) as Nanos
    }

    /// Whether data may leave at `now`; when not, and data waits, the stack asks to be
    /// polled when it may (`poll_timeout`).
    pub(super) fn line_ready(&mut self, now: Nanos) -> bool {
        if self.cfg.link_bps == 0 {
            return true;
        }
        let ahead = self.line_free_at.saturating_sub(now);
        let allowed = self.line_time(self.cfg.line_backlog);
        if ahead <= allowed {
            return true;
        }
        if self.sched.first(1).next().is_some() {
            self.pace_at = Some(self.line_free_at - allowed);
        }
        false
    }

    /// A frame of `bytes` was handed to the line at `now`.
    pub(super) fn line_sent(&mut self, now: Nanos, bytes: usize) {
        if self.cfg.link_bps != 0 {
            let on_line = bytes + self.cfg.line_frame_overhead;
            self.line_free_at = self.line_free_at.max(now) + self.line_time(on_line);
        }
    }
}
