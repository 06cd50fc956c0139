//! The in-place edits an MTP device makes to a frame as it forwards it (mtp.txt 3.1.1,
//! 3.1.3, 4): read what it needs to decide (message id and size, TC, the path-exclude
//! list), append path feedback into a reserved slot, and trim the payload on overflow.
//! None of them allocates; each takes arbitrary bytes and never panics.

use std::net::Ipv4Addr;

use sluice_wire::checksum;

use super::entries::{Feedback, PathletTc};
use super::error::MtpError;
use super::frame::{locate, Encap, Location};
use super::header::{
    check_structure, compute_checksum, field, Layout, DEVICE_FEEDBACK_FULL, DEVICE_TRIMMED,
    FLAG_DATA,
};

/// What a device reads of an MTP packet to decide on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Where it lies in the frame.
    pub at: Location,
    /// Source address (with the message id, names the message).
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Whether it carries part of a message.
    pub data: bool,
    /// The message id.
    pub msg_id: u32,
    /// The message's length in bytes (devices size buffers and balance by it).
    pub msg_len: u32,
    /// The message's length in packets.
    pub msg_pkts: u16,
    /// This packet's number.
    pub pkt_num: u16,
    /// The sender's traffic class.
    pub tc: u8,
    /// The message's priority.
    pub priority: u8,
    layout: Layout,
}

impl Summary {
    /// Reads the summary of an MTP frame, or says why it is not a well-formed one.
    pub fn read(frame: &[u8]) -> Result<Summary, MtpError> {
        let at = locate(frame)?;
        let packet = frame.get(at.mtp.clone()).unwrap_or_default();
        let (layout, _) = check_structure(packet)?;
        let ip = frame.get(at.l3..).unwrap_or_default();
        let addr = |o: usize| {
            ip.get(o..o + 4)
                .and_then(|s| s.first_chunk::<4>())
                .map_or(Ipv4Addr::UNSPECIFIED, |a| Ipv4Addr::from(*a))
        };
        let b = |o: usize| packet.get(o).copied().unwrap_or(0);
        let w16 = |r: core::ops::Range<usize>| {
            packet
                .get(r)
                .and_then(|s| s.first_chunk::<2>())
                .map_or(0, |w| u16::from_be_bytes(*w))
        };
        let w32 = |r: core::ops::Range<usize>| {
            packet
                .get(r)
                .and_then(|s| s.first_chunk::<4>())
                .map_or(0, |w| u32::from_be_bytes(*w))
        };
        Ok(Summary {
            src: addr(12),
            dst: addr(16),
            src_port: w16(field::SRC_PORT),
            dst_port: w16(field::DST_PORT),
            data: b(field::VER_FLAGS) & FLAG_DATA != 0,
            msg_id: w32(field::MSG_ID),
            msg_len: w32(field::MSG_LEN),
            msg_pkts: w16(field::MSG_PKTS),
            pkt_num: w16(field::PKT_NUM),
            tc: b(field::TC),
            priority: b(field::PRIORITY),
            layout,
            at,
        })
    }

    /// Whether the sender asked the network not to use `pathlet` for this packet (any TC
    /// when the entry's TC is 255).
    pub fn excludes(&self, frame: &[u8], pathlet: PathletTc) -> bool {
        let Some(list) = frame.get(
            self.at.mtp.start + self.layout.exclude.start
                ..self.at.mtp.start + self.layout.exclude.end,
        ) else {
            return false;
        };
        list.chunks_exact(PathletTc::LEN)
            .filter_map(PathletTc::read)
            .any(|e| e.pathlet == pathlet.pathlet && (e.tc == pathlet.tc || e.tc == u8::MAX))
    }

    /// Appends `fb` in the next free feedback slot; when none is free, sets the
    /// feedback-full device flag and returns false. The checksum stays valid (these bytes
    /// are outside it).
    pub fn push_feedback(&self, frame: &mut [u8], fb: Feedback) -> bool {
        let Some(packet) = frame.get_mut(self.at.mtp.clone()) else {
            return false;
        };
        let count = usize::from(packet.get(field::FEEDBACK_COUNT).copied().unwrap_or(0));
        let slots = self.layout.feedback_slots.len() / Feedback::LEN;
        if count >= slots {
            if let Some(flags) = packet.get_mut(field::DEVICE_FLAGS) {
                *flags |= DEVICE_FEEDBACK_FULL;
            }
            return false;
        }
        let at = self.layout.feedback_slots.start + count * Feedback::LEN;
        if let Some(slot) = packet.get_mut(at..at + Feedback::LEN) {
            fb.write(slot);
        }
        if let Some(c) = packet.get_mut(field::FEEDBACK_COUNT) {
            // count < slots <= 255.
            *c = (count + 1) as u8;
        }
        true
    }

    /// Trims a data packet's payload (NDP-style, mtp.txt 4): the header stays, the payload
    /// goes, the trimmed flag is set, the IPv4 (and UDP) lengths and checksums and the MTP
    /// checksum are fixed. Returns the frame's new length, or None when it is not a data
    /// packet or already trimmed.
    pub fn trim(&self, frame: &mut [u8]) -> Option<usize> {
        let hdr_len = self.layout.header_len();
        let packet = frame.get_mut(self.at.mtp.clone())?;
        let flags = *packet.get(field::DEVICE_FLAGS)?;
        if !self.data || flags & DEVICE_TRIMMED != 0 {
            return None;
        }
        packet[field::DEVICE_FLAGS] = flags | DEVICE_TRIMMED;
        let ck = compute_checksum(packet.get(..hdr_len)?, self.src, self.dst);
        packet[field::CHECKSUM].copy_from_slice(&ck.to_be_bytes());
        let end = self.at.mtp.start + hdr_len;
        let l4 = match self.at.encap {
            Encap::Ip => 0,
            Encap::Udp { .. } => 8,
        };
        let ip_total = u16::try_from(self.at.ip_header_len + l4 + hdr_len).ok()?;
        let ip = frame.get_mut(self.at.l3..)?;
        let old_total = u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]);
        ip[2..4].copy_from_slice(&ip_total.to_be_bytes());
        let old_ck = u16::from_be_bytes([ip[10], ip[11]]);
        let new_ck = checksum::update(old_ck, old_total, ip_total);
        ip[10..12].copy_from_slice(&new_ck.to_be_bytes());
        if l4 != 0 {
            let udp_len = u16::try_from(l4 + hdr_len).ok()?;
            let u = self.at.l3 + self.at.ip_header_len;
            let udp = frame.get_mut(u..u + 8)?;
            udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
            udp[6..8].copy_from_slice(&[0, 0]);
        }
        Some(end)
    }
}

/// Recomputes the MTP checksum of the packet at `at` in `frame` (for devices that change
/// checksummed bytes).
pub fn fill_checksum(
    frame: &mut [u8],
    at: &Location,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> Result<(), MtpError> {
    let packet = frame.get_mut(at.mtp.clone()).ok_or(MtpError::NotMtp)?;
    check_structure(packet)?;
    let ck = compute_checksum(packet, src, dst);
    packet[field::CHECKSUM].copy_from_slice(&ck.to_be_bytes());
    Ok(())
}
