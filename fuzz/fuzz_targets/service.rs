//! libFuzzer entry for the service's command interface: arbitrary context-queue entries and
//! ring positions beside a well-behaved connection (`sluice_fuzz::targets::service`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sluice_fuzz::targets::service::run(data);
});
