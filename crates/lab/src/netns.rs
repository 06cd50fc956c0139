//! The lab itself: four network namespaces joined through one bridge, built with ip(8).
//!
//! ```text
//!  sluice-a (engine)           sluice-b (Linux clients)               sluice-k (Linux server)
//!  sl-a  ──veth──  sl-a-br ─┐                                ┌─ sl-k-br ──veth── sl-k
//!  no kernel address         ├── br0 10.77.0.2/24 (bridge) ──┘          10.77.0.3/24
//!  engine: 10.77.0.1/24      │
//!  sluice-e (second engine)  │
//!  sl-e  ──veth──  sl-e-br ──┘
//!  no kernel address; engine: 10.77.0.4/24
//! ```
//!
//! The second engine's namespace is where a second `sluice engine` runs when two engines
//! talk to each other (RDMA verbs between two engines: scripts/verbs-demo.sh).
//!
//! The engine and the Linux baseline are reached from sluice-b over the same number of hops.
//! sl-a carries no kernel address and answers no ARP (arp_ignore 8), so only the engine
//! speaks for 10.77.0.1. IPv6 is disabled in all three namespaces to keep the wire quiet
//! (no router solicitations, MLD or DAD frames for the engine to skip). Offloads keep the
//! Linux defaults: local senders leave TCP/UDP checksums partial and send 64 KB GSO frames.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Output;

use crate::command::{self, ETHTOOL, IP, SYSCTL};
use crate::error::LabError;
use crate::mtp::names::is_mtp_namespace;
use crate::switched::names::is_switched_namespace;

/// The namespace that holds the engine.
pub const NS_ENGINE: &str = "sluice-a";
/// The namespace that holds the Linux clients and the bridge.
pub const NS_CLIENT: &str = "sluice-b";
/// The namespace that holds the Linux kernel server (the side-by-side baseline).
pub const NS_KERNEL: &str = "sluice-k";
/// The namespace that holds a second engine (engine-to-engine experiments).
pub const NS_ENGINE2: &str = "sluice-e";
/// All lab namespaces, in creation order.
pub const NAMESPACES: [&str; 4] = [NS_ENGINE, NS_CLIENT, NS_KERNEL, NS_ENGINE2];

/// The bridge in sluice-b.
pub const BRIDGE: &str = "br0";
/// The engine's veth in sluice-a (no kernel address).
pub const ENGINE_IFACE: &str = "sl-a";
/// The peer of sl-a, a port of br0 in sluice-b.
pub const ENGINE_PEER: &str = "sl-a-br";
/// The second engine's veth in sluice-e (no kernel address).
pub const ENGINE2_IFACE: &str = "sl-e";
/// The peer of sl-e, a port of br0 in sluice-b.
pub const ENGINE2_PEER: &str = "sl-e-br";
/// The kernel server's veth in sluice-k.
pub const KERNEL_IFACE: &str = "sl-k";
/// The peer of sl-k, a port of br0 in sluice-b.
pub const KERNEL_PEER: &str = "sl-k-br";
/// The bridge the TAP backend uses in sluice-a, joining sl-a and the engine's TAP.
pub const TAP_BRIDGE: &str = "br-a";
/// The TAP device name the lab expects the engine to open in sluice-a.
pub const TAP_IFACE: &str = "sl-tap";

/// The engine's address (owned by the engine, not by the kernel).
pub const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The Linux clients' address (br0 in sluice-b).
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The Linux kernel server's address (sl-k in sluice-k).
pub const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// The second engine's address (owned by that engine, not by the kernel).
pub const ENGINE2_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 4);
/// Prefix length of the lab subnet.
pub const PREFIX_LEN: u8 = 24;

/// sl-a's MAC: the engine's MAC with the AF_PACKET backend.
pub const ENGINE_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x00, 0x01];
/// br0's MAC.
pub const BRIDGE_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x00, 0x02];
/// sl-e's MAC: the second engine's MAC.
pub const ENGINE2_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x00, 0x04];
/// sl-e-br's MAC.
pub const ENGINE2_PEER_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x01, 0x04];
/// sl-k's MAC.
pub const KERNEL_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x00, 0x03];
/// sl-a-br's MAC.
pub const ENGINE_PEER_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x01, 0x01];
/// sl-k-br's MAC.
pub const KERNEL_PEER_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x01, 0x03];
/// The MAC the engine should use behind a TAP (distinct from every bridge port's MAC).
pub const TAP_ENGINE_MAC: [u8; 6] = [0x02, 0x77, 0x00, 0x00, 0x00, 0x11];

