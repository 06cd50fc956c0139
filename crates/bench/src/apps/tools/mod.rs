//! The client tools run in sluice-b, with their output parsed: redis-benchmark (and
//! redis-cli for the server's counters), wrk, iperf3 and curl.

pub mod curl;
pub mod iperf3;
pub mod redis_benchmark;
pub mod redis_info;
pub mod wrk;
