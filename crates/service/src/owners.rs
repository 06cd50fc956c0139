//! Who owns what across applications: bound ports and core connections, each mapped to an
//! (application, slot) in O(1).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_shm::Reuse;
use sluice_tcp::{ConnId, ListenerId, SpliceId};

use crate::port_ranges::PortRanges;

/// An application's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Index of the application in the service.
    pub app: u32,
    /// Slot in its region.
    pub slot: u32,
}

/// Core connections to their owners, indexed by the core's slot (`ConnId::slot`).
pub(crate) struct ConnMap {
    by_slot: Vec<Option<(ConnId, Owner)>>,
}

impl ConnMap {
    /// A map for a core of up to `max_connections` slots; rows are added as slots are used.
    pub fn new(max_connections: usize) -> ConnMap {
        ConnMap {
            by_slot: Vec::with_capacity(max_connections),
        }
    }

    /// Records `id` as owned by `owner`.
    pub fn insert(&mut self, id: ConnId, owner: Owner) {
        let i = id.slot() as usize;
        if i >= self.by_slot.len() {
            // Grows with the core's highest slot in use, never past its table size.
            self.by_slot.resize(i + 1, None);
        }
        self.by_slot[i] = Some((id, owner));
    }

    /// The owner of `id`, if it is the connection recorded (not a stale handle).
    pub fn get(&self, id: ConnId) -> Option<Owner> {
        match self.by_slot.get(id.slot() as usize) {
            Some(Some((known, owner))) if *known == id => Some(*owner),
            _ => None,
        }
    }

    /// Forgets `id`.
    pub fn remove(&mut self, id: ConnId) {
        if let Some(entry) = self.by_slot.get_mut(id.slot() as usize) {
            if entry.is_some_and(|(known, _)| known == id) {
                *entry = None;
            }
        }
    }
}

/// One socket bound to a port.
#[derive(Clone, Copy, Debug)]
struct Member {
    owner: Owner,
    /// Its application's uid at attach.
    uid: u32,
    /// SO_REUSEADDR / SO_REUSEPORT as set before its bind.
    reuse: Reuse,
    /// Its core listener, once it listens.
    listener: Option<ListenerId>,
}

impl Member {
    /// Linux's inet_bind_conflict, from `self`'s side against `other` (stricter in one
    /// point: SO_REUSEADDR shares only within a uid too, issue 23). Both SO_REUSEPORT and
    /// one uid: no conflict; both SO_REUSEADDR, one uid and `other` not listening: none.
    fn shares_with(&self, other: &Member) -> bool {
        self.uid == other.uid
            && (self.reuse.port && other.reuse.port
                || self.reuse.addr && other.reuse.addr && other.listener.is_none())
    }
}

/// Why a port is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortRefused {
    /// Held by a socket it may not share with (EADDRINUSE).
    InUse,
    /// Reserved for another uid by the port-range map (EACCES).
    Reserved,
}

/// Local ports bound by the sockets of every application: a small group per port of the
/// sockets that share it (SO_REUSEADDR / SO_REUSEPORT within one uid), each with its
/// owner, uid and flags; EADDRINUSE across uids.
///
/// One book for every flow-group part of the service (a clone shares it): bind, listen,
/// connect and close reach it, never a packet, so a lock is held only on connection set-up
/// and tear-down.
#[derive(Clone)]
pub(crate) struct Ports(Arc<Mutex<PortBook>>);

/// The book behind [`Ports`].
struct PortBook {
    bound: HashMap<u16, Vec<Member>>,
    /// Where the next ephemeral listening port is looked for.
    cursor: u16,
    range: (u16, u16),
    /// Ports reserved for one uid.
    reserved: PortRanges,
}

impl Ports {
    /// Ports; ephemeral ones are picked from `range` (inclusive).
    pub fn new(range: (u16, u16)) -> Ports {
        Ports(Arc::new(Mutex::new(PortBook::new(range))))
    }

