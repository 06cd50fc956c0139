//! The MTP header of mtp.txt Figure 4 (layout: `docs/mtp.md`).
//!
//! No-panic contract: [`MtpRepr::parse`] takes any bytes and returns a header or an
//! [`MtpError`]; a header it returns re-emits to the same bytes ([`MtpRepr::emit`]), apart
//! from reserved bytes (written as zero) and unfilled feedback slots (written as zero).
//!
//! The checksum is the Internet checksum over a pseudo header (source and destination
//! address, protocol 253) and the packet, with the bytes devices may change taken as zero:
//! the device flags, the filled-feedback count and the feedback slots. So a device that
//! appends feedback leaves it valid; one that trims the payload recomputes it
//! ([`super::edit`]).

use std::net::Ipv4Addr;

use sluice_wire::checksum;

use super::entries::{Feedback, PacketRun, PathletTc};
use super::error::MtpError;
use super::list::List;
use super::{IP_PROTOCOL, VERSION};

/// Byte ranges of the fixed part (smoltcp's `mod field` convention).
pub(crate) mod field {
    use core::ops::Range;
    pub(crate) const SRC_PORT: Range<usize> = 0..2;
    pub(crate) const DST_PORT: Range<usize> = 2..4;
    /// Version (high nibble) and sender flags (low nibble).
    pub(crate) const VER_FLAGS: usize = 4;
    pub(crate) const PRIORITY: usize = 5;
    pub(crate) const TC: usize = 6;
    /// Header length in 4-byte words, lists included.
    pub(crate) const HDR_WORDS: usize = 7;
    pub(crate) const MSG_ID: Range<usize> = 8..12;
    pub(crate) const MSG_LEN: Range<usize> = 12..16;
    pub(crate) const MSG_PKTS: Range<usize> = 16..18;
    pub(crate) const PKT_NUM: Range<usize> = 18..20;
    pub(crate) const PKT_OFFSET: Range<usize> = 20..24;
    pub(crate) const PKT_LEN: Range<usize> = 24..26;
    pub(crate) const CHECKSUM: Range<usize> = 26..28;
    pub(crate) const EXCLUDE_COUNT: usize = 28;
    pub(crate) const FEEDBACK_SLOTS: usize = 29;
    pub(crate) const ACK_FEEDBACK_COUNT: usize = 30;
    pub(crate) const SACK_COUNT: usize = 31;
    pub(crate) const NACK_COUNT: usize = 32;
    /// Device flags: changed by devices on the path, outside the checksum.
    pub(crate) const DEVICE_FLAGS: usize = 33;
    /// Feedback slots filled: changed by devices, outside the checksum.
    pub(crate) const FEEDBACK_COUNT: usize = 34;
    pub(crate) const RESERVED: usize = 35;
    /// The lists start here.
    pub(crate) const LISTS: usize = 36;
}

/// Length of the fixed part of the header.
pub const FIXED_LEN: usize = field::LISTS;
/// The longest header the 8-bit length field (in words) can describe.
pub const MAX_HEADER_LEN: usize = 255 * 4;

/// Sender flag: the packet carries part of a message (the message fields are meaningful).
pub const FLAG_DATA: u8 = 0x1;
/// Sender flag: the packet acknowledges (its SACK, NACK and ACK-feedback lists are meaningful).
pub const FLAG_ACK: u8 = 0x2;
/// Device flag: a device removed the payload on overflow (NDP-style trimming, mtp.txt 4).
pub const DEVICE_TRIMMED: u8 = 0x1;
/// Device flag: a device had feedback to add but every slot was filled.
pub const DEVICE_FEEDBACK_FULL: u8 = 0x2;

