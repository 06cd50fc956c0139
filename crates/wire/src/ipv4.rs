//! IPv4 (RFC 791) headers, with ECN (RFC 3168) helpers.

use crate::checksum;
use crate::field;
use crate::WireError;
use std::net::Ipv4Addr;

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of TCP.
pub const PROTOCOL_TCP: u8 = 6;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1FFF;

/// The ECN codepoint in the low two bits of the TOS byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    /// Not ECN-capable transport (0b00).
    NotEct,
    /// ECN-capable transport, ECT(1) (0b01).
    Ect1,
    /// ECN-capable transport, ECT(0) (0b10).
    Ect0,
    /// Congestion experienced (0b11).
    Ce,
}

impl Ecn {
    /// Decodes the low two bits of `tos`.
    #[inline]
    pub fn from_tos(tos: u8) -> Ecn {
        match tos & 0b11 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit codepoint.
    #[inline]
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// Whether the transport is ECN-capable (ECT(0), ECT(1) or CE).
    #[inline]
    pub fn is_ect(self) -> bool {
        self != Ecn::NotEct
    }
}

/// A parsed IPv4 header (options are skipped and not represented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol number.
    pub protocol: u8,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// Differentiated services code point (6 bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Identification field.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_fragment: bool,
    /// More-fragments flag.
    pub more_fragments: bool,
    /// Fragment offset in 8-byte units (13 bits).
    pub fragment_offset: u16,
}

/// Validates the header structure; returns (header_len, total_len).
#[inline(always)]
fn check_structure(packet: &[u8]) -> Result<(usize, usize), WireError> {
    let h = packet
        .first_chunk::<HEADER_LEN>()
        .ok_or(WireError::Truncated)?;
    let vihl = field::u8_at(h, 0);
    if vihl >> 4 != 4 {
        return Err(WireError::Malformed);
    }
    let header_len = usize::from(vihl & 0x0F) * 4;
    if header_len < HEADER_LEN {
        return Err(WireError::Malformed);
    }
    let total_len = usize::from(field::be16(h, 2));
    if header_len > packet.len() {
        return Err(WireError::Truncated);
    }
    if total_len < header_len {
        return Err(WireError::Malformed);
    }
    if total_len > packet.len() {
        return Err(WireError::Truncated);
    }
    Ok((header_len, total_len))
}

impl Ipv4Repr {
    /// Parses a packet; returns the header and exactly `total_len - IHL*4` payload bytes.
    #[inline]
    pub fn parse(packet: &[u8], verify_checksum: bool) -> Result<(Ipv4Repr, &[u8]), WireError> {
        let (header_len, total_len) = check_structure(packet)?;
        let h = packet
            .first_chunk::<HEADER_LEN>()
            .ok_or(WireError::Truncated)?;
        if verify_checksum {
            let full = packet.get(..header_len).ok_or(WireError::Truncated)?;
            if checksum::fold(checksum::sum(full)) != 0xFFFF {
                return Err(WireError::Checksum);
            }
        }
        let payload = packet
            .get(header_len..total_len)
            .ok_or(WireError::Truncated)?;
        let tos = field::u8_at(h, 1);
        let frag = field::be16(h, 6);
        let repr = Ipv4Repr {
            src: field::ipv4(h, 12),
            dst: field::ipv4(h, 16),
            protocol: field::u8_at(h, 9),
            // Both lengths are <= 0xFFFF, and total_len >= header_len.
            payload_len: (total_len - header_len) as u16,
            ttl: field::u8_at(h, 8),
            dscp: tos >> 2,
            ecn: Ecn::from_tos(tos),
            ident: field::be16(h, 4),
            dont_fragment: frag & FLAG_DF != 0,
            more_fragments: frag & FLAG_MF != 0,
            fragment_offset: frag & FRAG_OFFSET_MASK,
        };
        Ok((repr, payload))
    }

