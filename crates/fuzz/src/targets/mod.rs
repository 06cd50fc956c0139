//! Byte-driven targets for coverage-guided fuzzing (cargo-fuzz and libFuzzer on nightly):
//! each takes `&[u8]`, decodes it with `arbitrary` and panics on a violation. The same
//! functions run as seeded property tests on stable (`tests/targets.rs`).

pub mod core;
pub mod service;
