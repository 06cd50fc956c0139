//! Completion queues (`ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`): a verbs queue
//! the engine produces into, and the completion event (docs/verbs.md "Completion events").

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_shm::verbs::{Cqe, VerbsReply, VerbsRequest};
use sluice_shm::Consumer;

use crate::attach::Sluice;
use crate::lock::lock;
use crate::verbs::control::{self, unexpected};
use crate::verbs::device::Device;
use crate::verbs::error::VerbsError;

/// `ibv_wc_status` values this transport gives.
pub mod wc_status {
    /// IBV_WC_SUCCESS.
    pub const SUCCESS: u32 = 0;
    /// IBV_WC_LOC_LEN_ERR.
    pub const LOC_LEN_ERR: u32 = 1;
    /// IBV_WC_LOC_QP_OP_ERR.
    pub const LOC_QP_OP_ERR: u32 = 2;
    /// IBV_WC_LOC_PROT_ERR.
    pub const LOC_PROT_ERR: u32 = 4;
    /// IBV_WC_WR_FLUSH_ERR.
    pub const WR_FLUSH_ERR: u32 = 5;
    /// IBV_WC_REM_ACCESS_ERR.
    pub const REM_ACCESS_ERR: u32 = 10;
    /// IBV_WC_REM_OP_ERR: an OFFLOAD whose handler failed (the QP stays up).
    pub const REM_OP_ERR: u32 = 11;
}

/// `ibv_wc_opcode` values.
pub mod wc_opcode {
    /// IBV_WC_SEND.
    pub const SEND: u32 = 0;
    /// IBV_WC_RDMA_WRITE.
    pub const RDMA_WRITE: u32 = 1;
    /// IBV_WC_RDMA_READ.
    pub const RDMA_READ: u32 = 2;
    /// IBV_WC_RECV.
    pub const RECV: u32 = 128;
    /// IBV_WC_RECV_RDMA_WITH_IMM.
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
    /// An OFFLOAD's completion (`IBV_WC_SLUICE_OFFLOAD`, docs/offload.md).
    pub const SLUICE_OFFLOAD: u32 = 64;
}

/// IBV_WC_WITH_IMM in [`WorkCompletion::wc_flags`].
pub const WC_WITH_IMM: u32 = 2;

/// A work completion; the layout of C's `struct sluice_rdma_wc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// [`wc_status`].
    pub status: u32,
    /// [`wc_opcode`].
    pub opcode: u32,
    /// Bytes transferred or received.
    pub byte_len: u32,
    /// Immediate data (network order) when `wc_flags` has [`WC_WITH_IMM`].
    pub imm_data: u32,
    /// The local QP.
    pub qp_num: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
    /// [`WC_WITH_IMM`] or 0.
    pub wc_flags: u32,
    /// Zero.
    pub reserved: u32,
}

impl WorkCompletion {
    /// An OFFLOAD's handler status (0: success; `sluice_offload_api::status` names the
    /// others); None for another completion.
    pub fn offload_status(&self) -> Option<u32> {
        (self.opcode == wc_opcode::SLUICE_OFFLOAD).then(|| u32::from_be(self.imm_data))
    }
}

impl From<Cqe> for WorkCompletion {
    fn from(c: Cqe) -> WorkCompletion {
        WorkCompletion {
            wr_id: c.wr_id,
            status: u32::from(c.status),
            opcode: u32::from(c.opcode),
            byte_len: c.byte_len,
            imm_data: c.imm,
            qp_num: c.qp_num,
            src_qp: c.src_qp,
            wc_flags: u32::from(c.flags),
            reserved: 0,
        }
    }
}

/// A completion queue. Its QPs keep it alive; dropping the last handle destroys it.
#[derive(Debug)]
pub struct CompletionQueue(pub(crate) Arc<CqInner>);

/// What a CQ's handle and its QPs share.
pub(crate) struct CqInner {
    pub(crate) sluice: Arc<Sluice>,
    pub(crate) cq: u32,
    queue: u32,
    cqe: u32,
    event_fd: Option<OwnedFd>,
    /// Its verbs queue's consumer (None in pipe mode: its completions come through the
    /// attachment's completion pipes, `queue` is its arm slot).
    consumer: Option<Mutex<Consumer>>,
    /// Entries that did not decode as completions (skipped).
    bad_entries: AtomicU64,
    destroyed: AtomicBool,
}

