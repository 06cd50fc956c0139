//! A TCP segment: header, options, checksum from field values, round trip.
//! libfuzzer: -dict=fuzz/dict/tcp_options.dict
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::wire::tcp(data));
