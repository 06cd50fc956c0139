//! `sluice bench extensions` (issue 19 item 6): what the data-path's extensions cost, in the
//! shape of flextoe.txt Table 2: RPC operations per second through a running engine with no
//! module, a null XDP program, VLAN strip, a firewall holding 10k rules, all tracepoints on,
//! and capture with and without a filter; beside each, the hook path's ns per frame measured
//! in-process and the CPU per operation; then the interpreter against the JIT.
//!
//! - [`rows`]: the rows and what a measured row holds; [`micro`]: the in-process
//!   microbenchmark on `sluice_engine::Hooks` and the interpreter-vs-JIT runs; [`lab`]: one
//!   row's RPCs in the namespace lab (sockperf ping-pong against `sluice run sockperf
//!   server` on `sluice engine --lab`; the firewall's rules and the tracepoints go over
//!   libsluice's `sluice::admin`); [`table`]: the printed table and the CSV; [`bench`]: the command.

pub mod bench;
pub mod lab;
pub mod micro;
pub mod rows;
pub mod table;

pub use bench::{run, BenchExtensionsArgs};
