//! MTP across a TCP-only island (mtp.txt 4, "Interaction with TCP"): a bridging device turns
//! an MTP packet into a TCP segment that carries the MTP header as a TCP option, and the
//! bridge at the island's far side turns it back, byte for byte.
//!
//! The segment: the MTP ports as TCP ports; sequence number = the packet's byte offset in its
//! message; flags PSH|ACK; one option of kind 253 (RFC 4727's experimental kind, shared with
//! the RFC 6994 experiment id [`TCP_OPTION_EXID`]) holding the MTP header's fixed part after
//! the ports (32 bytes: 36 with kind, length and id, within TCP's 40); then, as TCP payload,
//! the MTP header's lists followed by the MTP payload. Devices inside the island that know the
//! option read message id, size and TC from it; the others see an ordinary TCP segment with a
//! valid checksum.
//!
//! No-panic contract: both directions take arbitrary bytes and return an error for anything
//! they cannot translate.

use sluice_wire::checksum;
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::Ipv4Repr;

use super::error::MtpError;
use super::frame::{locate, Encap};
use super::header::{check_structure, FIXED_LEN};
use super::IP_PROTOCOL;

/// The TCP option kind that carries the MTP header (RFC 4727: experimental, with an id).
pub const TCP_OPTION_KIND: u8 = 253;
/// The RFC 6994 experiment id of the MTP option ("MT").
pub const TCP_OPTION_EXID: u16 = 0x4d54;
/// Bytes of the option: kind, length, experiment id, and the header's fixed part less ports.
pub const TCP_OPTION_LEN: usize = 4 + FIXED_LEN - 4;
/// The TCP header of a bridged segment: 20 bytes and the option (a whole number of words).
const TCP_HEADER_LEN: usize = 20 + TCP_OPTION_LEN;
// The option must fit TCP's 40 bytes and the header be whole words.
const _: () = assert!(TCP_OPTION_LEN <= 40 && TCP_HEADER_LEN & 3 == 0);
const IP_PROTOCOL_TCP: u8 = 6;
const TCP_PSH_ACK: u8 = 0x18;

fn too_small(need: usize, have: usize) -> MtpError {
    MtpError::BufferTooSmall { need, have }
}

/// Rewrites the IPv4 header at `ip` (in `out`) for `protocol` and `payload_len`, checksum
/// included.
fn fix_ip(
    out: &mut [u8],
    l3: usize,
    ip: &Ipv4Repr,
    protocol: u8,
    payload_len: usize,
) -> Result<usize, MtpError> {
    let repr = Ipv4Repr {
        protocol,
        payload_len: u16::try_from(payload_len).map_err(|_| MtpError::ListTooLong("packet"))?,
        ..*ip
    };
    let have = out.len();
    let n = repr.emit(out.get_mut(l3..).ok_or(too_small(l3, have))?)?;
    Ok(l3 + n)
}