/// A parsed or to-be-emitted MTP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MtpRepr<'a> {
    /// Source port (selects the sending application).
    pub src_port: u16,
    /// Destination port (selects the receiving application).
    pub dst_port: u16,
    /// Sender flags ([`FLAG_DATA`], [`FLAG_ACK`]); only the low nibble is on the wire.
    pub flags: u8,
    /// The message's priority, set by the application (higher goes first).
    pub priority: u8,
    /// The traffic class the sender asks for (the tenant's class).
    pub tc: u8,
    /// The message id, unique among the sender's outstanding messages.
    pub msg_id: u32,
    /// The message's length in bytes.
    pub msg_len: u32,
    /// The message's length in packets.
    pub msg_pkts: u16,
    /// This packet's number within the message (from 0).
    pub pkt_num: u16,
    /// This packet's byte offset within the message.
    pub pkt_offset: u32,
    /// This packet's payload length in bytes (kept when a device trims the payload).
    pub pkt_len: u16,
    /// Device flags ([`DEVICE_TRIMMED`], [`DEVICE_FEEDBACK_FULL`]).
    pub device_flags: u8,
    /// Pathlets (and TCs) the sender asks the network not to use for this packet.
    pub exclude: List<'a, PathletTc>,
    /// Feedback slots reserved for devices on the path (at least `feedback.len()`).
    pub feedback_slots: u8,
    /// Path feedback filled in by devices so far.
    pub feedback: List<'a, Feedback>,
    /// Path feedback of an earlier packet, echoed by its receiver.
    pub ack_feedback: List<'a, Feedback>,
    /// Packets received (selective acknowledgement).
    pub sack: List<'a, PacketRun>,
    /// Packets known lost or trimmed (negative acknowledgement).
    pub nack: List<'a, PacketRun>,
}

fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    b.get(r)
        .and_then(|s| s.first_chunk::<2>())
        .map_or(0, |w| u16::from_be_bytes(*w))
}

fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    b.get(r)
        .and_then(|s| s.first_chunk::<4>())
        .map_or(0, |w| u32::from_be_bytes(*w))
}

fn byte(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// Where the lists of a header lie, from its count fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) exclude: core::ops::Range<usize>,
    pub(crate) feedback_slots: core::ops::Range<usize>,
    pub(crate) ack_feedback: core::ops::Range<usize>,
    pub(crate) sack: core::ops::Range<usize>,
    pub(crate) nack: core::ops::Range<usize>,
}

impl Layout {
    pub(crate) fn new(
        exclude: usize,
        slots: usize,
        ack_fb: usize,
        sack: usize,
        nack: usize,
    ) -> Layout {
        let e = FIXED_LEN + exclude * PathletTc::LEN;
        let f = e + slots * Feedback::LEN;
        let a = f + ack_fb * Feedback::LEN;
        let s = a + sack * PacketRun::LEN;
        let n = s + nack * PacketRun::LEN;
        Layout {
            exclude: FIXED_LEN..e,
            feedback_slots: e..f,
            ack_feedback: f..a,
            sack: a..s,
            nack: s..n,
        }
    }

    /// Reads the count fields of a header's fixed part.
    pub(crate) fn of(fixed: &[u8]) -> Layout {
        Layout::new(
            usize::from(byte(fixed, field::EXCLUDE_COUNT)),
            usize::from(byte(fixed, field::FEEDBACK_SLOTS)),
            usize::from(byte(fixed, field::ACK_FEEDBACK_COUNT)),
            usize::from(byte(fixed, field::SACK_COUNT)),
            usize::from(byte(fixed, field::NACK_COUNT)),
        )
    }

    pub(crate) fn header_len(&self) -> usize {
        self.nack.end
    }
}

/// Checks the structure of `packet` (an MTP packet: header and payload) without the
/// checksum; returns its layout and header length.
pub(crate) fn check_structure(packet: &[u8]) -> Result<(Layout, usize), MtpError> {
    let fixed = packet.get(..FIXED_LEN).ok_or(MtpError::Truncated {
        need: FIXED_LEN,
        have: packet.len(),
    })?;
    let version = byte(fixed, field::VER_FLAGS) >> 4;
    if version != VERSION {
        return Err(MtpError::Version(version));
    }
    let layout = Layout::of(fixed);
    let hdr_len = usize::from(byte(fixed, field::HDR_WORDS)) * 4;
    if hdr_len != layout.header_len() {
        return Err(MtpError::HeaderLength {
            field: hdr_len,
            lists: layout.header_len(),
        });
    }
    if packet.len() < hdr_len {
        return Err(MtpError::Truncated {
            need: hdr_len,
            have: packet.len(),
        });
    }
    let count = byte(fixed, field::FEEDBACK_COUNT);
    let slots = byte(fixed, field::FEEDBACK_SLOTS);
    if count > slots {
        return Err(MtpError::FeedbackCount { count, slots });
    }
    let flags = byte(fixed, field::VER_FLAGS) & 0x0f;
    let device = byte(fixed, field::DEVICE_FLAGS);
    let pkt_len = usize::from(be16(fixed, field::PKT_LEN));
    let present = packet.len() - hdr_len;
    let expected = if flags & FLAG_DATA != 0 && device & DEVICE_TRIMMED == 0 {
        pkt_len
    } else {
        0
    };
    if present != expected {
        return Err(MtpError::PayloadLength {
            field: expected,
            present,
        });
    }
    if flags & FLAG_DATA != 0 {
        let end = u64::from(be32(fixed, field::PKT_OFFSET)) + pkt_len as u64;
        let msg_len = u64::from(be32(fixed, field::MSG_LEN));
        if be16(fixed, field::PKT_NUM) >= be16(fixed, field::MSG_PKTS) || end > msg_len {
            return Err(MtpError::OutsideMessage);
        }
    }
    Ok((layout, hdr_len))
}

