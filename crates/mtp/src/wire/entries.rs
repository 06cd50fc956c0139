//! The entries of the header's lists: a (pathlet, traffic class) pair, a feedback TLV
//! tagged with its pathlet, and a run of (message id, packet number) pairs.

/// A pathlet id (mtp.txt 3.1.3): a resource of the network, assigned by its devices.
pub type PathletId = u16;

/// A (pathlet, traffic class) pair: an entry of the path-exclude list, and the key of a
/// sender's congestion window (mtp.txt 3.2 "Multi-Entity Isolation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathletTc {
    /// The pathlet.
    pub pathlet: PathletId,
    /// The traffic class.
    pub tc: u8,
}

impl PathletTc {
    /// Bytes on the wire: pathlet (2), TC (1), reserved (1).
    pub const LEN: usize = 4;

    pub(crate) fn read(b: &[u8]) -> Option<PathletTc> {
        let b = b.first_chunk::<{ Self::LEN }>()?;
        Some(PathletTc {
            pathlet: u16::from_be_bytes([b[0], b[1]]),
            tc: b[2],
        })
    }

    pub(crate) fn write(&self, b: &mut [u8]) {
        let Some(b) = b.first_chunk_mut::<{ Self::LEN }>() else {
            return;
        };
        b[..2].copy_from_slice(&self.pathlet.to_be_bytes());
        b[2] = self.tc;
        b[3] = 0;
    }
}

/// What a feedback value means (the "T" of mtp.txt's feedback TLV; the length is fixed at 4
/// bytes in version 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeedbackKind {
    /// ECN-style congestion: value 1 when the pathlet's queue was above its marking
    /// threshold as this packet passed, else 0. Its fraction drives a DCTCP-like law.
    Ecn,
    /// An explicit fair rate for the pathlet in Mbit/s. Drives an RCP-like law.
    Rate,
    /// The pathlet's queue depth in bytes as the packet passed (informational).
    QueueBytes,
    /// A kind this implementation does not know: carried and echoed, not acted on.
    Unknown(u8),
}

impl From<u8> for FeedbackKind {
    fn from(v: u8) -> FeedbackKind {
        match v {
            1 => FeedbackKind::Ecn,
            2 => FeedbackKind::Rate,
            3 => FeedbackKind::QueueBytes,
            other => FeedbackKind::Unknown(other),
        }
    }
}

impl From<FeedbackKind> for u8 {
    fn from(k: FeedbackKind) -> u8 {
        match k {
            FeedbackKind::Ecn => 1,
            FeedbackKind::Rate => 2,
            FeedbackKind::QueueBytes => 3,
            FeedbackKind::Unknown(other) => other,
        }
    }
}

/// One (pathlet, TC, feedback) tuple of the path-feedback and ACK-path-feedback lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Feedback {
    /// The pathlet and the traffic class the device assigned.
    pub at: PathletTc,
    /// What `value` means.
    pub kind: FeedbackKind,
    /// The value.
    pub value: u32,
}

impl Feedback {
    /// Bytes on the wire: pathlet (2), TC (1), kind (1), value (4).
    pub const LEN: usize = 8;

    pub(crate) fn read(b: &[u8]) -> Option<Feedback> {
        let b = b.first_chunk::<{ Self::LEN }>()?;
        Some(Feedback {
            at: PathletTc {
                pathlet: u16::from_be_bytes([b[0], b[1]]),
                tc: b[2],
            },
            kind: FeedbackKind::from(b[3]),
            value: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    pub(crate) fn write(&self, b: &mut [u8]) {
        let Some(b) = b.first_chunk_mut::<{ Self::LEN }>() else {
            return;
        };
        b[..2].copy_from_slice(&self.at.pathlet.to_be_bytes());
        b[2] = self.at.tc;
        b[3] = u8::from(self.kind);
        b[4..].copy_from_slice(&self.value.to_be_bytes());
    }
}

/// A run of packets of one message: (message id, packet number) pairs `first..first+count`,
/// an entry of the SACK and NACK lists (a run rather than single pairs keeps ACKs short).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketRun {
    /// The message.
    pub msg_id: u32,
    /// The first packet number.
    pub first: u16,
    /// How many packets from `first` (0 is taken as 1 on receive).
    pub count: u16,
}

impl PacketRun {
    /// Bytes on the wire: message id (4), first packet (2), count (2).
    pub const LEN: usize = 8;

    pub(crate) fn read(b: &[u8]) -> Option<PacketRun> {
        let b = b.first_chunk::<{ Self::LEN }>()?;
        Some(PacketRun {
            msg_id: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            first: u16::from_be_bytes([b[4], b[5]]),
            count: u16::from_be_bytes([b[6], b[7]]),
        })
    }

    pub(crate) fn write(&self, b: &mut [u8]) {
        let Some(b) = b.first_chunk_mut::<{ Self::LEN }>() else {
            return;
        };
        b[..4].copy_from_slice(&self.msg_id.to_be_bytes());
        b[4..6].copy_from_slice(&self.first.to_be_bytes());
        b[6..].copy_from_slice(&self.count.to_be_bytes());
    }

    /// The packet numbers of the run (a count of 0 means 1; runs stop at packet 65535).
    pub fn packets(&self) -> impl Iterator<Item = u16> {
        let n = u32::from(self.count.max(1));
        let end = (u32::from(self.first) + n).min(u32::from(u16::MAX) + 1);
        (u32::from(self.first)..end).map(|p| p as u16)
    }
}

/// An entry of one of the header's lists (crate-internal: how to read and write it).
pub trait Entry: Copy {
    /// Bytes on the wire.
    const WIRE_LEN: usize;
    /// Reads one entry from the first [`Entry::WIRE_LEN`] bytes, or None when shorter.
    fn read_entry(b: &[u8]) -> Option<Self>;
    /// Writes one entry into the first [`Entry::WIRE_LEN`] bytes (nothing when shorter).
    fn write_entry(&self, b: &mut [u8]);
}

macro_rules! entry {
    ($t:ty) => {
        impl Entry for $t {
            const WIRE_LEN: usize = <$t>::LEN;
            fn read_entry(b: &[u8]) -> Option<Self> {
                <$t>::read(b)
            }
            fn write_entry(&self, b: &mut [u8]) {
                self.write(b)
            }
        }
    };
}
entry!(PathletTc);
entry!(Feedback);
entry!(PacketRun);
