//! libFuzzer entry for the TCP core target: two stacks, a byte-steered wire, application
//! calls and time steps, invariants after every step (`sluice_fuzz::targets::core`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::targets::core::run(data);
});
