//! Verbs in service mode (docs/verbs.md): one RDMA transport beside the TCP core, the
//! control-path verbs an application asks over its control socket, the work requests it
//! posts in its verbs queues, and the completions the engine places there.
//!
//! Inside, layered like the service: `memory` (backings and the transport) and `objects`
//! (what an application owns) at the bottom; `completions` (transport to verbs queues) and
//! `work` (verbs queues to transport, which makes completions of its own) above them;
//! `requests` (the control path, which re-runs `work` after a modify) on top.

mod completions;
mod memory;
mod objects;
mod offload;
mod requests;
mod work;

use std::collections::HashMap;

use sluice_rdma::stack::{RdmaStack, StackConfig};
use sluice_rdma::verbs::{Key, WorkCompletion};
use sluice_shm::verbs::{DeviceInfo, MAX_INLINE};
use sluice_tcp::Stack;

pub(crate) use completions::deliver;
pub(crate) use memory::Rdma;
pub(crate) use offload::{answer as offload_answer, run as run_offload};
pub(crate) use requests::request;
pub(crate) use work::{doorbell, poll_pipes, retry};

use memory::Backings;
use objects::VerbsApp;

/// The RDMA device's limits (ServiceConfig::verbs_limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbsLimits {
    /// Queue pairs at most, over every application.
    pub max_qps: u32,
    /// Completion queues at most.
    pub max_cqs: u32,
    /// Memory regions at most (QPs' inline buffers count too).
    pub max_mrs: u32,
    /// Protection domains at most.
    pub max_pds: u32,
    /// Entries per completion queue at most.
    pub max_cqe: u32,
    /// Work requests per queue at most.
    pub max_wr: u32,
    /// Largest memory region in bytes.
    pub max_mr_size: u64,
    /// Packets a QP keeps unacknowledged.
    pub max_inflight: u32,
}

impl Default for VerbsLimits {
    fn default() -> Self {
        VerbsLimits {
            max_qps: 1024,
            max_cqs: 1024,
            max_mrs: 4096,
            max_pds: 1024,
            max_cqe: 4096,
            max_wr: 4096,
            max_mr_size: 1 << 32,
            max_inflight: 256,
        }
    }
}

/// The service's verbs: the transport and who owns what of it.
pub(crate) struct Verbs {
    /// The transport with its memory (what the engine drives).
    pub rdma: Rdma,
    /// Applications that asked for verbs, by their index in the service's table.
    apps: HashMap<u32, VerbsApp>,
    /// What QueryDevice answers.
    device: DeviceInfo,
    limits: VerbsLimits,
    /// Protection domains handed out (over every application).
    pds: u32,
    /// The next protection domain's number (never reused: a stale one names nothing).
    next_pd: u32,
    /// QPs with work requests left in their queues: (application, qpn).
    retry: Vec<(u32, u32)>,
    /// Scratch for polling the transport's CQs.
    wcs: Vec<WorkCompletion>,
    /// CQs to visit in the next `deliver` besides the transport's ready list: those with
    /// completions the service made, or left behind by a full queue.
    ready_cqs: Vec<u32>,
    /// Scratch: the previous ready list, kept for its capacity.
    ready_spare: Vec<u32>,
    /// Pipe-mode QPs placed on each engine core (over every application): a new QP goes
    /// to the least loaded core.
    core_qps: Vec<u32>,
    /// Applications with notification pipes in use (polled every iteration).
    pipe_apps: Vec<u32>,
    /// How often the engine publishes its head of a work-request pipe at most (entries).
    publish_every: u64,
    /// Scratch: QPs a pipe poll gave work to.
    touched: Vec<u32>,
    /// Offload handlers registered on QPs, and the engine running them.
    offload: offload::Offload,
}

/// IBV_MTU_* for an Ethernet MTU: the largest IB MTU whose packets, with RoCEv2's headers
/// (IPv4 20, UDP 8, BTH 12, RETH 16, ICRC 4), fit.
fn active_mtu(mtu: u16) -> u8 {
    let room = u32::from(mtu).saturating_sub(60);
    (1..=5u8).rev().find(|&c| 128u32 << c <= room).unwrap_or(1)
}

