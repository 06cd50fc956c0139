//! A simulated host that loses or reorders chosen frames of its core, deterministically.

use sluice_sim::Host;
use sluice_tcp::{Instant, Stack};

/// A core whose next `drop_data` outgoing frames with TCP payload are lost on the wire,
/// and whose next `hold_data` ones are each sent after the frame that follows them.
pub struct Lossy {
    pub stack: Stack,
    pub drop_data: u32,
    pub dropped: u32,
    pub hold_data: u32,
    held: Option<Vec<u8>>,
    release: Option<Vec<u8>>,
}

impl Lossy {
    pub fn new(stack: Stack) -> Self {
        Lossy {
            stack,
            drop_data: 0,
            dropped: 0,
            hold_data: 0,
            held: None,
            release: None,
        }
    }
}

impl Host for Lossy {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack.handle_frame(now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(f) = self.release.take() {
            buf[..f.len()].copy_from_slice(&f);
            return Some(f.len());
        }
        loop {
            let n = self.stack.poll_transmit(now, buf)?;
            let data = tcp_payload_len(&buf[..n]) > 0;
            if self.drop_data > 0 && data {
                self.drop_data -= 1;
                self.dropped += 1;
                continue;
            }
            if self.hold_data > 0 && data && self.held.is_none() {
                self.hold_data -= 1;
                self.held = Some(buf[..n].to_vec());
                continue;
            }
            self.release = self.held.take();
            return Some(n);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now)
    }
}

/// TCP payload bytes of an Ethernet + IPv4 + TCP frame (0 for anything else).
pub fn tcp_payload_len(frame: &[u8]) -> usize {
    if frame.len() < 54 || frame[12..14] != [0x08, 0x00] || frame[23] != 6 {
        return 0;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let doff = frame
        .get(14 + ihl + 12)
        .map_or(0, |b| usize::from(b >> 4) * 4);
    total.saturating_sub(ihl + doff)
}