    /// The book, whoever last held it (a part that panicked left it consistent: every
    /// change is one map operation).
    fn book(&self) -> MutexGuard<'_, PortBook> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the ephemeral range (the core's, known once the service sees the stack).
    pub fn set_range(&mut self, range: (u16, u16)) {
        self.book().set_range(range)
    }

    /// Sets the per-uid port-range map.
    pub fn set_reserved(&mut self, reserved: PortRanges) {
        self.book().reserved = reserved;
    }

    /// See [`PortBook::bind`].
    pub fn bind(
        &mut self,
        port: u16,
        owner: Owner,
        uid: u32,
        reuse: Reuse,
    ) -> Result<(), PortRefused> {
        self.book().bind(port, owner, uid, reuse)
    }

    /// See [`PortBook::bind_ephemeral`].
    pub fn bind_ephemeral(&mut self, owner: Owner, uid: u32) -> Option<u16> {
        self.book().bind_ephemeral(owner, uid)
    }

    /// Whether a socket of application `app` that is not `mine` holds `port` (another
    /// flow-group part's slot: its Close may be on its way, on that part's queue).
    pub fn held_elsewhere(&self, port: u16, app: u32, mine: impl Fn(Owner) -> bool) -> bool {
        self.book()
            .bound
            .get(&port)
            .is_some_and(|ms| ms.iter().any(|m| m.owner.app == app && !mine(m.owner)))
    }

    /// See [`PortBook::may_listen`].
    pub fn may_listen(&self, port: u16, owner: Owner) -> Option<bool> {
        self.book().may_listen(port, owner)
    }

    /// See [`PortBook::set_listener`].
    pub fn set_listener(&mut self, port: u16, owner: Owner, listener: ListenerId) {
        self.book().set_listener(port, owner, listener)
    }

    /// See [`PortBook::release`].
    pub fn release(&mut self, port: u16, owner: Owner) {
        self.book().release(port, owner)
    }

    /// Who listens with `listener` (a port's group may have several listeners), of the
    /// owners `mine` admits (listener ids are per core: a part looks at its own).
    pub fn owner_of(&self, listener: ListenerId, mine: impl Fn(Owner) -> bool) -> Option<Owner> {
        self.book().owner_of(listener, mine)
    }

    /// Who holds `port`: its first socket.
    #[cfg(test)]
    pub fn owner(&self, port: u16) -> Option<Owner> {
        self.book().bound.get(&port)?.first().map(|m| m.owner)
    }
}

impl PortBook {
    fn new(range: (u16, u16)) -> PortBook {
        let range = (range.0.max(1), range.1.max(range.0.max(1)));
        PortBook {
            bound: HashMap::new(),
            cursor: range.0,
            range,
            reserved: PortRanges::default(),
        }
    }

    fn set_range(&mut self, range: (u16, u16)) {
        *self = PortBook {
            bound: std::mem::take(&mut self.bound),
            reserved: std::mem::take(&mut self.reserved),
            ..PortBook::new(range)
        };
    }

    /// Binds `port` (not 0) to `owner` of `uid` with `reuse`: refused if the port is
    /// reserved for another uid, or held by a socket it may not share with. Binding the
    /// same owner again is a no-op.
    pub fn bind(
        &mut self,
        port: u16,
        owner: Owner,
        uid: u32,
        reuse: Reuse,
    ) -> Result<(), PortRefused> {
        if !self.reserved.allows(uid, port) {
            return Err(PortRefused::Reserved);
        }
        let new = Member {
            owner,
            uid,
            reuse,
            listener: None,
        };
        let members = self.bound.entry(port).or_default();
        if members.iter().any(|m| m.owner == owner) {
            return Ok(());
        }
        if !members.iter().all(|m| new.shares_with(m)) {
            return Err(PortRefused::InUse);
        }
        members.push(new);
        Ok(())
    }