/// Formats a MAC as ip(8) writes it: lower-case, colon-separated.
pub fn mac_string(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

/// The namespace lab: fixed names, built and torn down idempotently with ip(8).
///
/// `Lab` takes no lock; hold a [`crate::LabLock`] (or a [`crate::LabGuard`]) so that only
/// one test or benchmark uses the lab at a time.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lab;

impl Lab {
    /// A handle on the lab (creates nothing).
    pub fn new() -> Lab {
        Lab
    }

    /// Builds the lab; does only what is missing, so running it twice changes nothing.
    pub fn up(&self) -> Result<(), LabError> {
        crate::check_root()?;
        let mut existing = self.namespaces_present()?;
        if existing.iter().any(|ns| is_mtp_namespace(ns)) {
            // The MTP lab moved the engines' veth ends out of br0: start from nothing.
            self.down()?;
            existing = self.namespaces_present()?;
        }
        for ns in NAMESPACES {
            if !existing.iter().any(|e| e == ns) {
                self.ip(&["netns", "add", ns])?;
            }
            // Before any link exists, so new interfaces inherit it.
            self.sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")?;
            self.sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")?;
            self.ip_in(ns, &["link", "set", "lo", "up"])?;
        }

        // sluice-b: the bridge with the clients' address.
        if !self.link_exists(NS_CLIENT, BRIDGE)? {
            self.ip_in(NS_CLIENT, &["link", "add", BRIDGE, "type", "bridge"])?;
        }
        let prefix = format!("{CLIENT_IP}/{PREFIX_LEN}");
        self.ip_in(
            NS_CLIENT,
            &["link", "set", BRIDGE, "address", &mac_string(BRIDGE_MAC)],
        )?;
        self.ip_in(NS_CLIENT, &["addr", "replace", &prefix, "dev", BRIDGE])?;
        self.ip_in(NS_CLIENT, &["link", "set", BRIDGE, "up"])?;
        // Every side's frames cross br0: none of them through the host's netfilter hooks.
        self.bridge_netfilter_off()?;

        // sluice-a: the engine's veth, no kernel address, no ARP answers.
        self.veth_to_bridge(NS_ENGINE, ENGINE_IFACE, ENGINE_PEER)?;
        self.ip_in(
            NS_ENGINE,
            &[
                "link",
                "set",
                ENGINE_IFACE,
                "address",
                &mac_string(ENGINE_MAC),
            ],
        )?;
        self.sysctl(NS_ENGINE, "net.ipv4.ip_forward", "0")?;
        self.sysctl(
            NS_ENGINE,
            &format!("net.ipv4.conf.{ENGINE_IFACE}.arp_ignore"),
            "8",
        )?;
        self.ip_in(NS_ENGINE, &["addr", "flush", "dev", ENGINE_IFACE])?;
        self.ip_in(NS_ENGINE, &["link", "set", ENGINE_IFACE, "up"])?;
        self.peer_into_bridge(ENGINE_PEER, ENGINE_PEER_MAC)?;

        // sluice-k: the Linux kernel server.
        self.veth_to_bridge(NS_KERNEL, KERNEL_IFACE, KERNEL_PEER)?;
        self.ip_in(
            NS_KERNEL,
            &[
                "link",
                "set",
                KERNEL_IFACE,
                "address",
                &mac_string(KERNEL_MAC),
            ],
        )?;
        let prefix = format!("{KERNEL_IP}/{PREFIX_LEN}");
        self.ip_in(
            NS_KERNEL,
            &["addr", "replace", &prefix, "dev", KERNEL_IFACE],
        )?;
        self.ip_in(NS_KERNEL, &["link", "set", KERNEL_IFACE, "up"])?;
        self.peer_into_bridge(KERNEL_PEER, KERNEL_PEER_MAC)?;

        // sluice-e: a second engine's veth, as sluice-a's.
        self.veth_to_bridge(NS_ENGINE2, ENGINE2_IFACE, ENGINE2_PEER)?;
        self.ip_in(
            NS_ENGINE2,
            &[
                "link",
                "set",
                ENGINE2_IFACE,
                "address",
                &mac_string(ENGINE2_MAC),
            ],
        )?;
        self.sysctl(NS_ENGINE2, "net.ipv4.ip_forward", "0")?;
        self.sysctl(
            NS_ENGINE2,
            &format!("net.ipv4.conf.{ENGINE2_IFACE}.arp_ignore"),
            "8",
        )?;
        self.ip_in(NS_ENGINE2, &["addr", "flush", "dev", ENGINE2_IFACE])?;
        self.ip_in(NS_ENGINE2, &["link", "set", ENGINE2_IFACE, "up"])?;
        self.peer_into_bridge(ENGINE2_PEER, ENGINE2_PEER_MAC)?;
        Ok(())
    }

    /// Deletes the three namespaces (and with them every link in them), and the switched
    /// and MTP labs' if present ([`crate::switched`]); absent ones are skipped.
    pub fn down(&self) -> Result<(), LabError> {
        crate::check_root()?;
        let existing = self.namespaces_present()?;
        for ns in &existing {
            if is_switched_namespace(ns) || is_mtp_namespace(ns) {
                self.delete_namespace(ns)?;
            }
        }
        for ns in NAMESPACES {
            if existing.iter().any(|e| e == ns) {
                self.ip(&["netns", "del", ns])?;
            }
        }
        self.restore_bridge_netfilter()
    }

    /// The lab namespaces that exist now (the switched lab's included).
    pub fn namespaces_present(&self) -> Result<Vec<String>, LabError> {
        let out = self.ip(&["netns", "list"])?;
        // Lines look like "sluice-a (id: 0)" or just "sluice-a".
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| {
                NAMESPACES.contains(name) || is_switched_namespace(name) || is_mtp_namespace(name)
            })
            .map(str::to_owned)
            .collect())
    }

    /// Runs `args` inside namespace `ns` (`ip netns exec NS ARGS...`) and returns its output, whatever its exit status.
    pub fn exec<S: AsRef<OsStr>>(&self, ns: &str, args: &[S]) -> Result<Output, LabError> {
        check_namespace(ns)?;
        let Some(first) = args.first() else {
            return Err(LabError::InvalidArgument("exec needs a program".into()));
        };
        if first.as_ref().is_empty() {
            return Err(LabError::InvalidArgument("exec needs a program".into()));
        }
        let mut full: Vec<&OsStr> = vec!["netns".as_ref(), "exec".as_ref(), ns.as_ref()];
        full.extend(args.iter().map(AsRef::as_ref));
        command::output(&command::find(IP)?, &full)
    }

    /// Runs `args` inside namespace `ns`; a non-zero exit is an error. Returns stdout.
    pub fn run<S: AsRef<OsStr>>(&self, ns: &str, args: &[S]) -> Result<String, LabError> {
        check_namespace(ns)?;
        let mut full: Vec<&OsStr> = vec!["netns".as_ref(), "exec".as_ref(), ns.as_ref()];
        full.extend(args.iter().map(AsRef::as_ref));
        command::run(&command::find(IP)?, &full)
    }

    /// Runs `ip -n NS ARGS...` (ip(8) acting on namespace `ns`); returns stdout.
    pub fn ip_in(&self, ns: &str, args: &[&str]) -> Result<String, LabError> {
        check_namespace(ns)?;
        let mut full = vec!["-n", ns];
        full.extend_from_slice(args);
        self.ip(&full)
    }

    /// Sets a sysctl inside namespace `ns` (`sysctl -w KEY=VALUE`).
    pub fn sysctl(&self, ns: &str, key: &str, value: &str) -> Result<(), LabError> {
        check_word(key)?;
        let sysctl = command::find(SYSCTL)?;
        let assignment = format!("{key}={value}");
        self.run(
            ns,
            &[
                sysctl.as_os_str(),
                "-q".as_ref(),
                "-w".as_ref(),
                assignment.as_ref(),
            ],
        )?;
        Ok(())
    }

    /// Reads a sysctl inside namespace `ns`.
    pub fn sysctl_get(&self, ns: &str, key: &str) -> Result<String, LabError> {
        check_word(key)?;
        let sysctl = command::find(SYSCTL)?;
        let out = self.run(ns, &[sysctl.as_os_str(), "-n".as_ref(), key.as_ref()])?;
        Ok(out.trim().to_owned())
    }

    /// Switches offload features of `iface` in `ns` (`ethtool -K IFACE tso off gro on ...`).
    pub fn ethtool_features(
        &self,
        ns: &str,
        iface: &str,
        features: &[(&str, bool)],
    ) -> Result<(), LabError> {
        check_word(iface)?;
        if features.is_empty() {
            return Ok(());
        }
        let ethtool = command::find(ETHTOOL)?;
        let mut args: Vec<&OsStr> = vec![ethtool.as_os_str(), "-K".as_ref(), iface.as_ref()];
        for (feature, on) in features {
            check_word(feature)?;
            args.push(feature.as_ref());
            args.push(if *on { "on" } else { "off" }.as_ref());
        }
        self.run(ns, &args)?;
        Ok(())
    }

    /// Reads offload features of `iface` in `ns` (`ethtool -k`), as (name, on) pairs.
    pub fn ethtool_show(&self, ns: &str, iface: &str) -> Result<Vec<(String, bool)>, LabError> {
        check_word(iface)?;
        let ethtool = command::find(ETHTOOL)?;
        let out = self.run(ns, &[ethtool.as_os_str(), "-k".as_ref(), iface.as_ref()])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.split_once(':')?;
                let state = rest.split_whitespace().next()?;
                Some((name.trim().to_owned(), state == "on"))
            })
            .collect())
    }

    /// Sets the MTU of `iface` in `ns`.
    pub fn set_mtu(&self, ns: &str, iface: &str, mtu: u32) -> Result<(), LabError> {
        self.ip_in(ns, &["link", "set", iface, "mtu", &mtu.to_string()])?;
        Ok(())
    }

    /// The MAC address of `iface` in `ns`, as ip(8) prints it.
    pub fn mac_of(&self, ns: &str, iface: &str) -> Result<String, LabError> {
        let out = self.ip_in(ns, &["-o", "link", "show", "dev", iface])?;
        let mut words = out.split_whitespace();
        words
            .find(|w| *w == "link/ether")
            .and_then(|_| words.next())
            .map(str::to_owned)
            .ok_or_else(|| LabError::Command {
                command: format!("ip -n {ns} -o link show dev {iface}"),
                code: Some(0),
                stderr: format!("no link/ether address in {out:?}"),
            })
    }

    /// The neighbour entry for `addr` in `ns`: (MAC if known, state words such as "REACHABLE").
    pub fn neighbor(
        &self,
        ns: &str,
        addr: Ipv4Addr,
    ) -> Result<Option<(Option<String>, String)>, LabError> {
        let out = self.ip_in(ns, &["neigh", "show", &addr.to_string()])?;
        let Some(line) = out.lines().find(|l| !l.trim().is_empty()) else {
            return Ok(None);
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let mac = words
            .iter()
            .position(|w| *w == "lladdr")
            .and_then(|i| words.get(i + 1))
            .map(|s| (*s).to_owned());
        let state = words
            .iter()
            .filter(|w| w.chars().all(|c| c.is_ascii_uppercase()) && w.len() > 2)
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Some((mac, state)))
    }

    /// Bridges sl-a and the engine's TAP `tap` inside sluice-a (bridge br-a, no address); idempotent.
    ///
    /// The engine must have created `tap` in sluice-a first (opening the TAP creates it);
    /// it then uses [`TAP_ENGINE_MAC`], not sl-a's MAC.
    pub fn attach_tap(&self, tap: &str) -> Result<(), LabError> {
        if !self.link_exists(NS_ENGINE, TAP_BRIDGE)? {
            self.ip_in(NS_ENGINE, &["link", "add", TAP_BRIDGE, "type", "bridge"])?;
        }
        self.ip_in(NS_ENGINE, &["addr", "flush", "dev", TAP_BRIDGE])?;
        self.ip_in(NS_ENGINE, &["link", "set", TAP_BRIDGE, "up"])?;
        self.ip_in(
            NS_ENGINE,
            &["link", "set", ENGINE_IFACE, "master", TAP_BRIDGE, "up"],
        )?;
        self.ip_in(NS_ENGINE, &["link", "set", tap, "master", TAP_BRIDGE, "up"])?;
        Ok(())
    }

    /// Removes br-a from sluice-a, so sl-a is a plain interface again (AF_PACKET mode); idempotent.
    pub fn detach_tap(&self) -> Result<(), LabError> {
        if self.link_exists(NS_ENGINE, TAP_BRIDGE)? {
            self.ip_in(NS_ENGINE, &["link", "del", TAP_BRIDGE])?;
        }
        Ok(())
    }

    /// Prepares the wire for the engine's AF_XDP backend in generic (SKB) mode: TSO and GSO
    /// off on sl-a-br, so every frame towards the engine is wire-sized.
    ///
    /// Generic XDP hands AF_XDP the whole skb, and a 64 KB GSO frame from a Linux peer does
    /// not fit a UMEM frame, so the kernel would drop it. DRV mode needs nothing: while an
    /// XDP program is attached to sl-a, veth itself turns segmentation offload off on its
    /// peer. Neither mode needs bpffs: without it libxdp loads its program without the
    /// dispatcher, which this kernel could not load anyway.
    pub fn prepare_generic_xdp(&self) -> Result<(), LabError> {
        self.ethtool_features(NS_CLIENT, ENGINE_PEER, &[("tso", false), ("gso", false)])
    }

    /// Whether `iface` exists in `ns`.
    pub fn link_exists(&self, ns: &str, iface: &str) -> Result<bool, LabError> {
        check_namespace(ns)?;
        check_word(iface)?;
        let out = command::output(
            &command::find(IP)?,
            &["-n", ns, "link", "show", "dev", iface],
        )?;
        Ok(out.status.success())
    }

    /// Runs `ip ARGS...`; returns stdout.
    pub(crate) fn ip(&self, args: &[&str]) -> Result<String, LabError> {
        command::run(&command::find(IP)?, args)
    }

    /// Makes veth `iface` in `ns` whose peer `peer` lives in sluice-b, unless it exists.
    fn veth_to_bridge(&self, ns: &str, iface: &str, peer: &str) -> Result<(), LabError> {
        self.veth(ns, iface, NS_CLIENT, peer)
    }

    /// Makes veth `iface` in `ns` with peer `peer` in `peer_ns`, unless it exists.
    pub(crate) fn veth(
        &self,
        ns: &str,
        iface: &str,
        peer_ns: &str,
        peer: &str,
    ) -> Result<(), LabError> {
        if self.link_exists(ns, iface)? {
            return Ok(());
        }
        // A peer left over from a half-built lab would block the name.
        if self.link_exists(peer_ns, peer)? {
            self.ip_in(peer_ns, &["link", "del", peer])?;
        }
        self.ip_in(
            ns,
            &[
                "link", "add", iface, "type", "veth", "peer", "name", peer, "netns", peer_ns,
            ],
        )?;
        Ok(())
    }

    /// Enslaves `peer` (in sluice-b) to br0 and brings it up.
    fn peer_into_bridge(&self, peer: &str, mac: [u8; 6]) -> Result<(), LabError> {
        self.ip_in(
            NS_CLIENT,
            &["link", "set", peer, "address", &mac_string(mac)],
        )?;
        self.ip_in(NS_CLIENT, &["link", "set", peer, "master", BRIDGE, "up"])?;
        Ok(())
    }
}

