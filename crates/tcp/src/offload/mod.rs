//! AccelTCP's connection offloads (acceltcp.txt 4): stages beside the data-path that take
//! whole connections over from the control plane by an explicit handover, so that a
//! connection always has one owner. Today: the teardown stage (4.2) and its timer bitmap
//! wheel. The control plane's side (when to hand over, acting on outcomes) is in
//! control/offload.rs.

pub(crate) mod bitmap_wheel;
pub(crate) mod macs;
pub(crate) mod teardown;
