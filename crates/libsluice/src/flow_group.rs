//! Which engine core a command goes to when the engine serves sockets on several
//! data-path cores (flow groups; docs/service.md "Several data-path cores"). A leaf.
//!
//! Each context has one command/completion queue pair per core (`Layout::queue_cores` = N;
//! core 0's is the context's own, so N = 1 is the single-core contract). Core k serves the
//! socket slots with `slot % N == k` (`Layout::slot_core`), so a slot's commands go to its
//! core; `Open` goes to the core the library picks, round robin, so sockets spread over
//! the cores; the verbs and MTP doorbells go to core 0, where those transports run.

use std::sync::atomic::{AtomicU32, Ordering};

use sluice_shm::{Command, Layout};

/// The engine core that serves `cmd`: its slot's, core 0 for doorbells, the next core of
/// `next_open`'s round robin for `Open`. One core: 0 without looking further.
pub(crate) fn core_of(cmd: &Command, layout: &Layout, next_open: &AtomicU32) -> u32 {
    let cores = layout.queue_cores;
    if cores <= 1 {
        return 0;
    }
    match (cmd, cmd.slot()) {
        (Command::Open { .. }, _) => next_open.fetch_add(1, Ordering::Relaxed) % cores,
        // A Splice names slot_a: the engine refuses a splice across cores (EOPNOTSUPP).
        (_, Some(slot)) => layout.slot_core(slot),
        // Verbs and MTP doorbells: they run in flow group 0.
        (_, None) => 0,
    }
}

/// Whether the slot an `Open` posted to `core` was answered with is one of that core's.
pub(crate) fn opened_on(layout: &Layout, core: u32, slot: u32) -> bool {
    layout.slot_core(slot) == core
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use sluice_shm::{Congestion, Reuse, Shut};

    use super::*;

    fn layout(cores: u32) -> Layout {
        Layout {
            queue_cores: cores,
            ..Layout::default()
        }
    }

    /// Every command that names a slot, for `slot`.
    fn slot_commands(slot: u32) -> Vec<Command> {
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        vec![
            Command::Bind {
                req: 1,
                slot,
                ip,
                port: 80,
                reuse: Reuse::default(),
            },
            Command::Listen {
                req: 1,
                slot,
                backlog: 8,
            },
            Command::Connect {
                req: 1,
                slot,
                ip,
                port: 80,
            },
            Command::Send { slot },
            Command::Consumed { slot },
            Command::Shutdown {
                req: 1,
                slot,
                how: Shut::Write,
            },
            Command::Close { slot, abort: false },
            Command::SetNoDelay {
                req: 1,
                slot,
                nodelay: true,
            },
            Command::SetCongestion {
                req: 1,
                slot,
                algorithm: Congestion::Cubic,
            },
            Command::SetTeardownOffload {
                req: 1,
                slot,
                on: true,
            },
            Command::Splice {
                req: 1,
                slot_a: slot,
                slot_b: slot + 1,
            },
        ]
    }

    #[test]
    fn one_core_sends_everything_to_core_0_without_counting_opens() {
        let l = layout(1);
        let rr = AtomicU32::new(7);
        for slot in [0, 1, 5, 63] {
            for c in slot_commands(slot) {
                assert_eq!(core_of(&c, &l, &rr), 0, "{c:?}");
            }
        }
        assert_eq!(core_of(&Command::Open { req: 1 }, &l, &rr), 0);
        assert_eq!(
            rr.load(Ordering::Relaxed),
            7,
            "no atomic touched on one core"
        );
    }

    #[test]
    fn slot_commands_go_to_the_slot_s_core_and_doorbells_to_core_0() {
        for cores in [2, 3, 4] {
            let l = layout(cores);
            let rr = AtomicU32::new(0);
            for slot in 0..12 {
                for c in slot_commands(slot) {
                    assert_eq!(core_of(&c, &l, &rr), slot % cores, "{c:?} on {cores}");
                }
            }
            assert_eq!(core_of(&Command::QpDoorbell { qpn: 5 }, &l, &rr), 0);
            assert_eq!(core_of(&Command::MtpDoorbell { ep: 3 }, &l, &rr), 0);
            assert_eq!(
                rr.load(Ordering::Relaxed),
                0,
                "only Open turns the round robin"
            );
        }
    }

    #[test]
    fn opens_go_round_robin_and_wrap() {
        let l = layout(3);
        let rr = AtomicU32::new(u32::MAX - 1);
        let cores: Vec<u32> = (0..5)
            .map(|_| core_of(&Command::Open { req: 1 }, &l, &rr))
            .collect();
        // u32::MAX - 1 = 3 * 1431655764 + 2; then u32::MAX % 3 = 0, and the counter wraps.
        assert_eq!(cores, [2, 0, 0, 1, 2]);
        assert!(opened_on(&l, 1, 4));
        assert!(!opened_on(&l, 1, 5));
        assert!(opened_on(&layout(1), 0, 5));
    }
}
