//! The C structs of the "RDMA verbs" section of include/sluice.h, as `#[repr(C)]` mirrors,
//! the opaque handles, and how a C work request or QP attribute set becomes a typed one.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Mutex;

use crate::verbs::{
    send_flags, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpAttrs, QueuePair,
    SendData, SendOp, SendWr, Sge, VerbsError,
};

/// A null pointer where one is required.
pub(crate) const NULL: VerbsError = VerbsError::Invalid("null pointer");

/// `struct sluice_rdma_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmaDeviceAttr {
    /// The engine's address, network order.
    pub ipv4: u32,
    /// The engine's MAC.
    pub mac: [u8; 6],
    /// IBV_MTU_*.
    pub active_mtu: u8,
    /// Zero.
    pub reserved: u8,
    /// max_qp.
    pub max_qp: u32,
    /// max_qp_wr.
    pub max_qp_wr: u32,
    /// max_cq.
    pub max_cq: u32,
    /// max_cqe.
    pub max_cqe: u32,
    /// max_mr.
    pub max_mr: u32,
    /// max_sge.
    pub max_sge: u32,
    /// max_mr_size.
    pub max_mr_size: u64,
    /// max_inline_data.
    pub max_inline: u32,
    /// max_qp_rd_atom.
    pub max_qp_rd_atom: u32,
}

/// `struct sluice_rdma_qp_init`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaQpInit {
    /// The protection domain.
    pub pd: u32,
    /// max_send_wr.
    pub max_send_wr: u32,
    /// max_recv_wr.
    pub max_recv_wr: u32,
    /// max_inline.
    pub max_inline: u32,
    /// The send CQ.
    pub send_cq: *mut SluiceRdmaCq,
    /// The receive CQ.
    pub recv_cq: *mut SluiceRdmaCq,
}

/// `struct sluice_rdma_qp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmaQpCaps {
    /// The QP's number.
    pub qpn: u32,
    /// max_send_wr held.
    pub max_send_wr: u32,
    /// max_recv_wr held.
    pub max_recv_wr: u32,
    /// max_inline taken.
    pub max_inline: u32,
}

/// `struct sluice_rdma_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmaQpAttr {
    /// IBV_QPS_*.
    pub qp_state: u32,
    /// cur_qp_state.
    pub cur_qp_state: u32,
    /// qp_access_flags.
    pub access: u32,
    /// dest_qp_num.
    pub dest_qpn: u32,
    /// rq_psn.
    pub rq_psn: u32,
    /// sq_psn.
    pub sq_psn: u32,
    /// The peer's IPv4 address, network order; 0: none.
    pub dest_ipv4: u32,
    /// IBV_MTU_*.
    pub path_mtu: u8,
    /// timeout.
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
    /// Zero.
    pub reserved: u8,
}

/// `struct sluice_rdma_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmaSge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// The region's key.
    pub lkey: u32,
}

/// `struct sluice_rdma_send_wr`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaSendWr {
    /// wr_id.
    pub wr_id: u64,
    /// The SGEs.
    pub sg_list: *const RdmaSge,
    /// How many.
    pub num_sge: i32,
    /// IBV_WR_*.
    pub opcode: u32,
    /// IBV_SEND_*.
    pub send_flags: u32,
    /// Immediate data, network order.
    pub imm_data: u32,
    /// The peer's address.
    pub remote_addr: u64,
    /// The peer's key.
    pub rkey: u32,
    /// SLUICE_RDMA_WR_OFFLOAD: the response buffer's length; zero otherwise.
    pub resp_len: u32,
}

/// `struct sluice_rdma_recv_wr`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaRecvWr {
    /// wr_id.
    pub wr_id: u64,
    /// The SGEs.
    pub sg_list: *const RdmaSge,
    /// How many (at most 1).
    pub num_sge: i32,
    /// Zero.
    pub reserved: u32,
}

/// The opened device as C sees it (opaque `sluice_rdma`): PDs and regions by handle, and
/// the CQs and QPs still alive (destroyed by `sluice_rdma_close`).
pub struct SluiceRdma {
    pub(crate) dev: Device,
    pub(crate) pds: Mutex<HashMap<u32, ProtectionDomain>>,
    pub(crate) mrs: Mutex<HashMap<u32, MemoryRegion>>,
    pub(crate) cqs: Mutex<HashSet<usize>>,
    pub(crate) qps: Mutex<HashSet<usize>>,
}

/// A completion queue as C sees it (opaque `sluice_rdma_cq`).
pub struct SluiceRdmaCq {
    pub(crate) cq: CompletionQueue,
    pub(crate) dev: *const SluiceRdma,
}

/// A queue pair as C sees it (opaque `sluice_rdma_qp`).
pub struct SluiceRdmaQp {
    pub(crate) qp: QueuePair,
    pub(crate) dev: *const SluiceRdma,
}