impl std::fmt::Debug for CqInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqInner")
            .field("cq", &self.cq)
            .field("queue", &self.queue)
            .field("cqe", &self.cqe)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// A CQ of at least `cqe` entries. `event_fd` (a non-blocking eventfd, kept as a
    /// duplicate) is signalled by the engine when the armed CQ gets a completion.
    pub fn create_cq(
        &self,
        cqe: u32,
        event_fd: Option<BorrowedFd<'_>>,
    ) -> Result<CompletionQueue, VerbsError> {
        self.create_cq_with_token(cqe, event_fd, 1)
    }

    /// As [`Device::create_cq`], with the 8 bytes the engine writes to `event_fd` on an
    /// event: 1 for an eventfd; for a (non-blocking) pipe's write end, a record its reader
    /// recognises, as rdma-core's completion channels carry the CQ's address.
    pub fn create_cq_with_token(
        &self,
        cqe: u32,
        event_fd: Option<BorrowedFd<'_>>,
        token: u64,
    ) -> Result<CompletionQueue, VerbsError> {
        self.new_cq(cqe, event_fd, token, false)
    }

    /// A pipe-mode CQ (docs/verbs.md "Notification pipes"): its completions come through
    /// the completion pipes of its QPs' contexts, which [`CompletionQueue::poll`] drains
    /// into each CQ's buffer; only pipe-mode QPs ([`ProtectionDomain::create_pipe_qp`]) may
    /// use it.
    ///
    /// [`ProtectionDomain::create_pipe_qp`]: crate::verbs::ProtectionDomain::create_pipe_qp
    pub fn create_pipe_cq(
        &self,
        cqe: u32,
        event_fd: Option<BorrowedFd<'_>>,
    ) -> Result<CompletionQueue, VerbsError> {
        self.new_cq(cqe, event_fd, 1, true)
    }

    /// Sets how many completions the library takes from a completion pipe before it
    /// publishes its head ([`crate::verbs::DEFAULT_COMPLETION_LAG`]); for pipes opened
    /// afterwards.
    pub fn set_completion_lag(&self, n: u64) {
        self.sluice().pipes().set_completion_lag(n);
    }

    fn new_cq(
        &self,
        cqe: u32,
        event_fd: Option<BorrowedFd<'_>>,
        token: u64,
        piped: bool,
    ) -> Result<CompletionQueue, VerbsError> {
        if cqe == 0 {
            return Err(VerbsError::Invalid("cqe 0"));
        }
        let kept = match event_fd {
            Some(fd) => Some(
                fd.try_clone_to_owned()
                    .map_err(|e| VerbsError::Os(e.raw_os_error().unwrap_or(libc::EIO)))?,
            ),
            None => None,
        };
        let fds: Vec<BorrowedFd<'_>> = event_fd.into_iter().collect();
        let sluice = self.sluice();
        let req = if piped {
            VerbsRequest::CreatePipeCq { cqe, token }
        } else {
            VerbsRequest::CreateCq { cqe, token }
        };
        match control::call(sluice, req, &fds)? {
            VerbsReply::Cq { cq, queue, cqe } => {
                let consumer = if piped {
                    sluice.pipes().add_cq(cq, cqe);
                    None
                } else {
                    let c = Consumer::verbs(sluice.region.clone(), queue).ok_or_else(|| {
                        VerbsError::Protocol(format!("completion queue {queue} out of range"))
                    })?;
                    Some(Mutex::new(c))
                };
                Ok(CompletionQueue(Arc::new(CqInner {
                    sluice: sluice.clone(),
                    cq,
                    queue,
                    cqe,
                    event_fd: kept,
                    consumer,
                    bad_entries: AtomicU64::new(0),
                    destroyed: AtomicBool::new(false),
                })))
            }
            other => Err(unexpected(other)),
        }
    }
}

impl CompletionQueue {
    /// The CQ's handle in the engine.
    pub fn handle(&self) -> u32 {
        self.0.cq
    }

    /// Completions it holds (`ibv_cq`'s `cqe`).
    pub fn cqe(&self) -> u32 {
        self.0.cqe
    }

    /// Entries met that were not completions (skipped; the engine wrote garbage). Pipe
    /// mode: over the attachment's completion pipes.
    pub fn bad_entries(&self) -> u64 {
        if self.0.consumer.is_none() {
            return self.0.sluice.pipes().bad_entries();
        }
        self.0.bad_entries.load(Ordering::Relaxed)
    }

    /// Pipe mode: completions dropped because a CQ's buffer held its `cqe` already (over
    /// the attachment's pipe-mode CQs; 0 for a queue CQ, whose overruns the engine counts).
    pub fn overruns(&self) -> u64 {
        if self.0.consumer.is_none() {
            self.0.sluice.pipes().overruns()
        } else {
            0
        }
    }

    /// Whether it is a pipe-mode CQ.
    pub fn is_piped(&self) -> bool {
        self.0.consumer.is_none()
    }

