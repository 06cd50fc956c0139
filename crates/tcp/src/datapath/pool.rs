//! The bounded pool of the protocol stage's cold rows: out-of-order intervals and FIN
//! bookkeeping ([`OooState`]), the sender's SACK scoreboard and its loss-recovery state
//! ([`RecoveryState`]). A connection holds a row only while it has out-of-order data,
//! SACKed ranges, a recovery or a timeout's probe (issue 18 item 2), through the 2-byte
//! handle `SackSender::cold_row` in its hot row; an idle connection holds none.
//!
//! The pool grows to at most `capacity` rows (rows are added on first use, as the per-slot
//! tables are) and never beyond: when it is empty a connection goes on without a row, as
//! TAS does with no free interval (out-of-order data dropped, the peer retransmits) and as
//! RFC 5681 does without SACK (go-back-N recovery), and the caller counts it.

use sluice_wire::tcp::SeqNumber;

pub(crate) use super::state::NO_ROW;
use super::state::{flags, sack_flags, Interval, OooState, ProtoState, RecoveryState, SackedRange};
use super::summary::HeaderSummary;

/// The most rows a pool may have: every handle but [`NO_ROW`].
pub(crate) const MAX_ROWS: usize = NO_ROW as usize;

/// A connection's cold rows, pooled or the scratch rows of a connection without one.
pub(crate) struct ColdRows<'a> {
    /// Out-of-order and FIN bookkeeping.
    pub oo: &'a mut OooState,
    /// Loss recovery and the timeout's probe.
    pub rec: &'a mut RecoveryState,
    /// Out-of-order intervals (empty without a row: nothing can be stored).
    pub ooo: &'a mut [Interval],
    /// SACKed ranges (empty without a row: every SACK block finds the scoreboard full).
    pub sacked: &'a mut [SackedRange],
}

/// The pool: rows indexed by handle, a free list, and scratch rows for connections
/// without one.
pub(crate) struct ColdPool {
    /// Out-of-order and FIN bookkeeping, one per row.
    ooo_state: Vec<OooState>,
    /// Loss-recovery state, one per row.
    recovery: Vec<RecoveryState>,
    /// Out-of-order intervals, `ooo_stride` per row.
    ooo: Vec<Interval>,
    /// Interval slots per row.
    ooo_stride: usize,
    /// SACK scoreboards, `sacked_stride` ranges per row.
    sacked: Vec<SackedRange>,
    /// Scoreboard ranges per row.
    sacked_stride: usize,
    /// Rows given back, taken again first.
    free: Vec<u16>,
    /// The bound on rows.
    capacity: usize,
    /// Handed out for a connection without a row; never read for its contents.
    scratch_oo: OooState,
    /// See `scratch_oo`.
    scratch_rec: RecoveryState,
}

impl ColdPool {
    /// A pool of at most `capacity` rows (clamped to [`MAX_ROWS`]) of `ooo` intervals and
    /// `sacked` scoreboard ranges each. Reserves address space; rows are filled as taken.
    pub(crate) fn new(capacity: usize, ooo: usize, sacked: usize) -> Self {
        let capacity = capacity.min(MAX_ROWS);
        ColdPool {
            ooo_state: Vec::with_capacity(capacity),
            recovery: Vec::with_capacity(capacity),
            ooo: Vec::with_capacity(capacity * ooo),
            ooo_stride: ooo,
            sacked: Vec::with_capacity(capacity * sacked),
            sacked_stride: sacked,
            free: Vec::with_capacity(capacity),
            capacity,
            scratch_oo: OooState::default(),
            scratch_rec: RecoveryState::default(),
        }
    }

    /// Takes a row, reset for a connection at `snd_una` / `rcv_nxt` whose DupThresh is
    /// `reordering`; None when all `capacity` rows are held.
    pub(crate) fn take(
        &mut self,
        snd_una: SeqNumber,
        rcv_nxt: SeqNumber,
        reordering: u8,
    ) -> Option<u16> {
        let h = match self.free.pop() {
            Some(h) => h,
            None if self.ooo_state.len() < self.capacity => {
                self.ooo_state.push(OooState::default());
                self.recovery.push(RecoveryState::default());
                self.ooo
                    .extend(core::iter::repeat_n(Interval::default(), self.ooo_stride));
                self.sacked.extend(core::iter::repeat_n(
                    SackedRange::default(),
                    self.sacked_stride,
                ));
                (self.ooo_state.len() - 1) as u16
            }
            None => return None,
        };
        let i = usize::from(h);
        self.ooo_state[i] = fresh_ooo(rcv_nxt);
        self.recovery[i] = fresh_recovery(snd_una, reordering);
        Some(h)
    }

