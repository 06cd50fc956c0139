//! The queue pair state machine (IB spec vol. 1 10.3.1 and Table 91's attributes per
//! transition; ibv_modify_qp(3)) for reliable-connected QPs: which transitions exist, which
//! attributes each requires and which it may carry. Anything else is refused (EINVAL) and
//! leaves the QP as it was.

use std::fmt;

/// A QP's state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpState {
    /// Created, or reset: nothing posted is processed.
    Reset = 0,
    /// Receives may be posted; nothing moves yet.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained: new sends wait.
    Sqd = 4,
    /// Send queue error (unreliable types; RC goes to Error).
    Sqe = 5,
    /// Error: every outstanding and new work request completes flushed.
    Error = 6,
}

impl QpState {
    /// The state libibverbs numbers `n`.
    pub fn from_u32(n: u32) -> Option<QpState> {
        Some(match n {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Error,
            _ => return None,
        })
    }
}

/// Which attributes a modify carries (`enum ibv_qp_attr_mask`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// qp_state.
    pub const STATE: AttrMask = AttrMask(1);
    /// cur_qp_state.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// en_sqd_async_notify.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// qp_access_flags.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// pkey_index.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// port_num.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// ah_attr (the peer's address).
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// path_mtu.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// timeout (local ACK timeout).
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// retry_cnt.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// rnr_retry.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// rq_psn.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// max_rd_atomic (READs outstanding as requester).
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// alt_ah_attr and friends.
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// min_rnr_timer.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// sq_psn.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// max_dest_rd_atomic (READs outstanding as responder).
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// path_mig_state.
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// cap.
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// dest_qp_num.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    /// Both masks.
    pub const fn union(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    const fn of(bits: &[AttrMask]) -> AttrMask {
        let mut m = 0;
        let mut i = 0;
        while i < bits.len() {
            m |= bits[i].0;
            i += 1;
        }
        AttrMask(m)
    }
}

/// Why a modify was refused (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModifyError {
    /// No such transition for an RC QP (e.g. RESET to RTS).
    InvalidTransition(QpState, QpState),
    /// A required attribute is missing (the bits).
    MissingAttributes(AttrMask),
    /// An attribute this transition does not take (the bits).
    UnexpectedAttributes(AttrMask),
    /// cur_qp_state given and not the QP's state.
    CurrentStateMismatch,
    /// The mask lacks STATE.
    NoState,
}

impl fmt::Display for ModifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModifyError::InvalidTransition(a, b) => write!(f, "no QP transition {a:?} -> {b:?}"),
            ModifyError::MissingAttributes(m) => {
                write!(f, "QP transition lacks required attributes {:#x}", m.0)
            }
            ModifyError::UnexpectedAttributes(m) => {
                write!(f, "QP transition does not take attributes {:#x}", m.0)
            }
            ModifyError::CurrentStateMismatch => f.write_str("cur_qp_state is not the QP's state"),
            ModifyError::NoState => f.write_str("attribute mask lacks IBV_QP_STATE"),
        }
    }
}

impl std::error::Error for ModifyError {}

/// The attributes an RC transition requires, STATE included (what `ibv_modify_qp` callers
/// pass to go RESET -> INIT -> RTR -> RTS); None if there is no such transition.
pub fn required_attributes(from: QpState, to: QpState) -> Option<AttrMask> {
    rules(from, to).map(|(required, _)| required.union(AttrMask::STATE))
}

/// (required, optional) attributes of an RC transition, beyond STATE; None if there is no
/// such transition. After the kernel's `ib_modify_qp_is_ok` table for IB_QPT_RC.
fn rules(from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    use AttrMask as A;
    use QpState::*;
    let none = AttrMask(0);
    Some(match (from, to) {
        (_, Reset) | (_, Error) => (none, none),
        (Reset, Init) => (A::of(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]), none),
        (Init, Init) => (none, A::of(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS])),
        (Init, Rtr) => (
            A::of(&[
                A::AV,
                A::PATH_MTU,
                A::DEST_QPN,
                A::RQ_PSN,
                A::MAX_DEST_RD_ATOMIC,
                A::MIN_RNR_TIMER,
            ]),
            A::of(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
        ),
        (Rtr, Rts) => (
            A::of(&[
                A::SQ_PSN,
                A::TIMEOUT,
                A::RETRY_CNT,
                A::RNR_RETRY,
                A::MAX_QP_RD_ATOMIC,
            ]),
            A::of(&[
                A::CUR_STATE,
                A::ALT_PATH,
                A::ACCESS_FLAGS,
                A::MIN_RNR_TIMER,
                A::PATH_MIG_STATE,
            ]),
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            none,
            A::of(&[
                A::CUR_STATE,
                A::ACCESS_FLAGS,
                A::ALT_PATH,
                A::PATH_MIG_STATE,
                A::MIN_RNR_TIMER,
            ]),
        ),
        (Rts, Sqd) => (none, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            A::of(&[
                A::AV,
                A::ALT_PATH,
                A::ACCESS_FLAGS,
                A::PKEY_INDEX,
                A::MIN_RNR_TIMER,
                A::PATH_MIG_STATE,
                A::MAX_QP_RD_ATOMIC,
                A::MAX_DEST_RD_ATOMIC,
                A::TIMEOUT,
                A::RETRY_CNT,
                A::RNR_RETRY,
            ]),
        ),
        (Sqe, Rts) => (none, A::of(&[A::CUR_STATE, A::ACCESS_FLAGS])),
        _ => return None,
    })
}