pub(crate) fn attrs_from_c(a: &RdmaQpAttr) -> QpAttrs {
    QpAttrs {
        qp_state: a.qp_state,
        cur_qp_state: a.cur_qp_state,
        access: a.access,
        path_mtu: a.path_mtu,
        dest_qpn: a.dest_qpn,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        min_rnr_timer: a.min_rnr_timer,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        dest_ip: (a.dest_ipv4 != 0).then(|| Ipv4Addr::from(u32::from_be(a.dest_ipv4))),
    }
}

pub(crate) fn attrs_to_c(a: &QpAttrs) -> RdmaQpAttr {
    RdmaQpAttr {
        qp_state: a.qp_state,
        cur_qp_state: a.cur_qp_state,
        access: a.access,
        dest_qpn: a.dest_qpn,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_ipv4: a.dest_ip.map(|ip| u32::from(ip).to_be()).unwrap_or(0),
        path_mtu: a.path_mtu,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        min_rnr_timer: a.min_rnr_timer,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        reserved: 0,
    }
}

/// The SGEs of a C work request.
///
/// # Safety
/// `sg_list` is null or holds `num_sge` readable entries.
pub(crate) unsafe fn sges<'a>(
    sg_list: *const RdmaSge,
    num_sge: i32,
) -> Result<&'a [RdmaSge], VerbsError> {
    match num_sge {
        0 => Ok(&[]),
        n if n < 0 => Err(VerbsError::Invalid("num_sge")),
        _ if sg_list.is_null() => Err(NULL),
        // SAFETY: the caller's contract.
        n => Ok(unsafe { std::slice::from_raw_parts(sg_list, n as usize) }),
    }
}

pub(crate) fn sge(s: &RdmaSge) -> Sge {
    Sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}

/// A C send work request's operation.
pub(crate) fn send_op(w: &RdmaSendWr) -> Result<SendOp, VerbsError> {
    let (remote_addr, rkey, imm) = (w.remote_addr, w.rkey, w.imm_data);
    Ok(match w.opcode {
        0 => SendOp::Write { remote_addr, rkey },
        1 => SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm,
        },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm { imm },
        4 => SendOp::Read { remote_addr, rkey },
        // SLUICE_RDMA_WR_OFFLOAD: imm_data is the offload opcode (host order); the
        // response buffer is remote_addr/rkey (a local region) of resp_len bytes.
        64 => SendOp::Offload {
            opcode: imm,
            resp: Sge {
                addr: remote_addr,
                length: w.resp_len,
                lkey: rkey,
            },
        },
        _ => return Err(VerbsError::Invalid("opcode")),
    })
}

/// The inline bytes of a C request (empty without IBV_SEND_INLINE).
///
/// # Safety
/// As `sluice_rdma_post_send`'s for this request.
pub(crate) unsafe fn inline_parts<'a>(w: &RdmaSendWr) -> Result<Vec<&'a [u8]>, VerbsError> {
    if w.send_flags & u32::from(send_flags::INLINE) == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's contract.
    let list = unsafe { sges(w.sg_list, w.num_sge) }?;
    let mut total = 0usize;
    let mut parts = Vec::with_capacity(list.len());
    for s in list {
        total += s.length as usize;
        if total > sluice_shm::verbs::MAX_INLINE {
            return Err(VerbsError::Invalid("inline length past max_inline"));
        }
        if s.length > 0 {
            if s.addr == 0 {
                return Err(NULL);
            }
            // SAFETY: the caller's contract: an inline SGE names readable bytes.
            parts.push(unsafe {
                std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
            });
        }
    }
    Ok(parts)
}

