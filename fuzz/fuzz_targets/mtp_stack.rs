//! Two MTP stacks under arbitrary frames, edits and sends: no panic, state within the
//! configured bounds, delivered messages byte-exact.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::targets::mtp::mtp_stack(data));
