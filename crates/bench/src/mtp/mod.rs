//! `sluice bench mtp` (issue 17 "Lab"): MTP messages between the standard lab's two engines
//! beside Sluice TCP and Linux TCP, in one run: the 64 B RPC round trip (p50/p99) and
//! message throughput at 64 B and 64 KB, with CPU per operation and ratios.
//!
//! It reuses the verbs bench's harness ([`crate::verbs::hosts`]: engines A and E, measured
//! client/server pairs, CPU meters; [`crate::verbs::rows`]: sockperf and iperf3 rows):
//! - [`rows`]: the MTP rows (`sluice mtp rpc`/`send` against `sluice mtp recv`) and their
//!   output's parser; [`table`]: the printed table; [`bench`]: the command.

pub mod bench;
pub mod rows;
pub mod table;

pub use bench::{run, BenchMtpArgs};
