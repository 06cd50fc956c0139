//! The transports beside the TCP core on the same device (DESIGN.md "Three transports, one
//! engine"): the classifier that picks their frames, the shape the loop drives them by, and
//! the fixed set of them an application owns ([`Transports`]). RDMA (RoCEv2: IPv4, UDP
//! destination port 4791) and MTP (IPv4 protocol 253, or UDP destination port 9919) so far.

use sluice_tcp::Instant;

/// The UDP port of RoCEv2 (IBA annex A17).
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// MTP's IPv4 protocol number (RFC 3692's experimental range; docs/mtp.md).
pub const MTP_IP_PROTOCOL: u8 = 253;
/// MTP's UDP port, for networks that pass only UDP (docs/mtp.md).
pub const MTP_UDP_PORT: u16 = 9919;

/// A sans-IO transport the engine drives beside the TCP core: frames in, due timers,
/// frames out, its next deadline.
pub trait Transport {
    /// A frame the classifier gave it ([`classify`]).
    fn handle_frame(&mut self, now: Instant, frame: &[u8]);
    /// Writes its next frame into `buf`; the length, or None when it has nothing to send.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    /// Its earliest deadline.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Runs its timers due by `now`.
    fn handle_timeout(&mut self, now: Instant);
}

/// The transports an application owns beside the TCP core, by name: a small fixed set, so
/// that the classifier dispatches with a match and a TCP frame costs no virtual call.
#[derive(Default)]
pub struct Transports<'a> {
    /// The RDMA transport: RoCEv2 frames ([`is_rocev2`]).
    pub rdma: Option<&'a mut dyn Transport>,
    /// The MTP transport: MTP frames ([`is_mtp`]).
    pub mtp: Option<&'a mut dyn Transport>,
}

impl<'a> Transports<'a> {
    /// None at all: every frame goes to the TCP core.
    pub fn none() -> Transports<'a> {
        Transports::default()
    }

    /// The transport for a frame of class `class`; None for the core's frames and for a
    /// transport this set does not have (its frames then go to the core, which counts them).
    pub fn for_class(&mut self, class: Class) -> Option<&mut (dyn Transport + 'a)> {
        match class {
            Class::Core => None,
            Class::Rdma => self.rdma.as_deref_mut(),
            Class::Mtp => self.mtp.as_deref_mut(),
        }
    }

    /// Each transport present, in a fixed order (RDMA, MTP).
    pub fn each(&mut self) -> impl Iterator<Item = &mut (dyn Transport + 'a)> {
        [self.rdma.as_deref_mut(), self.mtp.as_deref_mut()]
            .into_iter()
            .flatten()
    }

    /// The earliest deadline of any of them.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.each().filter_map(|t| t.poll_timeout()).min()
    }
}

/// Which core a frame is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// The TCP core (TCP, ARP, ICMP, and everything no other transport claims).
    Core,
    /// The RDMA transport.
    Rdma,
    /// The MTP transport.
    Mtp,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const IP_PROTOCOL_UDP: u8 = 17;

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
}

/// The IPv4 protocol and where the transport header starts, for an Ethernet (optionally one
/// VLAN tag) IPv4 frame with a sane IHL that is not a fragment; None otherwise. Reads only
/// the headers' fixed fields and never trusts a length.
fn ipv4_l4(frame: &[u8]) -> Option<(u8, usize)> {
    let mut l3 = 14;
    let mut ethertype = be16(frame, 12);
    if ethertype == Some(ETHERTYPE_VLAN) {
        ethertype = be16(frame, 16);
        l3 = 18;
    }
    if ethertype != Some(ETHERTYPE_IPV4) {
        return None;
    }
    let vihl = *frame.get(l3)?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 {
        return None;
    }
    // Fragments (MF set or an offset) are neither RoCEv2 nor MTP: both set DF and never
    // fragment; the core counts them.
    if be16(frame, l3 + 6)? & 0x3fff != 0 {
        return None;
    }
    Some((*frame.get(l3 + 9)?, l3 + ihl))
}

/// Which core `frame` is for: one parse of the fixed header fields, no panic on any input;
/// a short or odd frame is the core's (which then counts it).
pub fn classify(frame: &[u8]) -> Class {
    match ipv4_l4(frame) {
        Some((MTP_IP_PROTOCOL, _)) => Class::Mtp,
        Some((IP_PROTOCOL_UDP, l4)) => match be16(frame, l4 + 2) {
            Some(ROCEV2_UDP_PORT) => Class::Rdma,
            Some(MTP_UDP_PORT) => Class::Mtp,
            _ => Class::Core,
        },
        _ => Class::Core,
    }
}

/// Whether `frame` is RoCEv2: IPv4, not a fragment, UDP to port 4791.
pub fn is_rocev2(frame: &[u8]) -> bool {
    classify(frame) == Class::Rdma
}

