//! The process's budget of memory mappings against the kernel's per-process limit
//! (`vm.max_map_count`): the engine refuses one attach cleanly before a mapping fails for
//! every application (issue 23, failure 1).

use std::fmt;

/// The kernel's default `vm.max_map_count`, used when the sysctl cannot be read.
pub const DEFAULT_MAX_MAP_COUNT: usize = 65_530;
/// Mappings kept free for the process's own needs (allocator arenas, thread stacks,
/// libraries loaded late), so that the budget refuses before the kernel does.
pub const HEADROOM: usize = 1024;
/// Mappings an attach must find free: its region's control area and reservation, and
/// room for the rings of its first sockets (a few mappings each).
pub const ATTACH_MAPPINGS: usize = 64;

/// Why an attach does not fit the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget {
    /// Mappings the process has now.
    pub in_use: usize,
    /// Mappings the attach needs free.
    pub need: usize,
    /// The budget (the limit less the headroom).
    pub budget: usize,
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the engine has {} memory mappings and an attach needs {} more, over its budget \
             of {} (vm.max_map_count less headroom)",
            self.in_use, self.need, self.budget
        )
    }
}

impl std::error::Error for OverBudget {}

/// The number of mappings this process may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapBudget {
    /// Mappings the process may hold before attaches are refused.
    pub budget: usize,
}

impl MapBudget {
    /// The budget from `/proc/sys/vm/max_map_count` (its default if unreadable), less
    /// [`HEADROOM`].
    pub fn from_system() -> MapBudget {
        MapBudget::from_limit(system_max_map_count())
    }

    /// The budget for a kernel limit of `limit` mappings.
    pub fn from_limit(limit: usize) -> MapBudget {
        MapBudget {
            budget: limit.saturating_sub(HEADROOM.min(limit / 2)),
        }
    }

    /// Whether `need` more mappings fit beside the process's present ones.
    pub fn admits(&self, need: usize) -> Result<(), OverBudget> {
        let in_use = mappings_in_use();
        if in_use.saturating_add(need) > self.budget {
            return Err(OverBudget {
                in_use,
                need,
                budget: self.budget,
            });
        }
        Ok(())
    }
}

/// `vm.max_map_count`, or its default when it cannot be read.
pub fn system_max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_MAP_COUNT)
}

/// The process's mappings now: the lines of `/proc/self/maps` (0 if it cannot be read).
pub fn mappings_in_use() -> usize {
    std::fs::read("/proc/self/maps")
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn a_budget_below_the_mappings_in_use_refuses_and_a_large_one_admits() {
        let in_use = mappings_in_use();
        assert!(in_use > 0, "a process has mappings");
        // Half of what is in use: other tests' threads map and unmap their stacks
        // meanwhile (one below the count raced with a thread exiting and was admitted).
        let small = MapBudget { budget: in_use / 2 };
        let e = small.admits(1).unwrap_err();
        assert_eq!(e.need, 1);
        assert!(e.to_string().contains("budget"), "{e}");
        assert!(MapBudget { budget: usize::MAX }.admits(10).is_ok());
    }

    #[test]
    fn the_headroom_is_kept_and_never_takes_more_than_half() {
        assert_eq!(MapBudget::from_limit(65_530).budget, 65_530 - HEADROOM);
        assert_eq!(MapBudget::from_limit(100).budget, 50);
        assert!(system_max_map_count() > 0);
    }
}
