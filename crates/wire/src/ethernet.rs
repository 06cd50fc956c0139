//! Ethernet II frames with at most one 802.1Q VLAN tag.

use crate::field;
use crate::WireError;
use core::fmt;

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xFF; 6]);

    /// Whether this is the broadcast address.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Whether the group (I/G) bit is set; broadcast is also multicast.
    #[inline]
    pub fn is_multicast(&self) -> bool {
        let [first, ..] = self.0;
        first & 0x01 != 0
    }

    /// Whether this is a unicast address (group bit clear).
    #[inline]
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The raw octets.
    #[inline]
    pub fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<[u8; 6]> for EthernetAddress {
    #[inline]
    fn from(b: [u8; 6]) -> Self {
        EthernetAddress(b)
    }
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag (TPID + TCI).
pub const VLAN_TAG_LEN: usize = 4;

/// The EtherType field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtherType {
    /// IPv4, 0x0800.
    Ipv4,
    /// ARP, 0x0806.
    Arp,
    /// 802.1Q VLAN tag, 0x8100.
    Vlan,
    /// Any other value.
    Other(u16),
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            other => EtherType::Other(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Other(v) => v,
        }
    }
}

/// A parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: EthernetAddress,
    /// Source MAC address.
    pub src: EthernetAddress,
    /// EtherType of the payload (the inner type when tagged).
    pub ethertype: EtherType,
    /// The full 16-bit TCI (PCP, DEI, VID) of one 802.1Q tag, if present.
    pub vlan: Option<u16>,
}

impl EthernetRepr {
    /// Parses a frame (one optional 802.1Q tag) and returns the header and payload.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<(EthernetRepr, &[u8]), WireError> {
        let h = frame
            .first_chunk::<HEADER_LEN>()
            .ok_or(WireError::Truncated)?;
        let dst = field::mac(h, 0);
        let src = field::mac(h, 6);
        let outer = field::be16(h, 12);
        if outer == 0x8100 {
            let t = frame
                .first_chunk::<{ HEADER_LEN + VLAN_TAG_LEN }>()
                .ok_or(WireError::Truncated)?;
            let repr = EthernetRepr {
                dst,
                src,
                ethertype: EtherType::from(field::be16(t, 16)),
                vlan: Some(field::be16(t, 14)),
            };
            let payload = frame.get(HEADER_LEN + VLAN_TAG_LEN..).unwrap_or(&[]);
            Ok((repr, payload))
        } else {
            let repr = EthernetRepr {
                dst,
                src,
                ethertype: EtherType::from(outer),
                vlan: None,
            };
            Ok((repr, frame.get(HEADER_LEN..).unwrap_or(&[])))
        }
    }

    /// Header length: 14, or 18 with a VLAN tag.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header (with a tag if `vlan` is set) and returns its length.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.header_len();
        let h = buf.get_mut(..len).ok_or(WireError::BufferTooSmall)?;
        field::put(h, 0, self.dst.0);
        field::put(h, 6, self.src.0);
        match self.vlan {
            Some(tci) => {
                field::put16(h, 12, 0x8100);
                field::put16(h, 14, tci);
                field::put16(h, 16, self.ethertype.into());
            }
            None => field::put16(h, 12, self.ethertype.into()),
        }
        Ok(len)
    }
}

