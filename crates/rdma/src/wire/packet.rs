//! A whole RoCEv2 UDP payload: BTH, the extension headers its opcode calls for (IBA Table
//! 38), payload, pad to a multiple of 4 bytes, and the 4-byte ICRC.
//!
//! No-panic contract: [`RoceRepr::parse`] and [`RocePacket::new_checked`] take arbitrary
//! bytes and return a [`RoceError`] for anything short or inconsistent; the ICRC is not
//! checked here (it covers the IP and UDP headers too: see [`super::frame`]).

use super::aeth::{self, AethRepr};
use super::bth::{self, BthRepr};
use super::error::RoceError;
use super::icrc::ICRC_LEN;
use super::immdt::{self, ImmDt};
use super::reth::{self, RethRepr};

/// The headers of a RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceRepr {
    /// The base transport header. On emit its pad count is derived from the payload length.
    pub bth: BthRepr,
    /// RDMA extended transport header, for the opcodes that carry one.
    pub reth: Option<RethRepr>,
    /// ACK extended transport header, for the opcodes that carry one.
    pub aeth: Option<AethRepr>,
    /// Immediate data, for the "with immediate" opcodes.
    pub immdt: Option<ImmDt>,
}

/// Bytes of padding that bring `payload_len` to a multiple of 4.
#[inline]
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

impl RoceRepr {
    /// A congestion notification packet to `dest_qp` (RoCEv2 annex A17.9.3: BECN set, PSN,
    /// flags and pad zero, the default partition; the 16 reserved bytes come from emit).
    pub fn cnp(dest_qp: u32) -> RoceRepr {
        RoceRepr {
            bth: BthRepr {
                opcode: super::Opcode::Cnp,
                solicited: false,
                migreq: false,
                pad_count: 0,
                pkey: bth::DEFAULT_PKEY,
                fecn: false,
                becn: true,
                dest_qp,
                ack_req: false,
                psn: super::Psn::new(0),
            },
            reth: None,
            aeth: None,
            immdt: None,
        }
    }

    /// Parses a UDP payload; returns the headers and the payload without its pad.
    pub fn parse(udp_payload: &[u8]) -> Result<(RoceRepr, &[u8]), RoceError> {
        let bth = BthRepr::parse(udp_payload)?;
        let ext = bth.opcode.headers();
        let need = bth::HEADER_LEN + ext.len() + ICRC_LEN;
        if udp_payload.len() < need {
            return Err(RoceError::Truncated {
                need,
                have: udp_payload.len(),
            });
        }
        let mut at = bth::HEADER_LEN;
        let mut next = |len: usize| {
            let h = udp_payload.get(at..).unwrap_or(&[]);
            at += len;
            h
        };
        if ext.reserved16 {
            // A CNP's reserved bytes: ignored on receive (A17.9.3).
            next(16);
        }
        let reth = if ext.reth {
            Some(RethRepr::parse(next(reth::HEADER_LEN))?)
        } else {
            None
        };
        let aeth = if ext.aeth {
            Some(AethRepr::parse(next(aeth::HEADER_LEN))?)
        } else {
            None
        };
        let immdt = if ext.immdt {
            Some(ImmDt::parse(next(immdt::HEADER_LEN))?)
        } else {
            None
        };
        let end = udp_payload.len() - ICRC_LEN;
        let padded = udp_payload.get(at..end).unwrap_or(&[]);
        if !ext.payload && !padded.is_empty() {
            return Err(RoceError::UnexpectedPayload(bth.opcode));
        }
        let pad = usize::from(bth.pad_count);
        if pad > padded.len() {
            return Err(RoceError::PadCount {
                pad: bth.pad_count,
                payload: padded.len(),
            });
        }
        let payload = padded.get(..padded.len() - pad).unwrap_or(&[]);
        let repr = RoceRepr {
            bth,
            reth,
            aeth,
            immdt,
        };
        Ok((repr, payload))
    }