impl Verbs {
    /// One line per application QP, for traces: what the service holds of it.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (app, a) in &self.apps {
            for (qpn, q) in &a.qps {
                out.push_str(&format!(
                    "app {app} qp {qpn:#x}: sq entry waiting {} (at {:?}), held send {}, listed {}, sends taken {}\n",
                    q.sq_in.as_ref().is_some_and(|c| c.has_entry()),
                    q.sq_in.as_ref().map(|c| c.position()),
                    q.held_send.is_some(),
                    q.listed,
                    q.sends_taken
                ));
            }
            for (cq, c) in &a.cqs {
                out.push_str(&format!(
                    "app {app} cq {cq}: free {:?}, made {}, dead {}\n",
                    c.producer.as_ref().map(|p| p.free()),
                    c.made.len(),
                    c.dead
                ));
            }
        }
        out
    }

    /// The verbs of the engine whose core is `stack`.
    pub fn new(stack: &Stack, limits: VerbsLimits) -> Verbs {
        let cfg = stack.config();
        let stack_cfg = StackConfig {
            max_qps: limits.max_qps as usize,
            max_cqs: limits.max_cqs as usize,
            max_mrs: limits.max_mrs as usize,
            max_cqe: limits.max_cqe as usize,
            max_wr: limits.max_wr as usize,
            max_inflight: limits.max_inflight,
            // DCQCN starts each QP at the default line rate (sluice_rdma::cc).
            ..StackConfig::new(cfg.mac, cfg.ip)
        };
        Verbs {
            rdma: Rdma {
                stack: RdmaStack::new(stack_cfg),
                mem: Backings::default(),
            },
            apps: HashMap::new(),
            device: DeviceInfo {
                ip: cfg.ip,
                mac: cfg.mac.0,
                active_mtu: active_mtu(cfg.mtu),
                max_qp: limits.max_qps,
                max_qp_wr: limits.max_wr,
                max_cq: limits.max_cqs,
                max_cqe: limits.max_cqe,
                max_mr: limits.max_mrs,
                max_mr_size: limits.max_mr_size,
                max_sge: 1,
                max_inline: MAX_INLINE as u32,
                max_qp_rd_atom: sluice_rdma::qp::MAX_DEST_RD_ATOMIC as u32,
            },
            limits,
            pds: 0,
            next_pd: 1,
            retry: Vec::new(),
            wcs: Vec::new(),
            ready_cqs: Vec::new(),
            ready_spare: Vec::new(),
            core_qps: Vec::new(),
            pipe_apps: Vec::new(),
            publish_every: 32,
            touched: Vec::new(),
            offload: offload::Offload::default(),
        }
    }

    /// Whether a work-request pipe holds a line (checked before the engine sleeps, after it
    /// announced so: the application rings it only when it sees the announcement), or an
    /// OFFLOAD request is with the offload engine (whose answer rings nothing).
    pub fn pipes_pending(&self) -> bool {
        self.offload.busy()
            || self.pipe_apps.iter().any(|app| {
                self.apps
                    .get(app)
                    .is_some_and(|a| a.pipes.iter().any(|p| p.work.peek().is_some()))
            })
    }

    /// Memory backings held (mapped regions and inline buffers).
    pub fn backings(&self) -> usize {
        self.rdma.mem.len()
    }

    /// The application at `app` went away: its QPs are destroyed (their work flushed),
    /// then its completion queues, its regions unregistered and unmapped, its domains
    /// freed.
    pub fn detach(&mut self, app: u32) {
        let Some(mut a) = self.apps.remove(&app) else {
            return;
        };
        let rdma = &mut self.rdma;
        for (qpn, qp) in a.qps.drain() {
            self.offload.forget_qp(qpn);
            if let Some(p) = &qp.pipe {
                let core = a.pipes[p.set].core as usize;
                self.core_qps[core] = self.core_qps[core].saturating_sub(1);
            }
            let _ = rdma.stack.destroy_qp(&mut rdma.mem, qpn);
            if let Some((backing, key)) = qp.inline {
                let _ = rdma.stack.dereg_mr(key);
                rdma.mem.remove(backing);
            }
        }
        for cq in a.cqs.keys() {
            let _ = rdma.stack.destroy_cq(*cq);
        }
        for (key, (_, backing)) in a.mrs.drain() {
            let _ = rdma.stack.dereg_mr(Key(key));
            rdma.mem.remove(backing);
        }
        self.pds -= a.pds.len() as u32;
        self.retry.retain(|&(x, _)| x != app);
        self.pipe_apps.retain(|&x| x != app);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_mtu_follows_the_device_mtu() {
        assert_eq!(active_mtu(1500), 3, "1500 -> IBV_MTU_1024");
        assert_eq!(active_mtu(9000), 5, "jumbo -> IBV_MTU_4096");
        assert_eq!(
            active_mtu(4096),
            4,
            "4096 leaves no room for 4096 of payload"
        );
        assert_eq!(active_mtu(576), 2);
        assert_eq!(active_mtu(0), 1);
    }
}
