//! TCP segments (RFC 9293) with MSS, window scale, SACK and timestamp options.

use crate::checksum;
use crate::field;
use crate::ipv4::PROTOCOL_TCP;
use crate::WireError;
use core::fmt;
use core::ops::{Add, AddAssign, BitAnd, BitOr, BitOrAssign, Sub, SubAssign};
use std::net::Ipv4Addr;

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// Maximum number of SACK blocks kept by [`TcpOptions`].
pub const MAX_SACK_BLOCKS: usize = 4;
/// Maximum length of the option area (data offset 15 minus the fixed header).
pub const MAX_OPTIONS_LEN: usize = 40;

/// A TCP sequence number with wrapping (RFC 1982 style) arithmetic and comparison.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Signed distance `self - other`, wrapping: positive when `self` is after `other`.
    #[inline(always)]
    pub fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Whether `self` is before `other`.
    #[inline(always)]
    pub fn seq_lt(self, other: SeqNumber) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` is before or equal to `other`.
    #[inline(always)]
    pub fn seq_le(self, other: SeqNumber) -> bool {
        self.diff(other) <= 0
    }

    /// Whether `self` is after `other`.
    #[inline(always)]
    pub fn seq_gt(self, other: SeqNumber) -> bool {
        self.diff(other) > 0
    }

    /// Whether `self` is after or equal to `other`.
    #[inline(always)]
    pub fn seq_ge(self, other: SeqNumber) -> bool {
        self.diff(other) >= 0
    }

    /// The later of the two in sequence space.
    #[inline(always)]
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        if self.seq_ge(other) {
            self
        } else {
            other
        }
    }

    /// The earlier of the two in sequence space.
    #[inline(always)]
    pub fn min(self, other: SeqNumber) -> SeqNumber {
        if self.seq_le(other) {
            self
        } else {
            other
        }
    }
}

impl Add<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline(always)]
    fn add(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs))
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;
    /// Adds modulo 2^32 (the `usize` is truncated to 32 bits).
    #[inline(always)]
    fn add(self, rhs: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl AddAssign<u32> for SeqNumber {
    #[inline(always)]
    fn add_assign(&mut self, rhs: u32) {
        self.0 = self.0.wrapping_add(rhs);
    }
}

impl AddAssign<usize> for SeqNumber {
    #[inline(always)]
    fn add_assign(&mut self, rhs: usize) {
        self.0 = self.0.wrapping_add(rhs as u32);
    }
}

impl Sub<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline(always)]
    fn sub(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(rhs))
    }
}

impl SubAssign<u32> for SeqNumber {
    #[inline(always)]
    fn sub_assign(&mut self, rhs: u32) {
        self.0 = self.0.wrapping_sub(rhs);
    }
}

impl fmt::Debug for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The eight TCP control bits (byte 13 of the header).
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN-Echo.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// No flags set.
    #[inline(always)]
    pub fn empty() -> Self {
        TcpFlags(0)
    }

    /// Whether every flag in `other` is set in `self`.
    #[inline(always)]
    pub fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag in `other` is set in `self`.
    #[inline(always)]
    pub fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no flag is set.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Sets the flags in `other`.
    #[inline(always)]
    pub fn insert(&mut self, other: TcpFlags) {
        self.0 |= other.0;
    }

    /// Clears the flags in `other`.
    #[inline(always)]
    pub fn remove(&mut self, other: TcpFlags) {
        self.0 &= !other.0;
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    #[inline(always)]
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    #[inline(always)]
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for TcpFlags {
    type Output = TcpFlags;
    #[inline(always)]
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        if self.0 == 0 {
            return f.write_str("(empty)");
        }
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

const OPT_EOL: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_MSS: u8 = 2;
const OPT_WS: u8 = 3;
const OPT_SACK_PERM: u8 = 4;
const OPT_SACK: u8 = 5;
const OPT_TS: u8 = 8;

/// The TCP options Sluice understands; others are skipped on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2).
    pub mss: Option<u16>,
    /// Window scale shift count as received, not clamped (kind 3).
    pub window_scale: Option<u8>,
    /// SACK permitted (kind 4).
    pub sack_permitted: bool,
    /// Timestamps (TSval, TSecr) (kind 8).
    pub timestamp: Option<(u32, u32)>,
    /// SACK blocks (left edge, right edge); the first `sack_count` are valid (kind 5).
    pub sack_blocks: [(SeqNumber, SeqNumber); MAX_SACK_BLOCKS],
    /// Number of valid entries in `sack_blocks`.
    pub sack_count: u8,
}

impl TcpOptions {
    /// The valid SACK blocks (at most [`MAX_SACK_BLOCKS`]).
    #[inline]
    pub fn sacks(&self) -> &[(SeqNumber, SeqNumber)] {
        let n = usize::from(self.sack_count).min(MAX_SACK_BLOCKS);
        self.sack_blocks.get(..n).unwrap_or(&[])
    }

    /// Appends a SACK block; returns false (and does nothing) when full.
    #[inline]
    pub fn push_sack(&mut self, left: SeqNumber, right: SeqNumber) -> bool {
        let n = usize::from(self.sack_count);
        match self.sack_blocks.get_mut(n) {
            Some(slot) => {
                *slot = (left, right);
                self.sack_count += 1;
                true
            }
            None => false,
        }
    }

    /// Length of every option except SACK blocks, as emitted.
    #[inline(always)]
    fn base_len(&self) -> usize {
        let mut len = 0;
        if self.mss.is_some() {
            len += 4;
        }
        if self.timestamp.is_some() {
            len += 12; // SACK_PERM + TS, or NOP NOP TS
        } else if self.sack_permitted {
            len += 4; // NOP NOP SACK_PERM
        }
        if self.window_scale.is_some() {
            len += 4; // NOP WS
        }
        len
    }

    /// How many SACK blocks [`TcpHeader::emit`] writes: those that fit in 40 bytes.
    #[inline]
    pub fn emitted_sack_count(&self) -> usize {
        let n = self.sacks().len();
        if n == 0 {
            return 0;
        }
        let room = MAX_OPTIONS_LEN.saturating_sub(self.base_len() + 4) / 8;
        n.min(room)
    }

    /// Length of the option area as emitted (a multiple of 4, at most 40).
    #[inline]
    pub fn emitted_len(&self) -> usize {
        let n = self.emitted_sack_count();
        self.base_len() + if n > 0 { 4 + 8 * n } else { 0 }
    }

    /// Writes the options into `o` (which must hold `emitted_len()` bytes); returns the length.
    ///
    /// Layout: MSS, SACK_PERM+TS (or NOP NOP TS / NOP NOP SACK_PERM), NOP WS,
    /// NOP NOP SACK; this matches Linux's SYN and data-segment layouts.
    #[inline]
    fn emit(&self, o: &mut [u8]) -> usize {
        let mut at = 0;
        if let Some(mss) = self.mss {
            let [hi, lo] = mss.to_be_bytes();
            field::put(o, at, [OPT_MSS, 4, hi, lo]);
            at += 4;
        }
        if let Some((tsval, tsecr)) = self.timestamp {
            let prefix = if self.sack_permitted {
                [OPT_SACK_PERM, 2, OPT_TS, 10]
            } else {
                [OPT_NOP, OPT_NOP, OPT_TS, 10]
            };
            field::put(o, at, prefix);
            field::put32(o, at + 4, tsval);
            field::put32(o, at + 8, tsecr);
            at += 12;
        } else if self.sack_permitted {
            field::put(o, at, [OPT_NOP, OPT_NOP, OPT_SACK_PERM, 2]);
            at += 4;
        }
        if let Some(ws) = self.window_scale {
            field::put(o, at, [OPT_NOP, OPT_WS, 3, ws]);
            at += 4;
        }
        let n = self.emitted_sack_count();
        if n > 0 {
            field::put(o, at, [OPT_NOP, OPT_NOP, OPT_SACK, 2 + 8 * n as u8]);
            at += 4;
            for &(left, right) in self.sacks().iter().take(n) {
                field::put32(o, at, left.0);
                field::put32(o, at + 4, right.0);
                at += 8;
            }
        }
        at
    }

    /// Unfolded one's-complement sum of the option area exactly as [`TcpOptions::emit`]
    /// writes it, computed from the values (a mirror of `emit`'s layout).
    #[inline]
    fn sum(&self) -> u32 {
        let word = |hi: u8, lo: u8| u32::from(u16::from_be_bytes([hi, lo]));
        let split = |v: u32| (v >> 16) + (v & 0xFFFF);
        let mut s = 0;
        if let Some(mss) = self.mss {
            s += word(OPT_MSS, 4) + u32::from(mss);
        }
        if let Some((tsval, tsecr)) = self.timestamp {
            s += if self.sack_permitted {
                word(OPT_SACK_PERM, 2)
            } else {
                word(OPT_NOP, OPT_NOP)
            };
            s += word(OPT_TS, 10) + split(tsval) + split(tsecr);
        } else if self.sack_permitted {
            s += word(OPT_NOP, OPT_NOP) + word(OPT_SACK_PERM, 2);
        }
        if let Some(ws) = self.window_scale {
            s += word(OPT_NOP, OPT_WS) + word(3, ws);
        }
        let n = self.emitted_sack_count();
        if n > 0 {
            s += word(OPT_NOP, OPT_NOP) + word(OPT_SACK, 2 + 8 * n as u8);
            for &(left, right) in self.sacks().iter().take(n) {
                s += split(left.0) + split(right.0);
            }
        }
        s
    }

    /// Parses an option area (the bytes between the fixed header and the data offset).
    #[inline]
    pub fn parse(mut opts: &[u8]) -> Result<TcpOptions, WireError> {
        let mut o = TcpOptions::default();
        // Fast path: Linux's data-segment layout, NOP NOP TS.
        if let [OPT_NOP, OPT_NOP, OPT_TS, 10, ref ts @ ..] = *opts {
            if ts.len() == 8 {
                o.timestamp = Some((field::be32(ts, 0), field::be32(ts, 4)));
                return Ok(o);
            }
        }
        loop {
            let (kind, len, rest) = match *opts {
                [] | [OPT_EOL, ..] => return Ok(o),
                [OPT_NOP, ref rest @ ..] => {
                    opts = rest;
                    continue;
                }
                [_] => return Err(WireError::Malformed),
                [kind, len, ref rest @ ..] => (kind, usize::from(len), rest),
            };
            // RFC 9293 MUST-7: an illegal option length (0, 1, or past the header) is
            // refused here; the core drops the segment and counts it.
            let data_len = len.checked_sub(2).ok_or(WireError::Malformed)?;
            let (data, rest) = rest
                .split_at_checked(data_len)
                .ok_or(WireError::Malformed)?;
            opts = rest;
            match kind {
                OPT_MSS => match *data {
                    [hi, lo] => o.mss = Some(u16::from_be_bytes([hi, lo])),
                    _ => return Err(WireError::Malformed),
                },
                OPT_WS => match *data {
                    [shift] => o.window_scale = Some(shift),
                    _ => return Err(WireError::Malformed),
                },
                OPT_SACK_PERM => match *data {
                    [] => o.sack_permitted = true,
                    _ => return Err(WireError::Malformed),
                },
                OPT_TS => match data.first_chunk::<8>() {
                    Some(ts) if data.len() == 8 => {
                        o.timestamp = Some((field::be32(ts, 0), field::be32(ts, 4)))
                    }
                    _ => return Err(WireError::Malformed),
                },
                OPT_SACK => {
                    let n = data.len() / 8;
                    if data.len() % 8 != 0 || n == 0 || n > MAX_SACK_BLOCKS {
                        return Err(WireError::Malformed);
                    }
                    o.sack_blocks = Default::default();
                    for (slot, block) in o.sack_blocks.iter_mut().zip(data.chunks_exact(8)) {
                        *slot = (
                            SeqNumber(field::be32(block, 0)),
                            SeqNumber(field::be32(block, 4)),
                        );
                    }
                    o.sack_count = n as u8;
                }
                // RFC 9293 MUST-6: an option we do not implement, with a valid length, is
                // skipped without error.
                _ => {}
            }
        }
    }
}

/// Whether [`TcpHeader::parse`] verifies the checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumCheck {
    /// Verify the checksum and fail with [`WireError::Checksum`] on mismatch.
    Verify,
    /// Do not verify (e.g. offloaded or trusted input).
    Skip,
}

/// A parsed TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: SeqNumber,
    /// Acknowledgment number.
    pub ack: SeqNumber,
    /// Control bits.
    pub flags: TcpFlags,
    /// Window field (unscaled).
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Parsed options.
    pub options: TcpOptions,
}

/// Validates data offset and lengths; returns the header length.
#[inline(always)]
fn check_structure(segment: &[u8]) -> Result<usize, WireError> {
    let h = segment
        .first_chunk::<HEADER_LEN>()
        .ok_or(WireError::Truncated)?;
    let header_len = usize::from(field::u8_at(h, 12) >> 4) * 4;
    if header_len < HEADER_LEN {
        return Err(WireError::Malformed);
    }
    if header_len > segment.len() {
        return Err(WireError::Truncated);
    }
    Ok(header_len)
}

impl TcpHeader {
    /// Parses a segment (header + payload). src/dst IPs are for the pseudo-header checksum.
    #[inline]
    pub fn parse(
        segment: &[u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        check: ChecksumCheck,
    ) -> Result<(TcpHeader, &[u8]), WireError> {
        let header_len = check_structure(segment)?;
        if check == ChecksumCheck::Verify && !verify_checksum(segment, src, dst) {
            return Err(WireError::Checksum);
        }
        let h = segment
            .first_chunk::<HEADER_LEN>()
            .ok_or(WireError::Truncated)?;
        let opts = segment.get(HEADER_LEN..header_len).unwrap_or(&[]);
        let options = if opts.is_empty() {
            TcpOptions::default()
        } else {
            TcpOptions::parse(opts)?
        };
        let header = TcpHeader {
            src_port: field::be16(h, 0),
            dst_port: field::be16(h, 2),
            seq: SeqNumber(field::be32(h, 4)),
            ack: SeqNumber(field::be32(h, 8)),
            flags: TcpFlags(field::u8_at(h, 13)),
            window: field::be16(h, 14),
            urgent: field::be16(h, 18),
            options,
        };
        Ok((header, segment.get(header_len..).unwrap_or(&[])))
    }

    /// Header length as emitted: 20 + `options.emitted_len()`.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.emitted_len()
    }

    /// Writes header (options padded with NOPs/EOL to 4-byte boundary) into buf; checksum field zero. Returns header_len.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.header_len();
        let out = buf.get_mut(..len).ok_or(WireError::BufferTooSmall)?;
        let (h, opts) = out
            .split_at_mut_checked(HEADER_LEN)
            .ok_or(WireError::BufferTooSmall)?;
        field::put16(h, 0, self.src_port);
        field::put16(h, 2, self.dst_port);
        field::put32(h, 4, self.seq.0);
        field::put32(h, 8, self.ack.0);
        field::put8(h, 12, ((len / 4) as u8) << 4);
        field::put8(h, 13, self.flags.0);
        field::put16(h, 14, self.window);
        field::put16(h, 16, 0);
        field::put16(h, 18, self.urgent);
        self.options.emit(opts);
        Ok(len)
    }

    /// Unfolded one's-complement sum of the header exactly as [`TcpHeader::emit`] writes it
    /// (checksum field zero), computed from the fields. Emitters add it to the pseudo
    /// header and payload sums instead of summing the header bytes they just wrote, which
    /// would read them back through a store-to-load forwarding stall. Below 2^21.
    #[inline]
    pub fn sum(&self) -> u32 {
        let split = |v: u32| (v >> 16) + (v & 0xFFFF);
        let offset_flags = ((self.header_len() as u32 / 4) << 12) | u32::from(self.flags.0);
        u32::from(self.src_port)
            + u32::from(self.dst_port)
            + split(self.seq.0)
            + split(self.ack.0)
            + offset_flags
            + u32::from(self.window)
            + u32::from(self.urgent)
            + self.options.sum()
    }
}

/// The checksum of a segment whose header sums to `header_sum` ([`TcpHeader::sum`]) and
/// whose payload of `payload.len()` bytes follows a header of `header_len` bytes.
#[inline]
pub fn segment_checksum(
    header_sum: u32,
    header_len: usize,
    payload: &[u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> u16 {
    let len = u32::try_from(header_len + payload.len()).unwrap_or(u32::MAX);
    let pseudo = checksum::pseudo_header_v4_u32(src, dst, PROTOCOL_TCP, len);
    // Each term is below 2^21, so the u32 sum cannot overflow.
    !checksum::fold(pseudo + header_sum + checksum::sum(payload))
}

/// The folded, uncomplemented pseudo-header sum for a segment of `len` bytes: what a sender
/// stores in the checksum field when it leaves the rest to offload (CHECKSUM_PARTIAL).
#[inline]
pub fn pseudo_header_checksum(len: u32, src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
    checksum::fold(checksum::pseudo_header_v4_u32(src, dst, PROTOCOL_TCP, len))
}

/// Unfolded sum of the pseudo header plus the whole segment.
#[inline(always)]
fn segment_sum(segment: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> u32 {
    // A length above 65535 cannot occur in IPv4; summing it as two words keeps
    // the function total instead of panicking or silently truncating.
    let len = u32::try_from(segment.len()).unwrap_or(u32::MAX);
    checksum::pseudo_header_v4_u32(src, dst, PROTOCOL_TCP, len) + checksum::sum(segment)
}

/// Computes and stores the checksum of a complete TCP segment (header+payload) in place.
///
/// Does nothing if the segment is shorter than the checksum field's end (18 bytes).
#[inline]
pub fn fill_checksum(segment: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
    if segment.len() < 18 {
        return;
    }
    field::put16(segment, 16, 0);
    let c = !checksum::fold(segment_sum(segment, src, dst));
    field::put16(segment, 16, c);
}

/// Verifies a complete segment's checksum.
#[inline]
pub fn verify_checksum(segment: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> bool {
    checksum::fold(segment_sum(segment, src, dst)) == 0xFFFF
}

/// A checked read/write view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Wraps `buffer`, checking the data offset against its length (not the checksum).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_structure(buffer.as_ref())?;
        Ok(TcpSegment { buffer })
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

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        field::be16(self.b(), 0)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        field::be16(self.b(), 2)
    }

    /// Sequence number.
    #[inline]
    pub fn seq(&self) -> SeqNumber {
        SeqNumber(field::be32(self.b(), 4))
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack(&self) -> SeqNumber {
        SeqNumber(field::be32(self.b(), 8))
    }

    /// Header length in bytes (data offset * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(field::u8_at(self.b(), 12) >> 4) * 4
    }

    /// Control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(field::u8_at(self.b(), 13))
    }

    /// Window field (unscaled).
    #[inline]
    pub fn window(&self) -> u16 {
        field::be16(self.b(), 14)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        field::be16(self.b(), 16)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        field::be16(self.b(), 18)
    }

    /// Raw option bytes (between the fixed header and the data offset).
    #[inline]
    pub fn options(&self) -> &[u8] {
        self.b().get(HEADER_LEN..self.header_len()).unwrap_or(&[])
    }

    /// Parses the option bytes.
    #[inline]
    pub fn parse_options(&self) -> Result<TcpOptions, WireError> {
        TcpOptions::parse(self.options())
    }

    /// Payload (everything after the header).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.b().get(self.header_len()..).unwrap_or(&[])
    }

    /// Whether the checksum verifies for the given pseudo-header addresses.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        verify_checksum(self.b(), src, dst)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    /// Sets the source port (checksum not updated).
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        field::put16(self.buffer.as_mut(), 0, port);
    }

    /// Sets the destination port (checksum not updated).
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        field::put16(self.buffer.as_mut(), 2, port);
    }

    /// Sets the sequence number (checksum not updated).
    #[inline]
    pub fn set_seq(&mut self, seq: SeqNumber) {
        field::put32(self.buffer.as_mut(), 4, seq.0);
    }

    /// Sets the acknowledgment number (checksum not updated).
    #[inline]
    pub fn set_ack(&mut self, ack: SeqNumber) {
        field::put32(self.buffer.as_mut(), 8, ack.0);
    }

    /// Sets the control bits (checksum not updated).
    #[inline]
    pub fn set_flags(&mut self, flags: TcpFlags) {
        field::put8(self.buffer.as_mut(), 13, flags.0);
    }

    /// Sets the window field (checksum not updated).
    #[inline]
    pub fn set_window(&mut self, window: u16) {
        field::put16(self.buffer.as_mut(), 14, window);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        field::put16(self.buffer.as_mut(), 16, c);
    }

    /// Recomputes and stores the checksum.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        fill_checksum(self.buffer.as_mut(), src, dst);
    }

    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        self.buffer.as_mut().get_mut(start..).unwrap_or(&mut [])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LO: Ipv4Addr = Ipv4Addr::LOCALHOST;

    /// A real Linux 6.x SYN to 127.0.0.1, captured with an AF_PACKET socket on
    /// `lo`. Loopback uses checksum offload, so the wire carried the folded
    /// pseudo-header sum 0xfe30; 0x6999 is the full checksum, computed by hand
    /// (and independently with a reference RFC 1071 script).
    const LINUX_SYN: [u8; 40] = [
        0xd4, 0x02, 0xe6, 0xd3, // ports 54274 -> 59091
        0x10, 0x41, 0x4d, 0xf6, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, 0xff, 0xd7, // data offset 10, SYN, window 65495
        0x69, 0x99, 0x00, 0x00, // checksum, urgent
        0x02, 0x04, 0xff, 0xd7, // MSS 65495
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0x7e, 0x1e, 0x4f, 0x39, 0x00, 0x00, 0x00, 0x00, // TS
        0x01, 0x03, 0x03, 0x0a, // NOP, WS 10
    ];

    fn header(options: TcpOptions) -> TcpHeader {
        TcpHeader {
            src_port: 80,
            dst_port: 40000,
            seq: SeqNumber(0xFFFF_FFF0),
            ack: SeqNumber(12345),
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 512,
            urgent: 0,
            options,
        }
    }

    #[test]
    fn linux_syn() {
        let (h, payload) = TcpHeader::parse(&LINUX_SYN, LO, LO, ChecksumCheck::Verify).unwrap();
        assert!(payload.is_empty());
        assert_eq!((h.src_port, h.dst_port), (54274, 59091));
        assert_eq!(h.seq, SeqNumber(0x1041_4df6));
        assert_eq!(h.ack, SeqNumber(0));
        assert_eq!(h.flags, TcpFlags::SYN);
        assert_eq!(h.window, 65495);
        assert_eq!(h.options.mss, Some(65495));
        assert!(h.options.sack_permitted);
        assert_eq!(h.options.timestamp, Some((0x7e1e_4f39, 0)));
        assert_eq!(h.options.window_scale, Some(10));
        assert!(h.options.sacks().is_empty());
        assert_eq!(h.header_len(), 40);

        // Emitting reproduces Linux's exact option layout.
        let mut out = [0xEEu8; 40];
        assert_eq!(h.emit(&mut out), Ok(40));
        assert_eq!(out[16..18], [0, 0]);
        fill_checksum(&mut out, LO, LO);
        assert_eq!(out, LINUX_SYN);
        assert!(verify_checksum(&out, LO, LO));

        // The bytes as captured (partial checksum) fail verification.
        let mut partial = LINUX_SYN;
        partial[16..18].copy_from_slice(&[0xfe, 0x30]);
        assert_eq!(
            TcpHeader::parse(&partial, LO, LO, ChecksumCheck::Verify),
            Err(WireError::Checksum)
        );
        assert!(TcpHeader::parse(&partial, LO, LO, ChecksumCheck::Skip).is_ok());
        // Wrong pseudo header addresses also fail.
        let other = Ipv4Addr::new(127, 0, 0, 2);
        assert!(!verify_checksum(&LINUX_SYN, other, LO));
    }

    #[test]
    fn data_segment_with_timestamps_and_sack() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let mut opts = TcpOptions {
            timestamp: Some((1, 2)),
            ..Default::default()
        };
        assert!(opts.push_sack(SeqNumber(100), SeqNumber(200)));
        assert!(opts.push_sack(SeqNumber(300), SeqNumber(400)));
        let h = header(opts);
        assert_eq!(h.header_len(), 20 + 12 + 4 + 16);
        let mut buf = vec![0u8; h.header_len() + 5];
        let n = h.emit(&mut buf).unwrap();
        assert_eq!(
            buf[20..n],
            [
                1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, // NOP NOP TS
                1, 1, 5, 18, 0, 0, 0, 100, 0, 0, 0, 200, 0, 0, 1, 44, 0, 0, 1,
                144, // NOP NOP SACK
            ]
        );
        buf[n..].copy_from_slice(b"hello");
        fill_checksum(&mut buf, src, dst);
        let (parsed, payload) = TcpHeader::parse(&buf, src, dst, ChecksumCheck::Verify).unwrap();
        assert_eq!(parsed, h);
        assert_eq!(payload, b"hello");
        assert_eq!(
            parsed.options.sacks(),
            &[
                (SeqNumber(100), SeqNumber(200)),
                (SeqNumber(300), SeqNumber(400))
            ]
        );

        // Checksum independently recomputed with a naive RFC 1071 sum.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&[0, 6, 0, buf.len() as u8]);
        pseudo.extend_from_slice(&buf);
        let mut s: u32 = 0;
        for (i, b) in pseudo.iter().enumerate() {
            s += if i % 2 == 0 {
                u32::from(*b) << 8
            } else {
                u32::from(*b)
            };
        }
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        assert_eq!(s, 0xFFFF);

        // The view agrees.
        let v = TcpSegment::new_checked(&buf[..]).unwrap();
        assert_eq!((v.src_port(), v.dst_port()), (80, 40000));
        assert_eq!((v.seq(), v.ack()), (h.seq, h.ack));
        assert_eq!(v.flags(), h.flags);
        assert_eq!(v.window(), 512);
        assert_eq!(v.header_len(), n);
        assert_eq!(v.options(), &buf[20..n]);
        assert_eq!(v.parse_options(), Ok(h.options));
        assert_eq!(v.payload(), b"hello");
        assert!(v.verify_checksum(src, dst));
    }

    #[test]
    fn no_options_and_view_setters() {
        let h = header(TcpOptions::default());
        let mut buf = [0u8; 24];
        assert_eq!(h.emit(&mut buf), Ok(20));
        assert_eq!(buf[12], 0x50);
        let mut v = TcpSegment::new_checked(&mut buf[..]).unwrap();
        v.set_src_port(1);
        v.set_dst_port(2);
        v.set_seq(SeqNumber(3));
        v.set_ack(SeqNumber(4));
        v.set_flags(TcpFlags::FIN | TcpFlags::ACK);
        v.set_window(5);
        v.payload_mut().copy_from_slice(b"abcd");
        v.fill_checksum(LO, LO);
        let (p, payload) = TcpHeader::parse(&buf, LO, LO, ChecksumCheck::Verify).unwrap();
        assert_eq!(
            (p.src_port, p.dst_port, p.seq, p.ack, p.window),
            (1, 2, SeqNumber(3), SeqNumber(4), 5)
        );
        assert_eq!(p.flags, TcpFlags::FIN | TcpFlags::ACK);
        assert_eq!(payload, b"abcd");
    }

    #[test]
    fn options_trimmed_to_40_bytes() {
        let mut o = TcpOptions {
            mss: Some(1460),
            timestamp: Some((7, 8)),
            window_scale: Some(7),
            sack_permitted: true,
            ..Default::default()
        };
        for i in 0..4 {
            assert!(o.push_sack(SeqNumber(i * 10), SeqNumber(i * 10 + 5)));
        }
        assert!(!o.push_sack(SeqNumber(0), SeqNumber(1)));
        assert_eq!(o.sacks().len(), 4);
        assert_eq!(o.emitted_sack_count(), 2);
        assert_eq!(o.emitted_len(), 40);
        let o2 = TcpOptions {
            mss: None,
            window_scale: None,
            sack_permitted: false,
            ..o
        };
        assert_eq!(o2.emitted_sack_count(), 3);
        assert_eq!(o2.emitted_len(), 12 + 4 + 24);
        let o3 = TcpOptions {
            timestamp: None,
            ..o2
        };
        assert_eq!(o3.emitted_sack_count(), 4);
        assert_eq!(o3.emitted_len(), 36);
        // Over-large sack_count is clamped.
        let o4 = TcpOptions {
            sack_count: 200,
            ..o3
        };
        assert_eq!(o4.sacks().len(), 4);
        let h = header(o);
        let mut buf = [0u8; 60];
        assert_eq!(h.emit(&mut buf), Ok(60));
        let (p, _) = TcpHeader::parse(&buf, LO, LO, ChecksumCheck::Skip).unwrap();
        assert_eq!(p.options.sacks(), &o.sacks()[..2]);
    }

    fn with_options(opts: &[u8]) -> Vec<u8> {
        assert_eq!(opts.len() % 4, 0);
        let mut seg = LINUX_SYN[..20].to_vec();
        seg[12] = ((20 + opts.len()) as u8 / 4) << 4;
        seg.extend_from_slice(opts);
        seg
    }

    fn parse_opts(opts: &[u8]) -> Result<TcpOptions, WireError> {
        TcpHeader::parse(&with_options(opts), LO, LO, ChecksumCheck::Skip).map(|(h, _)| h.options)
    }

    #[test]
    fn option_parsing_rules() {
        // Unknown kind with a valid length is skipped.
        assert_eq!(
            parse_opts(&[30, 6, 1, 2, 3, 4, 2, 4, 5, 180, 1, 1]).map(|o| o.mss),
            Ok(Some(1460))
        );
        // EOL stops parsing; garbage after it is ignored.
        assert_eq!(
            parse_opts(&[3, 3, 7, 0, 0xFF, 0xFF, 0, 0]).map(|o| o.window_scale),
            Ok(Some(7))
        );
        assert_eq!(parse_opts(&[1, 1, 1, 1]), Ok(TcpOptions::default()));
        // Length < 2.
        assert_eq!(parse_opts(&[30, 0, 0, 0]), Err(WireError::Malformed));
        assert_eq!(parse_opts(&[30, 1, 0, 0]), Err(WireError::Malformed));
        // Overrunning the option area.
        assert_eq!(parse_opts(&[1, 1, 30, 3]), Err(WireError::Malformed));
        assert_eq!(parse_opts(&[2, 5, 0, 0]), Err(WireError::Malformed));
        // Kind byte without length byte at the end.
        assert_eq!(parse_opts(&[1, 1, 1, 30]), Err(WireError::Malformed));
        // Known options with the wrong length.
        assert_eq!(parse_opts(&[2, 3, 0, 1]), Err(WireError::Malformed));
        assert_eq!(parse_opts(&[3, 4, 0, 1]), Err(WireError::Malformed));
        assert_eq!(parse_opts(&[4, 3, 0, 1]), Err(WireError::Malformed));
        assert_eq!(
            parse_opts(&[8, 8, 0, 0, 0, 0, 0, 0]),
            Err(WireError::Malformed)
        );
        assert_eq!(parse_opts(&[5, 2, 1, 1]), Err(WireError::Malformed));
        assert_eq!(
            parse_opts(&[5, 6, 0, 0, 0, 0, 1, 1]),
            Err(WireError::Malformed)
        );
        // SACK with one block.
        let o = parse_opts(&[1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2]).unwrap();
        assert_eq!(o.sacks(), &[(SeqNumber(1), SeqNumber(2))]);
    }

    #[test]
    fn structural_errors() {
        let e = |s: &[u8]| TcpHeader::parse(s, LO, LO, ChecksumCheck::Skip).err();
        assert_eq!(e(&LINUX_SYN[..19]), Some(WireError::Truncated));
        assert_eq!(e(&LINUX_SYN[..39]), Some(WireError::Truncated));
        let mut bad = LINUX_SYN;
        bad[12] = 0x40;
        assert_eq!(e(&bad), Some(WireError::Malformed));
        assert!(TcpSegment::new_checked(&bad[..]).is_err());
        assert!(TcpSegment::new_checked(&LINUX_SYN[..30]).is_err());
        let h = header(TcpOptions {
            mss: Some(1),
            ..Default::default()
        });
        assert_eq!(h.emit(&mut [0u8; 23]), Err(WireError::BufferTooSmall));
        // fill_checksum on a too-short buffer is a no-op, not a panic.
        let mut short = [0u8; 17];
        fill_checksum(&mut short, LO, LO);
        assert_eq!(short, [0u8; 17]);
        assert!(!verify_checksum(&[], LO, LO));
    }

    #[test]
    fn seq_number_arithmetic() {
        let a = SeqNumber(u32::MAX - 1);
        let b = a + 4u32;
        assert_eq!(b, SeqNumber(2));
        assert_eq!(a + 4usize, b);
        assert_eq!(b - 4, a);
        assert_eq!(b.diff(a), 4);
        assert_eq!(a.diff(b), -4);
        assert!(a.seq_lt(b) && a.seq_le(b) && b.seq_gt(a) && b.seq_ge(a));
        assert!(a.seq_le(a) && a.seq_ge(a) && !a.seq_lt(a) && !a.seq_gt(a));
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        let mut c = a;
        c += 3u32;
        c += 1usize;
        assert_eq!(c, b);
        c -= 4;
        assert_eq!(c, a);
        assert_eq!(format!("{b:?} {b}"), "2 2");
    }

    #[test]
    fn flags() {
        let f = TcpFlags::SYN | TcpFlags::ACK;
        assert_eq!(format!("{f:?}"), "SYN|ACK");
        assert_eq!(format!("{:?}", TcpFlags::empty()), "(empty)");
        assert_eq!(
            format!("{:?}", TcpFlags(0xFF)),
            "FIN|SYN|RST|PSH|ACK|URG|ECE|CWR"
        );
        assert!(f.contains(TcpFlags::SYN) && f.contains(f) && !f.contains(TcpFlags::FIN));
        assert_eq!(f & TcpFlags::ACK, TcpFlags::ACK);
        let mut g = TcpFlags::empty();
        g |= TcpFlags::RST;
        assert!(g.intersects(TcpFlags::RST | TcpFlags::FIN));
        g.remove(TcpFlags::RST);
        assert!(g.is_empty());
        g.insert(TcpFlags::ECE);
        assert_eq!(g.0, 0x40);
    }

    fn arb_options() -> impl Strategy<Value = TcpOptions> {
        (
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            any::<bool>(),
            proptest::option::of(any::<(u32, u32)>()),
            proptest::collection::vec(any::<(u32, u32)>(), 0..=MAX_SACK_BLOCKS),
        )
            .prop_map(|(mss, window_scale, sack_permitted, timestamp, sacks)| {
                let mut o = TcpOptions {
                    mss,
                    window_scale,
                    sack_permitted,
                    timestamp,
                    ..Default::default()
                };
                for (l, r) in sacks {
                    o.push_sack(SeqNumber(l), SeqNumber(r));
                }
                o
            })
    }

    fn arb_header() -> impl Strategy<Value = TcpHeader> {
        (
            any::<(u16, u16, u32, u32)>(),
            any::<(u8, u16, u16)>(),
            arb_options(),
        )
            .prop_map(
                |((src_port, dst_port, seq, ack), (flags, window, urgent), options)| TcpHeader {
                    src_port,
                    dst_port,
                    seq: SeqNumber(seq),
                    ack: SeqNumber(ack),
                    flags: TcpFlags(flags),
                    window,
                    urgent,
                    options,
                },
            )
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = TcpHeader::parse(&data, LO, LO, ChecksumCheck::Verify);
            let _ = TcpHeader::parse(&data, LO, LO, ChecksumCheck::Skip);
            if let Ok(v) = TcpSegment::new_checked(&data[..]) {
                let _ = (v.seq(), v.flags(), v.options(), v.parse_options(), v.payload());
            }
            let mut m = data.clone();
            fill_checksum(&mut m, LO, LO);
        }

        #[test]
        fn parse_options_never_panics(offset in 5u8..16, opts in proptest::collection::vec(any::<u8>(), 0..44)) {
            // A valid fixed header followed by random option bytes.
            let mut seg = LINUX_SYN[..20].to_vec();
            seg[12] = offset << 4;
            seg.extend_from_slice(&opts);
            if let Ok((h, payload)) = TcpHeader::parse(&seg, LO, LO, ChecksumCheck::Skip) {
                prop_assert_eq!(payload.len(), seg.len() - usize::from(offset) * 4);
                prop_assert!(h.options.sacks().len() <= MAX_SACK_BLOCKS);
            }
        }

        #[test]
        fn parse_options_never_panics_structured(
            parts in proptest::collection::vec((0u8..10, 0u8..12, any::<[u8; 10]>()), 0..8)
        ) {
            // Option-shaped noise: plausible kinds and lengths, random contents.
            let mut opts = Vec::new();
            for (kind, len, body) in parts {
                opts.push(kind);
                opts.push(len);
                opts.extend_from_slice(&body[..usize::from(len.saturating_sub(2)).min(10)]);
            }
            opts.truncate(40);
            while opts.len() % 4 != 0 {
                opts.push(1);
            }
            let _ = parse_opts(&opts);
        }

        #[test]
        fn emit_parse_round_trip(h in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..32)) {
            let src = Ipv4Addr::new(192, 0, 2, 1);
            let dst = Ipv4Addr::new(198, 51, 100, 7);
            let hl = h.header_len();
            prop_assert_eq!(hl % 4, 0);
            prop_assert!(hl <= HEADER_LEN + MAX_OPTIONS_LEN);
            let mut buf = vec![0u8; hl + payload.len()];
            prop_assert_eq!(h.emit(&mut buf), Ok(hl));
            buf[hl..].copy_from_slice(&payload);
            fill_checksum(&mut buf, src, dst);
            let (parsed, p) = TcpHeader::parse(&buf, src, dst, ChecksumCheck::Verify).unwrap();
            // SACK blocks beyond the 40-byte option space are dropped by emit.
            let mut expected = h;
            let n = h.options.emitted_sack_count();
            expected.options.sack_count = n as u8;
            for slot in expected.options.sack_blocks.iter_mut().skip(n) {
                *slot = Default::default();
            }
            prop_assert_eq!(parsed, expected);
            prop_assert_eq!(p, &payload[..]);
            prop_assert_eq!(parsed.header_len(), hl);
        }

        #[test]
        fn header_sum_matches_emitted_bytes(h in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let src = Ipv4Addr::new(192, 0, 2, 1);
            let dst = Ipv4Addr::new(198, 51, 100, 7);
            let hl = h.header_len();
            let mut buf = vec![0xEEu8; hl + payload.len()];
            h.emit(&mut buf).unwrap();
            prop_assert_eq!(checksum::fold(h.sum()), checksum::fold(checksum::sum(&buf[..hl])));
            buf[hl..].copy_from_slice(&payload);
            fill_checksum(&mut buf, src, dst);
            let c = segment_checksum(h.sum(), hl, &payload, src, dst);
            prop_assert_eq!(c.to_be_bytes(), [buf[16], buf[17]]);
        }

        #[test]
        fn seq_order_is_antisymmetric(a in any::<u32>(), d in 1u32..0x8000_0000) {
            let x = SeqNumber(a);
            let y = x + d;
            prop_assert!(x.seq_lt(y) && y.seq_gt(x) && !y.seq_lt(x));
            prop_assert_eq!(y.diff(x), d as i32);
        }
    }
}
