//! Errors returned by the simulator.

use core::fmt;

use crate::{Instant, LinkId, NodeId};

/// Everything that can go wrong when building or running a [`Sim`](crate::Sim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimError {
    /// The node id does not name a node of this simulator.
    NoSuchNode(NodeId),
    /// The link id does not name a link of this simulator.
    NoSuchLink(LinkId),
    /// The host already has its single port connected.
    HostAlreadyConnected(NodeId),
    /// A link must join two different nodes.
    SelfLoop(NodeId),
    /// The node is not a static switch (or a route named no link).
    NotAStaticSwitch(NodeId),
    /// The node is not a switch.
    NotASwitch(NodeId),
    /// The link does not join this switch.
    NotAttached(LinkId, NodeId),
    /// The run reached its deadline before the application was done.
    Deadline {
        /// Virtual time when the run stopped (the deadline).
        now: Instant,
    },
    /// No events remained before the deadline; time was advanced to the deadline.
    Idle {
        /// Virtual time when the run stopped (the deadline).
        now: Instant,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::NoSuchNode(n) => write!(f, "no such node: {}", n.0),
            SimError::NoSuchLink(l) => write!(f, "no such link: {}", l.0),
            SimError::HostAlreadyConnected(n) => {
                write!(f, "host {} already has a connected port", n.0)
            }
            SimError::SelfLoop(n) => write!(f, "cannot connect node {} to itself", n.0),
            SimError::NotAStaticSwitch(n) => {
                write!(
                    f,
                    "node {} is not a static switch, or the route is empty",
                    n.0
                )
            }
            SimError::NotASwitch(n) => write!(f, "node {} is not a switch", n.0),
            SimError::NotAttached(l, n) => write!(f, "link {} does not join switch {}", l.0, n.0),
            SimError::Deadline { now } => write!(f, "deadline reached at {now}"),
            SimError::Idle { now } => write!(f, "simulation idle; advanced to deadline {now}"),
        }
    }
}

impl std::error::Error for SimError {}
