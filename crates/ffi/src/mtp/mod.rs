//! The MTP transport's C ABI (`sluice_mtp_*`): an opaque `sluice_mtp_stack` (one host's
//! `sluice_mtp::stack::MtpStack`) driven like the TCP one — frames in with the time, frames
//! out, the next deadline, the timers — and the application calls on messages: bind and
//! unbind endpoints, send, receive, events, counters (docs/ffi.md "MTP").
//!
//! An endpoint handle is the core's `EndpointId` under the stack's tag: the core counts ids
//! up and does not reuse one for 2^32 binds, so it is its own generation and no handle table
//! is kept here.

mod app;
mod config;
mod endpoint;
mod error;
mod host;
mod inspect;
mod stack;

pub use app::{
    sluice_mtp_bind, sluice_mtp_event, sluice_mtp_event_kind, sluice_mtp_fail_reason,
    sluice_mtp_local_port, sluice_mtp_message_info, sluice_mtp_next_len, sluice_mtp_poll_event,
    sluice_mtp_recv, sluice_mtp_send, sluice_mtp_unbind,
};
pub use config::{
    sluice_mtp_config, sluice_mtp_config_check, sluice_mtp_config_default, SLUICE_MTP_ENCAP_IP,
    SLUICE_MTP_ENCAP_UDP,
};
pub use endpoint::sluice_mtp_endpoint;
pub use host::sluice_mtp_stack;
pub use inspect::{sluice_mtp_counters, sluice_mtp_srtt, sluice_mtp_stack_counters};
pub use stack::{
    sluice_mtp_set_neighbor, sluice_mtp_stack_free, sluice_mtp_stack_handle_frame,
    sluice_mtp_stack_handle_timeout, sluice_mtp_stack_max_frame_len, sluice_mtp_stack_new,
    sluice_mtp_stack_poll_timeout, sluice_mtp_stack_poll_transmit,
};