    /// Whether the packet is a fragment (MF set or nonzero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_fragments || self.fragment_offset != 0
    }

    /// Header length emitted by [`Ipv4Repr::emit`] (always 20).
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with checksum; `Malformed` if 20 + payload_len exceeds 65535.
    ///
    /// `dscp` is masked to 6 bits and `fragment_offset` to 13 bits.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let h = buf
            .first_chunk_mut::<HEADER_LEN>()
            .ok_or(WireError::BufferTooSmall)?;
        let total_len = self
            .payload_len
            .checked_add(HEADER_LEN as u16)
            .ok_or(WireError::Malformed)?;
        let mut frag = self.fragment_offset & FRAG_OFFSET_MASK;
        if self.dont_fragment {
            frag |= FLAG_DF;
        }
        if self.more_fragments {
            frag |= FLAG_MF;
        }
        let tos = (self.dscp << 2) | self.ecn.bits();
        field::put8(h, 0, 0x45);
        field::put8(h, 1, tos);
        field::put16(h, 2, total_len);
        field::put16(h, 4, self.ident);
        field::put16(h, 6, frag);
        field::put8(h, 8, self.ttl);
        field::put8(h, 9, self.protocol);
        field::put(h, 12, self.src.octets());
        field::put(h, 16, self.dst.octets());
        // The checksum is summed from the field values rather than read back from the bytes
        // just written (which would stall on store-to-load forwarding); same result.
        let (src, dst) = (self.src.to_bits(), self.dst.to_bits());
        let words = (0x4500 | u32::from(tos))
            + u32::from(total_len)
            + u32::from(self.ident)
            + u32::from(frag)
            + (u32::from(self.ttl) << 8 | u32::from(self.protocol))
            + (src >> 16)
            + (src & 0xFFFF)
            + (dst >> 16)
            + (dst & 0xFFFF);
        let c = !checksum::fold(words);
        field::put16(h, 10, c);
        Ok(HEADER_LEN)
    }
}

/// Marks ECN CE in place, updating the header checksum incrementally (RFC 1624).
///
/// The caller should only mark ECN-capable packets (RFC 3168 forbids marking
/// Not-ECT ones); this function sets CE regardless. Only the 20-byte fixed
/// header must be present; the version must be 4.
#[inline]
pub fn set_ecn_ce(packet: &mut [u8]) -> Result<(), WireError> {
    let h = packet
        .first_chunk_mut::<HEADER_LEN>()
        .ok_or(WireError::Truncated)?;
    let old_word = field::be16(h, 0);
    if old_word >> 12 != 4 {
        return Err(WireError::Malformed);
    }
    let new_word = old_word | 0b11;
    if new_word != old_word {
        let c = checksum::update(field::be16(h, 10), old_word, new_word);
        field::put16(h, 0, new_word);
        field::put16(h, 10, c);
    }
    Ok(())
}

