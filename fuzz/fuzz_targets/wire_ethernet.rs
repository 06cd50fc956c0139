//! Ethernet II with one 802.1Q tag: parse, emit byte for byte, parse again.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::wire::ethernet(data));
