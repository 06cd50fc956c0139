//! Arbitrary eBPF bytecode to the verifier; whatever it accepts runs under the x86-64 JIT and
//! the interpreter on an arbitrary frame, twice on the same maps: the same action or error,
//! frame bytes, bounds, redirect, counters, trace output and map contents.
//! libfuzzer: -max_len=4096
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::ebpf::jit_differential(data));
