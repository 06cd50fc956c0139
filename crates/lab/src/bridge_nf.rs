//! The lab's bridge and the host's netfilter hooks. With br_netfilter loaded, every frame
//! br0 forwards passes through iptables, ip6tables and arptables (about a quarter of the
//! engine's kernel time in a profile, issue 18), on every side alike. The lab turns the
//! three `net.bridge.bridge-nf-call-*` sysctls off while it is up: in sluice-b where the
//! kernel keeps them per namespace (Linux 5.3 and later; deleting the namespace ends the
//! change), or host-wide on older kernels, where the values it found are saved in
//! [`SAVED`] and restored by [`Lab::down`].

use std::fmt;
use std::path::Path;

use crate::command::{self, SYSCTL};
use crate::error::LabError;
use crate::netns::{Lab, NS_CLIENT};

/// The sysctls that send bridged frames through netfilter.
pub const BRIDGE_NF_KEYS: [&str; 3] = [
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.bridge.bridge-nf-call-arptables",
];

/// Where a host-wide change keeps the values it replaced (`key=value` lines), for
/// [`Lab::down`] in whichever process tears the lab down.
pub const SAVED: &str = "/run/sluice-lab/bridge-nf.saved";

/// What br_netfilter does to the lab's bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BridgeNetfilter {
    /// br_netfilter is not loaded: bridged frames never reach netfilter.
    NotLoaded,
    /// Every call is off in sluice-b, where the kernel keeps them per namespace.
    OffInLab,
    /// Every call is off host-wide (the kernel has one setting); the lab restores it on
    /// teardown if it changed it.
    OffHostWide,
    /// Some calls are on: `key=value` of each.
    On(Vec<String>),
}

impl fmt::Display for BridgeNetfilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BridgeNetfilter::NotLoaded => {
                f.write_str("br_netfilter not loaded: bridged frames skip netfilter")
            }
            BridgeNetfilter::OffInLab => f.write_str(
                "bridge-nf-call-iptables/ip6tables/arptables = 0 in sluice-b (the lab's \
                 bridge, per namespace): no side's frames pass netfilter on br0",
            ),
            BridgeNetfilter::OffHostWide => f.write_str(
                "bridge-nf-call-iptables/ip6tables/arptables = 0 host-wide while the lab is \
                 up (restored on teardown): no side's frames pass netfilter on br0",
            ),
            BridgeNetfilter::On(on) => write!(
                f,
                "bridged frames pass netfilter on every side alike: {}",
                on.join(", ")
            ),
        }
    }
}

/// The /proc/sys path of a dotted sysctl key.
fn proc_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

impl Lab {
    /// The value of `key` in sluice-b, or None where the namespace has no such sysctl.
    fn bridge_nf_in_lab(&self, key: &str) -> Result<Option<String>, LabError> {
        let sysctl = command::find(SYSCTL)?;
        let out = self.exec(
            NS_CLIENT,
            &[sysctl.as_os_str(), "-n".as_ref(), key.as_ref()],
        )?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    /// Turns the bridge's netfilter calls off (in sluice-b, or host-wide saving the old
    /// values); says what it found.
    pub fn bridge_netfilter_off(&self) -> Result<BridgeNetfilter, LabError> {
        if self.bridge_nf_in_lab(BRIDGE_NF_KEYS[0])?.is_some() {
            for key in BRIDGE_NF_KEYS {
                if self.bridge_nf_in_lab(key)?.is_some() {
                    self.sysctl(NS_CLIENT, key, "0")?;
                }
            }
        } else if Path::new(&proc_path(BRIDGE_NF_KEYS[0])).exists() {
            self.host_bridge_nf_off()?;
        }
        self.bridge_netfilter()
    }

    /// Host-wide: saves the values that are not 0 (once: a lab brought up twice keeps the
    /// first, real, values) and writes 0.
    fn host_bridge_nf_off(&self) -> Result<(), LabError> {
        let io = |what: String| move |e| LabError::Io { what, source: e };
        let mut saved = String::new();
        for key in BRIDGE_NF_KEYS {
            let path = proc_path(key);
            let Ok(v) = std::fs::read_to_string(&path) else {
                continue;
            };
            if v.trim() != "0" {
                saved.push_str(&format!("{key}={}\n", v.trim()));
                std::fs::write(&path, "0").map_err(io(format!("write 0 to {path}")))?;
            }
        }
        let file = Path::new(SAVED);
        if !saved.is_empty() && !file.exists() {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
            }
            std::fs::write(file, saved).map_err(io(format!("write {SAVED}")))?;
        }
        Ok(())
    }

