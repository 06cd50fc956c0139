//! Connection and listener handles as integers for C, and the tables that turn them back
//! into the core's ids. A handle carries a generation, so a closed or stale one is refused
//! (`InvalidHandle`), never misdirected to a later connection or listener; and its stack's
//! tag, so another stack's handle is refused too (unless the two tags collide, 1 in 255).

use std::collections::HashMap;

use sluice_tcp::{ConnId, ListenerId};

use crate::error::sluice_error;

/// A connection handle: the stack's tag (1..=255) in the top 8 bits, the core's slot in the
/// next 24 (`max_connections` is at most 2^24), the slot's generation in the low 32. Never 0.
pub type sluice_conn = u64;

/// A listener handle: the stack's tag in the top 8 bits, a per-stack listen generation
/// (from 1) in bits 16..48, the port in the low 16. Never 0.
pub type sluice_listener = u64;

/// Where the tag sits in a handle.
const TAG_SHIFT: u32 = 56;

/// A stack's tag, 1..=255, from what tells stacks apart (address, MAC, seed): a handle
/// passed to the wrong stack is refused, not taken for one of its connections.
pub(crate) fn stack_tag(ip: u32, mac: [u8; 6], seed: u64) -> u8 {
    let mut m = [0u8; 8];
    m[..6].copy_from_slice(&mac);
    // splitmix64's finalizer: every input bit moves the tag.
    let mut z = seed ^ (u64::from(ip) << 16) ^ u64::from_le_bytes(m).rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % 255) as u8 + 1
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
#[derive(Debug)]
pub(crate) struct Handles {
    /// This stack's tag, in every handle it issues.
    tag: u8,
    /// Connections by slot.
    conns: HashMap<u32, ConnEntry>,
    /// Listeners by port, with the listen generation in their handle.
    listeners: HashMap<u16, (u32, ListenerId)>,
    /// The last listener's generation (the next is one more, never 0).
    next_listen: u32,
}

impl Handles {
    /// Empty tables issuing handles with `tag` (1..=255; 0 is taken as 1).
    pub(crate) fn new(tag: u8) -> Self {
        Handles {
            tag: tag.max(1),
            conns: HashMap::new(),
            listeners: HashMap::new(),
            next_listen: 0,
        }
    }

    /// The handle of a connection id.
    pub(crate) fn conn_handle(&self, id: ConnId) -> sluice_conn {
        (u64::from(self.tag) << TAG_SHIFT)
            | (u64::from(id.slot()) << 32)
            | u64::from(id.generation())
    }

    /// The handle of a listen generation and port.
    fn listener_of(&self, generation: u32, port: u16) -> sluice_listener {
        (u64::from(self.tag) << TAG_SHIFT) | (u64::from(generation) << 16) | u64::from(port)
    }

    /// Refuses a handle without this stack's tag.
    fn ours(&self, h: u64) -> Result<(), sluice_error> {
        if h >> TAG_SHIFT == u64::from(self.tag) {
            Ok(())
        } else {
            Err(sluice_error::InvalidHandle)
        }
    }

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
        self.conn_handle(id)
    }

    /// The entry a handle names, if it is live.
    pub(crate) fn conn(&mut self, h: sluice_conn) -> Result<&mut ConnEntry, sluice_error> {
        self.ours(h)?;
        let slot = ((h >> 32) & 0x00ff_ffff) as u32;
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
        self.listener_of(self.next_listen, id.port())
    }

    /// The listener a handle names, if it is live.
    pub(crate) fn listener(&self, h: sluice_listener) -> Result<ListenerId, sluice_error> {
        self.ours(h)?;
        let port = (h & 0xffff) as u16;
        self.listeners
            .get(&port)
            .filter(|(generation, _)| u64::from(*generation) == (h >> 16) & 0xffff_ffff)
            .map(|(_, id)| *id)
            .ok_or(sluice_error::InvalidHandle)
    }

    /// The handle of a listener id, if the application holds it.
    pub(crate) fn listener_handle(&self, id: ListenerId) -> Option<sluice_listener> {
        self.listeners
            .get(&id.port())
            .filter(|(_, held)| *held == id)
            .map(|(generation, _)| self.listener_of(*generation, id.port()))
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
        let mut h = Handles::new(7);
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        let first = s.connect(sluice_tcp::Instant::ZERO, peer, 80).unwrap();
        let old = h.insert_conn(first);
        assert_eq!(old >> TAG_SHIFT, 7);
        assert_eq!(h.conn(old).unwrap().id, first);
        assert_eq!(h.conn(0).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(h.conn(old ^ 1).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(h.conn(u64::MAX).err(), Some(sluice_error::InvalidHandle));
        // The same connection under another stack's tag.
        let foreign = Handles::new(8).conn_handle(first);
        assert_eq!(h.conn(foreign).err(), Some(sluice_error::InvalidHandle));
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
    fn tags_are_never_zero_and_differ_between_neighbouring_addresses() {
        let mac = [2, 0, 0, 0, 0, 1];
        let tags: Vec<u8> = (1..=4u32)
            .map(|i| stack_tag(0x0a00_0000 + i, mac, 0))
            .collect();
        assert!(tags.iter().all(|t| *t >= 1));
        for (i, t) in tags.iter().enumerate() {
            assert!(!tags[i + 1..].contains(t), "{tags:?}");
        }
        assert_eq!(Handles::new(0).tag, 1);
    }

    #[test]
    fn a_listener_handle_names_one_listen_of_its_port() {
        let mut s = stack();
        let mut h = Handles::new(9);
        let id = s.listen(80, 4).unwrap();
        let first = h.insert_listener(id);
        assert_eq!(h.listener(first), Ok(id));
        assert_eq!(h.listener_handle(id), Some(first));
        assert_eq!(
            h.listener(first + (1 << 16)).err(),
            Some(sluice_error::InvalidHandle)
        );
        assert_eq!(h.listener(0).err(), Some(sluice_error::InvalidHandle));
        assert_eq!(
            h.listener(first ^ (3 << TAG_SHIFT)).err(),
            Some(sluice_error::InvalidHandle)
        );
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