/// A checked read/write view of an (untagged-layout) Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer`, checking it holds at least a 14-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(EthernetFrame { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst(&self) -> EthernetAddress {
        field::mac(self.buffer.as_ref(), 0)
    }

    /// Source MAC address.
    #[inline]
    pub fn src(&self) -> EthernetAddress {
        field::mac(self.buffer.as_ref(), 6)
    }

    /// The outer EtherType (`Vlan` for a tagged frame).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(field::be16(self.buffer.as_ref(), 12))
    }

    /// Everything after the 14-byte header (including any VLAN tag).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst(&mut self, addr: EthernetAddress) {
        field::put(self.buffer.as_mut(), 0, addr.0);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src(&mut self, addr: EthernetAddress) {
        field::put(self.buffer.as_mut(), 6, addr.0);
    }

    /// Sets the outer EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        field::put16(self.buffer.as_mut(), 12, t.into());
    }

    /// Mutable access to everything after the 14-byte header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UNTAGGED: [u8; 16] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
        0x08, 0x06, // ARP
        0xAA, 0xBB,
    ];

    const TAGGED: [u8; 20] = [
        0x01, 0x00, 0x5e, 0x00, 0x00, 0x01, // dst (multicast)
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // src
        0x81, 0x00, 0xA0, 0x64, // 802.1Q, PCP 5, VID 100
        0x08, 0x00, // IPv4
        0x45, 0x00,
    ];

    #[test]
    fn address_format() {
        let a = EthernetAddress([0xaa, 0xbb, 0xcc, 0x0d, 0xee, 0xff]);
        assert_eq!(a.to_string(), "aa:bb:cc:0d:ee:ff");
        assert_eq!(format!("{a:?}"), "aa:bb:cc:0d:ee:ff");
        assert!(EthernetAddress::BROADCAST.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        assert!(EthernetAddress([1, 0, 0x5e, 0, 0, 1]).is_multicast());
        assert!(!a.is_broadcast());
        assert!(!EthernetAddress([2, 0, 0, 0, 0, 1]).is_multicast());
    }

    #[test]
    fn ethertype_conversions() {
        for (v, t) in [
            (0x0800, EtherType::Ipv4),
            (0x0806, EtherType::Arp),
            (0x8100, EtherType::Vlan),
            (0x86dd, EtherType::Other(0x86dd)),
        ] {
            assert_eq!(EtherType::from(v), t);
            assert_eq!(u16::from(t), v);
        }
    }

    #[test]
    fn parse_untagged() {
        let (r, p) = EthernetRepr::parse(&UNTAGGED).unwrap();
        assert_eq!(r.dst, EthernetAddress::BROADCAST);
        assert_eq!(r.src, EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(r.ethertype, EtherType::Arp);
        assert_eq!(r.vlan, None);
        assert_eq!(r.header_len(), 14);
        assert_eq!(p, &[0xAA, 0xBB]);
        let mut out = [0u8; 16];
        assert_eq!(r.emit(&mut out), Ok(14));
        out[14..].copy_from_slice(p);
        assert_eq!(out, UNTAGGED);
    }

    #[test]
    fn parse_vlan() {
        let (r, p) = EthernetRepr::parse(&TAGGED).unwrap();
        assert_eq!(r.ethertype, EtherType::Ipv4);
        assert_eq!(r.vlan, Some(0xA064));
        assert_eq!(r.vlan.map(|t| t & 0x0FFF), Some(100));
        assert_eq!(r.header_len(), 18);
        assert_eq!(p, &[0x45, 0x00]);
        let mut out = [0u8; 18];
        assert_eq!(r.emit(&mut out), Ok(18));
        assert_eq!(&out[..], &TAGGED[..18]);
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.ethertype(), EtherType::Vlan);
        assert_eq!(f.payload().len(), 6);
    }

    #[test]
    fn errors() {
        assert_eq!(
            EthernetRepr::parse(&UNTAGGED[..13]),
            Err(WireError::Truncated)
        );
        assert_eq!(
            EthernetRepr::parse(&TAGGED[..17]),
            Err(WireError::Truncated)
        );
        assert!(EthernetRepr::parse(&TAGGED[..18]).unwrap().1.is_empty());
        let (r, _) = EthernetRepr::parse(&TAGGED).unwrap();
        assert_eq!(r.emit(&mut [0u8; 17]), Err(WireError::BufferTooSmall));
        assert!(EthernetFrame::new_checked(&[0u8; 13][..]).is_err());
    }

    #[test]
    fn frame_view_setters() {
        let mut buf = UNTAGGED;
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_dst(EthernetAddress([1, 2, 3, 4, 5, 6]));
        f.set_src(EthernetAddress([7, 8, 9, 10, 11, 12]));
        f.set_ethertype(EtherType::Ipv4);
        f.payload_mut()[0] = 0x11;
        assert_eq!(f.dst(), EthernetAddress([1, 2, 3, 4, 5, 6]));
        assert_eq!(f.src(), EthernetAddress([7, 8, 9, 10, 11, 12]));
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0x11, 0xBB]);
    }

    fn arb_repr() -> impl Strategy<Value = EthernetRepr> {
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            any::<u16>(),
            proptest::option::of(any::<u16>()),
        )
            .prop_filter(
                "inner type must not be a tag when untagged",
                |(_, _, t, v)| v.is_some() || *t != 0x8100,
            )
            .prop_map(|(d, s, t, vlan)| EthernetRepr {
                dst: EthernetAddress(d),
                src: EthernetAddress(s),
                ethertype: EtherType::from(t),
                vlan,
            })
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = EthernetRepr::parse(&data);
            if let Ok(f) = EthernetFrame::new_checked(&data[..]) {
                let _ = (f.dst(), f.src(), f.ethertype(), f.payload());
            }
        }

        #[test]
        fn emit_parse_round_trip(repr in arb_repr(), payload in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut buf = vec![0u8; repr.header_len() + payload.len()];
            let n = repr.emit(&mut buf).unwrap();
            buf[n..].copy_from_slice(&payload);
            let (parsed, p) = EthernetRepr::parse(&buf).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert_eq!(p, &payload[..]);
        }
    }
}
