//! ARP (RFC 826): answering requests, learning neighbors, and the SYNs that waited for an
//! answer.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::EthernetAddress;

use super::state::TcpState;
use crate::host::Stack;
use crate::time::Instant;

impl Stack {
    pub(crate) fn handle_arp(&mut self, arp: &ArpRepr) {
        if arp.target_ip != self.cfg.ip {
            self.counters.not_for_us += 1;
            return;
        }
        self.neighbors
            .learn(arp.source_ip, arp.source_mac, self.now);
        if arp.operation == ArpOperation::Request {
            let reply = ArpRepr {
                operation: ArpOperation::Reply,
                source_mac: self.cfg.mac,
                source_ip: self.cfg.ip,
                target_mac: arp.source_mac,
                target_ip: arp.source_ip,
            };
            if self.push_arp(arp.source_mac, &reply) {
                self.counters.arp_replies += 1;
            }
        }
        // Connections waiting for this neighbor send their SYN now.
        let mut i = 0;
        while i < self.awaiting_arp.len() {
            let slot = self.awaiting_arp[i];
            let c = &self.conns[slot as usize];
            if c.tuple.remote_ip == arp.source_ip {
                self.awaiting_arp.swap_remove(i);
                if c.state == TcpState::SynSent {
                    self.dp.pre[slot as usize].peer_mac = arp.source_mac;
                    self.send_syn(slot, false);
                }
            } else {
                i += 1;
            }
        }
    }

    pub(super) fn push_arp(&mut self, dst: EthernetAddress, arp: &ArpRepr) -> bool {
        let eth = EthernetRepr {
            dst,
            src: self.cfg.mac,
            ethertype: EtherType::Arp,
            vlan: None,
        };
        let ok = self.out.push_with(|buf| {
            let h = eth.emit(buf).ok()?;
            let n = arp.emit(buf.get_mut(h..)?).ok()?;
            Some(h + n)
        });
        if !ok {
            self.counters.control_queue_full += 1;
            crate::trace::record::tracepoint! { self, None, Drop { reason: "control_queue_full" } }
        }
        ok
    }

    /// Asks for `ip`'s MAC on behalf of another transport, at most once a second per
    /// target (RFC 1122 2.3.2.1: SHOULD NOT flood ARP requests, one per second at most);
    /// whether a request went out.
    pub(crate) fn request_neighbor(&mut self, ip: Ipv4Addr, now: Instant) -> bool {
        const INTERVAL: Duration = Duration::from_secs(1);
        if let Some(e) = self.arp_asked.iter().find(|e| e.0 == ip) {
            if now.saturating_since(e.1) < INTERVAL {
                return false;
            }
        }
        // The entry for this target, else the oldest.
        let i = self
            .arp_asked
            .iter()
            .position(|e| e.0 == ip)
            .or_else(|| {
                (0..self.arp_asked.len()).min_by_key(|&i| {
                    let (target, at) = self.arp_asked[i];
                    (!target.is_unspecified(), at)
                })
            })
            .unwrap_or(0);
        let before = self.counters.arp_requests;
        self.send_arp_request(ip);
        let sent = self.counters.arp_requests != before;
        if sent {
            self.arp_asked[i] = (ip, now);
        }
        sent
    }

    pub(crate) fn send_arp_request(&mut self, ip: Ipv4Addr) {
        let req = ArpRepr {
            operation: ArpOperation::Request,
            source_mac: self.cfg.mac,
            source_ip: self.cfg.ip,
            target_mac: EthernetAddress::default(),
            target_ip: ip,
        };
        if self.push_arp(EthernetAddress::BROADCAST, &req) {
            self.counters.arp_requests += 1;
        }
    }
}