    /// Gives row `h` back. Returns the DupThresh it held, which outlives the row.
    pub(crate) fn give_back(&mut self, h: u16) -> u8 {
        debug_assert!(usize::from(h) < self.ooo_state.len() && !self.free.contains(&h));
        self.free.push(h);
        self.recovery[usize::from(h)].reordering
    }

    /// The rows of handle `h`, or, for [`NO_ROW`], the scratch rows with no interval and
    /// no scoreboard range.
    #[inline]
    pub(crate) fn rows(&mut self, h: u16) -> ColdRows<'_> {
        if h == NO_ROW {
            return ColdRows {
                oo: &mut self.scratch_oo,
                rec: &mut self.scratch_rec,
                ooo: &mut [],
                sacked: &mut [],
            };
        }
        let i = usize::from(h);
        ColdRows {
            oo: &mut self.ooo_state[i],
            rec: &mut self.recovery[i],
            ooo: &mut self.ooo[i * self.ooo_stride..(i + 1) * self.ooo_stride],
            sacked: &mut self.sacked[i * self.sacked_stride..(i + 1) * self.sacked_stride],
        }
    }

    /// The scratch rows reset for a connection at `snd_una` / `rcv_nxt` whose DupThresh is
    /// `reordering`: what a cold path reads when the pool had no row for it.
    pub(crate) fn fresh_scratch(
        &mut self,
        snd_una: SeqNumber,
        rcv_nxt: SeqNumber,
        reordering: u8,
    ) -> ColdRows<'_> {
        self.scratch_oo = fresh_ooo(rcv_nxt);
        self.scratch_rec = fresh_recovery(snd_una, reordering);
        self.rows(NO_ROW)
    }

    /// The out-of-order intervals of `h` (none for [`NO_ROW`]).
    #[inline]
    pub(crate) fn intervals(&self, h: u16) -> &[Interval] {
        if h == NO_ROW {
            return &[];
        }
        let i = usize::from(h);
        &self.ooo[i * self.ooo_stride..(i + 1) * self.ooo_stride]
    }

    /// The SACK scoreboard of `h` (empty for [`NO_ROW`]).
    #[inline]
    pub(crate) fn sacked(&self, h: u16) -> &[SackedRange] {
        if h == NO_ROW {
            return &[];
        }
        let i = usize::from(h);
        &self.sacked[i * self.sacked_stride..(i + 1) * self.sacked_stride]
    }

    /// The out-of-order bookkeeping of `h` (the scratch row for [`NO_ROW`]).
    #[inline]
    pub(crate) fn ooo_state(&self, h: u16) -> &OooState {
        match h {
            NO_ROW => &self.scratch_oo,
            h => &self.ooo_state[usize::from(h)],
        }
    }

    /// The recovery state of `h`, if it is a row.
    pub(crate) fn recovery(&self, h: u16) -> Option<&RecoveryState> {
        self.recovery.get(usize::from(h)).filter(|_| h != NO_ROW)
    }

    /// Rows held by connections now.
    pub(crate) fn in_use(&self) -> usize {
        self.ooo_state.len() - self.free.len()
    }

    /// The bound on rows.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of one row with `ooo` intervals and `sacked` scoreboard ranges.
    pub(crate) fn row_bytes(ooo: usize, sacked: usize) -> usize {
        use core::mem::size_of;
        size_of::<OooState>()
            + size_of::<RecoveryState>()
            + ooo * size_of::<Interval>()
            + sacked * size_of::<SackedRange>()
    }
}

/// Whether segment `s` may leave `ps` (a connection without a row) state to keep: data or
/// a FIN beyond rcv_nxt (an interval, `rx_fin_seq`), or SACK blocks for the scoreboard.
#[inline]
pub(crate) fn wants_row(ps: &ProtoState, s: &HeaderSummary) -> bool {
    let fin = s.flags.contains(sluice_wire::tcp::TcpFlags::FIN);
    ((s.payload_len > 0 || fin) && s.seq.seq_gt(ps.rcv_nxt))
        || (s.sack_count > 0 && ps.sack.has(sack_flags::ENABLED))
}

