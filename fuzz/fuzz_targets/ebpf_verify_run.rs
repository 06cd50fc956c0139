//! Arbitrary eBPF bytecode to the verifier; whatever it accepts runs on an arbitrary frame:
//! no panic, no access outside frame, stack or map value, no run-time error.
//! libfuzzer: -max_len=4096
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::ebpf::verify_run(data));