    /// Takes up to `out.len()` completions, oldest first; how many.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let Some(consumer) = &self.0.consumer else {
            let mut slots = out.iter_mut();
            return self.0.sluice.pipes().poll(self.0.cq, slots.len(), |c| {
                if let Some(o) = slots.next() {
                    *o = c.into();
                }
            });
        };
        let mut c = lock(consumer);
        let mut n = 0;
        while n < out.len() {
            let Some(entry) = c.pop() else { break };
            match Cqe::decode(&entry) {
                Ok(cqe) => {
                    out[n] = cqe.into();
                    n += 1;
                }
                Err(_) => {
                    self.0.bad_entries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        c.publish();
        n
    }

    /// Whether a completion waits.
    pub fn has_completion(&self) -> bool {
        match &self.0.consumer {
            Some(c) => lock(c).has_entry(),
            None => self.0.sluice.pipes().has_completion(self.0.cq),
        }
    }

    /// Arms the completion event for the next completion (`solicited_only`: the next
    /// solicited one). Poll once more afterwards: one may have come before arming.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), VerbsError> {
        let region = &self.0.sluice.region;
        let arm = if self.0.consumer.is_some() {
            region.verbs_arm(self.0.queue)
        } else {
            region.pipe_arm(self.0.queue)
        }
        .ok_or(VerbsError::Invalid("completion queue"))?;
        arm.store(if solicited_only { 2 } else { 1 }, Ordering::SeqCst);
        Ok(())
    }

    /// Waits up to `timeout` (None: for ever) for completions and takes up to `out.len()`:
    /// polls, then arms and sleeps on the event (without one, sleeps in short slices).
    pub fn wait(
        &self,
        out: &mut [WorkCompletion],
        timeout: Option<Duration>,
    ) -> Result<usize, VerbsError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let n = self.poll(out);
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            if !self.0.sluice.check_alive() {
                return Err(VerbsError::Library(crate::Error::EngineGone));
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return Ok(0),
                },
                None => None,
            };
            match &self.0.event_fd {
                Some(fd) => {
                    self.req_notify(false)?;
                    if self.has_completion() {
                        continue;
                    }
                    // Bounded slices so a dead engine is noticed.
                    let slice = left
                        .unwrap_or(Duration::from_secs(1))
                        .min(Duration::from_secs(1));
                    sleep_on(fd, slice)?;
                }
                None => {
                    std::thread::sleep(left.unwrap_or(Duration::MAX).min(Duration::from_micros(50)))
                }
            }
        }
    }

    /// Destroys it now; [`VerbsError::Busy`] (nothing changed) while a QP uses it.
    pub fn destroy(self) -> Result<(), VerbsError> {
        if Arc::strong_count(&self.0) > 1 {
            return Err(VerbsError::Busy);
        }
        control::call_done(&self.0.sluice, VerbsRequest::DestroyCq { cq: self.0.cq })?;
        self.0.destroyed.store(true, Ordering::Relaxed);
        if self.0.consumer.is_none() {
            self.0.sluice.pipes().remove_cq(self.0.cq);
        }
        Ok(())
    }

    /// Whether QPs use it.
    pub(crate) fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

/// Sleeps until `fd` (an eventfd) is signalled or `t` passes, and clears it.
fn sleep_on(fd: &OwnedFd, t: Duration) -> Result<(), VerbsError> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = t.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: poll reads and writes one pollfd that lives across the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r > 0 && p.revents & libc::POLLIN != 0 {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into b; the eventfd is readable, so it does not block.
        unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    } else if r < 0 {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if e != libc::EINTR {
            return Err(VerbsError::Os(e));
        }
    }
    Ok(())
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if !self.destroyed.load(Ordering::Relaxed) && self.sluice.is_alive() {
            let _ = control::call_done(&self.sluice, VerbsRequest::DestroyCq { cq: self.cq });
        }
        if self.consumer.is_none() {
            self.sluice.pipes().remove_cq(self.cq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_entry_becomes_a_work_completion() {
        let c = Cqe {
            wr_id: 9,
            status: 5,
            opcode: 129,
            flags: 2,
            byte_len: 77,
            imm: 0x0403_0201,
            qp_num: 0x11,
            src_qp: 0x12,
        };
        let wc = WorkCompletion::from(c);
        assert_eq!(wc.wr_id, 9);
        assert_eq!(wc.status, wc_status::WR_FLUSH_ERR);
        assert_eq!(wc.opcode, wc_opcode::RECV_RDMA_WITH_IMM);
        assert_eq!(wc.wc_flags, WC_WITH_IMM);
        assert_eq!(
            (wc.byte_len, wc.imm_data, wc.qp_num, wc.src_qp),
            (77, 0x0403_0201, 0x11, 0x12)
        );
    }
}