/// Whether segment `s` may read recovery state (DupThresh, IsLost) though it leaves none:
/// a possible duplicate ACK with SACK recovery. Such a segment reads fresh scratch rows.
#[inline]
pub(crate) fn reads_recovery(ps: &ProtoState, s: &HeaderSummary) -> bool {
    s.ack == ps.snd_una && ps.snd_max != ps.snd_una && ps.sack.has(sack_flags::ENABLED)
}

/// Whether `ps`, holding row `rec`, needs it no longer: no interval, no SACKed range, no
/// FIN waiting, no recovery, timeout probe or undo pending, nothing retransmitted beyond
/// snd_una, and every mark of `rec` at or below snd_una, where it says nothing (so a row
/// taken afresh later, its marks at snd_una, answers every test alike).
#[inline]
pub(crate) fn is_idle(ps: &ProtoState, rec: &RecoveryState) -> bool {
    const LIVE: u8 = sack_flags::IN_RECOVERY
        | sack_flags::RXT_FIRST
        | sack_flags::AFTER_RTO
        | sack_flags::UNDO_ARMED
        | sack_flags::RTO_PROBE;
    let una = ps.snd_una;
    ps.ooo_count == 0
        && ps.sack.count == 0
        && !ps.has(flags::FIN_PENDING)
        && ps.sack.flags & LIVE == 0
        && !ps.sack.high_rxt.seq_gt(una)
        && [
            rec.recovery_point,
            rec.lost_below,
            rec.rxt_snd_max,
            rec.una_rxt_snd_max,
            rec.forgotten_to,
        ]
        .iter()
        .all(|m| !m.seq_gt(una))
}

/// Out-of-order bookkeeping of a connection with none: no FIN pending, no stamp.
fn fresh_ooo(rcv_nxt: SeqNumber) -> OooState {
    OooState {
        rx_fin_seq: rcv_nxt,
        ooo_seen: 0,
    }
}

/// Recovery state of a connection out of recovery: every sequence-number mark at snd_una,
/// where it says nothing (as the marks a finished recovery leaves behind, at or below it).
fn fresh_recovery(snd_una: SeqNumber, reordering: u8) -> RecoveryState {
    RecoveryState {
        rto_probe: Default::default(),
        recovery_point: snd_una,
        lost_below: snd_una,
        rxt_snd_max: snd_una,
        una_rxt_snd_max: snd_una,
        forgotten_from: snd_una,
        forgotten_to: snd_una,
        undo_rxt: 0,
        reordering,
        reorder_seen: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_hands_out_at_most_its_capacity_and_takes_rows_back() {
        let mut p = ColdPool::new(3, 1, 8);
        let una = SeqNumber(1000);
        let rows: Vec<u16> = (0..3).map(|_| p.take(una, una, 3).unwrap()).collect();
        assert_eq!(p.in_use(), 3);
        assert_eq!(p.take(una, una, 3), None, "a fourth row beyond the bound");
        assert_eq!(p.rows(rows[1]).sacked.len(), 8);
        assert_eq!(p.rows(rows[1]).ooo.len(), 1);
        p.rows(rows[1]).rec.reordering = 9;
        assert_eq!(p.give_back(rows[1]), 9, "DupThresh outlives the row");
        assert_eq!(p.in_use(), 2);
        let again = p.take(SeqNumber(5000), una, 4).unwrap();
        assert_eq!(again, rows[1], "a row given back is taken again");
        let r = p.rows(again);
        assert_eq!(
            r.rec.lost_below,
            SeqNumber(5000),
            "reset for its new holder"
        );
        assert_eq!(r.rec.reordering, 4);
        for h in rows.iter().filter(|&&h| h != again) {
            p.give_back(*h);
        }
        p.give_back(again);
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn no_row_has_no_interval_and_no_scoreboard() {
        let mut p = ColdPool::new(0, 4, 8);
        assert_eq!(p.take(SeqNumber(1), SeqNumber(1), 3), None);
        let r = p.rows(NO_ROW);
        assert!(r.ooo.is_empty() && r.sacked.is_empty());
        assert!(p.recovery(NO_ROW).is_none());
    }
}
