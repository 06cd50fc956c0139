//! Connection and listener handles as integers for C, and the tables that turn them back
//! into the core's ids. A handle carries a generation, so a closed or stale one is refused
//! (`InvalidHandle`), never misdirected to a later connection or listener.

use std::collections::HashMap;

use sluice_tcp::{ConnId, ListenerId};

use crate::error::sluice_error;

/// A connection handle: the core's slot (plus one, so 0 is never a handle) in the high 32
/// bits, the slot's generation in the low 32.
pub type sluice_conn = u64;

/// A listener handle: a per-stack listen generation (from 1) above the port's 16 bits.
pub type sluice_listener = u64;

/// The handle of a connection id.
pub(crate) fn conn_handle(id: ConnId) -> sluice_conn {
    ((u64::from(id.slot()) + 1) << 32) | u64::from(id.generation())
}

/// What the application holds for a connection: its id and the bytes it moved, for
/// `sluice_conn_get_info`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnEntry {
    /// The core's id.
    pub(crate) id: ConnId,
    /// Bytes the send buffer took.
    pub(crate) bytes_sent: u64,
    /// Bytes handed to the application by recv.
    pub(crate) bytes_received: u64,
}

/// The handles of one stack. At most one entry per connection slot and per listening port,
/// so the tables are bounded by `max_connections` and `max_listeners`.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    conns: HashMap<u32, ConnEntry>,
    listeners: HashMap<u16, (u32, ListenerId)>,
    /// The next listener's generation (never 0).
    next_listen: u32,
}

impl Handles {
    /// Records a connection the application now owns (accepted or connected).
    pub(crate) fn insert_conn(&mut self, id: ConnId) -> sluice_conn {
        // A stale entry on the same slot is replaced: its handle stays refused.
        self.conns.insert(
            id.slot(),
            ConnEntry {
                id,
                bytes_sent: 0,
                bytes_received: 0,
            },
        );
        conn_handle(id)
    }

    /// The entry a handle names, if it is live.
    pub(crate) fn conn(&mut self, h: sluice_conn) -> Result<&mut ConnEntry, sluice_error> {
        let slot = (h >> 32)
            .checked_sub(1)
            .ok_or(sluice_error::InvalidHandle)?;
        let slot = u32::try_from(slot).map_err(|_| sluice_error::InvalidHandle)?;
        self.conns
            .get_mut(&slot)
            .filter(|e| u64::from(e.id.generation()) == h & 0xffff_ffff)
            .ok_or(sluice_error::InvalidHandle)
    }

    /// Forgets a connection the application released (close, abort).
    pub(crate) fn remove_conn(&mut self, id: ConnId) {
        self.conns.remove(&id.slot());
    }

    /// Records a new listener.
    pub(crate) fn insert_listener(&mut self, id: ListenerId) -> sluice_listener {
        self.next_listen = self.next_listen.wrapping_add(1).max(1);
        self.listeners.insert(id.port(), (self.next_listen, id));
        (u64::from(self.next_listen) << 16) | u64::from(id.port())
    }

    /// The listener a handle names, if it is live.
    pub(crate) fn listener(&self, h: sluice_listener) -> Result<ListenerId, sluice_error> {
        let port = (h & 0xffff) as u16;
        self.listeners
            .get(&port)
            .filter(|(generation, _)| u64::from(*generation) == h >> 16)
            .map(|(_, id)| *id)
            .ok_or(sluice_error::InvalidHandle)
    }

    /// The handle of a listener id, if the application holds it.
    pub(crate) fn listener_handle(&self, id: ListenerId) -> Option<sluice_listener> {
        self.listeners
            .get(&id.port())
            .filter(|(_, held)| *held == id)
            .map(|(generation, _)| (u64::from(*generation) << 16) | u64::from(id.port()))
    }

    /// Forgets a listener (unlisten).
    pub(crate) fn remove_listener(&mut self, id: ListenerId) {
        self.listeners.remove(&id.port());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_tcp::{Config, Stack};
    use sluice_wire::EthernetAddress;
    use std::net::Ipv4Addr;

    fn stack() -> Stack {
        let mut c = Config::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        );
        c.max_connections = 4;
        Stack::new(c).unwrap()
    }

    #[test]
    fn a_connection_handle_is_never_zero_and_a_reused_slot_refuses_the_old_one() {
        let mut s = stack();
        let mut h = Handles::default();
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        let first = s.connect(sluice_tcp::Instant::ZERO, peer, 80).unwrap();
        let old = h.insert_conn(first);
        assert_ne!(old, 0);
        assert_eq!(h.conn(old).unwrap().id, first);
        assert_eq!(h.conn(0).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(h.conn(old ^ 1).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(h.conn(u64::MAX).err(), Some(sluice_error::InvalidHandle));
        s.close(first).unwrap();
        h.remove_conn(first);
        assert_eq!(h.conn(old).err(), Some(sluice_error::InvalidHandle));
        // The core reuses the slot with a new generation: a new handle, the old one stays
        // refused.
        let second = s.connect(sluice_tcp::Instant::ZERO, peer, 80).unwrap();
        let new = h.insert_conn(second);
        assert_eq!(second.slot(), first.slot());
        assert_ne!(new, old);
        assert_eq!(h.conn(old).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(h.conn(new).unwrap().id, second);
    }

    #[test]
    fn a_listener_handle_names_one_listen_of_its_port() {
        let mut s = stack();
        let mut h = Handles::default();
        let id = s.listen(80, 4).unwrap();
        let first = h.insert_listener(id);
        assert_eq!(h.listener(first), Ok(id));
        assert_eq!(h.listener_handle(id), Some(first));
        assert_eq!(
            h.listener(first + (1 << 16)).err(),
            Some(sluice_error::InvalidHandle)
        );
        assert_eq!(h.listener(0).err(), Some(sluice_error::InvalidHandle));
        h.remove_listener(id);
        s.unlisten(id).unwrap();
        assert_eq!(h.listener(first).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(h.listener_handle(id), None);
        let again = h.insert_listener(s.listen(80, 4).unwrap());
        assert_ne!(again, first);
        assert_eq!(h.listener(first).err(), Some(sluice_error::InvalidHandle));
        assert!(h.listener(again).is_ok());
    }
}
