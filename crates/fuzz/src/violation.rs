//! What a case reports when a check fails: a [`Violation`], and the [`Failure`] that adds the
//! seed and step that replay it. Displayed as the campaign prints it
//! (`seed S step K: ...`).

use std::fmt;
use std::net::Ipv4Addr;

use sluice_tcp::{Instant, InvariantViolation};

use crate::flows::StreamViolation;
use crate::net::Side;

/// An invariant violation, with the step it was found at.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The case's seed (replays it).
    pub seed: u64,
    /// The step during which the violation was found (steps past the fuzz loop are the
    /// healing and teardown phases; `usize::MAX` for a panic).
    pub step: usize,
    /// What went wrong.
    pub kind: Violation,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {} step {}: {}", self.seed, self.step, self.kind)
    }
}

/// A check that failed, with what it saw.
#[derive(Clone, Debug)]
pub enum Violation {
    /// The core's own invariant check (`Stack::check_invariants`) failed.
    Core {
        /// The stack.
        side: Side,
        /// The first invariant it found broken.
        violation: InvariantViolation,
    },
    /// More connections than the configured bound.
    TooManyConnections {
        /// The stack.
        side: Side,
        /// Connections in use.
        count: usize,
        /// `max_connections`.
        max: usize,
    },
    /// An emitted frame exceeds its stack's MTU.
    FrameOverMtu {
        /// The sender.
        side: Side,
        /// The frame's length.
        len: usize,
        /// The sender's MTU.
        mtu: u16,
        /// The frame, described.
        frame: String,
    },
    /// A data segment of a clean flow exceeds the peer's MSS plus the fixed TCP header.
    SegmentOverMss {
        /// The sender.
        side: Side,
        /// TCP header, options and data.
        tcp_len: usize,
        /// The MSS the peer announces.
        peer_mss: usize,
        /// The frame, described.
        frame: String,
    },
    /// `poll_timeout` is still due right after `handle_timeout`.
    TimerStillDue {
        /// The stack.
        side: Side,
        /// What `poll_timeout` returned.
        deadline: Instant,
        /// The time given to `handle_timeout`.
        now: Instant,
    },
    /// `poll_event` yielded more events than the queue can hold.
    EndlessEvents {
        /// The stack.
        side: Side,
        /// Most events a drain may yield.
        bound: usize,
    },
    /// `poll_transmit` reported more bytes than the buffer holds.
    TransmitOverBuffer {
        /// The stack.
        side: Side,
        /// The length it returned.
        len: usize,
    },
    /// `poll_transmit` went on yielding frames past the drain bound.
    EndlessTransmit {
        /// The stack.
        side: Side,
        /// Most frames a drain may yield.
        bound: usize,
    },
    /// `poll_transmit` wrote a frame into a buffer too small for any frame.
    SmallBufferUsed {
        /// The stack.
        side: Side,
        /// The buffer's length.
        len: usize,
    },
    /// A handle the application still holds went stale.
    StaleHandle {
        /// The stack.
        side: Side,
        /// The handle's slot.
        slot: u32,
    },
    /// A call on a released handle was not refused.
    ReleasedNotRefused {
        /// The stack.
        side: Side,
        /// The call.
        call: &'static str,
        /// The handle's slot.
        slot: u32,
    },
    /// A call refused a live handle as invalid.
    LiveRefused {
        /// The stack.
        side: Side,
        /// The call.
        call: &'static str,
        /// The handle's slot.
        slot: u32,
    },
    /// `listen` refused a non-zero port as an invalid argument.
    ListenRefused {
        /// The stack.
        side: Side,
        /// The port.
        port: u16,
    },
    /// `connect` accepted a destination it must refuse.
    BadConnectAccepted {
        /// The stack.
        side: Side,
        /// The destination address.
        ip: Ipv4Addr,
        /// The destination port.
        port: u16,
    },
    /// `accept` returned a handle the application already holds.
    AcceptedHeldHandle {
        /// The stack.
        side: Side,
    },
    /// `send` took more bytes than it was given.
    SendOverLen {
        /// The stack.
        side: Side,
        /// Bytes it took.
        taken: usize,
        /// Bytes it was given.
        len: usize,
    },
    /// `recv` returned more bytes than the buffer holds.
    RecvOverLen {
        /// The stack.
        side: Side,
        /// Bytes it returned.
        got: usize,
        /// The buffer's length.
        len: usize,
    },
    /// `peek` and `info` disagree on what is readable.
    PeekDisagrees {
        /// The stack.
        side: Side,
        /// Bytes `peek` showed.
        peeked: usize,
        /// `info().readable`.
        readable: usize,
    },
    /// Releasing every listener: `unlisten` failed.
    UnlistenFailed {
        /// The stack.
        side: Side,
        /// The listener's port.
        port: u16,
        /// What `unlisten` returned.
        outcome: String,
    },
    /// `unlisten` of a live listener failed.
    UnlistenLiveFailed {
        /// The stack.
        side: Side,
    },
    /// Bytes an application read are not what the peer wrote.
    Stream(StreamViolation),
    /// After healing, a clean flow did not deliver all its data.
    Undelivered {
        /// The flow's index.
        flow: usize,
        /// The client's port.
        client_port: u16,
        /// The server's port.
        server_port: u16,
        /// The direction ([`crate::flows::C2S`] or [`crate::flows::S2C`]).
        dir: usize,
        /// Bytes delivered.
        read: u64,
        /// Bytes written.
        written: u64,
        /// Both ends' states and infos.
        ends: String,
    },
    /// After healing, a clean flow whose sender closed gave no end of stream.
    NoEndOfStream {
        /// The flow's index.
        flow: usize,
        /// The client's port.
        client_port: u16,
        /// The server's port.
        server_port: u16,
        /// The direction.
        dir: usize,
        /// Both ends' states and infos.
        ends: String,
    },
    /// Connection slots still in use after everything was released and time passed.
    Leak {
        /// The stack.
        side: Side,
        /// Slots in use.
        count: usize,
        /// The time the network was quiet until.
        quiet_until: Instant,
        /// The stack's next timer.
        next_timer: Option<Instant>,
    },
    /// A panic, in the core or in the harness.
    Panic(String),
}

