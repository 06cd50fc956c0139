//! Completion queues (IB spec vol. 1 11.4.2; ibv_poll_cq(3), ibv_req_notify_cq(3)): a
//! bounded queue of work completions in the order the transport generated them, with the
//! one-shot notification an application arms to be woken by the next (or the next
//! solicited) completion.

use std::collections::VecDeque;
use std::fmt;

/// A completion's status (`enum ibv_wc_status`; the numbers are libibverbs').
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// Done.
    Success = 0,
    /// A receive buffer too small for the message, or a length past the limits.
    LocLenErr = 1,
    /// A work request the QP cannot carry out in its state.
    LocQpOpErr = 2,
    /// A local key, domain, bounds or rights check failed.
    LocProtErr = 4,
    /// Flushed: the QP went to the error state before it was done.
    WrFlushErr = 5,
    /// An unexpected response from the peer.
    BadRespErr = 7,
    /// A local access error found while placing a response.
    LocAccessErr = 8,
    /// The peer found the request invalid (NAK: invalid request).
    RemInvReqErr = 9,
    /// The peer refused the access (NAK: remote access error).
    RemAccessErr = 10,
    /// The peer could not carry it out (NAK: remote operational error).
    RemOpErr = 11,
    /// The transport retry count was exhausted (no answer).
    RetryExcErr = 12,
    /// The receiver-not-ready retry count was exhausted.
    RnrRetryExcErr = 13,
    /// Anything else.
    GeneralErr = 21,
}

/// What completed (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// A SEND (with or without immediate).
    Send = 0,
    /// An RDMA WRITE.
    RdmaWrite = 1,
    /// An RDMA READ.
    RdmaRead = 2,
    /// An OFFLOAD request and its response (Sluice's; not a libibverbs number).
    Offload = 64,
    /// A receive of a SEND.
    Recv = 128,
    /// A receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

/// One work completion (`struct ibv_wc`, the fields this transport fills).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id, as posted.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data, host order (IBV_WC_WITH_IMM).
    pub imm: Option<u32>,
    /// The local QP.
    pub qp_num: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
    /// The message asked for a solicited event (receives).
    pub solicited: bool,
}

/// Why a completion could not be queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqError {
    /// The queue was full (a CQ overrun, IB spec 11.4.2.1): the completion is lost and the
    /// queue is in error until destroyed; the transport raises the asynchronous error.
    Overrun,
}

impl fmt::Display for CqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("completion queue overrun")
    }
}

impl std::error::Error for CqError {}

/// How the application asked to be notified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    No,
    Next,
    Solicited,
}

/// A completion queue of at most `capacity` entries.
#[derive(Debug)]
pub struct CompletionQueue {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    armed: Armed,
    overrun: bool,
}

impl CompletionQueue {
    /// An empty queue of `capacity` entries (at least one).
    pub fn new(capacity: usize) -> CompletionQueue {
        let capacity = capacity.max(1);
        CompletionQueue {
            entries: VecDeque::with_capacity(capacity),
            capacity,
            armed: Armed::No,
            overrun: false,
        }
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the queue overran (it takes nothing more).
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// Queues `wc`. Ok(true) when it fires the armed notification (the event is then
    /// disarmed: notification is one-shot).
    pub fn push(&mut self, wc: WorkCompletion) -> Result<bool, CqError> {
        if self.overrun || self.entries.len() >= self.capacity {
            self.overrun = true;
            return Err(CqError::Overrun);
        }
        // Solicited-only fires on a solicited receive and on any error completion (IB spec
        // 11.4.2.2).
        let fires = match self.armed {
            Armed::No => false,
            Armed::Next => true,
            Armed::Solicited => wc.solicited || wc.status != WcStatus::Success,
        };
        if fires {
            self.armed = Armed::No;
        }
        self.entries.push_back(wc);
        Ok(fires)
    }

    /// Moves up to `max` completions, oldest first, into `out`; how many.
    pub fn poll(&mut self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let n = max.min(self.entries.len());
        out.extend(self.entries.drain(..n));
        n
    }

    /// Arms the notification for the next completion, or the next solicited one.
    pub fn req_notify(&mut self, solicited_only: bool) {
        self.armed = if solicited_only {
            Armed::Solicited
        } else {
            Armed::Next
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(wr_id: u64, status: WcStatus, solicited: bool) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: 8,
            imm: None,
            qp_num: 17,
            src_qp: 18,
            solicited,
        }
    }

    #[test]
    fn completions_come_out_in_order_and_an_overrun_is_final() {
        let mut cq = CompletionQueue::new(3);
        for i in 0..3 {
            assert_eq!(cq.push(wc(i, WcStatus::Success, false)), Ok(false));
        }
        assert_eq!(
            cq.push(wc(3, WcStatus::Success, false)),
            Err(CqError::Overrun)
        );
        let mut out = Vec::new();
        assert_eq!(cq.poll(2, &mut out), 2);
        assert_eq!(cq.poll(8, &mut out), 1);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
        // Room again, but the queue stays in error.
        assert!(cq.is_overrun());
        assert_eq!(
            cq.push(wc(4, WcStatus::Success, false)),
            Err(CqError::Overrun)
        );
    }

    #[test]
    fn notification_is_one_shot_and_solicited_only_waits_for_solicited_or_errors() {
        let mut cq = CompletionQueue::new(16);
        assert_eq!(
            cq.push(wc(0, WcStatus::Success, true)),
            Ok(false),
            "not armed"
        );
        cq.req_notify(false);
        assert_eq!(cq.push(wc(1, WcStatus::Success, false)), Ok(true));
        assert_eq!(
            cq.push(wc(2, WcStatus::Success, false)),
            Ok(false),
            "one-shot"
        );
        cq.req_notify(true);
        assert_eq!(cq.push(wc(3, WcStatus::Success, false)), Ok(false));
        assert_eq!(cq.push(wc(4, WcStatus::Success, true)), Ok(true));
        cq.req_notify(true);
        assert_eq!(cq.push(wc(5, WcStatus::RemAccessErr, false)), Ok(true));
    }
}
