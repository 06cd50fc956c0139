//! Bridging TCP-only islands (mtp.txt 4): a port marked as facing an island sends MTP
//! frames as TCP segments that carry the MTP header in a TCP option
//! (`sluice_mtp::wire::tcp_bridge`), and turns such segments arriving from the island back
//! into MTP. The devices inside the island see TCP; the hosts on either side see MTP.

use sluice_mtp::wire::tcp_bridge::{is_bridged, mtp_to_tcp, tcp_to_mtp};
use sluice_mtp::wire::MtpError;

/// The ports facing TCP islands, and a scratch frame so translating allocates nothing once
/// warm.
#[derive(Debug, Default)]
pub(super) struct Islands {
    ports: Vec<bool>,
    scratch: Vec<u8>,
}

/// What bridging did to a frame.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Bridged {
    /// Translated.
    Done,
    /// Not for this bridge (the port faces no island, or the frame is not MTP / bridged).
    Untouched,
    /// Bad: the frame should be dropped.
    Refused,
}

/// Room for a frame grown by the bridge (a jumbo frame and the TCP header).
const SCRATCH_LEN: usize = 9216 + 64;

impl Islands {
    /// Marks `port` as facing an island.
    pub(super) fn add(&mut self, port: usize) {
        if self.ports.len() <= port {
            self.ports.resize(port + 1, false);
        }
        self.ports[port] = true;
        self.scratch.resize(SCRATCH_LEN, 0);
    }

    fn faces(&self, port: usize) -> bool {
        self.ports.get(port).copied().unwrap_or(false)
    }

    /// An MTP frame leaving through `port`: into the island as TCP.
    pub(super) fn leave(&mut self, port: usize, frame: &mut Vec<u8>) -> Bridged {
        if !self.faces(port) {
            return Bridged::Untouched;
        }
        match mtp_to_tcp(frame, &mut self.scratch) {
            Ok(n) => self.swap_in(frame, n),
            Err(MtpError::NotMtp) | Err(MtpError::Encapsulation(_)) => Bridged::Untouched,
            Err(_) => Bridged::Refused,
        }
    }

    /// A frame arriving from `port`: a bridged segment out of the island back into MTP.
    pub(super) fn enter(&mut self, port: usize, frame: &mut Vec<u8>) -> Bridged {
        if !self.faces(port) || !is_bridged(frame) {
            return Bridged::Untouched;
        }
        match tcp_to_mtp(frame, &mut self.scratch) {
            Ok(n) => self.swap_in(frame, n),
            Err(_) => Bridged::Refused,
        }
    }

    fn swap_in(&mut self, frame: &mut Vec<u8>, n: usize) -> Bridged {
        frame.clear();
        frame.extend_from_slice(&self.scratch[..n]);
        Bridged::Done
    }
}
