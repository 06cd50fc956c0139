//! ARP (RFC 826): answering requests, learning neighbors, and the SYNs that waited for an
//! answer.

use std::net::Ipv4Addr;

use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::EthernetAddress;

use super::state::TcpState;
use crate::host::Stack;

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
        }
        ok
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
