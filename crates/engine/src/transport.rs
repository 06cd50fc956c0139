//! A second transport beside the TCP core on the same device (DESIGN.md "Three transports,
//! one engine"): the classifier that picks its frames, and the shape the loop drives it by.
//! The RDMA transport (RoCEv2: IPv4, UDP destination port 4791) is the one so far.

use sluice_tcp::Instant;

/// The UDP port of RoCEv2 (IBA annex A17).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// A sans-IO transport the engine drives beside the TCP core: frames in, due timers,
/// frames out, its next deadline.
pub trait Transport {
    /// A frame the classifier gave it ([`is_rocev2`]).
    fn handle_frame(&mut self, now: Instant, frame: &[u8]);
    /// Writes its next frame into `buf`; the length, or None when it has nothing to send.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    /// Its earliest deadline.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Runs its timers due by `now`.
    fn handle_timeout(&mut self, now: Instant);
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const IP_PROTOCOL_UDP: u8 = 17;

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
}

/// Whether `frame` is RoCEv2: Ethernet (optionally one VLAN tag), IPv4 with a sane IHL,
/// not a fragment, UDP to port 4791. Reads only the headers' fixed fields and never
/// trusts a length: a short or odd frame is simply not RoCEv2 (the TCP core then counts it).
pub fn is_rocev2(frame: &[u8]) -> bool {
    let mut l3 = 14;
    let mut ethertype = be16(frame, 12);
    if ethertype == Some(ETHERTYPE_VLAN) {
        ethertype = be16(frame, 16);
        l3 = 18;
    }
    if ethertype != Some(ETHERTYPE_IPV4) {
        return false;
    }
    let Some(&vihl) = frame.get(l3) else {
        return false;
    };
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 {
        return false;
    }
    // Fragments (MF set or an offset) are not RoCEv2: RoCE never fragments (DF is set).
    let Some(frag) = be16(frame, l3 + 6) else {
        return false;
    };
    if frag & 0x3fff != 0 || frame.get(l3 + 9) != Some(&IP_PROTOCOL_UDP) {
        return false;
    }
    be16(frame, l3 + ihl + 2) == Some(ROCEV2_UDP_PORT)
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
}
