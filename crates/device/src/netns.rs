//! Moving the calling thread into a named network namespace (`ip netns` style).
//!
//! setns(2) with CLONE_NEWNET changes the namespace of the calling thread only; sockets and
//! TAP devices opened afterwards belong to that namespace and stay there even if the thread
//! moves back. Needs root or CAP_SYS_ADMIN. Note that /sys still shows the namespace it was
//! mounted in, so read interface facts through ioctls or netlink, not sysfs.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use crate::error::DeviceError;

/// Where `ip netns add` bind-mounts named namespaces.
pub const NETNS_RUN_DIR: &str = "/var/run/netns";

/// What setns(2) needs.
const NEEDS_SYS_ADMIN: &str = "root or CAP_SYS_ADMIN";

/// Moves the calling thread into network namespace `name` (a file under /var/run/netns).
pub fn enter(name: &str) -> Result<(), DeviceError> {
    let target = open_named(name)?;
    set_netns(&target, name)
}

/// Moves the calling thread into `name` and returns a guard that moves it back when dropped.
pub fn enter_scoped(name: &str) -> Result<NetnsGuard, DeviceError> {
    let original = File::open("/proc/thread-self/ns/net").map_err(|e| DeviceError::Os {
        op: "open the current network namespace",
        source: e,
    })?;
    enter(name)?;
    Ok(NetnsGuard { original })
}

/// Returns the calling thread to the network namespace it was in before [`enter_scoped`].
#[derive(Debug)]
pub struct NetnsGuard {
    original: File,
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        // Going back to a namespace we were in cannot lack privilege; if it still fails the
        // thread stays where it is, which the caller sees on its next namespace-bound call.
        let _ = set_netns(&self.original, "(original)");
    }
}

/// Opens /var/run/netns/NAME, checking the name is one path component.
fn open_named(name: &str) -> Result<File, DeviceError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(DeviceError::NoSuchNamespace {
            name: name.to_owned(),
        });
    }
    let path: PathBuf = [NETNS_RUN_DIR, name].iter().collect();
    File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => DeviceError::NoSuchNamespace {
            name: name.to_owned(),
        },
        io::ErrorKind::PermissionDenied => DeviceError::PermissionDenied {
            op: "open the network namespace",
            needs: NEEDS_SYS_ADMIN,
        },
        _ => DeviceError::Os {
            op: "open the network namespace",
            source: e,
        },
    })
}

/// setns(2) into the network namespace behind `file`.
fn set_netns(file: &File, name: &str) -> Result<(), DeviceError> {
    // SAFETY: setns takes a descriptor and a flag; `file` keeps the descriptor open for the
    // duration of the call.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) => DeviceError::PermissionDenied {
                op: "enter the network namespace",
                needs: NEEDS_SYS_ADMIN,
            },
            // EINVAL: the file is not a network namespace (e.g. a stale name).
            Some(libc::EINVAL) => DeviceError::NoSuchNamespace {
                name: name.to_owned(),
            },
            _ => DeviceError::Os {
                op: "enter the network namespace",
                source: e,
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_bad_names_are_typed_errors() {
        for name in ["", ".", "..", "a/b", "sluice-no-such-namespace"] {
            assert!(
                matches!(enter(name), Err(DeviceError::NoSuchNamespace { .. })),
                "{name:?}"
            );
        }
    }
}
