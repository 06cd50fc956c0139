//! MTP in a frame: Ethernet (optionally one VLAN tag), IPv4, then the MTP packet either
//! directly (protocol 253) or in UDP to port 9919 (checksum 0: MTP's own covers the packet).
//!
//! No-panic contract: [`MtpFrameRepr::parse`] and [`locate`] take arbitrary bytes.

use core::ops::Range;
use std::net::Ipv4Addr;

use sluice_wire::ethernet::{EtherType, EthernetAddress, EthernetRepr};
use sluice_wire::ipv4::{self, Ecn, Ipv4Repr};
use sluice_wire::udp::{self, UdpChecksum, UdpRepr};

use super::error::MtpError;
use super::header::MtpRepr;
use super::{IP_PROTOCOL, UDP_PORT};

/// How the MTP packet is carried in IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// Directly, as IPv4 protocol [`IP_PROTOCOL`].
    Ip,
    /// In UDP to [`UDP_PORT`] from `src_port` (flow entropy for ECMP hashing).
    Udp {
        /// The UDP source port.
        src_port: u16,
    },
}

/// The headers of a whole MTP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtpFrameRepr<'a> {
    /// Ethernet; its EtherType is set to IPv4 on emit.
    pub eth: EthernetRepr,
    /// IPv4; protocol and payload length are set on emit.
    pub ip: Ipv4Repr,
    /// Direct or UDP.
    pub encap: Encap,
    /// The MTP header.
    pub mtp: MtpRepr<'a>,
}

/// Where the MTP packet lies in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Offset of the IPv4 header.
    pub l3: usize,
    /// The IPv4 header's length.
    pub ip_header_len: usize,
    /// How it is carried.
    pub encap: Encap,
    /// The MTP packet's bytes (header and payload; link padding excluded).
    pub mtp: Range<usize>,
}

/// Finds the MTP packet in an Ethernet frame, or says why it is not one. Checks the
/// encapsulation's structure (not the IPv4 checksum); the MTP header is not parsed.
pub fn locate(frame: &[u8]) -> Result<Location, MtpError> {
    let (eth, _) = EthernetRepr::parse(frame)?;
    if eth.ethertype != EtherType::Ipv4 {
        return Err(MtpError::NotMtp);
    }
    let l3 = eth.header_len();
    let (ip, ip_payload) = Ipv4Repr::parse(frame.get(l3..).unwrap_or_default(), false)?;
    if ip.is_fragment() {
        return Err(MtpError::NotMtp);
    }
    let ip_header_len = ip.header_len();
    let start = l3 + ip_header_len;
    if ip.protocol == IP_PROTOCOL {
        return Ok(Location {
            l3,
            ip_header_len,
            encap: Encap::Ip,
            mtp: start..start + ip_payload.len(),
        });
    }
    if ip.protocol == udp::PROTOCOL_UDP {
        let (u, datagram) = UdpRepr::parse(ip_payload, ip.src, ip.dst, UdpChecksum::Ignore)?;
        if u.dst_port == UDP_PORT {
            let start = start + udp::HEADER_LEN;
            return Ok(Location {
                l3,
                ip_header_len,
                encap: Encap::Udp {
                    src_port: u.src_port,
                },
                mtp: start..start + datagram.len(),
            });
        }
    }
    Err(MtpError::NotMtp)
}

impl<'a> MtpFrameRepr<'a> {
    /// An untagged frame from (`src_mac`, `src`) to (`dst_mac`, `dst`): IPv4 with TTL 64,
    /// don't-fragment, no ECN capability, identification 0.
    pub fn new(
        (src_mac, src): (EthernetAddress, Ipv4Addr),
        (dst_mac, dst): (EthernetAddress, Ipv4Addr),
        encap: Encap,
        mtp: MtpRepr<'a>,
    ) -> MtpFrameRepr<'a> {
        MtpFrameRepr {
            eth: EthernetRepr {
                dst: dst_mac,
                src: src_mac,
                ethertype: EtherType::Ipv4,
                vlan: None,
            },
            ip: Ipv4Repr {
                src,
                dst,
                protocol: 0,
                payload_len: 0,
                ttl: 64,
                dscp: 0,
                ecn: Ecn::NotEct,
                ident: 0,
                dont_fragment: true,
                more_fragments: false,
                fragment_offset: 0,
            },
            encap,
            mtp,
        }
    }

    /// Parses a whole frame; returns its headers and the MTP payload. With `verify`, the
    /// IPv4 and MTP checksums are checked.
    pub fn parse(frame: &'a [u8], verify: bool) -> Result<(MtpFrameRepr<'a>, &'a [u8]), MtpError> {
        let loc = locate(frame)?;
        let (eth, _) = EthernetRepr::parse(frame)?;
        let (ip, _) = Ipv4Repr::parse(frame.get(loc.l3..).unwrap_or_default(), verify)?;
        let packet = frame.get(loc.mtp.clone()).unwrap_or_default();
        let (mtp, payload) = MtpRepr::parse(packet, ip.src, ip.dst, verify)?;
        Ok((
            MtpFrameRepr {
                eth,
                ip,
                encap: loc.encap,
                mtp,
            },
            payload,
        ))
    }

    /// Length of the whole frame for `payload_len` payload bytes.
    pub fn frame_len(&self, payload_len: usize) -> Result<usize, MtpError> {
        let udp = match self.encap {
            Encap::Ip => 0,
            Encap::Udp { .. } => udp::HEADER_LEN,
        };
        Ok(self.eth.header_len() + ipv4::HEADER_LEN + udp + self.mtp.header_len()? + payload_len)
    }

    /// Writes the whole frame (IPv4 and MTP checksums included); returns its length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, MtpError> {
        let len = self.frame_len(payload.len())?;
        let have = buf.len();
        let out = buf
            .get_mut(..len)
            .ok_or(MtpError::BufferTooSmall { need: len, have })?;
        let eth = EthernetRepr {
            ethertype: EtherType::Ipv4,
            ..self.eth
        };
        let l2 = eth.emit(out)?;
        let mtp_len = self.mtp.header_len()? + payload.len();
        let (protocol, l4) = match self.encap {
            Encap::Ip => (IP_PROTOCOL, 0),
            Encap::Udp { .. } => (udp::PROTOCOL_UDP, udp::HEADER_LEN),
        };
        let ip = Ipv4Repr {
            protocol,
            payload_len: u16::try_from(l4 + mtp_len)
                .map_err(|_| MtpError::ListTooLong("packet"))?,
            ..self.ip
        };
        let l3 = ip.emit(&mut out[l2..])?;
        if let Encap::Udp { src_port } = self.encap {
            UdpRepr {
                src_port,
                dst_port: UDP_PORT,
            }
            .emit(&mut out[l2 + l3..], mtp_len)?;
        }
        self.mtp
            .emit(&mut out[l2 + l3 + l4..], self.ip.src, self.ip.dst, payload)?;
        Ok(len)
    }
}
