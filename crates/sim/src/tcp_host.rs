//! The TCP core as a simulated host.

use sluice_tcp::{Instant, Stack};

use crate::Host;

impl Host for Stack {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        Stack::handle_frame(self, now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        Stack::poll_transmit(self, now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Stack::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        Stack::handle_timeout(self, now)
    }
}