/// The packet's checksum as it should be carried (device-mutable bytes taken as zero).
/// `packet` is header and payload; its checksum field is ignored.
pub(crate) fn compute_checksum(packet: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
    let layout = Layout::of(packet);
    let hdr_len = layout.header_len().min(packet.len());
    let mut sum = checksum::pseudo_header_v4(src, dst, IP_PROTOCOL, 0);
    // Every piece starts at an even offset, so the sum of pieces is the sum of the whole
    // with the excluded bytes zero.
    sum += checksum::sum(packet.get(..field::CHECKSUM.start).unwrap_or_default());
    sum += checksum::sum(
        packet
            .get(field::CHECKSUM.end..field::NACK_COUNT)
            .unwrap_or_default(),
    );
    // Bytes 32..36: NACK count, device flags (zero), feedback count (zero), reserved.
    sum += u32::from(byte(packet, field::NACK_COUNT)) << 8;
    sum += u32::from(byte(packet, field::RESERVED));
    sum += checksum::sum(
        packet
            .get(FIXED_LEN..layout.feedback_slots.start.min(hdr_len))
            .unwrap_or_default(),
    );
    sum += checksum::sum(
        packet
            .get(layout.feedback_slots.end.min(hdr_len)..)
            .unwrap_or_default(),
    );
    !checksum::fold(sum)
}

impl<'a> MtpRepr<'a> {
    /// Parses an MTP packet (the IPv4 or UDP payload, exactly); returns the header and the
    /// payload. With `verify`, checks the checksum against `src`/`dst`.
    pub fn parse(
        packet: &'a [u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        verify: bool,
    ) -> Result<(MtpRepr<'a>, &'a [u8]), MtpError> {
        let (layout, hdr_len) = check_structure(packet)?;
        if verify && compute_checksum(packet, src, dst) != be16(packet, field::CHECKSUM) {
            return Err(MtpError::Checksum);
        }
        let count = usize::from(byte(packet, field::FEEDBACK_COUNT));
        let filled =
            layout.feedback_slots.start..layout.feedback_slots.start + count * Feedback::LEN;
        let list = |r: core::ops::Range<usize>| packet.get(r).unwrap_or_default();
        let repr = MtpRepr {
            src_port: be16(packet, field::SRC_PORT),
            dst_port: be16(packet, field::DST_PORT),
            flags: byte(packet, field::VER_FLAGS) & 0x0f,
            priority: byte(packet, field::PRIORITY),
            tc: byte(packet, field::TC),
            msg_id: be32(packet, field::MSG_ID),
            msg_len: be32(packet, field::MSG_LEN),
            msg_pkts: be16(packet, field::MSG_PKTS),
            pkt_num: be16(packet, field::PKT_NUM),
            pkt_offset: be32(packet, field::PKT_OFFSET),
            pkt_len: be16(packet, field::PKT_LEN),
            device_flags: byte(packet, field::DEVICE_FLAGS),
            exclude: List::Wire(list(layout.exclude.clone())),
            feedback_slots: byte(packet, field::FEEDBACK_SLOTS),
            feedback: List::Wire(list(filled)),
            ack_feedback: List::Wire(list(layout.ack_feedback.clone())),
            sack: List::Wire(list(layout.sack.clone())),
            nack: List::Wire(list(layout.nack)),
        };
        Ok((repr, packet.get(hdr_len..).unwrap_or_default()))
    }

    /// Whether the packet carries part of a message.
    pub fn is_data(&self) -> bool {
        self.flags & FLAG_DATA != 0
    }

