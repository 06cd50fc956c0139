//! MTP in service mode (docs/mtp.md "Messages in service mode"): one MTP transport beside
//! the TCP core, the requests an application asks over its control socket, the messages
//! and buffers it posts in its endpoints' queues, and the completions the engine places.
//!
//! Inside, layered like the verbs: `objects` (what an application owns) at the bottom;
//! `completions` (transport events and messages to completion queues) and `work` (queues to
//! the transport, which makes completions of its own) above it; `requests` on top.

mod completions;
mod objects;
mod requests;
mod work;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use sluice_engine::Transport;
use sluice_mtp::stack::{EndpointId, MtpStack, StackConfig};
use sluice_tcp::{Instant, Stack};
use sluice_wire::EthernetAddress;

pub(crate) use completions::deliver;
pub(crate) use requests::request;
pub(crate) use work::{doorbell, retry};

use objects::MtpApp;

/// Destinations waiting for ARP at most (more are dropped from the list; their messages
/// wait in the transport until a later send asks again).
const MAX_UNRESOLVED: usize = 256;

/// Addresses remembered as handed to the transport at most (past it the memory is
/// cleared: it only saves lookups).
const MAX_KNOWN: usize = 4096;

/// The MTP transport as the engine drives it, and which neighbours it has been given.
pub(crate) struct MtpCore {
    /// The sans-IO stack.
    pub stack: MtpStack,
    /// Addresses whose MAC the stack was given.
    known: HashSet<Ipv4Addr>,
    /// Sources of received frames whose MAC the stack lacks: its ACKs to them need one,
    /// looked up in the TCP core's ARP cache before the next transmit.
    heard: Vec<Ipv4Addr>,
}

impl MtpCore {
    /// Gives the stack `ip`'s next-hop MAC.
    fn set_neighbor(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        self.known.insert(ip);
        self.stack.set_neighbor(ip, mac);
    }
}

/// The IPv4 source of an Ethernet frame (one VLAN tag looked through); None if short.
fn ipv4_source(frame: &[u8]) -> Option<Ipv4Addr> {
    let l3 = if frame.get(12..14)? == [0x81, 0x00] {
        18
    } else {
        14
    };
    let b: [u8; 4] = frame.get(l3 + 12..l3 + 16)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

impl Transport for MtpCore {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        if let Some(ip) = ipv4_source(frame) {
            if !self.known.contains(&ip)
                && !self.heard.contains(&ip)
                && self.heard.len() < MAX_UNRESOLVED
            {
                self.heard.push(ip);
            }
        }
        self.stack.handle_frame(now.as_nanos(), frame);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.stack.poll_transmit(now.as_nanos(), buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout().map(Instant::from_nanos)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now.as_nanos());
    }
}

/// The service's MTP: the transport and who owns what of it.
pub(crate) struct Mtp {
    /// The transport (what the engine drives).
    pub core: MtpCore,
    /// Applications that asked for MTP, by their index in the service's table.
    apps: HashMap<u32, MtpApp>,
    /// Which application owns each endpoint (the transport's events name endpoints).
    owners: HashMap<u32, u32>,
    /// The longest message.
    max_message: u32,
    /// Endpoints with entries left in their queues: (application, endpoint).
    retry: Vec<(u32, u32)>,
    /// Destinations whose MAC the TCP core is resolving.
    unresolved: Vec<Ipv4Addr>,
}

impl Mtp {
    /// The MTP transport of the engine whose core is `stack` (its MAC, address and MTU).
    pub fn new(stack: &Stack) -> Result<Mtp, String> {
        let cfg = stack.config();
        let mut c = StackConfig::new(cfg.mac, cfg.ip);
        c.mtu = usize::from(cfg.mtu);
        // The engine shares cores with its applications: scheduling stalls of a millisecond
        // or two are ordinary, and RACK recovers most losses without the timer, so the
        // timeout floor is set above them (the stack's default suits the simulator).
        c.rto_min = 5_000_000;
        c.rto_initial = 20_000_000;
        let max_message = c.max_message_len;
        let stack = MtpStack::new(c).map_err(|e| format!("MTP: {e}"))?;
        Ok(Mtp {
            core: MtpCore {
                stack,
                known: HashSet::new(),
                heard: Vec::new(),
            },
            apps: HashMap::new(),
            owners: HashMap::new(),
            max_message,
            retry: Vec::new(),
            unresolved: Vec::new(),
        })
    }

    /// Hands the transport the MACs the TCP core has resolved since they were asked for,
    /// and those of peers heard from (for the ACKs to them), resolving the ones unknown.
    pub fn learn_neighbors(&mut self, stack: &mut Stack, now: Instant) -> u64 {
        let mut waits = 0;
        for ip in std::mem::take(&mut self.core.heard) {
            match stack.neighbor(ip) {
                Some(mac) => self.core.set_neighbor(ip, mac),
                None => {
                    if !self.unresolved.contains(&ip) && self.unresolved.len() < MAX_UNRESOLVED {
                        self.unresolved.push(ip);
                        waits += 1;
                    }
                    stack.resolve_neighbor(ip, now);
                }
            }
        }
        let core = &mut self.core;
        self.unresolved.retain(|&ip| match stack.neighbor(ip) {
            Some(mac) => {
                core.set_neighbor(ip, mac);
                false
            }
            None => true,
        });
        waits
    }

    /// The application at `app` went away: its endpoints are unbound (their messages
    /// given up), its memory unmapped.
    pub fn detach(&mut self, app: u32) {
        let Some(a) = self.apps.remove(&app) else {
            return;
        };
        for ep in a.eps.keys() {
            self.core.stack.unbind(EndpointId(*ep));
            self.owners.remove(ep);
        }
        self.retry.retain(|&(x, _)| x != app);
    }

    /// Endpoints bound over every application (for tests and counters).
    pub fn endpoints(&self) -> usize {
        self.owners.len()
    }

    /// The transport's counters, one `name value` per line.
    pub fn describe_counters(&self) -> String {
        let c = self.core.stack.counters();
        let rows = [
            ("mtp_frames_in", c.frames_in),
            ("mtp_frames_out", c.frames_out),
            ("mtp_data_sent", c.data_sent),
            ("mtp_data_received", c.data_received),
            ("mtp_acks_sent", c.acks_sent),
            ("mtp_bad_checksum", c.bad_checksum),
            ("mtp_malformed", c.malformed),
            ("mtp_unknown_port", c.unknown_port),
            ("mtp_duplicates", c.duplicates),
            ("mtp_messages_delivered", c.messages_delivered),
            ("mtp_messages_acked", c.messages_acked),
            ("mtp_messages_failed", c.messages_failed),
            ("mtp_endpoint_queue_full", c.endpoint_queue_full),
            ("mtp_retx_timeout", c.retx_timeout),
            ("mtp_retx_nack", c.retx_nack),
            ("mtp_retx_sack_gap", c.retx_sack_gap),
            ("mtp_retx_rack", c.retx_rack),
            ("mtp_timeouts", c.timeouts),
            ("mtp_no_neighbor", c.no_neighbor),
        ];
        rows.iter().map(|(n, v)| format!("{n:<25} {v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_address_is_read_through_a_vlan_tag_and_short_frames_give_none() {
        let mut f = vec![0u8; 34];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[26..30].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(ipv4_source(&f), Some(Ipv4Addr::new(10, 0, 0, 7)));
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0, 5]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(ipv4_source(&tagged), Some(Ipv4Addr::new(10, 0, 0, 7)));
        for n in 0..30 {
            assert_eq!(ipv4_source(&f[..n]), None, "cut at {n}");
        }
    }
}
