//! `sluice bench verbs` (issue 16): perftest over Sluice's RDMA verbs beside Linux TCP
//! (sockperf ping-pong, iperf3) and Sluice TCP (the same programs through `sluice run`), in
//! one lab run, with CPU per operation and the ratios the goals name.
//!
//! - [`hosts`]: where each stack's server and client run, and one measured pair;
//! - [`rows`]: each row's programs and arguments; [`perftest`], [`sockperf`]: their output
//!   parsers; [`cpu`]: /proc CPU time; [`table`]: the printed table; [`bench`]: the command.

pub mod bench;
pub mod cpu;
pub mod hosts;
pub mod perftest;
pub mod rows;
pub mod sockperf;
pub mod table;

pub use bench::{run, BenchVerbsArgs};
