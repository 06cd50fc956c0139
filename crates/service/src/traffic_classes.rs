//! Traffic classes into the flow scheduler's rates (issue 19 item 2): a new connection
//! (accepted, or connected by an application) is noted; in the engine's hook turn its class
//! is read from the classifier module's maps (`sluice_engine::traffic_class::lookup`); in the
//! next poll its class's rate is programmed with `Stack::set_rate`, as `sluice ctl set-rate`
//! does. The turn in between is there because the modules live in the engine's hooks and the
//! core in the poll; both lists are bounded, and an overflow is counted, not queued.

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use sluice_engine::traffic_class;
use sluice_engine::Hooks;
use sluice_tcp::{ConnId, Stack};

use crate::counters::Counters;

/// New connections waiting for their class, and classified ones waiting for their rate, each.
pub(crate) const MAX_PENDING: usize = 4096;

/// Connections on their way from the classifier to the scheduler.
pub(crate) struct TrafficClasses {
    /// Whether a classifier may be loaded: connections are noted only then. True until the
    /// first look at the hooks says otherwise (a classifier given at start is not announced).
    on: bool,
    /// New connections and their endpoints (local, remote).
    unclassified: VecDeque<(ConnId, SocketAddrV4, SocketAddrV4)>,
    /// Classified connections and their class's rate, bits per second.
    rates: Vec<(ConnId, u64)>,
}

impl Default for TrafficClasses {
    fn default() -> Self {
        TrafficClasses {
            on: true,
            unclassified: VecDeque::new(),
            rates: Vec::new(),
        }
    }
}

impl TrafficClasses {
    /// Notes a new connection of the core (in the poll).
    pub(crate) fn note(&mut self, id: ConnId, stack: &Stack, counters: &mut Counters) {
        if !self.on {
            return;
        }
        let Ok((local, remote)) = stack.endpoints(id) else {
            return;
        };
        if self.unclassified.len() >= MAX_PENDING {
            counters.classify_overflow += 1;
            return;
        }
        self.unclassified.push_back((id, local, remote));
    }

    /// Whether connections wait for the hook turn.
    pub(crate) fn waiting(&self) -> bool {
        !self.unclassified.is_empty()
    }

    /// Whether classified connections wait for their rate (the engine must not sleep).
    pub(crate) fn has_rates(&self) -> bool {
        !self.rates.is_empty()
    }

    /// Looks up the noted connections' classes (in the engine's hook turn); also refreshes
    /// whether any classifier is loaded, so that none costs nothing per connection.
    pub(crate) fn classify(&mut self, hooks: &mut Hooks, counters: &mut Counters) {
        self.on = hooks
            .modules()
            .modules()
            .iter()
            .any(traffic_class::is_classifier);
        if !self.on {
            self.unclassified.clear();
            return;
        }
        let mut chain = hooks.modules_mut();
        while let Some((id, local, remote)) = self.unclassified.pop_front() {
            let Some(c) = traffic_class::lookup(&mut chain, local, remote) else {
                continue;
            };
            if c.rate_bps == 0 {
                continue;
            }
            if self.rates.len() >= MAX_PENDING {
                counters.classify_overflow += 1;
                continue;
            }
            self.rates.push((id, c.rate_bps));
        }
    }

    /// Programs the classified connections' rates (in the poll); a connection gone since is
    /// skipped.
    pub(crate) fn apply(&mut self, stack: &mut Stack, counters: &mut Counters) {
        for (id, rate) in self.rates.drain(..) {
            if stack.set_rate(id, rate).is_ok() {
                counters.flows_classified += 1;
            }
        }
    }
}
