//! A request packet cut from a send work request (IBA 9.7.7.1): the opcode of its place in
//! the message, the RETH on a WRITE's first packet or a READ request, ImmDt on the last,
//! AckReq at the end and every [`ACK_EVERY`] packets, the payload read from local memory.
//!
//! Where the payload is read to is the caller's [`PayloadDst`]: a staging buffer, or the
//! device's frame right after the headers (header-only TX, flexins.txt 3.2: the engine
//! writes headers and the payload goes from the application's memory into the frame once).

use super::payload::PayloadDst;
use super::wr::{SendOp, SendWr};
use super::{Ctx, Memory, QpConfig};
use crate::verbs::{Access, WcStatus};
use crate::wire::{ImmDt, Opcode, Psn, RethRepr, RoceRepr};

/// Ask for an ACK at least every this many packets of a long message.
pub(super) const ACK_EVERY: u32 = 16;

/// Packet `k` of the `npkts` of work request `wr` (PSN `psn`; a READ: the request for
/// what has not come yet, from response `k` on): headers, and its payload read into
/// `dst`. Err: the status the QP fails with (a local buffer its key does not allow).
pub(super) fn request_packet<M: Memory>(
    wr: &SendWr,
    npkts: u32,
    k: u32,
    psn: Psn,
    cfg: &QpConfig,
    ctx: &mut Ctx<'_, M>,
    dst: &mut PayloadDst<'_>,
) -> Result<(RoceRepr, usize), WcStatus> {
    let total = wr.sge.len;
    if let SendOp::Offload { opcode, resp } = wr.op {
        return super::offload::request_packet(wr, opcode, resp, psn, cfg, ctx, dst);
    }
    let mut bth = super::bth(Opcode::SendOnly, cfg.dest_qpn, psn);
    if let SendOp::Read { remote } = wr.op {
        // The request for what has not come yet.
        let got = k * cfg.mtu;
        bth.opcode = Opcode::ReadRequest;
        bth.ack_req = true;
        let reth = RethRepr {
            va: remote.addr + u64::from(got),
            rkey: remote.rkey.0,
            dma_len: total - got.min(total),
        };
        return Ok((
            RoceRepr {
                bth,
                reth: Some(reth),
                aeth: None,
                immdt: None,
            },
            0,
        ));
    }
    let off = k * cfg.mtu;
    let len = (total - off).min(cfg.mtu);
    let (first, last) = (k == 0, k + 1 == npkts);
    let imm = match wr.op {
        SendOp::Send { imm } | SendOp::Write { imm, .. } => imm,
        SendOp::Read { .. } | SendOp::Offload { .. } => None,
    };
    use Opcode::*;
    bth.opcode = match (wr.op, first, last, imm.is_some()) {
        (SendOp::Send { .. }, true, true, false) => SendOnly,
        (SendOp::Send { .. }, true, true, true) => SendOnlyImm,
        (SendOp::Send { .. }, true, false, _) => SendFirst,
        (SendOp::Send { .. }, false, false, _) => SendMiddle,
        (SendOp::Send { .. }, false, true, false) => SendLast,
        (SendOp::Send { .. }, false, true, true) => SendLastImm,
        (_, true, true, false) => WriteOnly,
        (_, true, true, true) => WriteOnlyImm,
        (_, true, false, _) => WriteFirst,
        (_, false, false, _) => WriteMiddle,
        (_, false, true, false) => WriteLast,
        (_, false, true, true) => WriteLastImm,
    };
    bth.solicited = last && wr.solicited;
    bth.ack_req = last || (k + 1).is_multiple_of(ACK_EVERY);
    let reth = match wr.op {
        SendOp::Write { remote, .. } if first => Some(RethRepr {
            va: remote.addr,
            rkey: remote.rkey.0,
            dma_len: total,
        }),
        _ => None,
    };
    let immdt = imm.filter(|_| last).map(ImmDt);
    let repr = RoceRepr {
        bth,
        reth,
        aeth: None,
        immdt,
    };
    let sge = wr.sge;
    let out = dst.slot(&repr, len as usize).ok_or(WcStatus::GeneralErr)?;
    if len > 0 {
        let at = ctx
            .mrs
            .check(
                sge.lkey,
                cfg.pd,
                sge.addr + u64::from(off),
                u64::from(len),
                Access::empty(),
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        if !ctx.mem.read(at.backing, at.offset, out) {
            return Err(WcStatus::LocProtErr);
        }
    }
    Ok((repr, len as usize))
}
