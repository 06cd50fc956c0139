//! What the engine reports about a splice an application asked for ([`crate::Command::Splice`]):
//! an unsolicited completion entry, [`crate::Completion::Splice`], on the asking context.
//!
//! Layout after the completion opcode: handle u32 at 4, outcome u8 at 8, bytes relayed
//! from the first connection's peer to the second's u64 at 16, the other way u64 at 24.

use crate::le::{u32_at, u64_at};

/// What happened to a splice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpliceOutcome {
    /// Both connections were drained and handed to the splice stage.
    Installed,
    /// A connection failed before the handover; the other was reset.
    Failed,
    /// Both sides closed (FINs acknowledged both ways).
    Closed,
    /// A RST from the first connection's peer.
    ResetByA,
    /// A RST from the second connection's peer.
    ResetByB,
}

impl SpliceOutcome {
    /// Every outcome (for tests and generators).
    pub const ALL: [SpliceOutcome; 5] = [
        SpliceOutcome::Installed,
        SpliceOutcome::Failed,
        SpliceOutcome::Closed,
        SpliceOutcome::ResetByA,
        SpliceOutcome::ResetByB,
    ];

    /// The byte that stands for it in an entry (and in the C API).
    pub fn code(self) -> u8 {
        match self {
            SpliceOutcome::Installed => 1,
            SpliceOutcome::Failed => 2,
            SpliceOutcome::Closed => 3,
            SpliceOutcome::ResetByA => 4,
            SpliceOutcome::ResetByB => 5,
        }
    }

    /// The outcome a byte stands for.
    pub fn from_code(code: u8) -> Option<SpliceOutcome> {
        SpliceOutcome::ALL.into_iter().find(|o| o.code() == code)
    }

    /// Whether the splice is over (every outcome but Installed).
    pub fn is_final(self) -> bool {
        self != SpliceOutcome::Installed
    }
}

/// One splice report: which splice, what happened, and its traffic so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpliceReport {
    /// The handle the engine gave in the Splice command's completion.
    pub handle: u32,
    /// What happened.
    pub outcome: SpliceOutcome,
    /// Payload bytes relayed from the first connection's peer to the second's.
    pub a_to_b: u64,
    /// Payload bytes relayed the other way.
    pub b_to_a: u64,
}

const HANDLE: usize = 4;
const OUTCOME: usize = 8;
const A_TO_B: usize = 16;
const B_TO_A: usize = 24;

impl SpliceReport {
    /// Writes the report's fields into an entry of at least 32 bytes (the caller writes
    /// the opcode).
    pub(crate) fn encode_into(&self, e: &mut [u8]) {
        e[HANDLE..HANDLE + 4].copy_from_slice(&self.handle.to_le_bytes());
        e[OUTCOME] = self.outcome.code();
        e[A_TO_B..A_TO_B + 8].copy_from_slice(&self.a_to_b.to_le_bytes());
        e[B_TO_A..B_TO_A + 8].copy_from_slice(&self.b_to_a.to_le_bytes());
    }

    /// Reads the report's fields from an entry of at least 32 bytes; None for an unknown
    /// outcome.
    pub(crate) fn decode_from(e: &[u8]) -> Option<SpliceReport> {
        let handle = u32_at(e, HANDLE);
        Some(SpliceReport {
            handle,
            outcome: SpliceOutcome::from_code(e[OUTCOME])?,
            a_to_b: u64_at(e, A_TO_B),
            b_to_a: u64_at(e, B_TO_A),
        })
    }
}