    /// Length of the BTH and extension headers.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.bth.opcode.headers().len()
    }

    /// Length of the UDP payload for `payload_len` bytes of payload: headers, payload, pad
    /// and ICRC.
    pub fn packet_len(&self, payload_len: usize) -> usize {
        self.header_len()
            .saturating_add(payload_len)
            .saturating_add(usize::from(pad_for(payload_len)) + ICRC_LEN)
    }

    /// Writes headers, `payload`, zero pad and a zero ICRC (which [`super::icrc::fill_ipv4`]
    /// fills once the IP and UDP headers are in front); returns the length written.
    ///
    /// `HeaderMismatch` if the extension headers given are not the opcode's,
    /// `UnexpectedPayload` for a payload on an opcode that has none.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, RoceError> {
        let len = self.emit_around(buf, payload.len())?;
        let at = self.header_len();
        if let Some(body) = buf.get_mut(at..at + payload.len()) {
            body.copy_from_slice(payload);
        }
        Ok(len)
    }

    /// [`RoceRepr::emit`] for a payload of `payload_len` bytes already in place after the
    /// headers (header-only TX): writes the headers in front of it and the zero pad and ICRC
    /// after it, and leaves its bytes as they are.
    pub fn emit_around(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, RoceError> {
        let op = self.bth.opcode;
        let ext = op.headers();
        if ext.reth != self.reth.is_some()
            || ext.aeth != self.aeth.is_some()
            || ext.immdt != self.immdt.is_some()
        {
            return Err(RoceError::HeaderMismatch(op));
        }
        if !ext.payload && payload_len != 0 {
            return Err(RoceError::UnexpectedPayload(op));
        }
        let len = self.packet_len(payload_len);
        let have = buf.len();
        let out = buf
            .get_mut(..len)
            .ok_or(RoceError::BufferTooSmall { need: len, have })?;
        let pad = pad_for(payload_len);
        let bth = BthRepr {
            pad_count: pad,
            ..self.bth
        };
        let mut at = bth.emit(out)?;
        if ext.reserved16 {
            // A CNP's reserved bytes, sent as zero (A17.9.3).
            out.get_mut(at..at + 16).unwrap_or_default().fill(0);
            at += 16;
        }
        if let Some(r) = &self.reth {
            at += r.emit(out.get_mut(at..).unwrap_or_default())?;
        }
        if let Some(a) = &self.aeth {
            at += a.emit(out.get_mut(at..).unwrap_or_default())?;
        }
        if let Some(i) = &self.immdt {
            at += i.emit(out.get_mut(at..).unwrap_or_default())?;
        }
        out.get_mut(at + payload_len..).unwrap_or_default().fill(0);
        Ok(len)
    }
}

