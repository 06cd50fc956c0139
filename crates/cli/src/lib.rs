//! The `sluice` command's library: what its integration tests drive directly.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apps;
pub mod bench;
pub mod experiment;