impl From<StreamViolation> for Violation {
    fn from(v: StreamViolation) -> Self {
        Violation::Stream(v)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Core { side, violation } => write!(f, "{side:?}: {violation}"),
            Violation::TooManyConnections { side, count, max } => {
                write!(f, "{side:?}: {count} connections > max_connections {max}")
            }
            Violation::FrameOverMtu {
                side,
                len,
                mtu,
                frame,
            } => write!(
                f,
                "{side:?}: emitted a {len}-byte frame, MTU {mtu} ({frame})"
            ),
            Violation::SegmentOverMss {
                side,
                tcp_len,
                peer_mss,
                frame,
            } => write!(
                f,
                "{side:?}: {tcp_len}-byte segment exceeds the peer's MSS {peer_mss} + 20 ({frame})"
            ),
            Violation::TimerStillDue {
                side,
                deadline,
                now,
            } => write!(
                f,
                "{side:?}: poll_timeout {deadline:?} still due after handle_timeout({now:?})"
            ),
            Violation::EndlessEvents { side, bound } => {
                write!(f, "{side:?}: poll_event yielded more than {bound} events")
            }
            Violation::TransmitOverBuffer { side, len } => {
                write!(f, "{side:?}: poll_transmit returned length {len} > buffer")
            }
            Violation::EndlessTransmit { side, bound } => write!(
                f,
                "{side:?}: poll_transmit yielded more than {bound} frames without draining"
            ),
            Violation::SmallBufferUsed { side, len } => {
                write!(f, "{side:?}: poll_transmit used a {len}-byte buffer")
            }
            Violation::StaleHandle { side, slot } => write!(
                f,
                "{side:?}: handle of slot {slot} went stale while the application held it"
            ),
            Violation::ReleasedNotRefused { side, call, slot } => write!(
                f,
                "{side:?}: {call} on a released handle (slot {slot}) was not refused"
            ),
            Violation::LiveRefused { side, call, slot } => write!(
                f,
                "{side:?}: {call} refused a live handle (slot {slot}) the application never \
                 released"
            ),
            Violation::ListenRefused { side, port } => {
                write!(f, "{side:?}: listen({port}) refused as invalid")
            }
            Violation::BadConnectAccepted { side, ip, port } => {
                write!(f, "{side:?}: connect({ip}:{port}) was accepted")
            }
            Violation::AcceptedHeldHandle { side } => {
                write!(f, "{side:?}: accept returned a handle already held")
            }
            Violation::SendOverLen { side, taken, len } => {
                write!(f, "{side:?}: send took {taken} of {len} bytes")
            }
            Violation::RecvOverLen { side, got, len } => {
                write!(f, "{side:?}: recv returned {got} > {len}")
            }
            Violation::PeekDisagrees {
                side,
                peeked,
                readable,
            } => write!(
                f,
                "{side:?}: peek shows {peeked} bytes, info says {readable} readable"
            ),
            Violation::UnlistenFailed {
                side,
                port,
                outcome,
            } => write!(f, "{side:?}: unlisten({port}) failed: {outcome}"),
            Violation::UnlistenLiveFailed { side } => {
                write!(f, "{side:?}: unlisten of a live listener failed")
            }
            Violation::Stream(v) => write!(f, "{v}"),
            Violation::Undelivered {
                flow,
                client_port,
                server_port,
                dir,
                read,
                written,
                ends,
            } => write!(
                f,
                "liveness: flow {flow} ({client_port}:{server_port}) direction {dir}: {read} of \
                 {written} bytes delivered after healing; {ends}"
            ),
            Violation::NoEndOfStream {
                flow,
                client_port,
                server_port,
                dir,
                ends,
            } => write!(
                f,
                "liveness: flow {flow} ({client_port}:{server_port}) direction {dir}: sender \
                 closed but no end of stream after healing; {ends}"
            ),
            Violation::Leak {
                side,
                count,
                quiet_until,
                next_timer,
            } => write!(
                f,
                "{side:?}: {count} connection slot(s) still in use after every handle and \
                 listener was released and the network was quiet until {quiet_until:?} (next \
                 timer {next_timer:?})"
            ),
            Violation::Panic(msg) => write!(f, "panic: {msg}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::{StreamAt, C2S, S2C};
    use sluice_tcp::WheelViolation;

    /// The campaign's report lines are read by people and scripts: the wording is kept.
    #[test]
    fn violations_print_as_the_campaign_always_printed_them() {
        let at = StreamAt {
            client_port: 40000,
            server_port: 80,
            client: Side::A,
            dir: S2C,
        };
        let leak = format!(
            "A: 1 connection slot(s) still in use after every handle and listener was \
             released and the network was quiet until {:?} (next timer None)",
            Instant::from_millis(5)
        );
        let cases: Vec<(Violation, &str)> = vec![
            (
                Violation::LiveRefused {
                    side: Side::B,
                    call: "recv",
                    slot: 3,
                },
                "B: recv refused a live handle (slot 3) the application never released",
            ),
            (
                Violation::Stream(StreamViolation::WrongByte {
                    at,
                    offset: 12,
                    got: 0xab,
                    written: 7,
                    read_len: 100,
                    read_from: 10,
                }),
                "flow 40000:80 (A client) server->client: delivered byte at stream offset 12 \
                 is 0xab, written 0x07 (read of 100 bytes from offset 10)",
            ),
            (
                Violation::Stream(StreamViolation::EarlyEof {
                    at: StreamAt { dir: C2S, ..at },
                    read: 5,
                    written: 9,
                }),
                "flow 40000:80 (A client) client->server: end of stream after 5 of 9 bytes",
            ),
            (
                Violation::NoEndOfStream {
                    flow: 2,
                    client_port: 40000,
                    server_port: 80,
                    dir: 1,
                    ends: "client/server states []; infos []".into(),
                },
                "liveness: flow 2 (40000:80) direction 1: sender closed but no end of stream \
                 after healing; client/server states []; infos []",
            ),
            (
                Violation::Leak {
                    side: Side::A,
                    count: 1,
                    quiet_until: Instant::from_millis(5),
                    next_timer: None,
                },
                &leak,
            ),
            (
                Violation::Core {
                    side: Side::A,
                    violation: InvariantViolation::TooManyIntervals {
                        slot: 2,
                        count: 9,
                        bound: 8,
                    },
                },
                "A: slot 2: 9 intervals > bound",
            ),
            (
                Violation::Core {
                    side: Side::B,
                    violation: WheelViolation::CountDisagrees { queued: 2, len: 1 }.into(),
                },
                "B: wheel: 2 queued, len says 1",
            ),
            (Violation::Panic("boom".into()), "panic: boom"),
        ];
        for (v, want) in cases {
            assert_eq!(v.to_string(), want);
        }
        let f = Failure {
            seed: 7,
            step: 3,
            kind: Violation::EndlessEvents {
                side: Side::B,
                bound: 9,
            },
        };
        assert_eq!(
            f.to_string(),
            "seed 7 step 3: B: poll_event yielded more than 9 events"
        );
    }
}
