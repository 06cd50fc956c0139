//! The reliable-connected (RC) BTH opcodes and the extension headers each one carries
//! (the OpCode table of IBA vol. 1, chapter 9; RC is transport 000, opcodes 0x00-0x1F),
//! and RoCEv2's congestion notification packet (CNP, 0x81: annex A17.9.3), and Sluice's two
//! OFFLOAD opcodes in the RC range IBA reserves (0x18-0x1B; docs/offload.md).

/// An RC opcode this transport implements (IBA numbering; the atomic and invalidate
/// opcodes, 0x12-0x17, are not supported and parse as an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// SEND First (0x00).
    SendFirst = 0x00,
    /// SEND Middle (0x01).
    SendMiddle = 0x01,
    /// SEND Last (0x02).
    SendLast = 0x02,
    /// SEND Last with Immediate (0x03).
    SendLastImm = 0x03,
    /// SEND Only (0x04).
    SendOnly = 0x04,
    /// SEND Only with Immediate (0x05).
    SendOnlyImm = 0x05,
    /// RDMA WRITE First (0x06).
    WriteFirst = 0x06,
    /// RDMA WRITE Middle (0x07).
    WriteMiddle = 0x07,
    /// RDMA WRITE Last (0x08).
    WriteLast = 0x08,
    /// RDMA WRITE Last with Immediate (0x09).
    WriteLastImm = 0x09,
    /// RDMA WRITE Only (0x0A).
    WriteOnly = 0x0A,
    /// RDMA WRITE Only with Immediate (0x0B).
    WriteOnlyImm = 0x0B,
    /// RDMA READ Request (0x0C).
    ReadRequest = 0x0C,
    /// RDMA READ Response First (0x0D).
    ReadResponseFirst = 0x0D,
    /// RDMA READ Response Middle (0x0E).
    ReadResponseMiddle = 0x0E,
    /// RDMA READ Response Last (0x0F).
    ReadResponseLast = 0x0F,
    /// RDMA READ Response Only (0x10).
    ReadResponseOnly = 0x10,
    /// ACKNOWLEDGE (0x11).
    Acknowledge = 0x11,
    /// OFFLOAD Request (0x18, reserved in IBA's RC table; Sluice's programmable offloading
    /// engine, flexins.txt 3.5): RETH (its DMA length: the response capacity; VA and R_Key
    /// zero), ImmDt (the offload opcode a handler registered), the request bytes.
    OffloadRequest = 0x18,
    /// OFFLOAD Response (0x19, reserved in IBA's RC table): AETH, ImmDt (the handler's
    /// status), the response bytes.
    OffloadResponse = 0x19,
    /// Congestion Notification Packet (0x81, RoCEv2 annex A17.9.3): BECN set, 16 reserved
    /// bytes after the BTH; not an RC opcode, so not in [`Opcode::ALL`].
    Cnp = 0x81,
}

/// Which extension headers follow the BTH, in wire order (RETH, AETH, ImmDt), and whether a
/// payload may follow them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeaders {
    /// An RDMA extended transport header (16 bytes).
    pub reth: bool,
    /// An ACK extended transport header (4 bytes).
    pub aeth: bool,
    /// Immediate data (4 bytes).
    pub immdt: bool,
    /// Whether the packet carries a payload.
    pub payload: bool,
    /// 16 reserved bytes (a CNP's), sent as zero and ignored on receive.
    pub reserved16: bool,
}

impl ExtHeaders {
    /// The total length of the extension headers.
    #[inline]
    pub const fn len(self) -> usize {
        16 * self.reth as usize
            + 4 * self.aeth as usize
            + 4 * self.immdt as usize
            + 16 * self.reserved16 as usize
    }

    /// Whether there is no extension header.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }
}

const fn ext(reth: bool, aeth: bool, immdt: bool, payload: bool) -> ExtHeaders {
    ExtHeaders {
        reth,
        aeth,
        immdt,
        payload,
        reserved16: false,
    }
}

impl Opcode {
    /// Every RC opcode, in numbering order (the CNP is apart).
    pub const ALL: [Opcode; 18] = [
        Opcode::SendFirst,
        Opcode::SendMiddle,
        Opcode::SendLast,
        Opcode::SendLastImm,
        Opcode::SendOnly,
        Opcode::SendOnlyImm,
        Opcode::WriteFirst,
        Opcode::WriteMiddle,
        Opcode::WriteLast,
        Opcode::WriteLastImm,
        Opcode::WriteOnly,
        Opcode::WriteOnlyImm,
        Opcode::ReadRequest,
        Opcode::ReadResponseFirst,
        Opcode::ReadResponseMiddle,
        Opcode::ReadResponseLast,
        Opcode::ReadResponseOnly,
        Opcode::Acknowledge,
    ];

    /// The OFFLOAD opcodes (apart from [`Opcode::ALL`], which is IBA's RC table).
    pub const OFFLOAD: [Opcode; 2] = [Opcode::OffloadRequest, Opcode::OffloadResponse];

