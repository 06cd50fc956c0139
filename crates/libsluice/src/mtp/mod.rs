//! Messages through the engine (docs/mtp.md "Messages in service mode"): MTP endpoints
//! over the engine's MTP transport. [`Endpoint::bind`] binds a port; `send_message` copies a
//! message into the endpoint's registered memory and rings the engine; completions say
//! when every packet was acknowledged; `recv_message` gives whole messages; `wait` polls,
//! then sleeps on the endpoint's eventfd. [`Rpc`] pairs requests and responses by an id it
//! puts in front of the payload.

mod endpoint;
mod error;
mod poll;
mod rpc;

pub use endpoint::{ring_doorbell, Endpoint, EndpointConfig, Received};
pub use error::MtpError;
pub use rpc::{Rpc, RPC_HEADER};
pub use sluice_shm::mtp::{CqeKind, MtpCqe, MtpStatus, RecvEntry, SendEntry};

#[cfg(test)]
mod tests {
    use super::*;

    /// An endpoint's sends and polls may come from any thread.
    #[test]
    fn the_endpoint_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Endpoint>();
    }
}
