//! Software segmentation (GSO) of an IPv4 TCP frame: payloads concatenate back, checksums
//! verify, sequence numbers advance by segment lengths.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::wire::gso(data));
