//! The properties every case checks: after every step, the core's own invariants and bounds;
//! at the end, liveness of untouched flows and that no connection slot leaks. (The stream
//! checks, which run on every byte an application reads, are in [`crate::flows`].)

use sluice_tcp::{Instant, Stack, TcpState};

use crate::case::Case;
use crate::net::Side;

/// The core's internal invariants and the connection-table bound.
pub fn check_stack(s: &Stack, side: Side) -> Result<(), String> {
    s.check_invariants().map_err(|e| format!("{side:?}: {e}"))?;
    let max = s.config().max_connections;
    if s.connection_count() > max {
        return Err(format!(
            "{side:?}: {} connections > max_connections {max}",
            s.connection_count()
        ));
    }
    Ok(())
}

/// A frame `from` emitted fits its own MTU; if it carries data on a flow that no forged
/// segment touched, its TCP header, options and data also fit the peer's MSS plus the fixed
/// TCP header (RFC 9293 3.7.1, MUST-16: the effective send MSS is net of option bytes;
/// RFC 6691). The peer's MSS is what the peer's stack announces. (A forged SYN may announce
/// anything, so forged flows only get the MTU check.)
pub fn frame_size(
    stacks: &[Stack; 2],
    flows: &crate::flows::Flows,
    from: Side,
    frame: &[u8],
) -> Result<(), String> {
    let own = &stacks[from.index()].config();
    let peer_mss = usize::from(stacks[from.other().index()].config().local_mss());
    let seg = crate::frames::parse_tcp(frame, from.other().ip(), true);
    let describe = || match &seg {
        Some(s) => format!(
            "TCP {}->{} flags {:#04x}, {} option bytes {:?}, {} data bytes",
            s.tcp.src_port,
            s.tcp.dst_port,
            s.tcp.flags.0,
            frame.len() - crate::frames::ETH_LEN - 40 - s.payload.len(),
            s.tcp.options,
            s.payload.len()
        ),
        None => "not TCP".into(),
    };
    if frame.len() > usize::from(own.mtu) + crate::frames::ETH_LEN {
        return Err(format!(
            "{from:?}: emitted a {}-byte frame, MTU {} ({})",
            frame.len(),
            own.mtu,
            describe()
        ));
    }
    let Some(s) = &seg else {
        return Ok(());
    };
    let clean_flow = flows
        .find(from, s.tcp.src_port, s.tcp.dst_port)
        .is_some_and(|i| !flows.list[i].forged);
    let tcp_len = frame.len() - crate::frames::ETH_LEN - 20;
    if clean_flow && !s.payload.is_empty() && tcp_len > peer_mss + 20 {
        return Err(format!(
            "{from:?}: {tcp_len}-byte segment exceeds the peer's MSS {peer_mss} + 20 ({})",
            describe()
        ));
    }
    Ok(())
}

/// After `handle_timeout(now)` nothing may be due at `now` any more; otherwise a host that
/// sleeps until `poll_timeout` would spin.
pub fn timers_done(s: &Stack, side: Side, now: Instant) -> Result<(), String> {
    match s.poll_timeout() {
        Some(t) if t <= now => Err(format!(
            "{side:?}: poll_timeout {t:?} still due after handle_timeout({now:?})"
        )),
        _ => Ok(()),
    }
}

/// Takes every pending event. The event queue holds at most one entry per connection slot
/// and per listener, so a drain that yields more never ends.
pub fn drain_events(s: &mut Stack, side: Side) -> Result<(), String> {
    let bound = s.config().max_connections + s.config().max_listeners + 1;
    for _ in 0..=bound {
        if s.poll_event().is_none() {
            return Ok(());
        }
    }
    Err(format!(
        "{side:?}: poll_event yielded more than {bound} events"
    ))
}

impl Case {
    /// Maps new handles and checks both stacks, and that every handle the application holds
    /// is still honored.
    pub(crate) fn after_step(&mut self) -> Result<(), String> {
        self.map_handles();
        for side in Side::BOTH {
            check_stack(&self.stacks[side.index()], side)?;
        }
        for h in &self.handles {
            if !h.released && self.stacks[h.side.index()].state(h.id).is_err() {
                return Err(format!(
                    "{:?}: handle of slot {} went stale while the application held it",
                    h.side,
                    h.id.slot()
                ));
            }
        }
        Ok(())
    }
}

/// After healing, every flow nobody tampered with has delivered all its data, and the end of
/// stream if the sender closed. Flows that failed (reset, timed out) are exempt: loss and
/// time jumps may legitimately exhaust the user timeout.
pub fn liveness(case: &mut Case) -> Result<(), String> {
    for (fi, f) in case.flows.list.iter().enumerate() {
        let (Some(ch), Some(sh)) = (f.client_handle, f.server_handle) else {
            continue;
        };
        if f.forged {
            continue;
        }
        let ends = [&case.handles[ch], &case.handles[sh]];
        let healthy = ends.iter().all(|h| {
            let s = &case.stacks[h.side.index()];
            !h.released && matches!(s.error(h.id), Ok(None))
        });
        if !healthy {
            continue;
        }
        let describe = || {
            let states: Vec<_> = ends
                .iter()
                .map(|h| case.stacks[h.side.index()].state(h.id).ok())
                .collect();
            let infos: Vec<_> = ends
                .iter()
                .map(|h| case.stacks[h.side.index()].info(h.id).ok())
                .collect();
            format!("client/server states {states:?}; infos {infos:?}")
        };
        for (d, dir) in f.dirs.iter().enumerate() {
            if dir.data_tainted {
                continue;
            }
            if dir.read != dir.written {
                return Err(format!(
                    "liveness: flow {fi} ({}:{}) direction {d}: {} of {} bytes delivered after \
                     healing; {}",
                    f.client_port,
                    f.server_port,
                    dir.read,
                    dir.written,
                    describe()
                ));
            }
            if dir.shut && !dir.fin_tainted && !dir.eof {
                return Err(format!(
                    "liveness: flow {fi} ({}:{}) direction {d}: sender closed but no end of \
                     stream after healing; {}",
                    f.client_port,
                    f.server_port,
                    describe()
                ));
            }
        }
        case.stats.live_flows += 1;
    }
    Ok(())
}

/// Once the applications closed everything and time passed, both tables are empty: every
/// path out of every state frees its slot.
pub fn no_leaks(case: &Case) -> Result<(), String> {
    for side in Side::BOTH {
        let s = &case.stacks[side.index()];
        if s.connection_count() != 0 {
            let pending = s.poll_timeout();
            return Err(format!(
                "{side:?}: {} connection slot(s) still in use after every handle and listener \
                 was released and the network was quiet until {:?} (next timer {pending:?})",
                s.connection_count(),
                case.now
            ));
        }
    }
    Ok(())
}

/// States in which the peer's FIN has been consumed.
pub fn fin_received(state: TcpState) -> bool {
    matches!(
        state,
        TcpState::CloseWait | TcpState::LastAck | TcpState::Closing | TcpState::TimeWait
    )
}
