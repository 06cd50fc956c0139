//! Where an eBPF module runs in the multi-core engine (flextoe.txt 3.2: stages that keep no
//! per-connection state are replicated; docs/ebpf.md, "Modules on several cores"). The
//! operator declares it when attaching: a [`Placement::Stateless`] module runs in every pre
//! replica (ingress) or post replica (egress), each with its own copy of the maps, as
//! per-CPU maps are; a [`Placement::PerGroup`] module runs in every flow group's protocol
//! role (ingress, established), each group with its own maps. No placement shares one map
//! between cores: that would need a lock or atomics on the data-path.

use std::fmt;

use crate::hook_point::HookPoint;
use crate::modules::ModuleAttachError;

/// Where a module runs, as its loader declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// It keeps no state a frame of one connection leaves for another (no maps, or maps
    /// only the control plane writes, or counters read summed over the copies): one copy
    /// per pre replica (ingress) or post replica (egress).
    Stateless,
    /// It keeps state by flow (a connection tracker): one copy per flow group, in the
    /// group's protocol role, which sees every frame of the group's connections in order.
    PerGroup,
}

/// Why a module was not attached to the multi-core engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// A stateless module at established: whether a segment takes the established path is
    /// the group core's per-connection question, asked in the protocol role only.
    StatelessAtEstablished,
    /// A per-group module at egress: the protocol role's frames still carry partial
    /// checksums (the post replicas complete them), so a module there would see frames the
    /// device never sends; declare it stateless.
    PerGroupAtEgress,
    /// The maps made for a copy do not match the program's.
    MapsDoNotMatch,
    /// A role's chain at that point is full.
    Attach(ModuleAttachError),
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementError::StatelessAtEstablished => f.write_str(
                "a module at established runs per flow group: attach it with Placement::PerGroup",
            ),
            PlacementError::PerGroupAtEgress => f.write_str(
                "a module at egress runs in the replicated post role: attach it with \
                 Placement::Stateless",
            ),
            PlacementError::MapsDoNotMatch => {
                f.write_str("the maps made for a copy of the module do not match its program")
            }
            PlacementError::Attach(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PlacementError {}

/// Checks that `placement` can run a module at `at`.
pub fn check(at: HookPoint, placement: Placement) -> Result<(), PlacementError> {
    match (placement, at) {
        (Placement::Stateless, HookPoint::Established) => {
            Err(PlacementError::StatelessAtEstablished)
        }
        (Placement::PerGroup, HookPoint::Egress) => Err(PlacementError::PerGroupAtEgress),
        _ => Ok(()),
    }
}