/// A checked read/write view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer`, checking version, IHL and total length (not the checksum).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_structure(buffer.as_ref())?;
        Ok(Ipv4Packet { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline(always)]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header length in bytes (IHL * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(field::u8_at(self.b(), 0) & 0x0F) * 4
    }

    /// DSCP (upper 6 bits of TOS).
    #[inline]
    pub fn dscp(&self) -> u8 {
        field::u8_at(self.b(), 1) >> 2
    }

    /// ECN codepoint.
    #[inline]
    pub fn ecn(&self) -> Ecn {
        Ecn::from_tos(field::u8_at(self.b(), 1))
    }

    /// Total length field.
    #[inline]
    pub fn total_len(&self) -> u16 {
        field::be16(self.b(), 2)
    }

    /// Identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        field::be16(self.b(), 4)
    }

    /// Don't-fragment flag.
    #[inline]
    pub fn dont_fragment(&self) -> bool {
        field::be16(self.b(), 6) & FLAG_DF != 0
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_fragments(&self) -> bool {
        field::be16(self.b(), 6) & FLAG_MF != 0
    }

    /// Fragment offset in 8-byte units.
    #[inline]
    pub fn fragment_offset(&self) -> u16 {
        field::be16(self.b(), 6) & FRAG_OFFSET_MASK
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        field::u8_at(self.b(), 8)
    }

    /// Payload protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        field::u8_at(self.b(), 9)
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        field::be16(self.b(), 10)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        field::ipv4(self.b(), 12)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        field::ipv4(self.b(), 16)
    }

    /// Header options (between byte 20 and the header length).
    #[inline]
    pub fn options(&self) -> &[u8] {
        self.b().get(HEADER_LEN..self.header_len()).unwrap_or(&[])
    }

    /// Whether the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        match self.b().get(..self.header_len()) {
            Some(h) => checksum::fold(checksum::sum(h)) == 0xFFFF,
            None => false,
        }
    }

    /// The payload: bytes from the header end up to the total length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = usize::from(self.total_len());
        self.b().get(self.header_len()..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the TTL, updating the checksum incrementally.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        let b = self.buffer.as_mut();
        let old = field::be16(b, 8);
        let new = (u16::from(ttl) << 8) | (old & 0xFF);
        let c = checksum::update(field::be16(b, 10), old, new);
        field::put16(b, 8, new);
        field::put16(b, 10, c);
    }

    /// Sets the ECN codepoint, updating the checksum incrementally.
    #[inline]
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let b = self.buffer.as_mut();
        let old = field::be16(b, 0);
        let new = (old & !0b11) | u16::from(ecn.bits());
        let c = checksum::update(field::be16(b, 10), old, new);
        field::put16(b, 0, new);
        field::put16(b, 10, c);
    }

    /// Sets the source address (checksum not updated; call `fill_checksum`).
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        field::put(self.buffer.as_mut(), 12, addr.octets());
    }

    /// Sets the destination address (checksum not updated; call `fill_checksum`).
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        field::put(self.buffer.as_mut(), 16, addr.octets());
    }

    /// Recomputes and stores the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        field::put16(b, 10, 0);
        if let Some(h) = b.get(..hl) {
            let c = checksum::checksum(h);
            field::put16(b, 10, c);
        }
    }

    /// Mutable payload (from the header end up to the total length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        self.buffer.as_mut().get_mut(start..end).unwrap_or(&mut [])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Real header of a Linux loopback TCP SYN (captured with AF_PACKET), plus payload.
    fn linux_syn_packet() -> Vec<u8> {
        let mut p = vec![
            0x45, 0x00, 0x00, 0x3c, 0x8b, 0xdb, 0x40, 0x00, 0x40, 0x06, 0xb0, 0xde, 127, 0, 0, 1,
            127, 0, 0, 1,
        ];
        p.extend_from_slice(&[0u8; 40]);
        p
    }

    #[test]
    fn parse_known() {
        let p = linux_syn_packet();
        let (r, payload) = Ipv4Repr::parse(&p, true).unwrap();
        assert_eq!(r.src, Ipv4Addr::LOCALHOST);
        assert_eq!(r.dst, Ipv4Addr::LOCALHOST);
        assert_eq!(r.protocol, PROTOCOL_TCP);
        assert_eq!(r.payload_len, 40);
        assert_eq!(payload.len(), 40);
        assert_eq!(r.ttl, 64);
        assert_eq!((r.dscp, r.ecn), (0, Ecn::NotEct));
        assert_eq!(r.ident, 0x8bdb);
        assert!(r.dont_fragment && !r.more_fragments && r.fragment_offset == 0);
        assert!(!r.is_fragment());
        let mut out = [0u8; 20];
        assert_eq!(r.emit(&mut out), Ok(20));
        assert_eq!(out[..], p[..20]);
    }

    #[test]
    fn checksum_error_and_skip() {
        let mut p = linux_syn_packet();
        p[11] ^= 1;
        assert_eq!(Ipv4Repr::parse(&p, true), Err(WireError::Checksum));
        assert!(Ipv4Repr::parse(&p, false).is_ok());
        assert!(!Ipv4Packet::new_checked(&p[..]).unwrap().verify_checksum());
    }

    #[test]
    fn trailing_padding_ignored() {
        let mut p = linux_syn_packet();
        p.extend_from_slice(&[0xAA; 6]);
        let (r, payload) = Ipv4Repr::parse(&p, true).unwrap();
        assert_eq!(r.payload_len, 40);
        assert_eq!(payload, &[0u8; 40][..]);
    }

    #[test]
    fn with_options() {
        // IHL 6: one 4-byte option (NOP NOP NOP EOL), total length 28.
        let mut p = vec![
            0x46, 0xba, 0x00, 0x1c, 0x12, 0x34, 0x00, 0x00, 0x40, 0x06, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2, 1, 1, 1, 0, 0xDE, 0xAD, 0xBE, 0xEF,
        ];
        let c = checksum::checksum(&p[..24]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let (r, payload) = Ipv4Repr::parse(&p, true).unwrap();
        assert_eq!(payload, &[0xDE, 0xAD, 0xBE, 0xEF]);
        assert_eq!(r.payload_len, 4);
        assert_eq!((r.dscp, r.ecn), (46, Ecn::Ect0));
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.header_len(), 24);
        assert_eq!(v.options(), &[1, 1, 1, 0]);
        assert_eq!(v.payload(), payload);
        assert_eq!(v.total_len(), 28);
        assert!(v.verify_checksum());
        // Options that do not fit in the buffer.
        assert_eq!(Ipv4Repr::parse(&p[..22], false), Err(WireError::Truncated));
    }

    #[test]
    fn fragments() {
        let base = Ipv4Repr::parse(&linux_syn_packet(), true).unwrap().0;
        let mf = Ipv4Repr {
            more_fragments: true,
            dont_fragment: false,
            ..base
        };
        let off = Ipv4Repr {
            fragment_offset: 185,
            dont_fragment: false,
            ..base
        };
        for r in [mf, off] {
            assert!(r.is_fragment());
            let mut buf = [0u8; 60];
            r.emit(&mut buf).unwrap();
            let (parsed, _) = Ipv4Repr::parse(&buf, true).unwrap();
            assert_eq!(parsed, r);
            assert!(parsed.is_fragment());
        }
        let mut buf = [0u8; 60];
        mf.emit(&mut buf).unwrap();
        assert_eq!(buf[6], 0x20);
        off.emit(&mut buf).unwrap();
        assert_eq!(u16::from_be_bytes([buf[6], buf[7]]), 185);
    }

    #[test]
    fn malformed_and_truncated() {
        let p = linux_syn_packet();
        assert_eq!(Ipv4Repr::parse(&p[..19], false), Err(WireError::Truncated));
        assert_eq!(Ipv4Repr::parse(&p[..59], false), Err(WireError::Truncated));
        let mut v6 = p.clone();
        v6[0] = 0x65;
        assert_eq!(Ipv4Repr::parse(&v6, false), Err(WireError::Malformed));
        let mut ihl4 = p.clone();
        ihl4[0] = 0x44;
        assert_eq!(Ipv4Repr::parse(&ihl4, false), Err(WireError::Malformed));
        let mut short_total = p.clone();
        short_total[3] = 19;
        assert_eq!(
            Ipv4Repr::parse(&short_total, false),
            Err(WireError::Malformed)
        );
        let r = Ipv4Repr::parse(&p, true).unwrap().0;
        assert_eq!(r.emit(&mut [0u8; 19]), Err(WireError::BufferTooSmall));
        let big = Ipv4Repr {
            payload_len: 65516,
            ..r
        };
        assert_eq!(big.emit(&mut [0u8; 20]), Err(WireError::Malformed));
        assert_eq!(set_ecn_ce(&mut [0x45; 19]), Err(WireError::Truncated));
        assert_eq!(set_ecn_ce(&mut v6[..]), Err(WireError::Malformed));
    }

    #[test]
    fn ecn_ce_marking() {
        let base = Ipv4Repr::parse(&linux_syn_packet(), true).unwrap().0;
        for ecn in [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce] {
            let r = Ipv4Repr {
                ecn,
                dscp: 10,
                ..base
            };
            let mut buf = [0u8; 60];
            r.emit(&mut buf).unwrap();
            set_ecn_ce(&mut buf).unwrap();
            let (parsed, _) = Ipv4Repr::parse(&buf, true).unwrap();
            assert_eq!(parsed, Ipv4Repr { ecn: Ecn::Ce, ..r });
        }
    }

    #[test]
    fn view_setters() {
        let mut p = linux_syn_packet();
        let mut v = Ipv4Packet::new_checked(&mut p[..]).unwrap();
        v.set_ttl(3);
        v.set_ecn(Ecn::Ect1);
        assert!(v.verify_checksum());
        v.set_src_addr(Ipv4Addr::new(1, 2, 3, 4));
        v.set_dst_addr(Ipv4Addr::new(5, 6, 7, 8));
        v.fill_checksum();
        v.payload_mut()[0] = 7;
        let (r, payload) = Ipv4Repr::parse(&p, true).unwrap();
        assert_eq!((r.ttl, r.ecn), (3, Ecn::Ect1));
        assert_eq!(
            (r.src, r.dst),
            (Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8))
        );
        assert_eq!(payload[0], 7);
    }

    fn arb_repr() -> impl Strategy<Value = Ipv4Repr> {
        (
            (
                any::<u32>(),
                any::<u32>(),
                any::<u8>(),
                0u16..200,
                any::<u8>(),
            ),
            (
                0u8..64,
                0u8..4,
                any::<u16>(),
                any::<bool>(),
                any::<bool>(),
                0u16..8192,
            ),
        )
            .prop_map(
                |((s, d, protocol, payload_len, ttl), (dscp, e, ident, df, mf, fo))| Ipv4Repr {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    protocol,
                    payload_len,
                    ttl,
                    dscp,
                    ecn: Ecn::from_tos(e),
                    ident,
                    dont_fragment: df,
                    more_fragments: mf,
                    fragment_offset: fo,
                },
            )
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..80), verify in any::<bool>()) {
            let _ = Ipv4Repr::parse(&data, verify);
            if let Ok(v) = Ipv4Packet::new_checked(&data[..]) {
                let _ = (v.src_addr(), v.dst_addr(), v.protocol(), v.ecn(), v.options(), v.payload(), v.verify_checksum());
            }
            let mut m = data.clone();
            let _ = set_ecn_ce(&mut m);
        }

        #[test]
        fn parse_never_panics_plausible(mut data in proptest::collection::vec(any::<u8>(), 20..80), ihl in 0u8..16, len in 0u16..100) {
            // Bias towards version 4 with random IHL and total length.
            data[0] = 0x40 | ihl;
            data[2..4].copy_from_slice(&len.to_be_bytes());
            let _ = Ipv4Repr::parse(&data, true);
            if let Ok(v) = Ipv4Packet::new_checked(&data[..]) {
                prop_assert_eq!(v.payload().len() + v.header_len(), usize::from(v.total_len()));
            }
        }

        #[test]
        fn emit_parse_round_trip(r in arb_repr()) {
            let mut buf = vec![0u8; HEADER_LEN + usize::from(r.payload_len)];
            prop_assert_eq!(r.emit(&mut buf), Ok(HEADER_LEN));
            let (parsed, payload) = Ipv4Repr::parse(&buf, true).unwrap();
            prop_assert_eq!(parsed, r);
            prop_assert_eq!(payload.len(), usize::from(r.payload_len));
        }

        #[test]
        fn emitted_checksum_matches_byte_sum(r in arb_repr()) {
            // emit sums the fields; the result is the checksum of the bytes it wrote.
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut buf).unwrap();
            let stored = u16::from_be_bytes([buf[10], buf[11]]);
            buf[10..12].copy_from_slice(&[0, 0]);
            prop_assert_eq!(stored, checksum::checksum(&buf));
        }

        #[test]
        fn set_ecn_ce_matches_full_recompute(r in arb_repr()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut buf).unwrap();
            set_ecn_ce(&mut buf).unwrap();
            let mut expected = [0u8; HEADER_LEN];
            Ipv4Repr { ecn: Ecn::Ce, ..r }.emit(&mut expected).unwrap();
            prop_assert_eq!(buf, expected);
        }
    }
}
