//! A QP's context for one call, built from the stack's tables.

use crate::qp::{Cqs, Ctx, Memory, Nanos};
use crate::verbs::{CompletionQueue, MrTable};

/// A QP's context for one call: the regions, its two completion queues (which may be
/// one), the memory and the time; None if a queue is gone.
pub(super) fn qp_ctx<'a, M: Memory>(
    mrs: &'a MrTable,
    cqs: &'a mut [Option<CompletionQueue>],
    send: u32,
    recv: u32,
    mem: &'a mut M,
    now: Nanos,
) -> Option<Ctx<'a, M>> {
    Some(Ctx {
        mrs,
        mem,
        cqs: cq_pair(cqs, send, recv)?,
        now,
    })
}

/// The two completion queues of a QP, which may be one.
fn cq_pair(cqs: &mut [Option<CompletionQueue>], send: u32, recv: u32) -> Option<Cqs<'_>> {
    let (s, r) = (send as usize, recv as usize);
    if s == r {
        return cqs.get_mut(s)?.as_mut().map(Cqs::Same);
    }
    let (lo, hi) = (s.min(r), s.max(r));
    let (a, b) = cqs.split_at_mut(hi);
    let (lo_q, hi_q) = (a.get_mut(lo)?.as_mut()?, b.first_mut()?.as_mut()?);
    Some(if s < r {
        Cqs::Split {
            send: lo_q,
            recv: hi_q,
        }
    } else {
        Cqs::Split {
            send: hi_q,
            recv: lo_q,
        }
    })
}
