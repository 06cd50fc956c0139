//! The Sluice namespace lab: where the engine meets Linux kernel TCP on a real (virtual) wire.
//!
//! [`Lab::up`] builds four network namespaces joined through one bridge (see [`netns`]):
//! the engine in `sluice-a` on veth `sl-a` (10.77.0.1, no kernel address), Linux clients in
//! `sluice-b` on bridge `br0` (10.77.0.2), a Linux kernel server in `sluice-k` on `sl-k`
//! (10.77.0.3), and a second engine's namespace `sluice-e` on `sl-e` (10.77.0.4, for
//! engine-to-engine runs). [`Lab::down`] deletes them. Both are idempotent and drive ip(8), sysctl(8)
//! and ethtool(8) as child processes; nothing here is `unsafe`. The engine side enters
//! `sluice-a` with `sluice_device::netns::enter` before opening its device.
//!
//! With [`Lab::up_switched`] the lab also gets `sluice switch`'s namespace and N Linux
//! client namespaces behind it, for incast ([`switched`]).
//!
//! With [`Lab::up_mtp`] engines A and E reach each other only through two `sluice switch`
//! processes with two parallel links between them ([`mtp`], issue 17).
//!
//! While the lab is up its bridge skips the host's netfilter hooks ([`BridgeNetfilter`]:
//! `bridge-nf-call-*tables` = 0, restored on teardown where the setting is host-wide).
//!
//! [`presets`] gives the engine its lab options (`EngineOptions::lab`) and the lab's part in
//! opening the engine's device.
//!
//! Tests hold a [`LabGuard`]: it takes the lab lock (one user at a time, across threads and
//! processes), builds the lab, and tears it down when dropped, also when the test panics.
#![forbid(unsafe_code)]

mod bridge_nf;
pub mod command;
mod error;
pub mod flood;
mod lock;
pub mod mtp;
pub mod netns;
pub mod presets;
pub mod switched;

pub use bridge_nf::{BridgeNetfilter, BRIDGE_NF_KEYS};
pub use error::LabError;
pub use lock::LabLock;
pub use mtp::{mtp_switch_args, MtpSwitch, NS_MTP_S1, NS_MTP_S2, UPLINK_IMPAIRMENTS};
pub use netns::*;
pub use switched::{
    client_iface, client_ip, client_ns, NS_SWITCH, SWITCH_UPLINK, SWITCH_UPLINK_PEER,
};

/// Fails with [`LabError::NotRoot`] unless the effective user is root.
pub fn check_root() -> Result<(), LabError> {
    let euid = nix::unistd::geteuid();
    if euid.is_root() {
        Ok(())
    } else {
        Err(LabError::NotRoot {
            euid: euid.as_raw(),
        })
    }
}

/// Why the lab cannot be used here (not root, `ip` missing), or None if it can.
pub fn unavailable_reason() -> Option<String> {
    if let Err(e) = check_root() {
        return Some(e.to_string());
    }
    if let Err(e) = command::find(command::IP) {
        return Some(e.to_string());
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Some("the kernel has no network namespaces".into());
    }
    None
}

/// Panics unless the lab can be used here (root, `ip`, network namespaces).
///
/// Root tests are `#[ignore]`d, so they run only when asked for (scripts/test.sh does, as
/// root); once asked, a test must run or fail, never pass without running.
pub fn require_lab() {
    if let Some(why) = unavailable_reason() {
        panic!(
            "this test needs root and the namespace lab: {why}; run it as root, as \
             scripts/test.sh does"
        );
    }
}

/// Panics unless every one of `programs` is installed (on $PATH or in the system
/// directories): the root tests that run python3, nginx or a C compiler fail, rather than
/// pass, without them.
pub fn require_programs(programs: &[&str]) {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| !command::is_installed(p))
        .collect();
    if !missing.is_empty() {
        panic!(
            "this test needs {} installed; install it (scripts/setup.sh does) and run the test \
             as root, as scripts/test.sh does",
            missing.join(", ")
        );
    }
}

/// Exclusive use of a built lab: locks, builds, and tears the lab down when dropped.
#[derive(Debug)]
pub struct LabGuard {
    lab: Lab,
    torn_down: bool,
    // Dropped after `Drop::drop` has torn the lab down, so the next user finds it clean.
    _lock: LabLock,
}

impl LabGuard {
    /// Takes the lab lock (waiting for other users) and builds the lab.
    pub fn up() -> Result<LabGuard, LabError> {
        LabGuard::build(Lab::up)
    }

    /// For the root tests: [`require_lab`], then [`LabGuard::up`], panicking if it fails.
    pub fn require() -> LabGuard {
        require_lab();
        LabGuard::up().expect("lab up")
    }

    /// Takes the lab lock and builds the switched lab with `clients` client namespaces
    /// ([`switched`]); the switch itself is the caller's to run.
    pub fn up_switched(clients: u8) -> Result<LabGuard, LabError> {
        LabGuard::build(|lab| lab.up_switched(clients))
    }

    /// Takes the lab lock and builds the MTP lab ([`mtp`]); the switches are the caller's
    /// to run ([`mtp_switch_args`]).
    pub fn up_mtp() -> Result<LabGuard, LabError> {
        LabGuard::build(Lab::up_mtp)
    }

    /// Takes the lock and builds with `up`, tearing down whatever it left if it fails.
    fn build(up: impl FnOnce(&Lab) -> Result<(), LabError>) -> Result<LabGuard, LabError> {
        check_root()?;
        let lock = LabLock::acquire()?;
        let lab = Lab::new();
        if let Err(e) = up(&lab) {
            let _ = lab.down();
            return Err(e);
        }
        Ok(LabGuard {
            lab,
            torn_down: false,
            _lock: lock,
        })
    }

    /// Tears the lab down while still holding the lock and checks no lab namespace is left.
    pub fn teardown(mut self) -> Result<(), LabError> {
        self.lab.down()?;
        self.torn_down = true;
        let left = self.lab.namespaces_present()?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(LabError::Command {
                command: "ip netns list".into(),
                code: Some(0),
                stderr: format!("namespaces still present after down: {left:?}"),
            })
        }
    }

    /// The lab.
    pub fn lab(&self) -> &Lab {
        &self.lab
    }
}

impl std::ops::Deref for LabGuard {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        if let Err(e) = self.lab.down() {
            eprintln!("sluice-lab: tearing the lab down failed: {e}");
        }
    }
}
