//! The MTP lab (issue 17 "Lab"): engines A and E joined through two `sluice switch`
//! processes with two parallel links between them, so an MTP message has two paths.
//!
//! ```text
//!  sluice-a: sl-a (engine A) ─veth─ sl-a-br ┐ sluice-m1: S1      S2: sluice-m2 ┌ sl-e-br ─veth─ sl-e (engine E): sluice-e
//!                                   port 0  ├─ port 1 m1-u1 ══ m2-u1 port 1 ─┤  port 0
//!                                           └─ port 2 m1-u2 ══ m2-u2 port 2 ─┘
//! ```
//!
//! The default lab is built first and the engines' bridge-side veth ends (sl-a-br, sl-e-br)
//! are moved out of br0 into the switches' namespaces, so A and E reach each other only
//! through S1 and S2. Each switch routes the far engine's MAC over both uplinks with the
//! message balancer (`--route MAC=1+2 --balancer message`), each uplink a pathlet with ECN
//! feedback; the near engine is learned on port 0. Broadcasts (ARP) must still cross, so
//! the second uplink pair has `flood=off`: floods take link 1 only and cannot loop, while
//! unicast uses both. [`mtp_switch_args`] gives each switch's command line.

pub(crate) mod names;

use crate::error::LabError;
use crate::netns::{
    mac_string, Lab, ENGINE2_MAC, ENGINE2_PEER, ENGINE_MAC, ENGINE_PEER, NS_CLIENT,
};
use crate::switched::SWITCH_FED_OFFLOADS_OFF;

pub use names::{is_mtp_namespace, NS_MTP_S1, NS_MTP_S2};

/// Impairments of every uplink's egress in the MTP lab, as `sluice switch` port keys: 1 %
/// loss, 1 % of frames held back 200 us (reordered), 1 % duplicated.
pub const UPLINK_IMPAIRMENTS: &str = "loss=0.01,reorder=0.01,reorder-delay=200us,duplicate=0.01";

/// One of the MTP lab's two switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtpSwitch {
    /// S1, in sluice-m1, engine A on its port 0.
    S1,
    /// S2, in sluice-m2, engine E on its port 0.
    S2,
}

impl MtpSwitch {
    /// Both switches.
    pub const ALL: [MtpSwitch; 2] = [MtpSwitch::S1, MtpSwitch::S2];

    /// The switch's namespace.
    pub fn netns(self) -> &'static str {
        match self {
            MtpSwitch::S1 => NS_MTP_S1,
            MtpSwitch::S2 => NS_MTP_S2,
        }
    }

    /// The switch's port towards its engine (the moved veth end).
    pub fn engine_port(self) -> &'static str {
        match self {
            MtpSwitch::S1 => ENGINE_PEER,
            MtpSwitch::S2 => ENGINE2_PEER,
        }
    }

    /// The switch's uplink `link` (1 or 2).
    pub fn uplink(self, link: u8) -> String {
        match self {
            MtpSwitch::S1 => format!("m1-u{link}"),
            MtpSwitch::S2 => format!("m2-u{link}"),
        }
    }

    /// The MAC of the engine behind the other switch, routed over both uplinks.
    pub fn far_mac(self) -> [u8; 6] {
        match self {
            MtpSwitch::S1 => ENGINE2_MAC,
            MtpSwitch::S2 => ENGINE_MAC,
        }
    }

    /// The MAC of uplink `link`'s interface (S1: 02:77:00:00:05:0L, S2: ..:06:0L).
    fn uplink_mac(self, link: u8) -> [u8; 6] {
        let switch = match self {
            MtpSwitch::S1 => 5,
            MtpSwitch::S2 => 6,
        };
        [0x02, 0x77, 0x00, 0x00, switch, link]
    }

    /// The pathlet id of uplink `link` (S1: 1, 2; S2: 3, 4).
    fn pathlet(self, link: u8) -> u8 {
        match self {
            MtpSwitch::S1 => link,
            MtpSwitch::S2 => 2 + link,
        }
    }

    /// `NETNS:IFACE` of port `port` (0 the engine, 1 and 2 the uplinks) as `sluice switch`
    /// prints it in its report.
    pub fn port_name(self, port: u8) -> String {
        let iface = match port {
            0 => self.engine_port().to_owned(),
            link => self.uplink(link),
        };
        format!("{}:{iface}", self.netns())
    }
}

