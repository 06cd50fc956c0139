//! Each uid's memory group in the core (sluice_tcp's memory groups, as Linux's memory
//! cgroups): every connection an application of that uid opens or accepts is charged to the
//! uid's group, whose limit on buffered bytes is `ServiceConfig::buffered_bytes_per_uid`.
//! One tenant whose connections fill their buffers then goes over its own limit, below the
//! core's global one, and only its own SYNs and buffers are refused.
//!
//! Per uid rather than per application: a uid is the tenant the quotas name, and a
//! program that restarts, forks or attaches many times stays one tenant (per application,
//! it could multiply its share by attaching again). Root is charged like any uid: the
//! limit is about memory, and a root server that never reads locks others out as well.

use std::collections::HashMap;

use sluice_tcp::{ConnId, ListenerId, MemoryLimits, Stack, UNGROUPED};

use crate::counters::Counters;

/// Uids to their groups, given out on first use.
pub(crate) struct UidGroups {
    /// The limit per uid: None for half the core's hard limit, 0 for no groups at all.
    per_uid: Option<u64>,
    by_uid: HashMap<u32, u16>,
}

impl UidGroups {
    /// Groups with `per_uid` bytes each (see [`UidGroups::per_uid`]).
    pub(crate) fn new(per_uid: Option<u64>) -> Self {
        UidGroups {
            per_uid,
            by_uid: HashMap::new(),
        }
    }

    /// The limit each uid's group gets in `stack`: the configured bytes, or half the core's
    /// hard limit, so that no single uid reaches the global one.
    pub(crate) fn per_uid(&self, stack: &Stack) -> u64 {
        self.per_uid
            .unwrap_or(stack.config().memory_limits().high as u64 / 2)
    }

    /// `uid`'s group, given a group and its limit the first time. Bounded by the core's
    /// `max_memory_groups`: once every group is taken (or with a limit of 0) a uid is
    /// ungrouped, under the global limit only.
    fn group_of(&mut self, uid: u32, stack: &mut Stack, counters: &mut Counters) -> u16 {
        if let Some(&g) = self.by_uid.get(&uid) {
            return g;
        }
        let high = self.per_uid(stack);
        let next = self.by_uid.len() + 1;
        if high == 0 || next >= stack.config().max_memory_groups {
            counters.uid_groups_full += u64::from(high != 0);
            return UNGROUPED;
        }
        let high = usize::try_from(high).unwrap_or(usize::MAX);
        // The proportions of the core's default limits (Linux's tcp_mem): pressure above
        // two thirds, until below a half.
        let limits = MemoryLimits {
            low: (high / 2).max(1),
            pressure: (high / 3 * 2).max(1),
            high,
        };
        let group = next as u16;
        if stack.set_group_limit(group, Some(limits)).is_err() {
            return UNGROUPED;
        }
        self.by_uid.insert(uid, group);
        group
    }

    /// Charges the connection `uid` opened to its group.
    pub(crate) fn connection_joins(
        &mut self,
        stack: &mut Stack,
        id: ConnId,
        uid: u32,
        counters: &mut Counters,
    ) {
        let group = self.group_of(uid, stack, counters);
        // The handle was just returned by connect and the group exists.
        let _ = stack.set_memory_group(id, group);
    }

    /// Charges the connections from `uid`'s listener to its group from their SYN on.
    pub(crate) fn listener_joins(
        &mut self,
        stack: &mut Stack,
        id: ListenerId,
        uid: u32,
        counters: &mut Counters,
    ) {
        let group = self.group_of(uid, stack, counters);
        let _ = stack.set_listener_memory_group(id, group);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use sluice_tcp::Config;

    use super::*;

    fn stack(groups: usize) -> Stack {
        let mut c = Config::new(Default::default(), Ipv4Addr::new(10, 0, 0, 1));
        c.max_memory_groups = groups;
        Stack::new(c).expect("config")
    }

    #[test]
    fn each_uid_gets_a_group_of_its_own_until_they_run_out() {
        let mut s = stack(3);
        let mut counters = Counters::default();
        let mut g = UidGroups::new(Some(30_000));
        assert_eq!(g.group_of(1000, &mut s, &mut counters), 1);
        assert_eq!(
            g.group_of(0, &mut s, &mut counters),
            2,
            "root is charged too"
        );
        assert_eq!(g.group_of(1000, &mut s, &mut counters), 1, "the same uid");
        let limits = s.memory_group(1).unwrap().limits.expect("limited");
        assert_eq!(
            (limits.low, limits.pressure, limits.high),
            (15_000, 20_000, 30_000)
        );
        assert_eq!(counters.uid_groups_full, 0);
        assert_eq!(g.group_of(1001, &mut s, &mut counters), UNGROUPED);
        assert_eq!(counters.uid_groups_full, 1);
    }

    #[test]
    fn the_default_is_half_the_global_hard_limit_and_zero_turns_groups_off() {
        let mut s = stack(8);
        let mut counters = Counters::default();
        let high = s.config().memory_limits().high as u64;
        assert_eq!(UidGroups::new(None).per_uid(&s), high / 2);
        let mut off = UidGroups::new(Some(0));
        assert_eq!(off.group_of(1000, &mut s, &mut counters), UNGROUPED);
        assert_eq!(counters.uid_groups_full, 0, "off, not full");
    }
}
