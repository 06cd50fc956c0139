//! Memory groups: the bytes buffered by the connections of each group (a tenant), counted
//! beside the global count of crate::pressure, as Linux's memory cgroups charge socket
//! memory to the cgroup (mm/memcontrol.c, mem_cgroup_charge_skmem) under the global
//! tcp_mem. A group has its own thresholds; what a group's state does to its connections
//! is in control/memory_group.rs. Group 0 is "ungrouped": counted, never limited, so
//! connections nobody grouped behave as without groups.

use crate::config::MemoryLimits;
use crate::pressure::{next_state, Crossed, MemoryState};

/// The group of connections nobody put in one: only the global thresholds apply.
pub const UNGROUPED: u16 = 0;

/// One group's count.
#[derive(Clone, Copy, Debug)]
struct Group {
    /// None: no limit of its own (the global one still applies).
    limits: Option<MemoryLimits>,
    total: u64,
    state: MemoryState,
    /// SYNs and cookie ACKs refused because this group was over its limit.
    refused: u64,
    /// Times the group rose above its high threshold.
    over_limit_entered: u64,
}

/// What one group holds now, for [`crate::Stack::memory_group`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupStats {
    /// Bytes its connections buffer (unread, out of order, unacknowledged).
    pub buffered: u64,
    /// Where that stands against its own limits (Normal when it has none).
    pub state: MemoryState,
    /// Its thresholds, if it has any.
    pub limits: Option<MemoryLimits>,
    /// SYNs (and SYN cookies' ACKs) to its listeners refused while it was over its limit.
    pub refused: u64,
    /// Times it rose above its high threshold.
    pub over_limit_entered: u64,
}

/// Every group's count, each slot's group and each listener's.
pub(crate) struct MemoryGroups {
    groups: Box<[Group]>,
    /// The group of each slot's connection; rows added as slots first join a group.
    of_slot: Vec<u16>,
    /// Per listener index: (the generation of the listener that chose, its group).
    of_listener: Box<[(u32, u16)]>,
    /// Groups in pressure or over their limit now: while none is, a slot's state is the
    /// global one without a look at its group.
    pressured: u32,
    /// Groups over their limit now.
    over_limit: u32,
}

impl MemoryGroups {
    /// `groups` groups (ids 0..groups), room reserved for `slots` slots and `listeners`.
    pub(crate) fn new(groups: usize, slots: usize, listeners: usize) -> Self {
        let empty = Group {
            limits: None,
            total: 0,
            state: MemoryState::Normal,
            refused: 0,
            over_limit_entered: 0,
        };
        MemoryGroups {
            groups: vec![empty; groups].into_boxed_slice(),
            of_slot: Vec::with_capacity(slots),
            of_listener: vec![(0, UNGROUPED); listeners].into_boxed_slice(),
            pressured: 0,
            over_limit: 0,
        }
    }

    /// Whether `group` names a group.
    pub(crate) fn exists(&self, group: u16) -> bool {
        usize::from(group) < self.groups.len()
    }

    /// How many groups there are.
    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    /// The group of `slot`'s connection.
    #[inline(always)]
    pub(crate) fn of(&self, slot: u32) -> u16 {
        self.of_slot
            .get(slot as usize)
            .copied()
            .unwrap_or(UNGROUPED)
    }

    /// The state of `slot`'s group (Normal while no group is under pressure).
    #[inline(always)]
    pub(crate) fn state_of(&self, slot: u32) -> MemoryState {
        if self.pressured == 0 {
            return MemoryState::Normal;
        }
        self.groups[usize::from(self.of(slot))].state
    }

    /// Whether `slot`'s group is over its limit.
    #[inline(always)]
    pub(crate) fn over_limit(&self, slot: u32) -> bool {
        self.over_limit != 0 && self.state_of(slot) == MemoryState::OverLimit
    }

    /// The state of `group` (Normal for an unknown one).
    pub(crate) fn state(&self, group: u16) -> MemoryState {
        self.groups
            .get(usize::from(group))
            .map_or(MemoryState::Normal, |g| g.state)
    }

    /// Moves `slot` with the `held` bytes counted for it into `group` (which exists).
    pub(crate) fn assign(&mut self, slot: u32, group: u16, held: u32) -> Crossed {
        let old = self.of(slot);
        if old == group {
            return Crossed::default();
        }
        let s = slot as usize;
        if s >= self.of_slot.len() {
            // Within the capacity reserved at construction for the table's slots.
            self.of_slot.resize(s + 1, UNGROUPED);
        }
        self.of_slot[s] = group;
        self.add(old, -i64::from(held));
        self.add(group, i64::from(held))
    }

    /// Changes `group`'s total by `delta` and moves its state.
    #[inline]
    pub(crate) fn add(&mut self, group: u16, delta: i64) -> Crossed {
        let Some(g) = self.groups.get_mut(usize::from(group)) else {
            return Crossed::default();
        };
        // Never below 0: a miscount would show in the invariant check.
        g.total = (g.total as i64 + delta).max(0) as u64;
        let Some(limits) = g.limits else {
            return Crossed::default();
        };
        let before = g.state;
        g.state = next_state(&limits, g.total, before);
        self.account(before, group)
    }

