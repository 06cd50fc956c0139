//! ECN congestion-experienced marking of IPv4-in-Ethernet frames.
//!
//! Implemented here (rather than via `sluice-wire`) so the model needs only the few header
//! fields it touches. Never panics on any input.

/// Ethertype of IPv4.
const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype (TPID) of an 802.1Q VLAN tag.
const ETHERTYPE_VLAN: u16 = 0x8100;
/// The two ECN bits of the IPv4 TOS byte.
const ECN_MASK: u8 = 0b11;
/// Congestion experienced.
const ECN_CE: u8 = 0b11;

/// What [`mark_ce`] did to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EcnOutcome {
    /// Not an Ethernet frame carrying a plausible IPv4 header; untouched.
    NotIpv4,
    /// IPv4 but Not-ECT; untouched.
    NotEct,
    /// Already CE; untouched.
    AlreadyCe,
    /// ECT(0) or ECT(1) rewritten to CE, header checksum updated.
    Marked,
}

/// Reads a big-endian u16 at `at`, if in bounds.
fn be16(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// One's-complement 16-bit addition with end-around carry.
fn ones_add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// Sets CE on an ECT IPv4 packet inside an Ethernet frame (one optional
/// 802.1Q tag allowed) and fixes the header checksum incrementally (RFC 1624,
/// eqn. 3: `HC' = ~(~HC + ~m + m')`).
pub fn mark_ce(frame: &mut [u8]) -> EcnOutcome {
    let Some(mut ethertype) = be16(frame, 12) else {
        return EcnOutcome::NotIpv4;
    };
    let mut off = 14;
    if ethertype == ETHERTYPE_VLAN {
        let Some(inner) = be16(frame, 16) else {
            return EcnOutcome::NotIpv4;
        };
        ethertype = inner;
        off = 18;
    }
    if ethertype != ETHERTYPE_IPV4 {
        return EcnOutcome::NotIpv4;
    }
    let Some(&ver_ihl) = frame.get(off) else {
        return EcnOutcome::NotIpv4;
    };
    let ihl = usize::from(ver_ihl & 0x0f);
    if ver_ihl >> 4 != 4 || ihl < 5 {
        return EcnOutcome::NotIpv4;
    }
    let Some(hdr) = frame.get_mut(off..off + ihl * 4) else {
        return EcnOutcome::NotIpv4;
    };
    let [_, tos, _, _, _, _, _, _, _, _, ck_hi, ck_lo, ..] = hdr else {
        return EcnOutcome::NotIpv4;
    };
    match *tos & ECN_MASK {
        0 => EcnOutcome::NotEct,
        ECN_CE => EcnOutcome::AlreadyCe,
        _ => {
            let old_word = u16::from_be_bytes([ver_ihl, *tos]);
            *tos |= ECN_CE;
            let new_word = u16::from_be_bytes([ver_ihl, *tos]);
            let hc = u16::from_be_bytes([*ck_hi, *ck_lo]);
            let new_hc = !ones_add(ones_add(!hc, !old_word), new_word);
            [*ck_hi, *ck_lo] = new_hc.to_be_bytes();
            EcnOutcome::Marked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One's-complement sum over a header; 0xffff means the checksum verifies.
    fn verify(hdr: &[u8]) -> bool {
        let mut sum = 0u16;
        for c in hdr.chunks(2) {
            let w = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
            sum = ones_add(sum, w);
        }
        sum == 0xffff
    }

    fn fill_checksum(hdr: &mut [u8]) {
        hdr[10] = 0;
        hdr[11] = 0;
        let mut sum = 0u16;
        for c in hdr.chunks(2) {
            sum = ones_add(sum, u16::from_be_bytes([c[0], c[1]]));
        }
        hdr[10..12].copy_from_slice(&(!sum).to_be_bytes());
    }

    fn frame(vlan: bool, tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let ip_off = f.len();
        f.extend_from_slice(&[
            0x45, tos, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0u8; 20]);
        fill_checksum(&mut f[ip_off..ip_off + 20]);
        f
    }

    #[test]
    fn marks_ect0_and_ect1_with_valid_checksum() {
        for vlan in [false, true] {
            for tos in [0b01u8, 0b10, 0xb9, 0xfe] {
                let mut f = frame(vlan, tos);
                assert_eq!(mark_ce(&mut f), EcnOutcome::Marked);
                let off = if vlan { 18 } else { 14 };
                assert_eq!(f[off + 1] & 3, 3);
                assert_eq!(f[off + 1] & !3, tos & !3);
                assert!(verify(&f[off..off + 20]));
            }
        }
    }

    #[test]
    fn leaves_not_ect_and_ce_alone() {
        let mut f = frame(false, 0x00);
        let orig = f.clone();
        assert_eq!(mark_ce(&mut f), EcnOutcome::NotEct);
        assert_eq!(f, orig);
        let mut f = frame(true, 0x03);
        let orig = f.clone();
        assert_eq!(mark_ce(&mut f), EcnOutcome::AlreadyCe);
        assert_eq!(f, orig);
    }

    #[test]
    fn rejects_non_ipv4_and_truncated() {
        let mut f = frame(false, 1);
        f[12] = 0x86;
        f[13] = 0xdd;
        assert_eq!(mark_ce(&mut f), EcnOutcome::NotIpv4);
        let mut f = frame(false, 1);
        f.truncate(14 + 19);
        assert_eq!(mark_ce(&mut f), EcnOutcome::NotIpv4);
        let mut f = frame(false, 1);
        f[14] = 0x44;
        assert_eq!(mark_ce(&mut f), EcnOutcome::NotIpv4);
        assert_eq!(mark_ce(&mut []), EcnOutcome::NotIpv4);
        assert_eq!(mark_ce(&mut [0u8; 17][..]), EcnOutcome::NotIpv4);
    }

    proptest! {
        #[test]
        fn never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = mark_ce(&mut bytes);
        }

        #[test]
        fn checksum_stays_valid(vlan: bool, tos: u8, ihl in 5u8..=15, body in proptest::collection::vec(any::<u8>(), 60)) {
            let mut f = vec![0u8; 12];
            if vlan {
                f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
            }
            f.extend_from_slice(&[0x08, 0x00]);
            let off = f.len();
            let hlen = usize::from(ihl) * 4;
            f.extend_from_slice(&body[..hlen]);
            f[off] = 0x40 | ihl;
            f[off + 1] = tos;
            fill_checksum(&mut f[off..off + hlen]);
            let out = mark_ce(&mut f);
            let expected = match tos & 3 {
                0 => EcnOutcome::NotEct,
                3 => EcnOutcome::AlreadyCe,
                _ => EcnOutcome::Marked,
            };
            prop_assert_eq!(out, expected);
            prop_assert!(verify(&f[off..off + hlen]));
        }
    }
}
