//! IPv4: parse with and without the checksum, the view, RFC 1624 updates, round trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::wire::ipv4(data));