    /// Puts back host-wide values the lab changed ([`SAVED`]); nothing if it changed none.
    pub(crate) fn restore_bridge_netfilter(&self) -> Result<(), LabError> {
        let Ok(saved) = std::fs::read_to_string(SAVED) else {
            return Ok(());
        };
        for (key, value) in saved.lines().filter_map(|l| l.split_once('=')) {
            // Only the lab's own keys, whatever the file holds.
            if BRIDGE_NF_KEYS.contains(&key) && value.chars().all(|c| c.is_ascii_digit()) {
                let path = proc_path(key);
                std::fs::write(&path, value).map_err(|e| LabError::Io {
                    what: format!("restore {path}"),
                    source: e,
                })?;
            }
        }
        std::fs::remove_file(SAVED).map_err(|e| LabError::Io {
            what: format!("remove {SAVED}"),
            source: e,
        })
    }

    /// What br_netfilter does to br0 now (the bench prints it in its header).
    pub fn bridge_netfilter(&self) -> Result<BridgeNetfilter, LabError> {
        let mut values = Vec::new();
        let mut per_namespace = false;
        for key in BRIDGE_NF_KEYS {
            let v = match self.bridge_nf_in_lab(key)? {
                Some(v) => {
                    per_namespace = true;
                    Some(v)
                }
                None => std::fs::read_to_string(proc_path(key))
                    .ok()
                    .map(|v| v.trim().to_string()),
            };
            if let Some(v) = v {
                values.push((key, v));
            }
        }
        Ok(classify(&values, per_namespace))
    }
}

/// The state the values of the sysctls (those that exist) amount to.
fn classify(values: &[(&str, String)], per_namespace: bool) -> BridgeNetfilter {
    if values.is_empty() {
        return BridgeNetfilter::NotLoaded;
    }
    let on: Vec<String> = values
        .iter()
        .filter(|(_, v)| v != "0")
        .map(|(k, v)| format!("{}={v}", k.trim_start_matches("net.bridge.")))
        .collect();
    if !on.is_empty() {
        BridgeNetfilter::On(on)
    } else if per_namespace {
        BridgeNetfilter::OffInLab
    } else {
        BridgeNetfilter::OffHostWide
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_from_values() {
        assert_eq!(classify(&[], true), BridgeNetfilter::NotLoaded);
        let off = [(BRIDGE_NF_KEYS[0], "0".to_string())];
        assert_eq!(classify(&off, true), BridgeNetfilter::OffInLab);
        assert_eq!(classify(&off, false), BridgeNetfilter::OffHostWide);
        let on = [
            (BRIDGE_NF_KEYS[0], "1".to_string()),
            (BRIDGE_NF_KEYS[1], "0".to_string()),
        ];
        let state = classify(&on, true);
        assert_eq!(
            state,
            BridgeNetfilter::On(vec!["bridge-nf-call-iptables=1".into()])
        );
        assert!(state.to_string().contains("bridge-nf-call-iptables=1"));
        assert!(BridgeNetfilter::NotLoaded
            .to_string()
            .contains("not loaded"));
        assert_eq!(
            proc_path(BRIDGE_NF_KEYS[2]),
            "/proc/sys/net/bridge/bridge-nf-call-arptables"
        );
    }
}