/// A checked view of a RoCEv2 UDP payload: its headers parsed once, its payload in place.
#[derive(Debug, Clone)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
    repr: RoceRepr,
    /// Where the payload starts and its length (pad excluded).
    payload_at: usize,
    payload_len: usize,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Wraps `buffer` (a UDP payload), checking the headers, pad count and length.
    pub fn new_checked(buffer: T) -> Result<Self, RoceError> {
        let (repr, payload) = RoceRepr::parse(buffer.as_ref())?;
        let payload_at = repr.header_len();
        let payload_len = payload.len();
        Ok(RocePacket {
            buffer,
            repr,
            payload_at,
            payload_len,
        })
    }

    /// The parsed headers.
    pub fn repr(&self) -> &RoceRepr {
        &self.repr
    }

    /// The base transport header.
    pub fn bth(&self) -> &BthRepr {
        &self.repr.bth
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &[u8] {
        let end = self.payload_at + self.payload_len;
        self.buffer
            .as_ref()
            .get(self.payload_at..end)
            .unwrap_or(&[])
    }

    /// The ICRC the packet carries (not verified: that needs the IP and UDP headers).
    pub fn icrc(&self) -> u32 {
        match self.buffer.as_ref().last_chunk::<ICRC_LEN>() {
            Some(t) => u32::from_le_bytes(*t),
            None => 0,
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RocePacket<T> {
    /// The payload, writable (direct placement builds packets in place).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_at + self.payload_len;
        self.buffer
            .as_mut()
            .get_mut(self.payload_at..end)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Opcode, Psn, Syndrome};

    fn bth(opcode: Opcode) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            migreq: true,
            pad_count: 0,
            pkey: bth::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: Psn::new(7),
        }
    }

    #[test]
    fn pad_and_payload() {
        let r = RoceRepr {
            bth: bth(Opcode::SendOnly),
            reth: None,
            aeth: None,
            immdt: None,
        };
        let mut b = vec![0u8; r.packet_len(5)];
        assert_eq!(b.len(), 12 + 5 + 3 + 4);
        assert_eq!(r.emit(&mut b, b"hello"), Ok(24));
        assert_eq!(b[1] >> 4 & 3, 3, "pad count");
        let p = RocePacket::new_checked(&b[..]).expect("valid");
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.bth().pad_count, 3);
        // A pad count longer than the payload area.
        let mut bad = b.clone();
        bad.truncate(12 + 4 + 2);
        bad[12..14].copy_from_slice(b"he");
        assert_eq!(
            RoceRepr::parse(&bad),
            Err(RoceError::PadCount { pad: 3, payload: 2 })
        );
    }

    #[test]
    fn cnp_is_bth_16_reserved_bytes_and_icrc() {
        // The layout of A17.9.3 (and of a ConnectX CNP: 81 00 ff ff 40 <qpn> 00 00 00 00).
        let c = RoceRepr::cnp(0xd2);
        let mut b = [0xAAu8; 40];
        assert_eq!(c.emit(&mut b, b""), Ok(32));
        assert_eq!(
            &b[..12],
            &[0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0xd2, 0, 0, 0, 0]
        );
        assert!(b[12..32].iter().all(|&x| x == 0), "reserved and ICRC zero");
        let (back, payload) = RoceRepr::parse(&b[..32]).expect("a CNP parses");
        assert_eq!((back, payload), (c, &[][..]));
        assert!(back.bth.becn);
        // Reserved bytes are ignored on receive; a payload after them is not a CNP.
        b[13] = 0x55;
        assert_eq!(RoceRepr::parse(&b[..32]).map(|r| r.0), Ok(c));
        assert_eq!(
            RoceRepr::parse(&b[..36]),
            Err(RoceError::UnexpectedPayload(Opcode::Cnp))
        );
        assert!(matches!(
            RoceRepr::parse(&b[..31]),
            Err(RoceError::Truncated { need: 32, .. })
        ));
    }

    #[test]
    fn headers_must_match_the_opcode() {
        let ack = RoceRepr {
            bth: bth(Opcode::Acknowledge),
            reth: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 3,
            }),
            immdt: None,
        };
        let mut b = [0u8; 64];
        assert_eq!(
            ack.emit(&mut b, b"x"),
            Err(RoceError::UnexpectedPayload(Opcode::Acknowledge))
        );
        let no_aeth = RoceRepr { aeth: None, ..ack };
        assert_eq!(
            no_aeth.emit(&mut b, b""),
            Err(RoceError::HeaderMismatch(Opcode::Acknowledge))
        );
        let n = ack.emit(&mut b, b"").expect("fits");
        assert_eq!(n, 20);
        let mut extra = b[..n].to_vec();
        extra.splice(16..16, [0u8; 4]);
        assert_eq!(
            RoceRepr::parse(&extra),
            Err(RoceError::UnexpectedPayload(Opcode::Acknowledge))
        );
        assert_eq!(
            RoceRepr::parse(&b[..19]),
            Err(RoceError::Truncated { need: 20, have: 19 })
        );
    }
}
