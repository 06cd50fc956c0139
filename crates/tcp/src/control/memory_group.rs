//! Memory groups at the API and at admission (counted in crate::memory_group): a
//! connection is charged to its group from its SYN on (a listener's group) or from when the
//! application names one, and lives under the stricter of its group's state and the global
//! one (control/memory.rs says what each state does). So a tenant whose connections fill
//! their buffers goes over its own limit first: its rings stop growing, its connections
//! keep only an initial ring unacknowledged, its new out-of-order data is dropped and its
//! listeners' SYNs go unanswered, while other groups' connections are untouched and the
//! global thresholds stay the last line (as Linux's memory cgroups under tcp_mem).

use crate::config::MemoryLimits;
use crate::error::MemoryGroupError;
use crate::handle::{ConnId, ListenerId};
use crate::host::Stack;
use crate::invariant::InvariantViolation;
use crate::memory_group::{GroupStats, UNGROUPED};
use crate::pressure::{send_limit, Crossed, MemoryState};

impl Stack {
    /// Charges the connection's buffered bytes to `group` from now on (what it holds moves
    /// with it). Group 0 is ungrouped: only the global limits apply.
    pub fn set_memory_group(&mut self, id: ConnId, group: u16) -> Result<(), MemoryGroupError> {
        self.check_group(group)?;
        let slot = self
            .slot_of(id)
            .map_err(|_| MemoryGroupError::InvalidHandle)?;
        let held = self.memory.charged(slot);
        let crossed = self.groups.assign(slot, group, held);
        self.count_group_crossing(crossed);
        Ok(())
    }

    /// The group the connection is charged to.
    pub fn connection_memory_group(&self, id: ConnId) -> Result<u16, MemoryGroupError> {
        let slot = self
            .slot_of(id)
            .map_err(|_| MemoryGroupError::InvalidHandle)?;
        Ok(self.groups.of(slot))
    }

    /// Charges connections opened from the listener's SYNs to `group` from their SYN on, and
    /// refuses its SYNs while that group is over its limit (those already past their SYN
    /// keep their group).
    pub fn set_listener_memory_group(
        &mut self,
        id: ListenerId,
        group: u16,
    ) -> Result<(), MemoryGroupError> {
        self.check_group(group)?;
        match self.listeners.get(usize::from(id.index)) {
            Some(Some(l)) if l.port == id.port && l.generation == id.generation => {}
            _ => return Err(MemoryGroupError::InvalidHandle),
        }
        self.groups.set_listener(id.index, id.generation, group);
        Ok(())
    }

    /// Sets `group`'s thresholds on the bytes its connections buffer (as `Config::tcp_mem`
    /// for all), or with None removes them. Group 0 takes none: it is the ungrouped.
    pub fn set_group_limit(
        &mut self,
        group: u16,
        limits: Option<MemoryLimits>,
    ) -> Result<(), MemoryGroupError> {
        self.check_group(group)?;
        if group == UNGROUPED {
            return Err(MemoryGroupError::Ungrouped);
        }
        if let Some(m) = limits {
            if m.low == 0 || m.low > m.pressure || m.pressure > m.high {
                return Err(MemoryGroupError::BadLimits);
            }
        }
        let crossed = self.groups.set_limits(group, limits);
        self.count_group_crossing(crossed);
        Ok(())
    }

    /// Bytes the connections of `group` buffer now (unread, out of order, unacknowledged).
    pub fn group_buffered_bytes(&self, group: u16) -> Result<u64, MemoryGroupError> {
        Ok(self.memory_group(group)?.buffered)
    }

    /// What `group` holds, its state, limits and refusals.
    pub fn memory_group(&self, group: u16) -> Result<GroupStats, MemoryGroupError> {
        self.groups
            .stats(group)
            .ok_or(MemoryGroupError::NoSuchGroup {
                group,
                groups: self.groups.len(),
            })
    }

    fn check_group(&self, group: u16) -> Result<(), MemoryGroupError> {
        if self.groups.exists(group) {
            Ok(())
        } else {
            Err(MemoryGroupError::NoSuchGroup {
                group,
                groups: self.groups.len(),
            })
        }
    }

    fn count_group_crossing(&mut self, crossed: Crossed) {
        self.counters.memory_group_over_limit_entered += u64::from(crossed.over_limit);
    }