/// Whether `frame` is MTP: IPv4, not a fragment, protocol 253 or UDP to port 9919.
pub fn is_mtp(frame: &[u8]) -> bool {
    classify(frame) == Class::Mtp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 (with `options` bytes of options) + UDP header to `dport`.
    fn frame(options: usize, frag: u16, protocol: u8, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut ip = vec![0u8; 20 + options];
        ip[0] = 0x40 | ((20 + options) / 4) as u8;
        ip[6..8].copy_from_slice(&frag.to_be_bytes());
        ip[9] = protocol;
        f.extend_from_slice(&ip);
        let mut udp = vec![0u8; 8];
        udp[0..2].copy_from_slice(&0xc000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&udp);
        f
    }

    #[test]
    fn rocev2_is_ipv4_udp_to_4791_only() {
        assert!(is_rocev2(&frame(0, 0x4000, 17, 4791)), "DF set is fine");
        assert!(!is_rocev2(&frame(0, 0, 17, 4792)), "another UDP port");
        assert!(!is_rocev2(&frame(0, 0, 6, 4791)), "TCP");
        let mut arp = frame(0, 0, 17, 4791);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(!is_rocev2(&arp), "not IPv4");
        let mut v6 = frame(0, 0, 17, 4791);
        v6[14] = 0x65;
        assert!(!is_rocev2(&v6), "IP version 6 in an IPv4 ethertype");
    }

    #[test]
    fn options_move_the_udp_header_and_a_bad_ihl_is_refused() {
        // With 8 bytes of options the port is at 14 + 28 + 2.
        assert!(is_rocev2(&frame(8, 0, 17, 4791)));
        let mut f = frame(8, 0, 17, 4791);
        // Claiming no options reads the options as UDP: not 4791.
        f[14] = 0x45;
        assert!(!is_rocev2(&f));
        f[14] = 0x44;
        assert!(!is_rocev2(&f), "IHL below 5");
        // IHL 15 points past the end of the frame.
        f[14] = 0x4f;
        assert!(!is_rocev2(&f));
    }

    #[test]
    fn fragments_are_not_rocev2() {
        assert!(!is_rocev2(&frame(0, 0x2000, 17, 4791)), "more fragments");
        assert!(!is_rocev2(&frame(0, 0x0001, 17, 4791)), "an offset");
    }

    #[test]
    fn short_frames_never_panic_and_are_not_rocev2() {
        let f = frame(0, 0, 17, 4791);
        for n in 0..f.len() - 4 {
            assert!(!is_rocev2(&f[..n]), "cut at {n}");
        }
        assert!(
            is_rocev2(&f[..f.len() - 4]),
            "the destination port is enough"
        );
    }

    #[test]
    fn one_vlan_tag_is_looked_through() {
        let plain = frame(0, 0, 17, 4791);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        tagged.extend_from_slice(&[0, 5]);
        tagged.extend_from_slice(&plain[12..]);
        assert!(is_rocev2(&tagged));
    }

    /// An Ethernet + IPv4 frame of `protocol` with 16 bytes of (zero) transport header.
    fn ip_frame(frag: u16, protocol: u8) -> Vec<u8> {
        let mut f = frame(0, frag, protocol, 0);
        f.extend_from_slice(&[0; 8]);
        f
    }

    #[test]
    fn mtp_is_ipv4_protocol_253_or_udp_to_9919() {
        assert!(is_mtp(&ip_frame(0x4000, 253)), "IPv4 protocol 253, DF set");
        assert!(is_mtp(&frame(0, 0, 17, 9919)), "UDP to 9919");
        assert!(!is_mtp(&frame(0, 0, 17, 9918)), "another UDP port");
        assert!(!is_mtp(&ip_frame(0, 254)), "another protocol");
        assert!(!is_mtp(&frame(0, 0, 6, 9919)), "TCP to 9919 is TCP");
        assert!(!is_mtp(&frame(0, 0, 17, 4791)), "RoCEv2 is not MTP");
        assert!(!is_rocev2(&ip_frame(0, 253)), "MTP is not RoCEv2");
        let mut arp = ip_frame(0, 253);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(!is_mtp(&arp), "not IPv4");
        let mut v6 = ip_frame(0, 253);
        v6[14] = 0x65;
        assert!(!is_mtp(&v6), "IP version 6 in an IPv4 ethertype");
    }

    #[test]
    fn mtp_fragments_and_bad_ihl_are_the_cores() {
        assert!(!is_mtp(&ip_frame(0x2000, 253)), "more fragments");
        assert!(!is_mtp(&ip_frame(0x0001, 253)), "an offset");
        let mut f = frame(8, 0, 17, 9919);
        assert!(is_mtp(&f), "options move the UDP header");
        f[14] = 0x45;
        assert!(!is_mtp(&f), "claiming no options reads the options as UDP");
        f[14] = 0x44;
        assert!(!is_mtp(&f), "IHL below 5");
        f[14] = 0x4f;
        assert!(!is_mtp(&f), "IHL past the end");
    }

    #[test]
    fn short_frames_never_panic_and_are_not_mtp() {
        let p = ip_frame(0, 253);
        // The protocol byte is at 14 + 9: a frame cut before it is not MTP.
        for n in 0..24 {
            assert!(!is_mtp(&p[..n]), "cut at {n}");
            assert_eq!(classify(&p[..n]), Class::Core);
        }
        assert!(is_mtp(&p[..24]), "the protocol is enough");
        let u = frame(0, 0, 17, 9919);
        for n in 0..u.len() - 4 {
            assert!(!is_mtp(&u[..n]), "UDP cut at {n}");
        }
        // Every byte value at every position of a short frame: no panic.
        for n in 0..40 {
            for b in [0u8, 0x08, 0x45, 0x81, 0xfd, 0xff] {
                let _ = classify(&vec![b; n]);
            }
        }
    }

    #[test]
    fn a_set_without_a_transport_leaves_its_frames_to_the_core() {
        let mut set = Transports::none();
        assert!(set.for_class(Class::Mtp).is_none());
        assert!(set.for_class(Class::Rdma).is_none());
        assert!(set.poll_timeout().is_none());
        assert_eq!(set.each().count(), 0);
    }
}
