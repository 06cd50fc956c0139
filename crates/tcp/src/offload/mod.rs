//! AccelTCP's connection offloads (acceltcp.txt 4): stages beside the data-path that take
//! whole connections over from the control plane by an explicit handover, so that a
//! connection always has one owner: the teardown stage (4.2) with its timer bitmap wheel,
//! and the splice stage (4.3) with the queue of frames it relays. The control plane's side
//! (when to hand over, acting on outcomes) is in control/offload.rs and control/splice.rs.

pub(crate) mod bitmap_wheel;
pub(crate) mod macs;
pub(crate) mod relay;
pub(crate) mod splice;
pub(crate) mod teardown;