    /// Picks a free port in the ephemeral range that `uid` may bind and binds it to `owner`.
    pub fn bind_ephemeral(&mut self, owner: Owner, uid: u32) -> Option<u16> {
        let (lo, hi) = self.range;
        let span = (hi - lo) as u32 + 1;
        for _ in 0..span {
            let p = self.cursor;
            self.cursor = if p >= hi { lo } else { p + 1 };
            if !self.reserved.allows(uid, p) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = self.bound.entry(p) {
                e.insert(vec![Member {
                    owner,
                    uid,
                    reuse: Reuse::default(),
                    listener: None,
                }]);
                return Some(p);
            }
        }
        None
    }

    /// Whether `owner`, bound to `port`, may listen on it now (Linux rechecks at listen:
    /// a listener shares only under SO_REUSEPORT, so of SO_REUSEADDR sockets one listens);
    /// Some(reuseport) if it may, whether its listener joins the core's reuseport group.
    pub fn may_listen(&self, port: u16, owner: Owner) -> Option<bool> {
        let members = self.bound.get(&port)?;
        let me = members.iter().find(|m| m.owner == owner)?;
        let alone = members
            .iter()
            .filter(|m| m.owner != owner)
            .all(|m| me.shares_with(m));
        alone.then_some(me.reuse.port)
    }

    /// Records `owner`'s core listener on `port`.
    pub fn set_listener(&mut self, port: u16, owner: Owner, listener: ListenerId) {
        if let Some(m) = self
            .bound
            .get_mut(&port)
            .and_then(|ms| ms.iter_mut().find(|m| m.owner == owner))
        {
            m.listener = Some(listener);
        }
    }

    /// Releases `owner`'s hold on `port`; the port stays bound for the others that share it.
    pub fn release(&mut self, port: u16, owner: Owner) {
        if let Some(members) = self.bound.get_mut(&port) {
            members.retain(|m| m.owner != owner);
            if members.is_empty() {
                self.bound.remove(&port);
            }
        }
    }

    /// Who listens with `listener` (a port's group may have several listeners).
    fn owner_of(&self, listener: ListenerId, mine: impl Fn(Owner) -> bool) -> Option<Owner> {
        self.bound
            .get(&listener.port())?
            .iter()
            .find(|m| m.listener == Some(listener) && mine(m.owner))
            .map(|m| m.owner)
    }
}

/// Where a splice's reports go.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    /// The owner's index in the application table.
    pub app: u32,
    /// The owner's attach id (an index may be reused by a later application).
    pub app_id: u32,
    /// The context that asked.
    pub context: u32,
    /// The handle the application was given.
    pub handle: u32,
}

/// The service's splices: core splice id to its owner. Bounded by the core's `splice_max`
/// (an entry leaves with its splice's final event).
#[derive(Default)]
pub(crate) struct Splices {
    routes: HashMap<SpliceId, Route>,
    next_handle: u32,
}

impl Splices {
    /// A fresh handle (never 0).
    pub fn next_handle(&mut self) -> u32 {
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        self.next_handle
    }

    /// Routes splice `id` to its owner.
    pub fn insert(&mut self, id: SpliceId, route: Route) {
        self.routes.insert(id, route);
    }

    /// Where splice `id`'s reports go.
    pub fn get(&self, id: SpliceId) -> Option<Route> {
        self.routes.get(&id).copied()
    }

