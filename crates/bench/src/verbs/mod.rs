//! `sluice bench verbs` (issue 16): perftest over Sluice's RDMA verbs beside Linux TCP
//! (sockperf ping-pong, iperf3) and Sluice TCP (the same programs through `sluice run`), in
//! one lab run, with CPU per operation and the ratios the goals name.
//!
//! - [`hosts`]: where each stack's server and client run, and one measured pair;
//! - [`rows`]: each row's programs and arguments; [`perftest`] and [`crate::sockperf`]: their
//!   output parsers; [`crate::cpu`]: /proc CPU time; [`table`]: the printed table (its cells:
//!   [`crate::cells`]); [`bench`]: the command.

pub mod bench;
pub mod hosts;
pub mod perftest;
pub mod rows;
pub mod table;

pub use bench::{run, BenchVerbsArgs};
