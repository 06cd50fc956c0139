//! The engine side of Sluice's service mode (docs/service.md; FlexTOE 3 libTOE and CTX-Qs,
//! Laminar 4.3 and 5, FlexiNS 3.4): applications attach over a Unix socket, each gets its
//! own shared region (`sluice_shm`), and the engine moves their commands, completions and
//! payload bytes between that region and the TCP core.
//!
//! [`Service`] is an engine [`sluice_engine::App`]: the engine's loop polls it every
//! iteration, and it sleeps with the engine on one epoll descriptor
//! ([`sluice_engine::App::wake_fd`]) holding the control listener, every application's
//! control socket and every application's doorbell.
//!
//! Trust: everything an application writes (queue entries, its line of each socket block,
//! the published head of its completion queues) is checked before use; bad input fails the
//! command, or resets that one connection with EFAULT, and is counted ([`Counters`]). It
//! never panics the engine and never touches another application.
#![forbid(unsafe_code)]

mod app;
mod commands;
mod config;
mod congestion;
mod control;
mod counters;
mod data;
mod error;
mod events;
mod owners;
mod service;
mod shared;
mod slots;
mod teardown;
mod wake;

pub use config::ServiceConfig;
pub use counters::Counters;
pub use error::ServiceError;
pub use service::Service;
