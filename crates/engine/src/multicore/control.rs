//! The control plane's messages to a flow group (flextoe.txt 3.2; issue 20: "the control
//! plane's messages to a flow group (new connection, rate, close) travel the same way"): a
//! bounded single-producer/single-consumer ring per group to its protocol role, and one back
//! for the answers. The sender never blocks and nothing grows: a full ring is
//! [`ControlError::Full`], with the message handed back. The protocol role takes a message
//! only when the answer has room, so an answer is never lost either.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use rtrb::{Consumer, Producer, RingBuffer};
use sluice_tcp::{ConnId, ConnectError, Counters, Error, Instant, ListenError, Stack};

use super::doorbell::Doorbell;

/// Messages each direction of a group's control link holds.
pub const CONTROL_SLOTS: usize = 16;

/// A control-plane message to one flow group's protocol role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlMsg {
    /// Active open (a new connection) to `ip:port`; the group's core picks a local port
    /// whose 4-tuple hashes to the group. Answered with [`ControlReply::Connected`].
    Connect {
        /// The caller's tag, returned in the answer.
        tag: u64,
        /// The peer's address.
        ip: Ipv4Addr,
        /// The peer's port.
        port: u16,
    },
    /// Passive open on `port` (every group listens on it: the peer's SYN reaches the group
    /// its 4-tuple hashes to). Answered with [`ControlReply::Listening`].
    Listen {
        /// The caller's tag.
        tag: u64,
        /// The local port.
        port: u16,
        /// Connections waiting to be accepted.
        backlog: usize,
    },
    /// A fixed rate for a connection of the group (`Stack::set_rate`; 0 = the congestion
    /// policy's own). Answered with [`ControlReply::Done`].
    Rate {
        /// The caller's tag.
        tag: u64,
        /// The connection, as a [`ControlReply::Connected`] named it.
        conn: ConnId,
        /// Bits per second.
        bits_per_sec: u64,
    },
    /// Orderly close (FIN after queued data). Answered with [`ControlReply::Done`].
    Close {
        /// The caller's tag.
        tag: u64,
        /// The connection.
        conn: ConnId,
    },
    /// Abort (RST). Answered with [`ControlReply::Done`].
    Abort {
        /// The caller's tag.
        tag: u64,
        /// The connection.
        conn: ConnId,
    },
    /// The group core's counters, answered with [`ControlReply::Counters`].
    Counters {
        /// The caller's tag.
        tag: u64,
    },
}

impl ControlMsg {
    /// The caller's tag.
    pub fn tag(&self) -> u64 {
        match *self {
            ControlMsg::Connect { tag, .. }
            | ControlMsg::Listen { tag, .. }
            | ControlMsg::Rate { tag, .. }
            | ControlMsg::Close { tag, .. }
            | ControlMsg::Abort { tag, .. }
            | ControlMsg::Counters { tag } => tag,
        }
    }
}

/// A protocol role's answer to a [`ControlMsg`], in the order the messages were sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlReply {
    /// A [`ControlMsg::Connect`]'s connection, or why there is none.
    Connected {
        /// The message's tag.
        tag: u64,
        /// The answering group.
        group: u16,
        /// The connection.
        result: Result<ConnId, ConnectError>,
    },
    /// A [`ControlMsg::Listen`]'s outcome.
    Listening {
        /// The message's tag.
        tag: u64,
        /// The answering group.
        group: u16,
        /// Ok, or why the port was refused.
        result: Result<(), ListenError>,
    },
    /// A rate, close or abort's outcome.
    Done {
        /// The message's tag.
        tag: u64,
        /// The answering group.
        group: u16,
        /// Ok, or why the core refused it (a stale handle, say).
        result: Result<(), Error>,
    },
    /// The group core's counters.
    Counters {
        /// The message's tag.
        tag: u64,
        /// The answering group.
        group: u16,
        /// Its counters when the message was taken (boxed: the ring's slots stay small).
        counters: Box<Counters>,
    },
}

impl ControlReply {
    /// The tag of the message answered.
    pub fn tag(&self) -> u64 {
        match *self {
            ControlReply::Connected { tag, .. }
            | ControlReply::Listening { tag, .. }
            | ControlReply::Done { tag, .. }
            | ControlReply::Counters { tag, .. } => tag,
        }
    }