    /// Forgets splice `id` (its final report), returning its route.
    pub fn remove(&mut self, id: SpliceId) -> Option<Route> {
        self.routes.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_has_one_owner_and_ephemeral_ports_skip_bound_ones() {
        let a = Owner { app: 0, slot: 1 };
        let b = Owner { app: 1, slot: 1 };
        let none = Reuse::default();
        let mut ports = Ports::new((5000, 5002));
        assert_eq!(ports.bind(5000, a, 0, none), Ok(()));
        assert_eq!(ports.bind(5000, b, 0, none), Err(PortRefused::InUse));
        assert_eq!(ports.bind_ephemeral(b, 0), Some(5001));
        assert_eq!(ports.bind_ephemeral(b, 0), Some(5002));
        assert_eq!(ports.bind_ephemeral(b, 0), None);
        ports.release(5000, b);
        assert_eq!(ports.owner(5000), Some(a));
        ports.release(5000, a);
        assert_eq!(ports.bind_ephemeral(b, 0), Some(5000));
    }

    const PORT: Reuse = Reuse {
        addr: false,
        port: true,
    };
    const ADDR: Reuse = Reuse {
        addr: true,
        port: false,
    };

    #[test]
    fn reuseport_shares_a_port_within_a_uid_only_and_all_may_listen() {
        let (a, b, c) = (
            Owner { app: 0, slot: 1 },
            Owner { app: 1, slot: 1 },
            Owner { app: 2, slot: 1 },
        );
        let mut ports = Ports::new((5000, 5002));
        ports.bind(80, a, 1000, PORT).unwrap();
        assert_eq!(ports.bind(80, b, 1000, PORT), Ok(()));
        assert_eq!(ports.bind(80, c, 2000, PORT), Err(PortRefused::InUse));
        assert_eq!(ports.bind(80, c, 1000, ADDR), Err(PortRefused::InUse));
        assert_eq!(ports.may_listen(80, a), Some(true));
        ports.set_listener(80, a, listener(80, 1));
        assert_eq!(ports.may_listen(80, b), Some(true));
        ports.set_listener(80, b, listener(80, 2));
        assert_eq!(ports.owner_of(listener(80, 2), |_| true), Some(b));
        ports.release(80, a);
        assert_eq!(ports.owner_of(listener(80, 1), |_| true), None);
        assert_eq!(
            ports.owner_of(listener(80, 2), |_| true),
            Some(b),
            "b keeps the port"
        );
        assert_eq!(ports.bind(80, c, 2000, PORT), Err(PortRefused::InUse));
        ports.release(80, b);
        assert_eq!(ports.bind(80, c, 2000, PORT), Ok(()), "free once all left");
    }

    #[test]
    fn reuseaddr_shares_binding_but_one_listens() {
        let (a, b, c) = (
            Owner { app: 0, slot: 1 },
            Owner { app: 0, slot: 2 },
            Owner { app: 0, slot: 3 },
        );
        let mut ports = Ports::new((5000, 5002));
        ports.bind(8080, a, 7, ADDR).unwrap();
        assert_eq!(ports.bind(8080, b, 7, ADDR), Ok(()));
        assert_eq!(ports.bind(8080, c, 8, ADDR), Err(PortRefused::InUse));
        assert_eq!(ports.may_listen(8080, a), Some(false));
        ports.set_listener(8080, a, listener(8080, 1));
        assert_eq!(ports.may_listen(8080, b), None, "a listens: EADDRINUSE");
        assert_eq!(
            ports.bind(8080, c, 7, ADDR),
            Err(PortRefused::InUse),
            "no bind beside a listener"
        );
    }

    #[test]
    fn reserved_ports_admit_their_uid_and_root_and_ephemeral_ports_avoid_others() {
        use crate::port_ranges::PortRange;
        let a = Owner { app: 0, slot: 1 };
        let mut ports = Ports::new((5000, 5003));
        let map = PortRanges::new(&[PortRange {
            uid: 1000,
            ports: 5000..=5001,
        }])
        .unwrap();
        ports.set_reserved(map);
        let none = Reuse::default();
        assert_eq!(ports.bind(5000, a, 2000, none), Err(PortRefused::Reserved));
        assert_eq!(ports.bind(5000, a, 1000, none), Ok(()));
        assert_eq!(ports.bind(5001, a, 0, none), Ok(()));
        assert_eq!(ports.bind_ephemeral(a, 2000), Some(5002));
    }

    fn listener(port: u16, n: u16) -> ListenerId {
        let mut cfg = sluice_tcp::Config::new(
            sluice_wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            std::net::Ipv4Addr::new(10, 0, 0, 1),
        );
        cfg.max_listeners = 16;
        let mut stack = sluice_tcp::Stack::new(cfg).unwrap();
        let mut last = None;
        for _ in 0..n {
            last = Some(stack.listen_reuseport(port, 1, None).unwrap());
        }
        last.unwrap()
    }
}
