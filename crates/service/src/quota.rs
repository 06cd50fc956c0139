//! Quotas per application and per uid (issue 23 item 3): no application, and no uid, can
//! lock the others out of the engine by exhausting a shared resource. The books count what
//! each application and each uid holds; every slot remembers what it is counted as
//! ([`Charge`]), so a change of state moves the books by the difference and a slot is
//! released exactly once, whatever path frees it.
//!
//! Per-uid quotas do not apply to uid 0 (as Linux exempts root from RLIMIT_NPROC: root can
//! stop the engine anyway); per-application quotas apply to everyone.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// Per-uid quotas are not applied to this uid.
const ROOT: u32 = 0;

/// The configured quotas (`sluice engine --apps-per-uid ...`; 0 is refused by
/// [`crate::ServiceConfig::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// Applications of one uid attached at once.
    pub apps_per_uid: u32,
    /// Open sockets (slots) of all applications of one uid.
    pub sockets_per_uid: u32,
    /// Listeners of one application.
    pub listeners_per_app: u32,
    /// Listeners of all applications of one uid.
    pub listeners_per_uid: u32,
    /// Connections one application owns (connecting, connected, closing, accepted).
    pub connections_per_app: u32,
    /// Connections all applications of one uid own, closed ones still draining included.
    pub connections_per_uid: u32,
    /// Commands taken from one application per loop iteration, over all its contexts.
    pub commands_per_app: u32,
}

impl Default for Quotas {
    fn default() -> Quotas {
        Quotas {
            apps_per_uid: 64,
            sockets_per_uid: 16_384,
            listeners_per_app: 256,
            listeners_per_uid: 1024,
            connections_per_app: 16_384,
            connections_per_uid: 32_768,
            commands_per_app: 256,
        }
    }
}

impl Quotas {
    /// Every quota with its name, for validation and messages.
    pub fn named(&self) -> [(&'static str, u32); 7] {
        [
            ("apps_per_uid", self.apps_per_uid),
            ("sockets_per_uid", self.sockets_per_uid),
            ("listeners_per_app", self.listeners_per_app),
            ("listeners_per_uid", self.listeners_per_uid),
            ("connections_per_app", self.connections_per_app),
            ("connections_per_uid", self.connections_per_uid),
            ("commands_per_app", self.commands_per_app),
        ]
    }
}

/// What one application or one uid holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Applications attached (uid books only).
    pub apps: u32,
    /// Allocated slots.
    pub sockets: u32,
    /// Listening slots.
    pub listeners: u32,
    /// Connections owned (connecting, connected, closing, accepted).
    pub connections: u32,
}

impl Usage {
    fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// What an application holds, counted in one place for every flow-group part that serves
/// it (a clone shares the count): the parts' slots are counted against one quota.
#[derive(Clone, Debug, Default)]
pub(crate) struct AppUsage(Arc<Mutex<Usage>>);

/// Something an application's holdings are counted in: a plain [`Usage`] or the shared
/// [`AppUsage`].
pub(crate) trait Tally {
    /// What it holds now.
    fn held(&self) -> Usage;
    /// Changes it.
    fn change(&mut self, f: &dyn Fn(&mut Usage));
}

impl Tally for Usage {
    fn held(&self) -> Usage {
        *self
    }
    fn change(&mut self, f: &dyn Fn(&mut Usage)) {
        f(self)
    }
}

impl Tally for AppUsage {
    fn held(&self) -> Usage {
        *lock(&self.0)
    }
    fn change(&mut self, f: &dyn Fn(&mut Usage)) {
        f(&mut lock(&self.0))
    }
}

/// A book's lock, whoever held it last (every change leaves it consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one slot is counted as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Charge {
    /// An open socket.
    pub socket: bool,
    /// A listener.
    pub listener: bool,
    /// A connection.
    pub connection: bool,
}

impl Charge {
    /// Counted as nothing (a free slot).
    pub const NONE: Charge = Charge {
        socket: false,
        listener: false,
        connection: false,
    };
}

/// A resource an application asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resource {
    /// An attach.
    App,
    /// A socket (Open).
    Socket,
    /// A listener (Listen).
    Listener,
    /// A connection (Connect, accept).
    Connection,
}

/// Which quota refused, and at what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exceeded {
    /// The quota's name (as `sluice engine`'s flag without the dashes).
    pub quota: &'static str,
    /// The uid whose application asked.
    pub uid: u32,
    /// The quota's value.
    pub limit: u32,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: uid {} is at its {} of {} (sluice engine --{})",
            sluice_shm::control::QUOTA_EXCEEDED,
            self.uid,
            self.quota.replace('_', " "),
            self.limit,
            self.quota.replace('_', "-")
        )
    }
}