    /// The group that answered.
    pub fn group(&self) -> u16 {
        match *self {
            ControlReply::Connected { group, .. }
            | ControlReply::Listening { group, .. }
            | ControlReply::Done { group, .. }
            | ControlReply::Counters { group, .. } => group,
        }
    }
}

/// Why a control message was not sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// The group's link is full (its role has not caught up); the message is handed back.
    Full(ControlMsg),
    /// No such flow group.
    NoGroup(u16),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Full(m) => write!(
                f,
                "the flow group's control link is full ({CONTROL_SLOTS} messages); message {} not sent",
                m.tag()
            ),
            ControlError::NoGroup(g) => write!(f, "no flow group {g}"),
        }
    }
}

impl std::error::Error for ControlError {}

/// The control plane's ends of every group's control link (Send: hand it to the control
/// plane's thread while [`super::MultiEngine::run`] runs the data-path).
pub struct Control {
    to_group: Vec<Producer<ControlMsg>>,
    from_group: Vec<Consumer<ControlReply>>,
    /// Per group, the doorbell of the thread that runs its protocol role (rung if it sleeps).
    bells: Vec<Option<Arc<Doorbell>>>,
    /// Messages refused because a link was full.
    pub full: u64,
}

impl Control {
    /// Flow groups it reaches.
    pub fn groups(&self) -> u16 {
        self.to_group.len() as u16
    }

    /// Rings `bell` after each message to group `group`, if its thread sleeps.
    pub(crate) fn wake(&mut self, group: u16, bell: Arc<Doorbell>) {
        if let Some(b) = self.bells.get_mut(usize::from(group)) {
            *b = Some(bell);
        }
    }

    /// Sends `msg` to group `group`'s protocol role without waiting (waking its thread if
    /// it sleeps).
    pub fn send(&mut self, group: u16, msg: ControlMsg) -> Result<(), ControlError> {
        let Some(ring) = self.to_group.get_mut(usize::from(group)) else {
            return Err(ControlError::NoGroup(group));
        };
        ring.push(msg).map_err(|rtrb::PushError::Full(m)| {
            self.full += 1;
            ControlError::Full(m)
        })?;
        if let Some(Some(b)) = self.bells.get(usize::from(group)) {
            b.ring_if_asleep();
        }
        Ok(())
    }

    /// Group `group`'s next answer, if one waits.
    pub fn recv(&mut self, group: u16) -> Option<ControlReply> {
        self.from_group.get_mut(usize::from(group))?.pop().ok()
    }
}

/// A protocol role's ends of its group's control link.
pub struct ControlRx {
    from_plane: Consumer<ControlMsg>,
    to_plane: Producer<ControlReply>,
    /// Messages taken and answered.
    pub handled: u64,
}

impl ControlRx {
    /// Takes at most `budget` messages, acts on each on `stack` and answers it; stops early
    /// when the answer ring is full (the message waits, the data-path does not). Returns how
    /// many it took.
    pub fn serve(&mut self, group: u16, stack: &mut Stack, now: Instant, budget: usize) -> usize {
        let mut n = 0;
        while n < budget && self.to_plane.slots() > 0 {
            let Ok(msg) = self.from_plane.pop() else {
                break;
            };
            let reply = answer(group, stack, now, msg);
            // Cannot fail: a slot was free and this role is the ring's only producer.
            let _ = self.to_plane.push(reply);
            self.handled += 1;
            n += 1;
        }
        n
    }
}

/// Acts on one message.
fn answer(group: u16, stack: &mut Stack, now: Instant, msg: ControlMsg) -> ControlReply {
    match msg {
        ControlMsg::Connect { tag, ip, port } => ControlReply::Connected {
            tag,
            group,
            result: stack.connect(now, ip, port),
        },
        ControlMsg::Listen { tag, port, backlog } => ControlReply::Listening {
            tag,
            group,
            result: stack.listen(port, backlog).map(|_| ()),
        },
        ControlMsg::Rate {
            tag,
            conn,
            bits_per_sec,
        } => ControlReply::Done {
            tag,
            group,
            result: stack.set_rate(conn, bits_per_sec),
        },
        ControlMsg::Close { tag, conn } => ControlReply::Done {
            tag,
            group,
            result: stack.close(conn),
        },
        ControlMsg::Abort { tag, conn } => ControlReply::Done {
            tag,
            group,
            result: stack.abort(conn),
        },
        ControlMsg::Counters { tag } => ControlReply::Counters {
            tag,
            group,
            counters: Box::new(stack.counters().clone()),
        },
    }
}

