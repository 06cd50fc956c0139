//! The switched lab: the default lab plus `sluice switch` and N Linux client namespaces.
//!
//! ```text
//!  sluice-c1 (Linux)  sl-c1 10.77.0.101 ──veth── sw-c1 ┐
//!  ...                                                  ├─ sluice-s: `sluice switch --lab`
//!  sluice-cN (Linux)  sl-cN 10.77.0.(100+N) ─veth─ sw-cN ┤   (no addresses; forwards between
//!                                                       │    its ports in userspace)
//!  default lab: br0 in sluice-b ── sl-s-br ──veth── sw-up┘
//! ```
//!
//! The default lab is built as it always is and gains one more br0 port, the switch's
//! uplink, so the clients reach the engine (10.77.0.1), sluice-b (10.77.0.2) and sluice-k
//! (10.77.0.3) through the switch. Nothing is connected until the switch runs; every
//! frame between clients, and between clients and the default lab, crosses it.
//!
//! Offloads: the clients' interfaces have TX checksum offload, TSO, GSO and GRO off, and so
//! has sl-s-br (the kernel then segments and checksums what br0 forwards to the switch), so
//! the switch sees wire-sized frames with complete checksums and its queues count what a
//! wire would carry. The switch cuts any large TCP segment that still reaches it.

pub(crate) mod names;

use std::net::Ipv4Addr;

use crate::error::LabError;
use crate::netns::{mac_string, Lab, BRIDGE, NS_CLIENT, PREFIX_LEN};

use names::CLIENT_NS_PREFIX;
pub use names::{client_ns, is_switched_namespace, MAX_CLIENTS, NS_SWITCH};

/// The switch's uplink port (in sluice-s), towards br0.
pub const SWITCH_UPLINK: &str = "sw-up";
/// The uplink's peer, a port of br0 in sluice-b.
pub const SWITCH_UPLINK_PEER: &str = "sl-s-br";
/// Offloads turned off on every interface that feeds the switch.
pub const SWITCH_FED_OFFLOADS_OFF: [(&str, bool); 4] = [
    ("tx", false),
    ("tso", false),
    ("gso", false),
    ("gro", false),
];

/// Client `i`'s interface, in its namespace.
pub fn client_iface(i: u8) -> String {
    format!("sl-c{i}")
}

/// The switch's port towards client `i`, in sluice-s.
pub fn switch_port(i: u8) -> String {
    format!("sw-c{i}")
}

/// Client `i`'s address: 10.77.0.(100 + i).
pub fn client_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, 100u8.saturating_add(i))
}

/// Client `i`'s MAC.
pub fn client_mac(i: u8) -> [u8; 6] {
    [0x02, 0x77, 0x00, 0x00, 0x02, i]
}

/// The MAC of the switch's port towards client `i`.
fn switch_port_mac(i: u8) -> [u8; 6] {
    [0x02, 0x77, 0x00, 0x00, 0x03, i]
}

/// The uplink's MACs (sw-up, sl-s-br).
const UPLINK_MACS: ([u8; 6], [u8; 6]) = (
    [0x02, 0x77, 0x00, 0x00, 0x03, 0x00],
    [0x02, 0x77, 0x00, 0x00, 0x01, 0x05],
);

impl Lab {
    /// Builds the default lab plus the switch namespace and `clients` client namespaces
    /// (1 to [`MAX_CLIENTS`]); idempotent. Client namespaces beyond `clients` left from an
    /// earlier, larger build are removed.
    pub fn up_switched(&self, clients: u8) -> Result<(), LabError> {
        if !(1..=MAX_CLIENTS).contains(&clients) {
            return Err(LabError::InvalidArgument(format!(
                "--clients must be 1 to {MAX_CLIENTS}, not {clients}"
            )));
        }
        self.up()?;
        let existing = self.namespaces_present()?;
        for ns in &existing {
            let extra = ns
                .strip_prefix(CLIENT_NS_PREFIX)
                .and_then(|n| n.parse::<u8>().ok())
                .is_some_and(|n| n > clients);
            if extra {
                self.delete_namespace(ns)?;
            }
        }
        self.add_namespace(NS_SWITCH, &existing)?;

        // The uplink: sw-up in sluice-s, its peer a port of br0.
        let (up_mac, peer_mac) = UPLINK_MACS;
        self.veth(NS_SWITCH, SWITCH_UPLINK, NS_CLIENT, SWITCH_UPLINK_PEER)?;
        self.switch_side(SWITCH_UPLINK, up_mac)?;
        self.ip_in(
            NS_CLIENT,
            &[
                "link",
                "set",
                SWITCH_UPLINK_PEER,
                "address",
                &mac_string(peer_mac),
            ],
        )?;
        self.ethtool_features(NS_CLIENT, SWITCH_UPLINK_PEER, &SWITCH_FED_OFFLOADS_OFF)?;
        self.ip_in(
            NS_CLIENT,
            &["link", "set", SWITCH_UPLINK_PEER, "master", BRIDGE, "up"],
        )?;

        for i in 1..=clients {
            let ns = client_ns(i);
            let iface = client_iface(i);
            self.add_namespace(&ns, &existing)?;
            self.veth(&ns, &iface, NS_SWITCH, &switch_port(i))?;
            self.switch_side(&switch_port(i), switch_port_mac(i))?;
            self.ip_in(
                &ns,
                &["link", "set", &iface, "address", &mac_string(client_mac(i))],
            )?;
            self.ethtool_features(&ns, &iface, &SWITCH_FED_OFFLOADS_OFF)?;
            let prefix = format!("{}/{PREFIX_LEN}", client_ip(i));
            self.ip_in(&ns, &["addr", "replace", &prefix, "dev", &iface])?;
            self.ip_in(&ns, &["link", "set", &iface, "up"])?;
        }
        Ok(())
    }

