//! Property bodies for the coverage-guided fuzz targets in the repository's `fuzz/` folder.
//!
//! Each public function takes arbitrary bytes (decoded with `arbitrary` where they steer a
//! run), must never panic on them, and panics (which libFuzzer reports as a crash) when a
//! property fails. The libFuzzer targets are one-line wrappers around them, so the same
//! properties also run on stable Rust as seeded tests (`crates/fuzz/tests/`). Adding a
//! target: a function in a module here, a file in `fuzz/fuzz_targets/` that calls it, and its
//! `[[bin]]` entry in `fuzz/Cargo.toml`.

pub mod core;
pub mod ebpf;
pub mod mtp;
pub mod rdma;
pub mod roce;
pub mod service;
pub mod wire;
