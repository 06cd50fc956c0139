//! The control-path verbs (flexins.txt appendix A.2's 13 control verbs, the ones RC needs):
//! asked over the control socket as [`crate::control::Request::Verbs`] and answered with
//! [`crate::control::Reply::Verbs`] (docs/verbs.md "Control path"). The engine checks every
//! value: an application names only its own protection domains, regions, queues and QPs.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// What the engine's RDMA device offers (`ibv_query_device`, `ibv_query_port`,
/// `ibv_query_gid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The engine's IPv4 address: the port's GID is its IPv4-mapped form.
    pub ip: Ipv4Addr,
    /// The engine's MAC.
    pub mac: [u8; 6],
    /// The port's active MTU as IBV_MTU_* (1: 256 .. 5: 4096).
    pub active_mtu: u8,
    /// Queue pairs at most (`max_qp`).
    pub max_qp: u32,
    /// Work requests per queue at most (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Completion queues at most (`max_cq`).
    pub max_cq: u32,
    /// Entries per completion queue at most (`max_cqe`).
    pub max_cqe: u32,
    /// Memory regions at most (`max_mr`).
    pub max_mr: u32,
    /// Largest region in bytes (`max_mr_size`).
    pub max_mr_size: u64,
    /// Scatter/gather elements per work request (`max_sge`).
    pub max_sge: u32,
    /// Inline bytes per send work request (`max_inline_data`).
    pub max_inline: u32,
    /// Outstanding RDMA READs per QP (`max_qp_rd_atom`).
    pub max_qp_rd_atom: u32,
}

/// The attributes of a modify or a query (`struct ibv_qp_attr`, the fields RC uses); the
/// mask says which are given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttrs {
    /// qp_state (IBV_QPS_*).
    pub qp_state: u32,
    /// cur_qp_state.
    pub cur_qp_state: u32,
    /// qp_access_flags (IBV_ACCESS_*).
    pub access: u32,
    /// path_mtu (IBV_MTU_*).
    pub path_mtu: u8,
    /// dest_qp_num.
    pub dest_qpn: u32,
    /// rq_psn.
    pub rq_psn: u32,
    /// sq_psn.
    pub sq_psn: u32,
    /// timeout (4.096 us x 2^timeout).
    pub timeout: u8,
    /// retry_cnt.
    pub retry_cnt: u8,
    /// rnr_retry.
    pub rnr_retry: u8,
    /// min_rnr_timer.
    pub min_rnr_timer: u8,
    /// max_rd_atomic.
    pub max_rd_atomic: u8,
    /// max_dest_rd_atomic.
    pub max_dest_rd_atomic: u8,
    /// The peer: ah_attr's destination GID as IPv4 (an IPv4-mapped GID, or the dlid's
    /// address as the application wrote it).
    pub dest_ip: Option<Ipv4Addr>,
}