    /// The opcode byte `b`, if it is an RC opcode this transport implements, an OFFLOAD
    /// opcode or the CNP.
    #[inline]
    pub const fn from_u8(b: u8) -> Option<Opcode> {
        if b == Opcode::Cnp as u8 {
            Some(Opcode::Cnp)
        } else if b == Opcode::OffloadRequest as u8 {
            Some(Opcode::OffloadRequest)
        } else if b == Opcode::OffloadResponse as u8 {
            Some(Opcode::OffloadResponse)
        } else if (b as usize) < Self::ALL.len() {
            Some(Self::ALL[b as usize])
        } else {
            None
        }
    }

    /// The opcode byte.
    #[inline]
    pub const fn to_u8(self) -> u8 {
        self as u8
    }

    /// The extension headers that follow the BTH (IBA's OpCode table).
    #[inline]
    pub const fn headers(self) -> ExtHeaders {
        use Opcode::*;
        match self {
            SendFirst | SendMiddle | SendLast | SendOnly => ext(false, false, false, true),
            SendLastImm | SendOnlyImm => ext(false, false, true, true),
            WriteFirst | WriteOnly => ext(true, false, false, true),
            WriteMiddle | WriteLast => ext(false, false, false, true),
            WriteLastImm => ext(false, false, true, true),
            WriteOnlyImm => ext(true, false, true, true),
            ReadRequest => ext(true, false, false, false),
            ReadResponseFirst | ReadResponseLast | ReadResponseOnly => {
                ext(false, true, false, true)
            }
            ReadResponseMiddle => ext(false, false, false, true),
            Acknowledge => ext(false, true, false, false),
            OffloadRequest => ext(true, false, true, true),
            OffloadResponse => ext(false, true, true, true),
            Cnp => ExtHeaders {
                reserved16: true,
                ..ext(false, false, false, false)
            },
        }
    }

    /// Whether the responder sends this one (READ responses, ACKNOWLEDGE and OFFLOAD
    /// responses), not the requester.
    #[inline]
    pub const fn is_response(self) -> bool {
        (self as u8) >= Opcode::ReadResponseFirst as u8 && (self as u8) <= Opcode::Acknowledge as u8
            || matches!(self, Opcode::OffloadResponse)
    }

    /// Whether this is the congestion notification packet.
    #[inline]
    pub const fn is_cnp(self) -> bool {
        matches!(self, Opcode::Cnp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_round_trips_and_unknown_bytes_are_none() {
        for (i, op) in Opcode::ALL.iter().enumerate() {
            assert_eq!(op.to_u8() as usize, i);
            assert_eq!(Opcode::from_u8(i as u8), Some(*op));
        }
        for b in (0x12..=0xFF).filter(|&b| !matches!(b, 0x18 | 0x19 | 0x81)) {
            assert_eq!(Opcode::from_u8(b), None, "{b:#x}");
        }
        assert_eq!(Opcode::from_u8(0x81), Some(Opcode::Cnp));
        assert_eq!(Opcode::Cnp.to_u8(), 0x81);
        for op in Opcode::OFFLOAD {
            assert_eq!(Opcode::from_u8(op.to_u8()), Some(op));
        }
    }

    #[test]
    fn offload_opcodes_headers() {
        let req = Opcode::OffloadRequest.headers();
        assert!(req.reth && req.immdt && req.payload && !req.aeth);
        assert_eq!(req.len(), 20);
        let resp = Opcode::OffloadResponse.headers();
        assert!(resp.aeth && resp.immdt && resp.payload && !resp.reth);
        assert!(Opcode::OffloadResponse.is_response() && !Opcode::OffloadRequest.is_response());
        // The two IBA has since assigned in the reserved range (FLUSH 0x1C, ATOMIC WRITE
        // 0x1D) are not taken.
        assert!(Opcode::from_u8(0x1C).is_none() && Opcode::from_u8(0x1D).is_none());
    }

    #[test]
    fn table_38_extension_headers() {
        assert_eq!(Opcode::WriteOnlyImm.headers().len(), 20);
        assert_eq!(Opcode::ReadRequest.headers().len(), 16);
        assert!(!Opcode::ReadRequest.headers().payload);
        assert_eq!(Opcode::Acknowledge.headers().len(), 4);
        assert!(!Opcode::Acknowledge.headers().payload);
        assert!(Opcode::ReadResponseMiddle.headers().is_empty());
        assert!(Opcode::ReadResponseLast.headers().aeth);
        assert!(Opcode::SendLastImm.headers().immdt && !Opcode::SendLast.headers().immdt);
        let with_reth: Vec<_> = Opcode::ALL.iter().filter(|o| o.headers().reth).collect();
        assert_eq!(
            with_reth,
            [
                &Opcode::WriteFirst,
                &Opcode::WriteOnly,
                &Opcode::WriteOnlyImm,
                &Opcode::ReadRequest
            ]
        );
        assert!(Opcode::Acknowledge.is_response() && !Opcode::ReadRequest.is_response());
        // A17.9.3: the CNP carries 16 reserved bytes and no payload; it is no response.
        assert_eq!(Opcode::Cnp.headers().len(), 16);
        assert!(!Opcode::Cnp.headers().payload && !Opcode::Cnp.is_response());
    }
}
