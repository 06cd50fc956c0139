//! A TCP option area: NOP-prefix equivalence, emit within 40 bytes, round trip.
//! libfuzzer: -dict=fuzz/dict/tcp_options.dict -max_len=64
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::wire::tcp_options(data));
