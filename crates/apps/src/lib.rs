//! Applications written against the core's sans-IO API. Being sans-IO themselves, they run
//! unchanged in the simulator, the demo, the fuzzer and the engine: a verified bulk transfer
//! and a closed-loop RPC between two cores, and the single-host echo server, sink, source and
//! RPC client that the engine's subcommands run against Linux or simulated peers.
#![forbid(unsafe_code)]

mod bulk;
mod echo;
mod pattern;
mod proxy;
mod route;
mod rpc;
mod rpc_client;
mod sink;
mod source;

pub use bulk::{BulkTransfer, Side};
pub use echo::EchoServer;
pub use pattern::pattern_fill;
pub use proxy::{Proxy, ProxyConfig, ProxyCounters, ProxyMode, MAX_HEADER};
pub use route::{Decision, Refusal, Route, RouteError, Router, MAX_HEADERS};
pub use rpc::RpcEcho;
pub use rpc_client::{RpcClient, RpcClientError};
pub use sink::{Sink, SinkReport};
pub use source::Source;

/// Hex of a SHA-256 digest.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
