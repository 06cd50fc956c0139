//! One application's verbs objects on one engine of [`super::engines::Engines`]: a device,
//! a PD, one region, one CQ and N RC QPs, in doorbell mode (per-QP queues, a doorbell per
//! post) or pipe mode (the context's notification pipes); and the RESET -> RTS sequence.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::verbs::{
    access, qp_mask, qp_state, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpAttrs,
    QpInit, QueuePair, WorkCompletion,
};
use sluice::Sluice;

use crate::error::ExperimentError;

/// How work requests reach the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Per-QP send and receive queues; each post rings a `QpDoorbell` (the application
    /// writes a counter, the engine fetches that QP's entries): the baseline.
    Doorbell,
    /// The context's notification pipes (flexins.txt 3.4): one work-request pipe per
    /// engine core, polled by the engine, whatever the number of QPs.
    Pipe,
}

impl Mode {
    /// Its name in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Doorbell => "doorbell",
            Mode::Pipe => "pipe",
        }
    }
}

/// Send work requests each QP may have outstanding (the experiment's window is at most
/// this).
pub const MAX_SEND_WR: u32 = 8;
/// Receive work requests each QP may have outstanding.
pub const MAX_RECV_WR: u32 = 8;
/// The CQ's entries (doorbell mode: one verbs queue of the layout's 16 entries).
pub const CQE: u32 = 16;
/// How long one operation may take before the run is called failed.
pub const WAIT: Duration = Duration::from_secs(10);

/// One application's side.
pub struct VerbsSide {
    /// Its QPs, in creation order.
    pub qps: Vec<QueuePair>,
    /// Its one CQ (send and receive).
    pub cq: CompletionQueue,
    /// Its region.
    pub mr: MemoryRegion,
    _pd: ProtectionDomain,
    _dev: Device,
    _app: Arc<Sluice>,
}

fn err(what: &str, e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Workload(format!("{what}: {e}"))
}

impl VerbsSide {
    /// Attaches to the engine at `socket` and makes a region of `mr_len` bytes, a CQ and
    /// `qps` QPs in `mode`.
    pub fn open(
        socket: &Path,
        mode: Mode,
        qps: usize,
        mr_len: usize,
    ) -> Result<VerbsSide, ExperimentError> {
        let app = Sluice::attach(socket).map_err(|e| err("attach", e))?;
        let dev = Device::open(&app).map_err(|e| err("open the device", e))?;
        let pd = dev.alloc_pd().map_err(|e| err("alloc_pd", e))?;
        let mr = pd
            .alloc_mr(
                mr_len,
                access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            )
            .map_err(|e| err("alloc_mr", e))?;
        let init = QpInit {
            max_send_wr: MAX_SEND_WR,
            max_recv_wr: MAX_RECV_WR,
            // Pipe mode: up to one MTU inline (the inline QP).
            max_inline: if mode == Mode::Pipe { 1024 } else { 256 },
        };
        let cq = match mode {
            Mode::Doorbell => dev.create_cq(CQE, None),
            Mode::Pipe => dev.create_pipe_cq(CQE, None),
        }
        .map_err(|e| err("create_cq", e))?;
        let qps = (0..qps)
            .map(|_| match mode {
                Mode::Doorbell => pd.create_qp(&cq, &cq, init),
                Mode::Pipe => pd.create_pipe_qp(&cq, &cq, init),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err("create_qp", e))?;
        Ok(VerbsSide {
            qps,
            cq,
            mr,
            _pd: pd,
            _dev: dev,
            _app: app,
        })
    }

    /// The next completion, polled (busy) for at most [`WAIT`].
    pub fn next_completion(&self) -> Result<WorkCompletion, ExperimentError> {
        let mut wc = [WorkCompletion::default(); 1];
        let start = Instant::now();
        loop {
            if self.cq.poll(&mut wc) == 1 {
                return Ok(wc[0]);
            }
            if start.elapsed() > WAIT {
                return Err(ExperimentError::Workload(format!(
                    "no completion in {WAIT:?}"
                )));
            }
            // Yield, not spin: the two engines' threads need the cores this thread shares.
            std::thread::yield_now();
        }
    }
}

/// Connects QP `k` of `a` to QP `k` of `b` and back, each RESET -> INIT -> RTR -> RTS.
pub fn connect_all(
    a: &VerbsSide,
    a_ip: Ipv4Addr,
    b: &VerbsSide,
    b_ip: Ipv4Addr,
) -> Result<(), ExperimentError> {
    for (qa, qb) in a.qps.iter().zip(&b.qps) {
        connect(qa, b_ip, qb.qpn())?;
        connect(qb, a_ip, qa.qpn())?;
    }
    Ok(())
}

/// RESET -> INIT -> RTR -> RTS towards `peer` (the sequence perftest uses).
fn connect(qp: &QueuePair, peer_ip: Ipv4Addr, peer_qpn: u32) -> Result<(), ExperimentError> {
    let init = QpAttrs {
        qp_state: qp_state::INIT,
        access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttrs::default()
    };
    qp.modify(
        &init,
        qp_mask::STATE | qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::ACCESS_FLAGS,
    )
    .map_err(|e| err("to INIT", e))?;
    let rtr = QpAttrs {
        qp_state: qp_state::RTR,
        path_mtu: 3,
        dest_qpn: peer_qpn,
        rq_psn: 100,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        dest_ip: Some(peer_ip),
        ..QpAttrs::default()
    };
    qp.modify(
        &rtr,
        qp_mask::STATE
            | qp_mask::AV
            | qp_mask::PATH_MTU
            | qp_mask::DEST_QPN
            | qp_mask::RQ_PSN
            | qp_mask::MAX_DEST_RD_ATOMIC
            | qp_mask::MIN_RNR_TIMER,
    )
    .map_err(|e| err("to RTR", e))?;
    let rts = QpAttrs {
        qp_state: qp_state::RTS,
        sq_psn: 100,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttrs::default()
    };
    qp.modify(
        &rts,
        qp_mask::STATE
            | qp_mask::SQ_PSN
            | qp_mask::TIMEOUT
            | qp_mask::RETRY_CNT
            | qp_mask::RNR_RETRY
            | qp_mask::MAX_QP_RD_ATOMIC,
    )
    .map_err(|e| err("to RTS", e))?;
    Ok(())
}
