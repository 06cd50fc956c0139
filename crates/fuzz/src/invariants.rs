//! The properties every case checks, as methods of the [`Case`]: after every step, the core's
//! own invariants and bounds; at the end, liveness of untouched flows and that no connection
//! slot leaks. (The stream checks, which run on every byte an application reads, are in
//! [`crate::flows`].) The stack-level checks the applications also run are free functions.

use sluice_tcp::{Stack, TcpState};

use crate::case::Case;
use crate::frames::{parse_tcp, ETH_LEN};
use crate::net::Side;
use crate::violation::Violation;

/// The core's internal invariants and the connection-table bound.
pub fn check_stack(s: &Stack, side: Side) -> Result<(), Violation> {
    s.check_invariants()
        .map_err(|violation| Violation::Core { side, violation })?;
    let max = s.config().max_connections;
    if s.connection_count() > max {
        return Err(Violation::TooManyConnections {
            side,
            count: s.connection_count(),
            max,
        });
    }
    Ok(())
}

/// Takes every pending event. The event queue holds at most one entry per connection slot
/// and per listener, so a drain that yields more never ends.
pub fn drain_events(s: &mut Stack, side: Side) -> Result<(), Violation> {
    let bound = s.config().max_connections + s.config().max_listeners + 1;
    for _ in 0..=bound {
        if s.poll_event().is_none() {
            return Ok(());
        }
    }
    Err(Violation::EndlessEvents { side, bound })
}

/// States in which the peer's FIN has been consumed.
pub fn fin_received(state: TcpState) -> bool {
    matches!(
        state,
        TcpState::CloseWait | TcpState::LastAck | TcpState::Closing | TcpState::TimeWait
    )
}

impl Case {
    /// A frame `from` emitted fits its own MTU; if it carries data on a flow that no forged
    /// segment touched, its TCP header, options and data also fit the peer's MSS plus the
    /// fixed TCP header (RFC 9293 3.7.1, MUST-16: the effective send MSS is net of option
    /// bytes; RFC 6691). The peer's MSS is what the peer's stack announces. (A forged SYN may
    /// announce anything, so forged flows only get the MTU check.)
    pub(crate) fn check_frame_size(&self, from: Side, frame: &[u8]) -> Result<(), Violation> {
        let own = &self.stacks[from.index()].config();
        let peer_mss = usize::from(self.stacks[from.other().index()].config().local_mss());
        let seg = parse_tcp(frame, from.other().ip(), true);
        let describe = || match &seg {
            Some(s) => format!(
                "TCP {}->{} flags {:#04x}, {} option bytes {:?}, {} data bytes",
                s.tcp.src_port,
                s.tcp.dst_port,
                s.tcp.flags.0,
                frame.len() - ETH_LEN - 40 - s.payload.len(),
                s.tcp.options,
                s.payload.len()
            ),
            None => "not TCP".into(),
        };
        if frame.len() > usize::from(own.mtu) + ETH_LEN {
            return Err(Violation::FrameOverMtu {
                side: from,
                len: frame.len(),
                mtu: own.mtu,
                frame: describe(),
            });
        }
        let Some(s) = &seg else {
            return Ok(());
        };
        let clean_flow = self
            .flows
            .find(from, s.tcp.src_port, s.tcp.dst_port)
            .is_some_and(|i| !self.flows.list[i].forged);
        let tcp_len = frame.len() - ETH_LEN - 20;
        if clean_flow && !s.payload.is_empty() && tcp_len > peer_mss + 20 {
            return Err(Violation::SegmentOverMss {
                side: from,
                tcp_len,
                peer_mss,
                frame: describe(),
            });
        }
        Ok(())
    }

    /// After `handle_timeout(now)` nothing may be due at `now` any more; otherwise a host
    /// that sleeps until `poll_timeout` would spin.
    pub(crate) fn check_timers_done(&self, side: Side) -> Result<(), Violation> {
        let now = self.now;
        match self.stacks[side.index()].poll_timeout() {
            Some(t) if t <= now => Err(Violation::TimerStillDue {
                side,
                deadline: t,
                now,
            }),
            _ => Ok(()),
        }
    }

    /// Maps new handles and checks both stacks, and that every handle the application holds
    /// is still honored.
    pub(crate) fn after_step(&mut self) -> Result<(), Violation> {
        self.map_handles();
        for side in Side::BOTH {
            check_stack(&self.stacks[side.index()], side)?;
        }
        for h in &self.handles {
            if !h.released && self.stacks[h.side.index()].state(h.id).is_err() {
                return Err(Violation::StaleHandle {
                    side: h.side,
                    slot: h.id.slot(),
                });
            }
        }
        Ok(())
    }

    /// After healing, every flow nobody tampered with has delivered all its data, and the end
    /// of stream if the sender closed. Flows that failed (reset, timed out) are exempt: loss
    /// and time jumps may legitimately exhaust the user timeout.
    pub(crate) fn check_liveness(&mut self) -> Result<(), Violation> {
        for (fi, f) in self.flows.list.iter().enumerate() {
            let (Some(ch), Some(sh)) = (f.client_handle, f.server_handle) else {
                continue;
            };
            if f.forged {
                continue;
            }
            let ends = [&self.handles[ch], &self.handles[sh]];
            let healthy = ends.iter().all(|h| {
                let s = &self.stacks[h.side.index()];
                !h.released && matches!(s.error(h.id), Ok(None))
            });
            if !healthy {
                continue;
            }
            let describe = || {
                let states: Vec<_> = ends
                    .iter()
                    .map(|h| self.stacks[h.side.index()].state(h.id).ok())
                    .collect();
                let infos: Vec<_> = ends
                    .iter()
                    .map(|h| self.stacks[h.side.index()].info(h.id).ok())
                    .collect();
                format!("client/server states {states:?}; infos {infos:?}")
            };
            for (d, dir) in f.dirs.iter().enumerate() {
                if dir.data_tainted {
                    continue;
                }
                if dir.read != dir.written {
                    return Err(Violation::Undelivered {
                        flow: fi,
                        client_port: f.client_port,
                        server_port: f.server_port,
                        dir: d,
                        read: dir.read,
                        written: dir.written,
                        ends: describe(),
                    });
                }
                if dir.shut && !dir.fin_tainted && !dir.eof {
                    return Err(Violation::NoEndOfStream {
                        flow: fi,
                        client_port: f.client_port,
                        server_port: f.server_port,
                        dir: d,
                        ends: describe(),
                    });
                }
            }
            self.stats.live_flows += 1;
        }
        Ok(())
    }

    /// Once the applications closed everything and time passed, both tables are empty: every
    /// path out of every state frees its slot.
    pub(crate) fn check_no_leaks(&self) -> Result<(), Violation> {
        for side in Side::BOTH {
            let s = &self.stacks[side.index()];
            if s.connection_count() != 0 {
                return Err(Violation::Leak {
                    side,
                    count: s.connection_count(),
                    quiet_until: self.now,
                    next_timer: s.poll_timeout(),
                });
            }
        }
        Ok(())
    }
}
