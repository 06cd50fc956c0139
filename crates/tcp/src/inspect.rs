//! Looking into a running core from a control tool (`sluice ctl`): its live connections,
//! slot by slot, and its listeners. Statistics, off the data-path: nothing here changes
//! state.

use std::net::SocketAddrV4;

use crate::cc::Algorithm;
use crate::control::state::TcpState;
use crate::handle::{ConnId, ListenerId};
use crate::host::Stack;
use crate::stack::ConnInfo;

/// One live connection as a control tool shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnRow {
    /// Its handle (slot and generation).
    pub id: ConnId,
    /// Local address and port.
    pub local: SocketAddrV4,
    /// Remote address and port.
    pub remote: SocketAddrV4,
    /// Its variables, as [`Stack::info`] gives them.
    pub info: ConnInfo,
    /// An application holds it (accepted or connected); false while it waits in an accept
    /// queue or after the application closed it.
    pub app_owned: bool,
    /// Bytes the peer acknowledged: snd_una - ISS less the SYN, modulo 2^32 (sequence space).
    pub bytes_acked: u32,
    /// Bytes received in order: rcv_nxt - IRS less the SYN, modulo 2^32.
    pub bytes_received: u32,
}

/// One listener as a control tool shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// Its handle.
    pub id: ListenerId,
    /// The listening port.
    pub port: u16,
    /// Its accept queue's bound.
    pub backlog: usize,
    /// Established connections waiting to be accepted.
    pub accept_queue: usize,
    /// Handshakes under way (SYN-RECEIVED).
    pub syn_pending: usize,
    /// The algorithm its connections start with.
    pub congestion_control: Algorithm,
}

impl TcpState {
    /// The state's name as RFC 9293 spells it ("ESTABLISHED", "SYN-SENT", ...).
    pub fn rfc_name(self) -> &'static str {
        match self {
            TcpState::Closed => "CLOSED",
            TcpState::SynSent => "SYN-SENT",
            TcpState::SynReceived => "SYN-RECEIVED",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait1 => "FIN-WAIT-1",
            TcpState::FinWait2 => "FIN-WAIT-2",
            TcpState::CloseWait => "CLOSE-WAIT",
            TcpState::Closing => "CLOSING",
            TcpState::LastAck => "LAST-ACK",
            TcpState::TimeWait => "TIME-WAIT",
        }
    }
}

impl Stack {
    /// The live connection in the lowest slot at or above `from`, if any. A caller walks
    /// every connection by asking again from the row's slot + 1: the whole walk reads each
    /// slot of the table once (O(table) per walk, O(1) per row beyond the skipped free
    /// slots). Connections handed to the teardown stage have left the table and are not
    /// seen.
    pub fn next_connection(&self, from: u32) -> Option<ConnRow> {
        let slot = self.table.next_live(from)?;
        let s = slot as usize;
        let c = &self.conns[s];
        let info = self.info_at(s);
        let sent = |next: sluice_wire::tcp::SeqNumber, initial: sluice_wire::tcp::SeqNumber| {
            // The SYN takes one sequence number; before it is acknowledged nothing was sent.
            (next.0.wrapping_sub(initial.0)).saturating_sub(1)
        };
        let synchronized = info.state.is_synchronized();
        Some(ConnRow {
            id: ConnId {
                slot,
                generation: self.table.generation(slot),
            },
            local: SocketAddrV4::new(self.cfg.ip, c.tuple.local_port),
            remote: SocketAddrV4::new(c.tuple.remote_ip, c.tuple.remote_port),
            info,
            app_owned: c.app_owned,
            bytes_acked: if synchronized {
                sent(info.snd_una, c.iss)
            } else {
                0
            },
            bytes_received: if synchronized {
                sent(info.rcv_nxt, c.irs)
            } else {
                0
            },
        })
    }

    /// Every listener, in index order (bounded by the configured listener count).
    pub fn listeners(&self) -> impl Iterator<Item = ListenerInfo> + '_ {
        self.listeners.iter().enumerate().filter_map(|(i, l)| {
            let l = l.as_ref()?;
            Some(ListenerInfo {
                id: ListenerId {
                    index: i as u16,
                    port: l.port,
                    generation: l.generation,
                },
                port: l.port,
                backlog: l.backlog,
                accept_queue: l.accept.len(),
                syn_pending: l.syn_pending,
                congestion_control: l.cc_algorithm,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::counters::Counters;
    use sluice_wire::EthernetAddress;
    use std::net::Ipv4Addr;

    fn stack() -> Stack {
        let mut c = Config::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        );
        c.max_connections = 16;
        Stack::new(c).unwrap()
    }

    #[test]
    fn the_walk_visits_each_live_connection_once_in_slot_order() {
        let mut s = stack();
        s.add_neighbor(
            Ipv4Addr::new(10, 0, 0, 2),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
        );
        let now = crate::time::Instant::ZERO;
        let ids: Vec<ConnId> = (0..5)
            .map(|i| s.connect(now, Ipv4Addr::new(10, 0, 0, 2), 80 + i).unwrap())
            .collect();
        s.abort(ids[2]).unwrap();
        let mut seen = Vec::new();
        let mut from = 0;
        while let Some(row) = s.next_connection(from) {
            assert_eq!(row.info.state, TcpState::SynSent);
            assert_eq!(row.bytes_acked, 0);
            seen.push(row.remote.port());
            from = row.id.slot() + 1;
        }
        assert_eq!(seen.len(), s.connection_count());
        assert!(
            !seen.contains(&82),
            "the aborted connection is gone: {seen:?}"
        );
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn listeners_report_port_and_backlog() {
        let mut s = stack();
        s.listen(7, 3).unwrap();
        let l: Vec<ListenerInfo> = s.listeners().collect();
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].port, l[0].accept_queue, l[0].syn_pending), (7, 0, 0));
        assert!(l[0].backlog >= 1 && l[0].backlog <= 3);
    }

    #[test]
    fn counter_rows_name_every_field() {
        // A field added to Counters without a row would be missing from `sluice ctl`.
        let rows = Counters::default().rows();
        assert_eq!(rows.len() * 8, std::mem::size_of::<Counters>());
        let mut names: Vec<&str> = rows.iter().map(|r| r.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), rows.len());
    }

    #[test]
    fn state_names_are_rfc_9293s() {
        assert_eq!(TcpState::Established.rfc_name(), "ESTABLISHED");
        assert_eq!(TcpState::TimeWait.rfc_name(), "TIME-WAIT");
    }
}
