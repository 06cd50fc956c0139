//! An exclusive lock on the lab, across threads and processes (flock(2) on a lock file).
//!
//! The lab is one set of fixed names, so only one test (or benchmark) may use it at a time.
//! flock locks belong to an open file description, so two threads of one test binary that
//! each take the lock exclude each other just as two processes do (cargo runs the tests of
//! one binary in parallel; nextest runs each test in its own process).

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};

use crate::error::LabError;

/// The lock file; the temporary directory is used when /run is not writable.
const LOCK_PATH: &str = "/run/sluice-lab.lock";

/// Exclusive use of the lab until dropped.
#[derive(Debug)]
pub struct LabLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl LabLock {
    /// Blocks until this process holds the lab lock exclusively.
    pub fn acquire() -> Result<LabLock, LabError> {
        let path = PathBuf::from(LOCK_PATH);
        let open = |p: &PathBuf| {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(p)
        };
        let (path, file) = match open(&path) {
            Ok(f) => (path, f),
            Err(_) => {
                let fallback = std::env::temp_dir().join("sluice-lab.lock");
                let f = open(&fallback).map_err(|source| LabError::Lock {
                    path: fallback.clone(),
                    source,
                })?;
                (fallback, f)
            }
        };
        let lock =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| LabError::Lock {
                path: path.clone(),
                source: std::io::Error::from(errno),
            })?;
        Ok(LabLock { _lock: lock, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn threads_of_one_process_exclude_each_other() {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
                thread::spawn(move || {
                    let _lock = LabLock::acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }
}