    /// Whether the packet acknowledges.
    pub fn is_ack(&self) -> bool {
        self.flags & FLAG_ACK != 0
    }

    /// Whether a device trimmed its payload.
    pub fn is_trimmed(&self) -> bool {
        self.device_flags & DEVICE_TRIMMED != 0
    }

    fn layout(&self) -> Result<Layout, MtpError> {
        let count =
            |n: usize, what: &'static str| u8::try_from(n).map_err(|_| MtpError::ListTooLong(what));
        count(self.exclude.len(), "path exclude")?;
        count(self.ack_feedback.len(), "ACK path feedback")?;
        count(self.sack.len(), "SACK")?;
        count(self.nack.len(), "NACK")?;
        if self.feedback.len() > usize::from(self.feedback_slots) {
            return Err(MtpError::ListTooLong("path feedback"));
        }
        let layout = Layout::new(
            self.exclude.len(),
            usize::from(self.feedback_slots),
            self.ack_feedback.len(),
            self.sack.len(),
            self.nack.len(),
        );
        if layout.header_len() > MAX_HEADER_LEN {
            return Err(MtpError::ListTooLong("header"));
        }
        Ok(layout)
    }

    /// Header length in bytes (a multiple of 4), or an error when the lists do not fit.
    pub fn header_len(&self) -> Result<usize, MtpError> {
        Ok(self.layout()?.header_len())
    }

    /// Writes header and `payload` into `buf` with the checksum for `src`/`dst`; returns the
    /// packet length. A trimmed header takes no payload; a data header takes `pkt_len` bytes.
    pub fn emit(
        &self,
        buf: &mut [u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        payload: &[u8],
    ) -> Result<usize, MtpError> {
        let layout = self.layout()?;
        let hdr_len = layout.header_len();
        let len = hdr_len + payload.len();
        let have = buf.len();
        let out = buf
            .get_mut(..len)
            .ok_or(MtpError::BufferTooSmall { need: len, have })?;
        out[..hdr_len].fill(0);
        out[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        out[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        out[field::VER_FLAGS] = (VERSION << 4) | (self.flags & 0x0f);
        out[field::PRIORITY] = self.priority;
        out[field::TC] = self.tc;
        // The layout check bounds the header to 1020 bytes: 255 words.
        out[field::HDR_WORDS] = (hdr_len / 4) as u8;
        out[field::MSG_ID].copy_from_slice(&self.msg_id.to_be_bytes());
        out[field::MSG_LEN].copy_from_slice(&self.msg_len.to_be_bytes());
        out[field::MSG_PKTS].copy_from_slice(&self.msg_pkts.to_be_bytes());
        out[field::PKT_NUM].copy_from_slice(&self.pkt_num.to_be_bytes());
        out[field::PKT_OFFSET].copy_from_slice(&self.pkt_offset.to_be_bytes());
        out[field::PKT_LEN].copy_from_slice(&self.pkt_len.to_be_bytes());
        // Counts were checked to fit a byte by `layout`.
        out[field::EXCLUDE_COUNT] = self.exclude.len() as u8;
        out[field::FEEDBACK_SLOTS] = self.feedback_slots;
        out[field::ACK_FEEDBACK_COUNT] = self.ack_feedback.len() as u8;
        out[field::SACK_COUNT] = self.sack.len() as u8;
        out[field::NACK_COUNT] = self.nack.len() as u8;
        out[field::DEVICE_FLAGS] = self.device_flags;
        out[field::FEEDBACK_COUNT] = self.feedback.len() as u8;
        self.exclude.write(&mut out[layout.exclude.clone()]);
        let filled = layout.feedback_slots.start
            ..layout.feedback_slots.start + self.feedback.len() * Feedback::LEN;
        self.feedback.write(&mut out[filled]);
        self.ack_feedback
            .write(&mut out[layout.ack_feedback.clone()]);
        self.sack.write(&mut out[layout.sack.clone()]);
        self.nack.write(&mut out[layout.nack.clone()]);
        out[hdr_len..].copy_from_slice(payload);
        let ck = compute_checksum(out, src, dst);
        out[field::CHECKSUM].copy_from_slice(&ck.to_be_bytes());
        // Refuse what would not parse back, so nothing malformed leaves this host.
        check_structure(out)?;
        Ok(len)
    }
}