    /// Keeps the counts of pressured and over-limit groups as `group` left `before`.
    fn account(&mut self, before: MemoryState, group: u16) -> Crossed {
        let g = &mut self.groups[usize::from(group)];
        let after = g.state;
        if before == after {
            return Crossed::default();
        }
        let was = (
            before != MemoryState::Normal,
            before == MemoryState::OverLimit,
        );
        let is = (
            after != MemoryState::Normal,
            after == MemoryState::OverLimit,
        );
        self.pressured = self.pressured + u32::from(is.0) - u32::from(was.0);
        self.over_limit = self.over_limit + u32::from(is.1) - u32::from(was.1);
        let crossed = Crossed::between(before, after);
        g.over_limit_entered += u64::from(crossed.over_limit);
        crossed
    }

    /// Sets (or with None removes) `group`'s thresholds (the group exists, and is not
    /// [`UNGROUPED`]); its state follows at once.
    pub(crate) fn set_limits(&mut self, group: u16, limits: Option<MemoryLimits>) -> Crossed {
        let g = &mut self.groups[usize::from(group)];
        let before = g.state;
        g.limits = limits;
        g.state = match limits {
            // From Normal: a new limit starts its hysteresis afresh.
            Some(l) => next_state(&l, g.total, MemoryState::Normal),
            None => MemoryState::Normal,
        };
        self.account(before, group)
    }

    /// Counts a SYN refused for `group`.
    pub(crate) fn refused(&mut self, group: u16) {
        if let Some(g) = self.groups.get_mut(usize::from(group)) {
            g.refused += 1;
        }
    }

    /// The group connections from listener `index` of `generation` join.
    pub(crate) fn of_listener(&self, index: u16, generation: u32) -> u16 {
        match self.of_listener.get(usize::from(index)) {
            Some(&(g, group)) if g == generation => group,
            _ => UNGROUPED,
        }
    }

    /// Connections from listener `index` of `generation` join `group` from their SYN on.
    pub(crate) fn set_listener(&mut self, index: u16, generation: u32, group: u16) {
        if let Some(row) = self.of_listener.get_mut(usize::from(index)) {
            *row = (generation, group);
        }
    }

    /// What `group` holds (None for an unknown one).
    pub(crate) fn stats(&self, group: u16) -> Option<GroupStats> {
        self.groups.get(usize::from(group)).map(|g| GroupStats {
            buffered: g.total,
            state: g.state,
            limits: g.limits,
            refused: g.refused,
            over_limit_entered: g.over_limit_entered,
        })
    }

    /// Each group's total and state, for the invariant check.
    pub(crate) fn totals(&self) -> impl Iterator<Item = (u16, u64, MemoryState)> + '_ {
        self.groups
            .iter()
            .enumerate()
            .map(|(i, g)| (i as u16, g.total, g.state))
    }

    /// The counts of pressured and over-limit groups, for the invariant check.
    pub(crate) fn state_counts(&self) -> (u32, u32) {
        (self.pressured, self.over_limit)
    }

    /// Group `group`'s limits.
    pub(crate) fn limits(&self, group: u16) -> Option<MemoryLimits> {
        self.groups.get(usize::from(group)).and_then(|g| g.limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> MemoryLimits {
        MemoryLimits {
            low: 100,
            pressure: 200,
            high: 300,
        }
    }

    #[test]
    fn a_group_over_its_limit_marks_only_its_slots() {
        let mut g = MemoryGroups::new(3, 8, 2);
        g.set_limits(1, Some(limits()));
        g.assign(4, 1, 0);
        g.assign(5, 2, 0);
        let c = g.add(1, 301);
        assert!(c.pressure && c.over_limit);
        g.add(2, 10_000);
        assert!(g.over_limit(4));
        assert!(!g.over_limit(5), "group 2 has no limit");
        assert!(!g.over_limit(6), "ungrouped");
        assert_eq!(g.state_counts(), (1, 1));
        // Down to 150: pressure, not over; below low: normal.
        g.add(1, -151);
        assert_eq!(g.state_of(4), MemoryState::Pressure);
        g.add(1, -60);
        assert_eq!(g.state_of(4), MemoryState::Normal);
        assert_eq!(g.state_counts(), (0, 0));
        assert_eq!(g.stats(1).unwrap().over_limit_entered, 1);
    }

    #[test]
    fn moving_a_slot_moves_its_bytes_and_a_new_limit_applies_at_once() {
        let mut g = MemoryGroups::new(3, 8, 2);
        g.assign(2, 1, 0);
        g.add(1, 400);
        g.assign(2, 2, 400);
        assert_eq!(g.stats(1).unwrap().buffered, 0);
        assert_eq!(g.stats(2).unwrap().buffered, 400);
        g.set_limits(2, Some(limits()));
        assert_eq!(g.state(2), MemoryState::OverLimit);
        g.set_limits(2, None);
        assert_eq!(
            (g.state(2), g.state_counts()),
            (MemoryState::Normal, (0, 0))
        );
        assert!(g.stats(3).is_none());
    }

    #[test]
    fn a_listener_group_holds_only_for_its_generation() {
        let mut g = MemoryGroups::new(3, 8, 2);
        g.set_listener(1, 7, 2);
        assert_eq!(g.of_listener(1, 7), 2);
        assert_eq!(
            g.of_listener(1, 8),
            UNGROUPED,
            "a later listener on the index"
        );
        g.set_listener(9, 0, 2);
        assert_eq!(g.of_listener(9, 0), UNGROUPED, "no such index: ignored");
    }
}