    /// The state `slot`'s connection lives under: the stricter of the global one and its
    /// group's.
    #[inline]
    pub(crate) fn slot_memory_state(&self, slot: u32) -> MemoryState {
        self.memory.state().worse(self.groups.state_of(slot))
    }

    /// The most `slot`'s send ring may hold now (`Stack::tx_limit`, under its group's state
    /// too).
    pub(crate) fn tx_limit_of(&self, slot: u32) -> usize {
        send_limit(&self.cfg, self.table.len(), self.slot_memory_state(slot))
    }

    /// Whether pressure is on for `slot`'s connection (globally or in its group).
    #[inline]
    pub(crate) fn slot_pressured(&self, slot: u32) -> bool {
        self.slot_memory_state(slot) != MemoryState::Normal
    }

    /// The slot changed what it holds from `before` (already in the global count): its
    /// group's total follows.
    #[inline]
    pub(crate) fn charge_group(&mut self, slot: u32, before: u32) {
        let after = self.memory.charged(slot);
        if after != before {
            let group = self.groups.of(slot);
            let crossed = self.groups.add(group, i64::from(after) - i64::from(before));
            self.count_group_crossing(crossed);
        }
    }

    /// A slot just emptied (charged nothing) leaves its group: the next connection in it
    /// starts ungrouped.
    pub(crate) fn leave_group(&mut self, slot: u32) {
        let held = self.memory.charged(slot);
        let crossed = self.groups.assign(slot, UNGROUPED, held);
        self.count_group_crossing(crossed);
    }

    /// A connection opened from listener `index`'s SYN joins the listener's group.
    pub(crate) fn join_listener_group(&mut self, slot: u32, index: u16) {
        let group = self.listener_group(index);
        if group != UNGROUPED {
            let held = self.memory.charged(slot);
            let crossed = self.groups.assign(slot, group, held);
            self.count_group_crossing(crossed);
        }
    }

    fn listener_group(&self, index: u16) -> u16 {
        match self.listeners.get(usize::from(index)) {
            Some(Some(l)) => self.groups.of_listener(index, l.generation),
            _ => UNGROUPED,
        }
    }

    /// Whether listener `index`'s group admits a new connection; counts a refusal (in the
    /// group and in `memory_group_syn_refused`, or `_cookie_refused` for a cookie's ACK).
    pub(crate) fn admit_to_group(&mut self, index: u16, cookie: bool) -> bool {
        let group = self.listener_group(index);
        if self.groups.state(group) != MemoryState::OverLimit {
            return true;
        }
        self.groups.refused(group);
        if cookie {
            self.counters.memory_group_cookie_refused += 1;
        } else {
            self.counters.memory_group_syn_refused += 1;
        }
        false
    }

    /// Checks that each group is counted for what its connections hold, its state agrees
    /// with its thresholds, and the counts of groups in each state are right (for
    /// `check_invariants`: walks the slots).
    pub(crate) fn check_groups(&self) -> Result<(), InvariantViolation> {
        let mut held = vec![0u64; self.groups.len()];
        for s in 0..self.conns.len() as u32 {
            let g = usize::from(self.groups.of(s));
            let Some(sum) = held.get_mut(g) else {
                return Err(InvariantViolation::MemoryGroup {
                    group: g as u16,
                    counted: 0,
                    held: 0,
                });
            };
            *sum += u64::from(self.memory.charged(s));
        }
        let (mut pressured, mut over) = (0, 0);
        for (group, counted, state) in self.groups.totals() {
            let h = held[usize::from(group)];
            let consistent = match self.groups.limits(group) {
                None => state == MemoryState::Normal,
                Some(l) => {
                    (state == MemoryState::OverLimit) == (counted > l.high as u64)
                        && (counted <= l.pressure as u64 || state != MemoryState::Normal)
                        && (counted >= l.low as u64 || state == MemoryState::Normal)
                }
            };
            if counted != h || !consistent {
                return Err(InvariantViolation::MemoryGroup {
                    group,
                    counted,
                    held: h,
                });
            }
            pressured += u32::from(state != MemoryState::Normal);
            over += u32::from(state == MemoryState::OverLimit);
        }
        if self.groups.state_counts() != (pressured, over) {
            return Err(InvariantViolation::MemoryGroup {
                group: UNGROUPED,
                counted: u64::from(self.groups.state_counts().0),
                held: u64::from(pressured),
            });
        }
        Ok(())
    }
}