/// One control link per group: the plane's ends together, each role's end apart.
pub fn control_links(groups: u16) -> (Control, Vec<ControlRx>) {
    let mut to_group = Vec::new();
    let mut from_group = Vec::new();
    let mut rxs = Vec::new();
    for _ in 0..groups {
        let (msg_tx, msg_rx) = RingBuffer::new(CONTROL_SLOTS);
        let (reply_tx, reply_rx) = RingBuffer::new(CONTROL_SLOTS);
        to_group.push(msg_tx);
        from_group.push(reply_rx);
        rxs.push(ControlRx {
            from_plane: msg_rx,
            to_plane: reply_tx,
            handled: 0,
        });
    }
    (
        Control {
            bells: vec![None; to_group.len()],
            to_group,
            from_group,
            full: 0,
        },
        rxs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_tcp::Config;
    use sluice_wire::EthernetAddress;

    fn stack() -> Stack {
        Stack::new(Config::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        ))
        .unwrap()
    }

    #[test]
    fn a_full_link_is_reported_and_hands_the_message_back() {
        let (mut plane, _rxs) = control_links(2);
        for tag in 0..CONTROL_SLOTS as u64 {
            plane.send(1, ControlMsg::Counters { tag }).unwrap();
        }
        let refused = plane.send(1, ControlMsg::Counters { tag: 99 });
        assert_eq!(
            refused,
            Err(ControlError::Full(ControlMsg::Counters { tag: 99 }))
        );
        assert_eq!(plane.full, 1);
        // Group 0's link is a different ring: it still has room.
        plane.send(0, ControlMsg::Counters { tag: 7 }).unwrap();
        assert_eq!(
            plane.send(2, ControlMsg::Counters { tag: 8 }),
            Err(ControlError::NoGroup(2))
        );
    }

    #[test]
    fn answers_come_in_order_and_wait_when_the_answer_ring_is_full() {
        let (mut plane, mut rxs) = control_links(1);
        let mut s = stack();
        for tag in 0..CONTROL_SLOTS as u64 {
            plane.send(0, ControlMsg::Counters { tag }).unwrap();
        }
        assert_eq!(rxs[0].serve(0, &mut s, Instant::ZERO, usize::MAX), 16);
        // Answers not read: the role takes no more, the message waits in its ring.
        plane.send(0, ControlMsg::Counters { tag: 100 }).unwrap();
        assert_eq!(rxs[0].serve(0, &mut s, Instant::ZERO, usize::MAX), 0);
        let tags: Vec<u64> = std::iter::from_fn(|| plane.recv(0))
            .map(|r| r.tag())
            .collect();
        assert_eq!(tags, (0..16).collect::<Vec<_>>());
        assert_eq!(rxs[0].serve(0, &mut s, Instant::ZERO, usize::MAX), 1);
        assert_eq!(plane.recv(0).map(|r| r.tag()), Some(100));
    }

    #[test]
    fn a_listen_twice_is_refused_by_the_core_and_said_so() {
        let (mut plane, mut rxs) = control_links(1);
        let mut s = stack();
        for tag in 0..2 {
            let msg = ControlMsg::Listen {
                tag,
                port: 80,
                backlog: 8,
            };
            plane.send(0, msg).unwrap();
        }
        rxs[0].serve(0, &mut s, Instant::ZERO, 4);
        let first = plane.recv(0).unwrap();
        let second = plane.recv(0).unwrap();
        assert!(matches!(
            first,
            ControlReply::Listening { result: Ok(()), .. }
        ));
        assert!(matches!(
            second,
            ControlReply::Listening { result: Err(_), .. }
        ));
    }
}
