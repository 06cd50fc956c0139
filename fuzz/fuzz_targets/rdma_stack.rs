//! Two connected RDMA stacks under arbitrary frames and work requests: no panic, no access
//! outside registered memory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::rdma::rdma_stack(data));
