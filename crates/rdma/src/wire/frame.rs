//! The RoCEv2 encapsulation (IBA annex A17): Ethernet, IPv4, UDP to port 4791 (the source
//! port is flow entropy for ECMP), then the InfiniBand packet and its ICRC.
//!
//! No-panic contract: [`RoceFrameRepr::parse`] takes arbitrary bytes; anything that is not
//! a well-formed RoCEv2-over-IPv4 frame with a good ICRC is a [`RoceError`].

use super::error::RoceError;
use super::icrc;
use super::packet::RoceRepr;
use super::ROCEV2_UDP_PORT;
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{self, Ipv4Repr};
use sluice_wire::udp::{self, UdpChecksum, UdpRepr};

/// A whole RoCEv2 frame's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFrameRepr {
    /// Ethernet; its EtherType is set to IPv4 on emit.
    pub eth: EthernetRepr,
    /// IPv4; protocol and payload length are set on emit.
    pub ip: Ipv4Repr,
    /// The UDP source port (flow entropy); the destination is always 4791.
    pub src_port: u16,
    /// The InfiniBand headers.
    pub roce: RoceRepr,
}

impl RoceFrameRepr {
    /// Length of the whole frame for `payload_len` bytes of payload.
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.eth.header_len()
            + ipv4::HEADER_LEN
            + udp::HEADER_LEN
            + self.roce.packet_len(payload_len)
    }

    /// Where the InfiniBand headers (the BTH) start: after Ethernet, IPv4 and UDP.
    pub fn roce_at(&self) -> usize {
        self.eth.header_len() + ipv4::HEADER_LEN + udp::HEADER_LEN
    }

    /// Writes the whole frame, IPv4 checksum and ICRC included (UDP checksum 0, as RoCEv2
    /// senders do: the ICRC covers the datagram); returns its length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, RoceError> {
        self.emit_with(buf, payload.len(), |roce, out| roce.emit(out, payload))
    }

    /// [`RoceFrameRepr::emit`] for a payload of `payload_len` bytes the caller already put
    /// in `buf` at `roce_at() + roce.header_len()` (header-only TX): the headers go in front
    /// of it, pad and ICRC after it; the ICRC pass reads it there.
    pub fn emit_around(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, RoceError> {
        self.emit_with(buf, payload_len, |roce, out| {
            roce.emit_around(out, payload_len)
        })
    }

    fn emit_with(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        roce_emit: impl FnOnce(&RoceRepr, &mut [u8]) -> Result<usize, RoceError>,
    ) -> Result<usize, RoceError> {
        let len = self.frame_len(payload_len);
        let have = buf.len();
        let out = buf
            .get_mut(..len)
            .ok_or(RoceError::BufferTooSmall { need: len, have })?;
        let eth = EthernetRepr {
            ethertype: EtherType::Ipv4,
            ..self.eth
        };
        let l2 = eth.emit(out)?;
        let ip_packet = out.get_mut(l2..).unwrap_or_default();
        let udp_payload_len = self.roce.packet_len(payload_len);
        let ip = Ipv4Repr {
            protocol: udp::PROTOCOL_UDP,
            payload_len: u16::try_from(udp::HEADER_LEN + udp_payload_len)
                .map_err(|_| RoceError::FieldRange("IPv4 total length"))?,
            ..self.ip
        };
        let l3 = ip.emit(ip_packet)?;
        let u = UdpRepr {
            src_port: self.src_port,
            dst_port: ROCEV2_UDP_PORT,
        };
        let datagram = ip_packet.get_mut(l3..).unwrap_or_default();
        let l4 = u.emit(datagram, udp_payload_len)?;
        roce_emit(&self.roce, datagram.get_mut(l4..).unwrap_or_default())?;
        icrc::fill_ipv4(ip_packet)?;
        Ok(len)
    }

    /// Parses a frame: Ethernet (one optional VLAN tag), IPv4 with a good header checksum,
    /// UDP to port 4791 (a nonzero UDP checksum is verified), the InfiniBand headers and a
    /// good ICRC; returns the headers and the payload without pad.
    pub fn parse(frame: &[u8]) -> Result<(RoceFrameRepr, &[u8]), RoceError> {
        let (eth, l3) = EthernetRepr::parse(frame)?;
        if eth.ethertype != EtherType::Ipv4 {
            return Err(RoceError::NotRoce);
        }
        let (ip, datagram) = Ipv4Repr::parse(l3, true)?;
        if ip.protocol != udp::PROTOCOL_UDP || ip.is_fragment() {
            return Err(RoceError::NotRoce);
        }
        let (u, udp_payload) = UdpRepr::parse(datagram, ip.src, ip.dst, UdpChecksum::Verify)?;
        if u.dst_port != ROCEV2_UDP_PORT {
            return Err(RoceError::NotRoce);
        }
        let (roce, payload) = RoceRepr::parse(udp_payload)?;
        // The IP packet ends where the UDP datagram ends (link padding is not covered).
        let ihl = usize::from(l3.first().copied().unwrap_or(0) & 0x0F) * 4;
        let ip_end = ihl + udp::HEADER_LEN + udp_payload.len();
        icrc::verify_ipv4(l3.get(..ip_end).unwrap_or(&[]))?;
        let repr = RoceFrameRepr {
            eth,
            ip,
            src_port: u.src_port,
            roce,
        };
        Ok((repr, payload))
    }
}

/// The UDP source port Linux gives a connection between local QP `lqpn` and remote QP
/// `rqpn`: a 20-bit flow label from their product folded into 14 bits, in the range
/// 0xC000-0xFFFF the RoCEv2 annex reserves for entropy (`rdma_calc_flow_label` and
/// `rdma_flow_label_to_udp_sport` in Linux's include/rdma/ib_verbs.h).
pub fn entropy_src_port(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xF_FFFF) as u32;
    let low = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    0xC000 | low as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_port_is_in_the_reserved_range_and_spreads() {
        let ports: std::collections::HashSet<u16> =
            (1..200).map(|q| entropy_src_port(q, 0x11)).collect();
        assert!(ports.iter().all(|p| *p >= 0xC000));
        assert!(ports.len() > 150, "{} distinct ports", ports.len());
        assert_eq!(entropy_src_port(0, 5), 0xC000);
    }
}
