//! The TCP side of the MTP experiments: Sluice's core with DCTCP, configured for 10-100
//! Gbit/s links with microsecond delays, and a host that marks a tenant's DSCP on its frames
//! (what a tenant's NIC or hypervisor does, so a switch can queue tenants apart).

use std::time::Duration;

use sluice_sim::{Host, Instant};
use sluice_tcp::{Algorithm, Config, Stack};

use crate::error::ExperimentError;
use crate::fabric::host_addr;
use crate::flows::TcpHost;

/// Send and receive buffers for 100 Gbit/s x 10-20 us bandwidth-delay products, with room.
pub const BUFFER_100G: usize = 4 << 20;

/// Host `i`'s core among `n` (addresses [`host_addr`]), with DCTCP, send and receive buffers
/// of `buffer` bytes, and every other host as a static neighbour.
pub fn dctcp_stack(i: usize, n: usize, seed: u64, buffer: usize) -> Result<Stack, ExperimentError> {
    let (mac, ip) = host_addr(i);
    let mut c = Config::new(mac, ip);
    c.seed = seed.wrapping_mul(1000).wrapping_add(i as u64);
    c.congestion_control = Algorithm::Dctcp;
    c.ecn = true;
    // Microsecond RTTs: the default 200 ms floor would idle a 100 Gbit/s link for ages
    // after a tail loss (the simulator's fabrics use the same floor as ooo.rs's, smaller).
    c.rto_min = Duration::from_millis(1);
    c.rto_initial = Duration::from_millis(5);
    c.time_wait = Duration::from_millis(10);
    c.rx_buffer = buffer;
    c.tx_buffer = buffer;
    c.max_connections = 1024;
    c.syn_backlog = 1024;
    c.nagle = false;
    // A generous receiver and sender for reordering (spraying): out-of-order intervals and
    // SACK scoreboard entries well above Sluice's defaults (ooo.rs measures what fewer cost).
    c.ooo_intervals = 64;
    c.sack_scoreboard = 64;
    let mut stack =
        Stack::new(c).map_err(|e| ExperimentError::Usage(format!("host config: {e}")))?;
    for j in (0..n).filter(|&j| j != i) {
        let (m, a) = host_addr(j);
        stack.add_neighbor(a, m);
    }
    Ok(stack)
}

/// A TCP core whose outgoing IPv4 frames carry a fixed DSCP (the tenant's class).
pub struct Marked {
    stack: Stack,
    dscp: u8,
}

impl Marked {
    /// `stack` marking its frames with `dscp` (6 bits).
    pub fn new(stack: Stack, dscp: u8) -> Marked {
        Marked {
            stack,
            dscp: dscp & 0x3f,
        }
    }
}

impl TcpHost for Marked {
    fn tcp(&mut self) -> &mut Stack {
        &mut self.stack
    }
    fn tcp_ref(&self) -> &Stack {
        &self.stack
    }
}

impl Host for Marked {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack.handle_frame(now, frame)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let n = self.stack.poll_transmit(now, buf)?;
        if let Some(frame) = buf.get_mut(..n) {
            set_dscp(frame, self.dscp);
        }
        Some(n)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now)
    }
}

/// Sets the DSCP of an Ethernet/IPv4 frame (keeping its ECN bits) and fixes the header
/// checksum; other frames are left alone.
pub fn set_dscp(frame: &mut [u8], dscp: u8) {
    if frame.get(12..14) != Some(&[0x08, 0x00]) {
        return;
    }
    let Some(&vihl) = frame.get(14) else { return };
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 || frame.len() < 14 + ihl {
        return;
    }
    let header = &mut frame[14..14 + ihl];
    header[1] = (dscp << 2) | (header[1] & 0x03);
    header[10] = 0;
    header[11] = 0;
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    header[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dscp_is_set_ecn_kept_and_the_checksum_stays_valid() {
        let mut f = vec![0u8; 34];
        f[12] = 0x08;
        f[14] = 0x45;
        f[15] = 0x02; // ECT(0)
        f[16..18].copy_from_slice(&34u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 1, 0, 1]);
        f[30..34].copy_from_slice(&[10, 1, 0, 2]);
        set_dscp(&mut f, 9);
        assert_eq!(f[15], (9 << 2) | 0x02);
        let sum: u32 = f[14..34]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!(folded, 0xffff, "the header sums to all ones");
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        set_dscp(&mut arp, 9);
        assert_eq!(arp, before);
    }
}
