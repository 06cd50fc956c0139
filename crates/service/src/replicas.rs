//! Listener replicas: a listening slot is one part's, but a SYN reaches the part its tuple
//! hashes to, so every other part listens on the same port in its own core for it (a
//! replica) and hands the connections it accepts over to the listener's part
//! (src/handover.rs). This is the book of one part's replicas.

use std::collections::HashMap;

use sluice_tcp::ListenerId;

use crate::links::ListenOptions;
use crate::owners::Owner;

/// One replica in this part's core.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replica {
    /// The listening slot it accepts for.
    pub owner: Owner,
    /// Its application's attach id.
    pub app_id: u32,
    /// The part that owns the listening slot.
    pub part: u32,
    /// The listener's options, inherited by the connections accepted.
    pub options: ListenOptions,
    /// The core has connections waiting to be accepted.
    pub ready: bool,
    /// On the retry list.
    pub listed: bool,
}

/// This part's replicas, by its core's listener (bounded by the core's listeners).
#[derive(Default)]
pub(crate) struct Replicas {
    by_listener: HashMap<ListenerId, Replica>,
    /// Replicas with connections waiting that could not be handed over yet (the link was
    /// full, or the application had no free slot of this part).
    pub pending: Vec<ListenerId>,
}

impl Replicas {
    /// Records a replica.
    pub fn insert(&mut self, listener: ListenerId, r: Replica) {
        self.by_listener.insert(listener, r);
    }

    /// The replica `listener` is, if it is one.
    pub fn get_mut(&mut self, listener: ListenerId) -> Option<&mut Replica> {
        self.by_listener.get_mut(&listener)
    }

    /// The replica for `owner`'s listener (with its application's id), removed.
    pub fn remove_for(&mut self, owner: Owner, app_id: u32) -> Option<ListenerId> {
        let l = self
            .by_listener
            .iter()
            .find(|(_, r)| r.owner == owner && r.app_id == app_id)
            .map(|(l, _)| *l)?;
        self.by_listener.remove(&l);
        Some(l)
    }

    /// Whether a replica listens on `port` (its Unlisten may be on its way).
    pub fn on_port(&self, port: u16) -> bool {
        self.by_listener.values().any(|r| r.options.port == port)
    }

    /// Every replica for application index `app`, removed.
    pub fn remove_app(&mut self, app: u32) -> Vec<ListenerId> {
        let gone: Vec<ListenerId> = self
            .by_listener
            .iter()
            .filter(|(_, r)| r.owner.app == app)
            .map(|(l, _)| *l)
            .collect();
        for l in &gone {
            self.by_listener.remove(l);
        }
        gone
    }
}
