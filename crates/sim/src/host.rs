//! The [`Host`] trait: a simulated endpoint driven by frames and time.

use crate::Instant;

/// Size of the buffer handed to [`Host::poll_transmit`]; longer frames are dropped.
pub const MAX_FRAME_LEN: usize = 65536;

/// A simulated endpoint: anything driven by frames and time (the TCP core implements this via an adapter written by someone else).
pub trait Host {
    /// Delivers one received Ethernet frame at virtual time `now`.
    fn handle_frame(&mut self, now: Instant, frame: &[u8]);

    /// Writes the next frame to send into `buf` ([`MAX_FRAME_LEN`] bytes) and returns its length, or `None` when nothing is ready.
    ///
    /// The simulator asks (until `None`) when the host is added, after it handled a frame
    /// or its timeout, and after the application touched it; a host that wants to send
    /// later, with nothing arriving, asks for it through [`Host::poll_timeout`].
    ///
    /// A returned length larger than `buf.len()` is treated as an oversized
    /// frame: it is dropped and counted in [`SimStats::oversized_drops`](crate::SimStats).
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;

    /// The next instant at which the host wants [`Host::handle_timeout`] called, if any.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Called once virtual time reaches the deadline last returned by [`Host::poll_timeout`].
    fn handle_timeout(&mut self, now: Instant);
}

impl<H: Host + ?Sized> Host for Box<H> {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        (**self).handle_frame(now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        (**self).poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}