/// Checks `ns` is one of the lab's namespaces.
fn check_namespace(ns: &str) -> Result<(), LabError> {
    if NAMESPACES.contains(&ns) || is_switched_namespace(ns) || is_mtp_namespace(ns) {
        Ok(())
    } else {
        Err(LabError::UnknownNamespace(ns.to_owned()))
    }
}

/// Checks a name passed to a tool is one plain word that cannot be read as an option.
fn check_word(word: &str) -> Result<(), LabError> {
    if word.is_empty() || word.starts_with('-') || word.contains(char::is_whitespace) {
        return Err(LabError::InvalidArgument(format!(
            "{word:?} is not a plain name"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_print_like_ip() {
        assert_eq!(mac_string(ENGINE_MAC), "02:77:00:00:00:01");
        assert_eq!(mac_string([0xAB, 0, 1, 0xff, 0x10, 9]), "ab:00:01:ff:10:09");
    }

    #[test]
    fn foreign_namespaces_and_option_like_names_are_refused() {
        let lab = Lab::new();
        assert!(matches!(
            lab.exec("default", &["true"]),
            Err(LabError::UnknownNamespace(_))
        ));
        assert!(matches!(
            lab.sysctl(NS_CLIENT, "-a", "1"),
            Err(LabError::InvalidArgument(_))
        ));
        assert!(matches!(
            lab.ethtool_features(NS_CLIENT, "br0", &[("--help", true)]),
            Err(LabError::InvalidArgument(_))
        ));
        let empty: [&str; 0] = [];
        assert!(matches!(
            lab.exec(NS_CLIENT, &empty),
            Err(LabError::InvalidArgument(_))
        ));
    }
}
