//! A RoCEv2 InfiniBand packet (BTH .. ICRC): parse, view, round trip, framed with its ICRC.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::roce::roce(data));
