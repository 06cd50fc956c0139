//! Unmodified Linux programs (redis-server, memcached, nginx, iperf3, python3) served over
//! the Sluice engine or over Linux kernel TCP in the namespace lab, checked and measured by
//! the same clients in sluice-b (issue 4).
//!
//! - [`Side`]: where a program runs. Engine: `sluice engine --lab --socket S` ([`engine`])
//!   and `sluice run --socket S --lab -- PROGRAM` in sluice-a, at 10.77.0.1. Linux:
//!   `ip netns exec sluice-k PROGRAM`, at 10.77.0.3.
//! - [`servers`]: each program's exact command line; [`harness`] starts one on a side and
//!   waits until sluice-b can connect ([`server`]); [`process`] owns every child. Client
//!   programs run on a side too ([`ClientHost`]: iperf3 -c over the engine), against a
//!   server started in sluice-b (10.77.0.2, the peer).
//! - [`appcheck`]: the verification clients (`sluice appcheck`, hidden); [`tools`]: the
//!   benchmark and download clients with their output parsers; [`checks`]: one check per
//!   program (what the tests call); [`bench`]: `sluice bench apps` and its [`table`].

pub mod appcheck;
pub mod bench;
pub mod checks;
pub mod engine;
pub mod error;
pub mod harness;
pub mod process;
pub mod program;
pub mod server;
pub mod servers;
pub mod side;
pub mod table;
pub mod tools;
pub mod workdir;

pub use error::AppsError;
pub use harness::{ClientHost, Harness, Running};
pub use servers::App;
pub use side::Side;
