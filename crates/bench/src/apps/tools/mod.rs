//! The client tools run in sluice-b, with their output parsed: redis-benchmark, wrk,
//! iperf3 and curl.

pub mod curl;
pub mod iperf3;
pub mod redis_benchmark;
pub mod wrk;
