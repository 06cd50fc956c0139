//! Poll, then sleep (Laminar 5; docs/service.md "Sleeping and waking"): the engine wakes the
//! contexts that sleep when something changed for their application, and announces its own
//! sleep so applications ring its doorbell.

use std::sync::atomic::{fence, Ordering};

use crate::app::AttachedApp;
use crate::counters::Counters;

/// Signals the sleeping contexts of every application something changed for this iteration.
pub(crate) fn wake_dirty(apps: &mut [Option<AttachedApp>], counters: &mut Counters) {
    if !apps.iter().flatten().any(|a| a.dirty) {
        return;
    }
    // Pairs with the application's fence between setting `sleeping` and re-checking: either
    // it sees this iteration's changes, or the engine sees its flag.
    fence(Ordering::SeqCst);
    for app in apps.iter_mut().flatten().filter(|a| a.dirty) {
        app.dirty = false;
        counters.wakeups += app.wake_sleepers();
    }
}

/// Announces the engine's sleep in every region, then re-checks every command queue and
/// (`pipes_pending`) every notification pipe; false (stay awake) if a command or a work
/// request arrived meanwhile.
pub(crate) fn announce_sleep(
    apps: &[Option<AttachedApp>],
    counters: &mut Counters,
    pipes_pending: impl Fn() -> bool,
) -> bool {
    for app in apps.iter().flatten() {
        app.set_engine_sleeping(true);
    }
    // Pairs with the application's fence between posting a command and reading
    // `engine_sleeping`: either it rings the doorbell, or the engine sees the command here.
    fence(Ordering::SeqCst);
    if apps.iter().flatten().any(AttachedApp::has_commands) || pipes_pending() {
        counters.sleeps_cancelled += 1;
        announce_awake(apps);
        return false;
    }
    counters.sleeps += 1;
    true
}

/// Withdraws the sleep announcement: applications stop ringing the doorbell.
pub(crate) fn announce_awake(apps: &[Option<AttachedApp>]) {
    for app in apps.iter().flatten() {
        app.set_engine_sleeping(false);
    }
}