/// A control-path verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VerbsRequest {
    /// ibv_query_device / ibv_query_port: answered with [`VerbsReply::Device`].
    QueryDevice,
    /// ibv_alloc_pd: [`VerbsReply::Pd`].
    AllocPd,
    /// ibv_dealloc_pd (EBUSY while regions or QPs use it).
    DeallocPd {
        /// The domain.
        pd: u32,
    },
    /// ibv_reg_mr. Descriptor: a memfd sealed against shrinking whose bytes from
    /// `file_offset` are the application's `addr .. addr + len`, mapped shared in its
    /// address space. [`VerbsReply::Mr`].
    RegMr {
        /// The domain.
        pd: u32,
        /// First byte, as the application addresses it.
        addr: u64,
        /// Length.
        len: u64,
        /// IBV_ACCESS_* flags.
        access: u32,
        /// Where `addr` lies in the memfd.
        file_offset: u64,
    },
    /// ibv_dereg_mr.
    DeregMr {
        /// The region's key.
        key: u32,
    },
    /// ibv_create_cq. Optional descriptor, non-blocking (EINVAL otherwise): an eventfd, or
    /// a pipe's write end, to which the engine writes `token` (8 bytes, native order) when
    /// an armed queue gets a completion (a completion channel; rdma-core's channel reads
    /// the CQ's address as such a record). [`VerbsReply::Cq`].
    CreateCq {
        /// Entries wanted (at least).
        cqe: u32,
        /// What the engine writes on an event (1 for an eventfd: the counter counts events).
        #[serde(default = "one")]
        token: u64,
    },
    /// ibv_destroy_cq (EBUSY while a QP uses it).
    DestroyCq {
        /// The queue.
        cq: u32,
    },
    /// ibv_create_qp (RC only): [`VerbsReply::Qp`].
    CreateQp {
        /// The domain.
        pd: u32,
        /// Send completion queue.
        send_cq: u32,
        /// Receive completion queue.
        recv_cq: u32,
        /// Send work requests outstanding at most.
        max_send_wr: u32,
        /// Receive work requests outstanding at most.
        max_recv_wr: u32,
        /// Inline bytes per send work request at most.
        max_inline: u32,
    },
    /// ibv_modify_qp.
    ModifyQp {
        /// The QP.
        qpn: u32,
        /// IBV_QP_* attribute mask.
        mask: u32,
        /// The attributes.
        attrs: QpAttrs,
    },
    /// ibv_query_qp: [`VerbsReply::QpAttrs`].
    QueryQp {
        /// The QP.
        qpn: u32,
    },
    /// ibv_destroy_qp: outstanding work is flushed (completions with IBV_WC_WR_FLUSH_ERR).
    DestroyQp {
        /// The QP.
        qpn: u32,
    },
    /// ibv_create_cq in pipe mode (docs/verbs.md "Notification pipes"): no verbs queue; its
    /// completions come through the completion pipes of its QPs' contexts, and its arm word
    /// is pipe arm slot `queue` of [`VerbsReply::Cq`]. Descriptor as [`VerbsRequest::CreateCq`].
    CreatePipeCq {
        /// Entries wanted (at least).
        cqe: u32,
        /// What the engine writes on an event.
        token: u64,
    },
    /// ibv_create_qp in pipe mode: the QP's work requests come through context `context`'s
    /// work-request pipe of the engine core it is placed on (the least loaded), its
    /// completions through that core's completion pipe. Both CQs must be pipe-mode ones.
    /// [`VerbsReply::PipeQp`].
    CreatePipeQp {
        /// The domain.
        pd: u32,
        /// Send completion queue.
        send_cq: u32,
        /// Receive completion queue.
        recv_cq: u32,
        /// Send work requests outstanding at most.
        max_send_wr: u32,
        /// Receive work requests outstanding at most.
        max_recv_wr: u32,
        /// Inline bytes per send work request at most.
        max_inline: u32,
        /// The application context whose pipes it uses.
        context: u32,
    },
}

fn one() -> u64 {
    1
}

/// The engine's answer to a [`VerbsRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VerbsReply {
    /// The device.
    Device(DeviceInfo),
    /// A protection domain.
    Pd {
        /// Its handle.
        pd: u32,
    },
    /// A memory region: its key serves as lkey and rkey.
    Mr {
        /// The key.
        key: u32,
    },
    /// A completion queue: verbs queue `queue` of the region, produced by the engine.
    Cq {
        /// Its handle.
        cq: u32,
        /// Its verbs queue.
        queue: u32,
        /// Completions it holds (ibv_cq's `cqe`).
        cqe: u32,
    },
    /// A queue pair: its send and receive queues are verbs queues of the region.
    Qp {
        /// Its number.
        qpn: u32,
        /// The send queue's verbs queue.
        sq: u32,
        /// The receive queue's verbs queue.
        rq: u32,
        /// Send work requests it holds.
        max_send_wr: u32,
        /// Receive work requests it holds.
        max_recv_wr: u32,
        /// Inline bytes it takes per send work request.
        max_inline: u32,
    },
    /// A pipe-mode queue pair: its work requests go in `context`'s work-request pipe for
    /// engine core `core`.
    PipeQp {
        /// Its number.
        qpn: u32,
        /// The engine core it was placed on.
        core: u32,
        /// Send work requests it holds.
        max_send_wr: u32,
        /// Receive work requests it holds.
        max_recv_wr: u32,
        /// Inline bytes it takes per send work request.
        max_inline: u32,
    },
    /// A QP's attributes and state.
    QpAttrs(QpAttrs),
    /// Done (dealloc, dereg, destroy, modify).
    Done,
    /// Refused with a Linux errno (EINVAL, ENOMEM, EBUSY, ENOENT, EAGAIN, EPERM, ...).
    Failed {
        /// The errno.
        errno: i32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_survive_json() {
        let r = VerbsRequest::ModifyQp {
            qpn: 0x11,
            mask: 0x1 | 0x80,
            attrs: QpAttrs {
                qp_state: 3,
                dest_ip: Some(Ipv4Addr::new(10, 0, 0, 2)),
                ..QpAttrs::default()
            },
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<VerbsRequest>(&s).unwrap(), r);
        let q = VerbsReply::Qp {
            qpn: 0x11,
            sq: 0,
            rq: 1,
            max_send_wr: 128,
            max_recv_wr: 512,
            max_inline: 220,
        };
        let s = serde_json::to_string(&q).unwrap();
        assert_eq!(serde_json::from_str::<VerbsReply>(&s).unwrap(), q);
    }
}
