//! The core's side of tracing: its [`Tracer`], and recording an event with the connection's
//! addresses looked up only once the tracepoint is known to be on.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::{TraceData, Tracepoint, Tracer};
use crate::control::state::{ConnControl, TcpState};
use crate::host::Stack;
use crate::time::Instant;

impl Stack {
    /// The core's tracepoints: which are on, their hits, the events waiting.
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// The core's tracepoints, to turn them on or off and read events
    /// (`stack.tracer_mut().enable_all()`, `set_by_name`, `drain`).
    pub fn tracer_mut(&mut self) -> &mut Tracer {
        &mut self.tracer
    }

    /// Records `data` for connection `slot` (if any).
    pub(crate) fn trace_record(&mut self, slot: Option<u32>, data: TraceData) {
        conn_event(
            &mut self.tracer,
            (self.now, self.cfg.ip, &self.conns),
            slot,
            data,
        );
    }

    /// Reports the occupancy of the queues between the RX and TX workflows (the ready
    /// queue, the control queue) after a receive.
    #[inline]
    pub(crate) fn trace_queues(&mut self) {
        if self.tracer.is_on(Tracepoint::Queue) {
            let (len, cap) = self.dp.ready.occupancy();
            let (len, cap) = (len as u32, cap as u32);
            self.trace_record(
                None,
                TraceData::Queue {
                    queue: "ready",
                    len,
                    cap,
                },
            );
            let (len, cap) = (self.out.len() as u32, self.out.capacity() as u32);
            self.trace_record(
                None,
                TraceData::Queue {
                    queue: "control",
                    len,
                    cap,
                },
            );
        }
    }

    /// Sets connection `slot`'s RFC 9293 state, reporting the change to
    /// [`super::Tracepoint::State`].
    #[inline]
    pub(crate) fn set_state(&mut self, slot: usize, to: TcpState) {
        let from = self.conns[slot].state;
        self.conns[slot].state = to;
        if from != to {
            tracepoint! { self, Some(slot as u32), State { from: from.rfc_name(), to: to.rfc_name() } }
        }
    }
}

/// Records `data` with connection `slot`'s addresses (from the control plane's rows at
/// `now`); called by `tracepoint!` after its bit test, so it is kept out of line.
#[cold]
#[inline(never)]
pub(crate) fn conn_event(
    tracer: &mut Tracer,
    (now, ip, conns): (Instant, Ipv4Addr, &[ConnControl]),
    slot: Option<u32>,
    data: TraceData,
) {
    let conn = slot.and_then(|s| conns.get(s as usize)).map(|c| {
        (
            SocketAddrV4::new(ip, c.tuple.local_port),
            SocketAddrV4::new(c.tuple.remote_ip, c.tuple.remote_port),
        )
    });
    tracer.record(now, conn, data);
}

/// Records an event if its tracepoint is on: `tracepoint!(stack, slot, Variant { fields })`
/// with `slot` an `Option<u32>` naming the connection. Off, it is one bit test; the fields
/// are evaluated only when on.
macro_rules! tracepoint {
    ($stack:expr, $slot:expr, $tp:ident $($fields:tt)*) => {
        if $stack.tracer.is_on($crate::trace::Tracepoint::$tp) {
            // Field by field, so that a caller holding another field of the core may trace.
            $crate::trace::record::conn_event(
                &mut $stack.tracer,
                ($stack.now, $stack.cfg.ip, &$stack.conns),
                $slot,
                $crate::trace::TraceData::$tp $($fields)*,
            );
        }
    };
}
pub(crate) use tracepoint;