/// Checks a modify of a QP in `current` with `mask` towards `next`; Ok if it may happen.
pub fn check_modify(
    current: QpState,
    next: QpState,
    mask: AttrMask,
    cur_state_attr: Option<QpState>,
) -> Result<(), ModifyError> {
    if !mask.contains(AttrMask::STATE) {
        return Err(ModifyError::NoState);
    }
    let (required, optional) =
        rules(current, next).ok_or(ModifyError::InvalidTransition(current, next))?;
    let given = AttrMask(mask.0 & !AttrMask::STATE.0);
    let missing = AttrMask(required.0 & !given.0);
    if missing.0 != 0 {
        return Err(ModifyError::MissingAttributes(missing));
    }
    let extra = AttrMask(given.0 & !(required.0 | optional.0));
    if extra.0 != 0 {
        return Err(ModifyError::UnexpectedAttributes(extra));
    }
    if mask.contains(AttrMask::CUR_STATE) && cur_state_attr != Some(current) {
        return Err(ModifyError::CurrentStateMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttrMask as A;
    use QpState::*;

    fn mask(bits: &[AttrMask]) -> AttrMask {
        bits.iter().fold(A::STATE, |m, &b| m.union(b))
    }

    #[test]
    fn the_connection_sequence_perftest_uses_is_accepted() {
        let init = mask(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]);
        let rtr = mask(&[
            A::AV,
            A::PATH_MTU,
            A::DEST_QPN,
            A::RQ_PSN,
            A::MAX_DEST_RD_ATOMIC,
            A::MIN_RNR_TIMER,
        ]);
        let rts = mask(&[
            A::SQ_PSN,
            A::TIMEOUT,
            A::RETRY_CNT,
            A::RNR_RETRY,
            A::MAX_QP_RD_ATOMIC,
        ]);
        assert_eq!(check_modify(Reset, Init, init, None), Ok(()));
        assert_eq!(check_modify(Init, Rtr, rtr, None), Ok(()));
        assert_eq!(check_modify(Rtr, Rts, rts, None), Ok(()));
        for s in [Reset, Init, Rtr, Rts, Sqd, Sqe, Error] {
            assert_eq!(check_modify(s, Error, A::STATE, None), Ok(()));
            assert_eq!(check_modify(s, Reset, A::STATE, None), Ok(()));
        }
    }

    #[test]
    fn wrong_transitions_and_attributes_are_refused() {
        assert_eq!(
            check_modify(Reset, Rts, A::STATE, None),
            Err(ModifyError::InvalidTransition(Reset, Rts))
        );
        assert_eq!(
            check_modify(Reset, Init, mask(&[A::PORT, A::ACCESS_FLAGS]), None),
            Err(ModifyError::MissingAttributes(A::PKEY_INDEX))
        );
        assert_eq!(
            check_modify(
                Reset,
                Init,
                mask(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS, A::SQ_PSN]),
                None
            ),
            Err(ModifyError::UnexpectedAttributes(A::SQ_PSN))
        );
        assert_eq!(
            check_modify(Init, Rtr, A::AV, None),
            Err(ModifyError::NoState)
        );
        assert_eq!(
            check_modify(Rts, Rts, mask(&[A::CUR_STATE]), Some(Rtr)),
            Err(ModifyError::CurrentStateMismatch)
        );
        assert_eq!(
            check_modify(Rts, Rts, mask(&[A::CUR_STATE]), Some(Rts)),
            Ok(())
        );
    }

    #[test]
    fn states_round_trip_libibverbs_numbers() {
        for n in 0..7 {
            assert_eq!(QpState::from_u32(n).map(|s| s as u32), Some(n));
        }
        assert_eq!(QpState::from_u32(7), None);
    }
}