/// The usage books of every uid that holds anything (an entry goes when it holds nothing,
/// so there are never more than the applications attached and draining). One book for
/// every flow-group part (a clone shares it): reached on Open, Listen, Connect, accept and
/// close, never per packet, so a lock is taken only on connection set-up and tear-down.
#[derive(Clone, Debug, Default)]
pub(crate) struct Books {
    uids: Arc<Mutex<HashMap<u32, Usage>>>,
}

impl Books {
    /// What `uid` holds now.
    pub fn of(&self, uid: u32) -> Usage {
        lock(&self.uids).get(&uid).copied().unwrap_or_default()
    }

    /// Whether an application of `uid` holding `app` may take one more `what`.
    pub fn admits(
        &self,
        q: &Quotas,
        uid: u32,
        app: &impl Tally,
        what: Resource,
    ) -> Result<(), Exceeded> {
        let app = app.held();
        let exceeded = |quota, limit| Err(Exceeded { quota, uid, limit });
        match what {
            Resource::Listener if app.listeners >= q.listeners_per_app => {
                return exceeded("listeners_per_app", q.listeners_per_app)
            }
            Resource::Connection if app.connections >= q.connections_per_app => {
                return exceeded("connections_per_app", q.connections_per_app)
            }
            _ => {}
        }
        if uid == ROOT {
            return Ok(());
        }
        let held = self.of(uid);
        match what {
            Resource::App if held.apps >= q.apps_per_uid => {
                exceeded("apps_per_uid", q.apps_per_uid)
            }
            Resource::Socket if held.sockets >= q.sockets_per_uid => {
                exceeded("sockets_per_uid", q.sockets_per_uid)
            }
            Resource::Listener if held.listeners >= q.listeners_per_uid => {
                exceeded("listeners_per_uid", q.listeners_per_uid)
            }
            Resource::Connection if held.connections >= q.connections_per_uid => {
                exceeded("connections_per_uid", q.connections_per_uid)
            }
            _ => Ok(()),
        }
    }

    /// An application of `uid` attached.
    pub fn attach(&mut self, uid: u32) {
        lock(&self.uids).entry(uid).or_default().apps += 1;
    }

    /// An application of `uid` departed (what it still drains stays counted).
    pub fn detach(&mut self, uid: u32) {
        self.update(uid, |u| u.apps = u.apps.saturating_sub(1));
    }

    /// Moves the books of an application (`app`) of `uid` by the difference between what
    /// a slot was counted as (`charged`, updated) and what it is `now` (a slot settled
    /// twice in one state, or released twice, moves nothing).
    pub fn recharge(&mut self, uid: u32, app: &mut impl Tally, charged: &mut Charge, now: Charge) {
        if *charged == now {
            return;
        }
        let was = std::mem::replace(charged, now);
        let step = |n: &mut u32, was: bool, now: bool| match (was, now) {
            (false, true) => *n += 1,
            (true, false) => *n = n.saturating_sub(1),
            _ => {}
        };
        let apply = |u: &mut Usage| {
            step(&mut u.sockets, was.socket, now.socket);
            step(&mut u.listeners, was.listener, now.listener);
            step(&mut u.connections, was.connection, now.connection);
        };
        app.change(&apply);
        self.update(uid, apply);
    }

    /// Changes `uid`'s entry; an entry left holding nothing goes.
    fn update(&mut self, uid: u32, f: impl FnOnce(&mut Usage)) {
        let mut uids = lock(&self.uids);
        let u = uids.entry(uid).or_default();
        f(u);
        if u.is_empty() {
            uids.remove(&uid);
        }
    }