/// Turns an MTP frame (either encapsulation) into the bridged TCP segment in `out`; returns
/// its length. The MTP packet is checked structurally (not its checksum: it crosses intact).
pub fn mtp_to_tcp(frame: &[u8], out: &mut [u8]) -> Result<usize, MtpError> {
    let at = locate(frame)?;
    let packet = frame.get(at.mtp.clone()).unwrap_or_default();
    check_structure(packet)?;
    let (eth, _) = EthernetRepr::parse(frame)?;
    let (ip, _) = Ipv4Repr::parse(frame.get(at.l3..).unwrap_or_default(), false)?;
    let segment_len = TCP_HEADER_LEN + packet.len() - FIXED_LEN;
    let l3 = eth.header_len();
    let need = l3 + 20 + segment_len;
    if out.len() < need {
        return Err(too_small(need, out.len()));
    }
    EthernetRepr {
        ethertype: EtherType::Ipv4,
        ..eth
    }
    .emit(out)?;
    // The island sees a plain IPv4 header (options dropped).
    let l4 = fix_ip(out, l3, &ip, IP_PROTOCOL_TCP, segment_len)?;
    let tcp = &mut out[l4..l4 + segment_len];
    tcp[0..4].copy_from_slice(&packet[0..4]); // ports
    tcp[4..8].copy_from_slice(&packet[20..24]); // seq = packet offset
    tcp[8..12].fill(0);
    tcp[12] = ((TCP_HEADER_LEN / 4) as u8) << 4;
    tcp[13] = TCP_PSH_ACK;
    tcp[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
    tcp[16..20].fill(0);
    tcp[20] = TCP_OPTION_KIND;
    tcp[21] = TCP_OPTION_LEN as u8;
    tcp[22..24].copy_from_slice(&TCP_OPTION_EXID.to_be_bytes());
    tcp[24..TCP_HEADER_LEN].copy_from_slice(&packet[4..FIXED_LEN]);
    tcp[TCP_HEADER_LEN..].copy_from_slice(&packet[FIXED_LEN..]);
    let sum = checksum::pseudo_header_v4(ip.src, ip.dst, IP_PROTOCOL_TCP, segment_len as u16)
        + checksum::sum(tcp);
    let ck = !checksum::fold(sum);
    tcp[16..18].copy_from_slice(&ck.to_be_bytes());
    Ok(need)
}

/// Whether `frame` is a bridged segment (IPv4 TCP whose first option is the MTP option).
pub fn is_bridged(frame: &[u8]) -> bool {
    bridged_segment(frame).is_ok()
}

/// The IPv4 header and TCP segment of a bridged frame.
fn bridged_segment(frame: &[u8]) -> Result<(EthernetRepr, Ipv4Repr, usize, &[u8]), MtpError> {
    let (eth, l3_bytes) = EthernetRepr::parse(frame)?;
    if eth.ethertype != EtherType::Ipv4 {
        return Err(MtpError::NotMtp);
    }
    let (ip, segment) = Ipv4Repr::parse(l3_bytes, false)?;
    if ip.protocol != IP_PROTOCOL_TCP || ip.is_fragment() {
        return Err(MtpError::NotMtp);
    }
    let opt = segment.get(..TCP_HEADER_LEN).ok_or(MtpError::NotMtp)?;
    if usize::from(opt[12] >> 4) * 4 != TCP_HEADER_LEN
        || opt[20] != TCP_OPTION_KIND
        || usize::from(opt[21]) != TCP_OPTION_LEN
        || u16::from_be_bytes([opt[22], opt[23]]) != TCP_OPTION_EXID
    {
        return Err(MtpError::NotMtp);
    }
    Ok((eth, ip, eth.header_len(), segment))
}

/// Turns a bridged segment back into the MTP frame it came from (direct encapsulation, IPv4
/// protocol 253) in `out`; returns its length. The TCP checksum is verified; the MTP packet
/// that results is checked structurally.
pub fn tcp_to_mtp(frame: &[u8], out: &mut [u8]) -> Result<usize, MtpError> {
    let (eth, ip, l3, segment) = bridged_segment(frame)?;
    let seg_len = u16::try_from(segment.len()).map_err(|_| MtpError::NotMtp)?;
    let sum = checksum::pseudo_header_v4(ip.src, ip.dst, IP_PROTOCOL_TCP, seg_len)
        + checksum::sum(segment);
    if checksum::fold(sum) != 0xffff {
        return Err(MtpError::Checksum);
    }
    let packet_len = segment.len() - TCP_HEADER_LEN + FIXED_LEN;
    let need = l3 + 20 + packet_len;
    if out.len() < need {
        return Err(too_small(need, out.len()));
    }
    EthernetRepr {
        ethertype: EtherType::Ipv4,
        ..eth
    }
    .emit(out)?;
    let l4 = fix_ip(out, l3, &ip, IP_PROTOCOL, packet_len)?;
    let packet = &mut out[l4..l4 + packet_len];
    packet[0..4].copy_from_slice(&segment[0..4]);
    packet[4..FIXED_LEN].copy_from_slice(&segment[24..TCP_HEADER_LEN]);
    packet[FIXED_LEN..].copy_from_slice(&segment[TCP_HEADER_LEN..]);
    check_structure(packet)?;
    Ok(need)
}

/// The encapsulation a bridge restores (always direct: the island's far side is MTP-aware).
pub const RESTORED_ENCAP: Encap = Encap::Ip;
