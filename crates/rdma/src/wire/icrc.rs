//! The invariant CRC (ICRC, IBA vol. 1 and its RoCEv2 annex A17): CRC-32 (the IEEE
//! polynomial, as Ethernet's FCS) over the fields no router changes, stored little-endian
//! as the last 4 bytes of the UDP payload.
//!
//! The masking follows Linux soft-RoCE, `drivers/infiniband/sw/rxe/rxe_icrc.c`
//! (`rxe_icrc_hdr`): the CRC starts as if over 8 bytes of 1s standing for the LRH RoCE does
//! not have; the IPv4 header is hashed with ToS (DSCP and ECN), TTL and header checksum set
//! to 1s; the UDP header with its checksum set to 1s; the BTH with byte 4 (FECN, BECN and
//! reserved bits) set to 1s; then the extension headers, payload and pad as they are. Our
//! own code, not a copy: one CRC state fed the pieces in order.
//!
//! No-panic contract: every function takes arbitrary bytes; one too short for IPv4, UDP,
//! BTH and ICRC is `Truncated`.

use super::bth;
use super::error::RoceError;
use sluice_wire::udp;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// The 8 bytes of 1s hashed in place of the InfiniBand LRH.
const MASKED_LRH: [u8; 8] = [0xFF; 8];

/// IPv4 header bytes that routers change: ToS (1), TTL (8), header checksum (10-11).
const IPV4_VARIANT: [usize; 4] = [1, 8, 10, 11];
/// UDP checksum bytes.
const UDP_VARIANT: [usize; 2] = [6, 7];

/// Splits an IPv4 packet holding a RoCEv2 datagram into its IP header length and checks
/// it is long enough for UDP, BTH and ICRC.
fn ip_header_len(ip_packet: &[u8]) -> Result<usize, RoceError> {
    let ihl = usize::from(ip_packet.first().copied().unwrap_or(0) & 0x0F) * 4;
    let need = ihl.max(20) + udp::HEADER_LEN + bth::HEADER_LEN + ICRC_LEN;
    if ip_packet.len() < need {
        return Err(RoceError::Truncated {
            need,
            have: ip_packet.len(),
        });
    }
    Ok(ihl.max(20))
}

/// The ICRC of an IPv4 packet carrying a RoCEv2 datagram, computed over everything but the
/// packet's last 4 bytes (where the ICRC goes). `ip_packet` ends where the UDP datagram ends.
pub fn compute_ipv4(ip_packet: &[u8]) -> Result<u32, RoceError> {
    let ihl = ip_header_len(ip_packet)?;
    let (ip, rest) = ip_packet.split_at(ihl);
    let (udp_h, rest) = rest.split_at(udp::HEADER_LEN);
    let (bth_h, rest) = rest.split_at(bth::HEADER_LEN);
    let (tail, _icrc) = rest.split_at(rest.len() - ICRC_LEN);

    let mut crc = crc32fast::Hasher::new();
    crc.update(&MASKED_LRH);
    let mut fixed = [0u8; 20];
    fixed.copy_from_slice(&ip[..20]);
    for i in IPV4_VARIANT {
        fixed[i] = 0xFF;
    }
    crc.update(&fixed);
    // IPv4 options, if any, are invariant.
    crc.update(&ip[20..]);
    let mut u = [0u8; udp::HEADER_LEN];
    u.copy_from_slice(udp_h);
    for i in UDP_VARIANT {
        u[i] = 0xFF;
    }
    crc.update(&u);
    let mut b = [0u8; bth::HEADER_LEN];
    b.copy_from_slice(bth_h);
    b[bth::offset::FECN_BECN] = 0xFF;
    crc.update(&b);
    crc.update(tail);
    Ok(crc.finalize())
}

/// The ICRC the packet carries in its last 4 bytes.
pub fn carried(ip_packet: &[u8]) -> Result<u32, RoceError> {
    ip_header_len(ip_packet)?;
    let t = ip_packet
        .last_chunk::<ICRC_LEN>()
        .ok_or(RoceError::Truncated {
            need: ICRC_LEN,
            have: ip_packet.len(),
        })?;
    Ok(u32::from_le_bytes(*t))
}

/// Checks the ICRC of an IPv4 packet carrying a RoCEv2 datagram.
pub fn verify_ipv4(ip_packet: &[u8]) -> Result<(), RoceError> {
    let computed = compute_ipv4(ip_packet)?;
    let carried = carried(ip_packet)?;
    if computed != carried {
        return Err(RoceError::Icrc { computed, carried });
    }
    Ok(())
}

/// Computes the ICRC and writes it into the packet's last 4 bytes.
pub fn fill_ipv4(ip_packet: &mut [u8]) -> Result<(), RoceError> {
    let c = compute_ipv4(ip_packet)?;
    let len = ip_packet.len();
    if let Some(t) = ip_packet.get_mut(len - ICRC_LEN..) {
        t.copy_from_slice(&c.to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-laid IPv4/UDP/BTH (ACKNOWLEDGE with AETH) packet.
    fn packet() -> Vec<u8> {
        let mut p = vec![
            0x45, 0x00, 0x00, 0x24, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, // IPv4
            10, 0, 0, 1, 10, 0, 0, 2, //
            0xC0, 0x00, 0x12, 0xB7, 0x00, 0x10, 0x00, 0x00, // UDP
            0x11, 0x40, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x07, // BTH
            0x1F, 0x00, 0x00, 0x01, // AETH
        ];
        p.extend([0; ICRC_LEN]);
        p
    }

    #[test]
    fn variant_fields_do_not_change_it_and_invariant_ones_do() {
        let p = packet();
        let c = compute_ipv4(&p).expect("long enough");
        let mut v = p.clone();
        v[1] = 0x03; // ECN CE
        v[8] = 0x01; // TTL
        v[10] = 0xAB; // IP checksum
        v[26] = 0x55; // UDP checksum
        v[32] = 0xC0; // FECN, BECN
        assert_eq!(compute_ipv4(&v), Ok(c));
        for i in [0, 2, 12, 19, 20, 24, 28, 29, 33, 37, 40, 43] {
            let mut w = p.clone();
            w[i] ^= 0x01;
            assert_ne!(compute_ipv4(&w), Ok(c), "byte {i} is invariant");
        }
    }

    #[test]
    fn fill_then_verify_and_truncation() {
        let mut p = packet();
        fill_ipv4(&mut p).expect("long enough");
        assert_eq!(verify_ipv4(&p), Ok(()));
        p[41] ^= 0x80;
        assert!(matches!(verify_ipv4(&p), Err(RoceError::Icrc { .. })));
        assert_eq!(
            compute_ipv4(&p[..43]),
            Err(RoceError::Truncated { need: 44, have: 43 })
        );
        assert!(compute_ipv4(&[]).is_err());
    }
}