    /// The switch's ports as `sluice switch` names them (`sluice-s:sw-up`, then
    /// `sluice-s:sw-c1`, ...), for the client namespaces present.
    pub fn switch_ports(&self) -> Result<Vec<String>, LabError> {
        if !self.namespaces_present()?.iter().any(|n| n == NS_SWITCH) {
            return Err(LabError::InvalidArgument(
                "the switched lab is not up (sluice lab up --switch)".into(),
            ));
        }
        let mut ports = vec![format!("{NS_SWITCH}:{SWITCH_UPLINK}")];
        for i in 1..=self.clients_present()? {
            ports.push(format!("{NS_SWITCH}:{}", switch_port(i)));
        }
        Ok(ports)
    }

    /// How many client namespaces (sluice-c1, sluice-c2, ... without a gap) exist.
    pub fn clients_present(&self) -> Result<u8, LabError> {
        let present = self.namespaces_present()?;
        Ok((1..=MAX_CLIENTS)
            .take_while(|i| present.contains(&client_ns(*i)))
            .count() as u8)
    }

    /// Creates `ns` unless it is in `existing`, with IPv6 off and loopback up.
    pub(crate) fn add_namespace(&self, ns: &str, existing: &[String]) -> Result<(), LabError> {
        if !existing.iter().any(|e| e == ns) {
            self.ip(&["netns", "add", ns])?;
        }
        self.sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")?;
        self.sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")?;
        self.ip_in(ns, &["link", "set", "lo", "up"])?;
        Ok(())
    }

    /// Deletes namespace `ns` (a switched-lab one).
    pub(crate) fn delete_namespace(&self, ns: &str) -> Result<(), LabError> {
        self.ip(&["netns", "del", ns])?;
        Ok(())
    }

    /// Sets up a switch port in sluice-s: its MAC, no address, offloads off, up.
    fn switch_side(&self, iface: &str, mac: [u8; 6]) -> Result<(), LabError> {
        self.ip_in(
            NS_SWITCH,
            &["link", "set", iface, "address", &mac_string(mac)],
        )?;
        self.ip_in(NS_SWITCH, &["addr", "flush", "dev", iface])?;
        self.ethtool_features(NS_SWITCH, iface, &SWITCH_FED_OFFLOADS_OFF)?;
        self.ip_in(NS_SWITCH, &["link", "set", iface, "up"])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_ifnamsiz_and_are_recognised() {
        for i in [1, 9, 10, MAX_CLIENTS] {
            assert!(client_iface(i).len() <= 15 && switch_port(i).len() <= 15);
            assert!(is_switched_namespace(&client_ns(i)));
        }
        assert_eq!(client_ip(1), Ipv4Addr::new(10, 77, 0, 101));
        assert_eq!(client_ip(MAX_CLIENTS), Ipv4Addr::new(10, 77, 0, 164));
        assert!(SWITCH_UPLINK_PEER.len() <= 15);
        assert!(is_switched_namespace(NS_SWITCH));
        for not in [
            "sluice-c0",
            "sluice-c65",
            "sluice-c01",
            "sluice-cx",
            "sluice-b",
        ] {
            assert!(!is_switched_namespace(not), "{not}");
        }
    }

    #[test]
    fn client_count_is_checked_first() {
        for n in [0, MAX_CLIENTS + 1] {
            assert!(matches!(
                Lab::new().up_switched(n),
                Err(LabError::InvalidArgument(_))
            ));
        }
    }
}