/// The arguments of `sluice switch` for `switch` (after `switch`): its three ports, the far
/// engine's MAC routed over both uplinks by the message balancer, each uplink a pathlet
/// with ECN feedback and `impairments` (port keys, e.g. [`UPLINK_IMPAIRMENTS`]; empty for
/// none), floods on uplink 1 only.
pub fn mtp_switch_args(switch: MtpSwitch, impairments: &str) -> Vec<String> {
    let mut args = vec!["--port".to_owned(), switch.port_name(0)];
    for link in 1..=2u8 {
        let mut spec = format!(
            "{},pathlet={},feedback=ecn",
            switch.port_name(link),
            switch.pathlet(link)
        );
        if !impairments.is_empty() {
            spec.push(',');
            spec.push_str(impairments);
        }
        if link == 2 {
            spec.push_str(",flood=off");
        }
        args.extend(["--port".to_owned(), spec]);
    }
    args.extend([
        "--route".to_owned(),
        format!("{}=1+2", mac_string(switch.far_mac())),
        "--balancer".to_owned(),
        "message".to_owned(),
    ]);
    args
}

impl Lab {
    /// Builds the MTP lab (the default lab, the engines' veths moved into the switches'
    /// namespaces, two links between them). Starts from a clean lab, so running it twice
    /// gives the same lab.
    pub fn up_mtp(&self) -> Result<(), LabError> {
        crate::check_root()?;
        if !self.namespaces_present()?.is_empty() {
            self.down()?;
        }
        self.up()?;
        let existing = self.namespaces_present()?;
        for switch in MtpSwitch::ALL {
            let ns = switch.netns();
            self.add_namespace(ns, &existing)?;
            // The engine's veth end leaves br0 for the switch.
            let port = switch.engine_port();
            self.ip_in(NS_CLIENT, &["link", "set", port, "nomaster"])?;
            self.ip_in(NS_CLIENT, &["link", "set", port, "netns", ns])?;
            self.switch_port_up(ns, port, None)?;
        }
        for link in 1..=2u8 {
            let (s1, s2) = (MtpSwitch::S1, MtpSwitch::S2);
            self.veth(s1.netns(), &s1.uplink(link), s2.netns(), &s2.uplink(link))?;
            for s in MtpSwitch::ALL {
                self.switch_port_up(s.netns(), &s.uplink(link), Some(s.uplink_mac(link)))?;
            }
        }
        Ok(())
    }

    /// Readies a port of an MTP-lab switch: its MAC if given, no address, the offloads
    /// that would hand the switch frames larger than the wire off, up.
    fn switch_port_up(&self, ns: &str, iface: &str, mac: Option<[u8; 6]>) -> Result<(), LabError> {
        if let Some(mac) = mac {
            self.ip_in(ns, &["link", "set", iface, "address", &mac_string(mac)])?;
        }
        self.ip_in(ns, &["addr", "flush", "dev", iface])?;
        self.ethtool_features(ns, iface, &SWITCH_FED_OFFLOADS_OFF)?;
        self.ip_in(ns, &["link", "set", iface, "up"])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_args_route_the_far_engine_over_both_uplinks() {
        let a = mtp_switch_args(MtpSwitch::S1, UPLINK_IMPAIRMENTS);
        assert_eq!(a[1], "sluice-m1:sl-a-br");
        assert!(a[3].starts_with("sluice-m1:m1-u1,pathlet=1,feedback=ecn,loss=0.01"));
        assert!(a[5].ends_with(",flood=off") && !a[3].contains("flood"));
        assert_eq!(a[7], "02:77:00:00:00:04=1+2");
        let b = mtp_switch_args(MtpSwitch::S2, "");
        assert_eq!(b[5], "sluice-m2:m2-u2,pathlet=4,feedback=ecn,flood=off");
        assert_eq!(b[7], "02:77:00:00:00:01=1+2");
        for s in MtpSwitch::ALL {
            assert!(is_mtp_namespace(s.netns()));
            assert!(s.uplink(2).len() <= 15);
        }
        assert!(!is_mtp_namespace("sluice-s"));
    }
}
