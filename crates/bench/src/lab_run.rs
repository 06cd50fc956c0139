//! What every lab bench (`sluice bench`, `bench apps`, `bench verbs`, `bench mtp`) does around
//! its measurements: the lab lock, the lab brought up and torn down, and progress lines.

use sluice_lab::{Lab, LabError, LabLock};

/// A progress line on stderr, `sluice <command>: <msg>`.
pub fn progress(command: &str, msg: &str) {
    eprintln!("sluice {command}: {msg}");
}

/// A failed row on stderr as it happens.
pub fn report<T>(command: &str, result: &Result<T, String>) {
    if let Err(e) = result {
        progress(command, &format!("  failed: {e}"));
    }
}

/// Runs `measure` on the standard lab: as root, holding the lab lock unless the caller
/// already does (`no_lock`), and tearing the lab down afterwards unless `keep_lab` (a failed
/// teardown is only said, so that the measurement's own result is what the caller gets).
pub fn in_lab<T, E: From<LabError>>(
    command: &str,
    no_lock: bool,
    keep_lab: bool,
    measure: impl FnOnce(&Lab) -> Result<T, E>,
) -> Result<T, E> {
    sluice_lab::check_root()?;
    let _lock = if no_lock {
        None
    } else {
        progress(command, "waiting for the lab lock");
        Some(LabLock::acquire()?)
    };
    let lab = Lab::new();
    progress(command, "bringing the lab up");
    let result = lab.up().map_err(E::from).and_then(|()| measure(&lab));
    if !keep_lab {
        progress(command, "tearing the lab down");
        if let Err(e) = lab.down() {
            eprintln!("sluice {command}: tearing the lab down failed: {e}");
        }
    }
    result
}