    /// Uids holding anything (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.uids).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas() -> Quotas {
        Quotas {
            apps_per_uid: 2,
            sockets_per_uid: 3,
            listeners_per_app: 1,
            listeners_per_uid: 2,
            connections_per_app: 2,
            connections_per_uid: 3,
            commands_per_app: 4,
        }
    }

    const SOCKET: Charge = Charge {
        socket: true,
        listener: false,
        connection: false,
    };
    const LISTENER: Charge = Charge {
        socket: true,
        listener: true,
        connection: false,
    };
    const CONNECTION: Charge = Charge {
        socket: true,
        listener: false,
        connection: true,
    };

    #[test]
    fn a_slot_moves_the_books_by_differences_and_is_released_once() {
        let mut books = Books::default();
        let mut app = Usage::default();
        let mut charged = Charge::NONE;
        books.recharge(1000, &mut app, &mut charged, SOCKET);
        assert_eq!(app.sockets, 1);
        assert_eq!(books.of(1000).sockets, 1);
        // Settling again in the same state changes nothing.
        books.recharge(1000, &mut app, &mut charged, SOCKET);
        assert_eq!(books.of(1000).sockets, 1);
        books.recharge(1000, &mut app, &mut charged, LISTENER);
        assert_eq!((app.sockets, app.listeners), (1, 1));
        assert_eq!(books.of(1000).listeners, 1);
        books.recharge(1000, &mut app, &mut charged, CONNECTION);
        assert_eq!((app.sockets, app.listeners, app.connections), (1, 0, 1));
        books.recharge(1000, &mut app, &mut charged, Charge::NONE);
        books.recharge(1000, &mut app, &mut charged, Charge::NONE);
        assert_eq!(app, Usage::default(), "released once, never below zero");
        assert_eq!(books.len(), 0, "an empty entry goes");
    }

    #[test]
    fn a_uids_entry_stays_while_a_departed_apps_connections_drain() {
        let mut books = Books::default();
        let mut app = Usage::default();
        let mut charged = Charge::NONE;
        books.attach(7);
        books.recharge(7, &mut app, &mut charged, CONNECTION);
        books.detach(7);
        assert_eq!(books.of(7).apps, 0);
        assert_eq!(books.of(7).connections, 1, "draining still counts");
        books.recharge(7, &mut app, &mut charged, Charge::NONE);
        assert_eq!(books.len(), 0);
    }

    #[test]
    fn per_app_quotas_apply_to_everyone_per_uid_quotas_not_to_root() {
        let q = quotas();
        let mut books = Books::default();
        let full = Usage {
            apps: 0,
            sockets: 0,
            listeners: 1,
            connections: 2,
        };
        for uid in [0, 1000] {
            let e = books
                .admits(&q, uid, &full, Resource::Listener)
                .unwrap_err();
            assert_eq!(e.quota, "listeners_per_app");
            let e = books
                .admits(&q, uid, &full, Resource::Connection)
                .unwrap_err();
            assert_eq!(e.quota, "connections_per_app");
        }
        for _ in 0..2 {
            books.attach(0);
            books.attach(1000);
        }
        let none = Usage::default();
        let e = books.admits(&q, 1000, &none, Resource::App).unwrap_err();
        assert_eq!(e.quota, "apps_per_uid");
        assert!(e.to_string().starts_with("quota exceeded: uid 1000"), "{e}");
        assert!(e.to_string().contains("--apps-per-uid"), "{e}");
        assert_eq!(books.admits(&q, 0, &none, Resource::App), Ok(()));
        assert_eq!(books.admits(&q, 1001, &none, Resource::App), Ok(()));
        books.detach(1000);
        assert_eq!(books.admits(&q, 1000, &none, Resource::App), Ok(()));
    }

    #[test]
    fn per_uid_quotas_sum_every_application_of_the_uid() {
        let q = quotas();
        let mut books = Books::default();
        let (mut a, mut b) = (Usage::default(), Usage::default());
        let mut charges = [Charge::NONE; 3];
        for (i, charge) in charges.iter_mut().enumerate() {
            let app = if i == 1 { &mut b } else { &mut a };
            assert_eq!(books.admits(&q, 1000, app, Resource::Socket), Ok(()));
            books.recharge(1000, app, charge, SOCKET);
        }
        let e = books.admits(&q, 1000, &b, Resource::Socket).unwrap_err();
        assert_eq!((e.quota, e.limit), ("sockets_per_uid", 3));
        assert_eq!(books.admits(&q, 1001, &b, Resource::Socket), Ok(()));
        assert_eq!(books.admits(&q, 0, &b, Resource::Socket), Ok(()));
        books.recharge(1000, &mut b, &mut charges[1], Charge::NONE);
        assert_eq!(books.admits(&q, 1000, &b, Resource::Socket), Ok(()));
        assert_eq!((a.sockets, b.sockets), (2, 0));
        // Listeners and connections per uid, across two applications.
        let (mut la, mut lb) = (Charge::NONE, Charge::NONE);
        books.recharge(1000, &mut a, &mut la, LISTENER);
        books.recharge(1000, &mut b, &mut lb, LISTENER);
        let e = books.admits(&q, 1000, &Usage::default(), Resource::Listener);
        assert_eq!(e.unwrap_err().quota, "listeners_per_uid");
        let mut cs = [Charge::NONE; 3];
        for (i, charge) in cs.iter_mut().enumerate() {
            let app = if i == 0 { &mut a } else { &mut b };
            books.recharge(1000, app, charge, CONNECTION);
        }
        let e = books.admits(&q, 1000, &Usage::default(), Resource::Connection);
        assert_eq!(e.unwrap_err().quota, "connections_per_uid");
    }
}