/// A C send work request as a typed one (`parts`: its inline bytes).
pub(crate) fn send_wr<'a>(w: &RdmaSendWr, parts: &'a [&'a [u8]]) -> Result<SendWr<'a>, VerbsError> {
    let flags = u8::try_from(w.send_flags).map_err(|_| VerbsError::Invalid("send_flags"))?;
    let data = if flags & send_flags::INLINE != 0 {
        SendData::Inline(parts)
    } else {
        // SAFETY: the caller of post_send vouches for sg_list; inline_parts read it the same.
        match unsafe { sges(w.sg_list, w.num_sge) }? {
            [] => SendData::Empty,
            [s] => SendData::Sge(sge(s)),
            _ => return Err(VerbsError::Invalid("num_sge > 1 without INLINE")),
        }
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op: send_op(w)?,
        flags,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::WorkCompletion;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// `(C struct, Rust type's size, [(field, Rust offset)])` for every struct of the section.
    macro_rules! layouts {
        ($( $c:literal => $t:ty { $($f:ident),* } ),* $(,)?) => {
            vec![$( ($c, size_of::<$t>(), vec![$( (stringify!($f), offset_of!($t, $f)) ),*]) ),*]
        };
    }

    #[test]
    fn the_structs_match_the_header() {
        let layouts = layouts! {
            "sluice_rdma_device_attr" => RdmaDeviceAttr { ipv4, mac, active_mtu, reserved,
                max_qp, max_qp_wr, max_cq, max_cqe, max_mr, max_sge, max_mr_size, max_inline,
                max_qp_rd_atom },
            "sluice_rdma_wc" => WorkCompletion { wr_id, status, opcode, byte_len, imm_data,
                qp_num, src_qp, wc_flags, reserved },
            "sluice_rdma_qp_init" => RdmaQpInit { pd, max_send_wr, max_recv_wr, max_inline,
                send_cq, recv_cq },
            "sluice_rdma_qp_caps" => RdmaQpCaps { qpn, max_send_wr, max_recv_wr, max_inline },
            "sluice_rdma_qp_attr" => RdmaQpAttr { qp_state, cur_qp_state, access, dest_qpn,
                rq_psn, sq_psn, dest_ipv4, path_mtu, timeout, retry_cnt, rnr_retry,
                min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, reserved },
            "sluice_rdma_sge" => RdmaSge { addr, length, lkey },
            "sluice_rdma_send_wr" => RdmaSendWr { wr_id, sg_list, num_sge, opcode, send_flags,
                imm_data, remote_addr, rkey, resp_len },
            "sluice_rdma_recv_wr" => RdmaRecvWr { wr_id, sg_list, num_sge, reserved },
        };
        let mut src = String::from(
            "#include <stddef.h>\n#include <stdio.h>\n#include \"sluice.h\"\nint main(void) {\n",
        );
        let mut want = String::new();
        for (c, size, fields) in &layouts {
            src += &format!("printf(\"{c} %zu\\n\", sizeof(struct {c}));\n");
            want += &format!("{c} {size}\n");
            for (f, off) in fields {
                src += &format!("printf(\"{c}.{f} %zu\\n\", offsetof(struct {c}, {f}));\n");
                want += &format!("{c}.{f} {off}\n");
            }
        }
        src += "return 0;\n}\n";
        let dir = std::env::temp_dir().join(format!("sluice-rdma-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("layout.c");
        let exe = dir.join("layout");
        std::fs::write(&c, src).unwrap();
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = Command::new(cc)
            .args(["-std=c99", "-Wall", "-Werror", "-I", include])
            .arg(&c)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("a C compiler (cc) is needed for this test");
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }

    #[test]
    fn c_work_requests_become_typed_ones() {
        let bytes = *b"hello, inline";
        let s = [
            RdmaSge {
                addr: bytes.as_ptr() as u64,
                length: 5,
                lkey: 0,
            },
            RdmaSge {
                addr: bytes.as_ptr() as u64 + 5,
                length: 8,
                lkey: 0,
            },
        ];
        let w = RdmaSendWr {
            wr_id: 9,
            sg_list: s.as_ptr(),
            num_sge: 2,
            opcode: 3,
            send_flags: u32::from(send_flags::INLINE | send_flags::SIGNALED),
            imm_data: 0x0a0b_0c0d,
            remote_addr: 0,
            rkey: 0,
            resp_len: 0,
        };
        // SAFETY: the SGEs name bytes of `bytes`.
        let parts = unsafe { inline_parts(&w) }.unwrap();
        assert_eq!(parts.concat(), b"hello, inline");
        let t = send_wr(&w, &parts).unwrap();
        assert_eq!(t.op, SendOp::SendWithImm { imm: 0x0a0b_0c0d });
        assert!(matches!(t.data, SendData::Inline(p) if p.len() == 2));
        // Two SGEs without INLINE, or an atomic opcode: refused.
        let w2 = RdmaSendWr { send_flags: 0, ..w };
        assert!(send_wr(&w2, &[]).is_err());
        let w3 = RdmaSendWr {
            opcode: 5,
            num_sge: 1,
            send_flags: 0,
            ..w
        };
        assert!(matches!(
            send_wr(&w3, &[]),
            Err(VerbsError::Invalid("opcode"))
        ));
        let a = RdmaQpAttr {
            qp_state: 2,
            dest_ipv4: u32::from(Ipv4Addr::new(10, 0, 0, 2)).to_be(),
            path_mtu: 3,
            ..RdmaQpAttr::default()
        };
        let t = attrs_from_c(&a);
        assert_eq!(t.dest_ip, Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(attrs_to_c(&t).dest_ipv4, a.dest_ipv4);
        assert_eq!(attrs_from_c(&RdmaQpAttr::default()).dest_ip, None);
    }
}
