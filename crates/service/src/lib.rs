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
//!
//! Layers: a module imports only modules of the layers below it, never one above or beside
//! it in a loop, so the engine's stack through [`Service`]'s poll only ever goes down.
//!
//! 1. State, at the bottom (each imports only those before it here): `access` (who may
//!    attach, the peer's credentials), `error`, `counters`,
//!    `owners` (ports, connections and splices to their owners), `slots` (a slot's life),
//!    `congestion` (an application's congestion-control choice applied to a connection),
//!    `verbs` (docs/verbs.md: the RDMA transport, what each application owns of it, its
//!    control path, work requests and completions; it reaches only `counters` and
//!    `queues`, the verbs queues it shares with MTP), `mtp` (docs/mtp.md: the MTP transport,
//!    each application's memory and endpoints, requests, entries and completions; the same
//!    reach), `cores` (both transports, for the control plane), `config`, `memory_groups`
//!    (each uid's memory group in the core), `shared` (what every part reaches: maps, counters, pending lists) and `app`
//!    (an attached application, and the checked slot handle, the one way to a slot).
//! 2. Data movers, which call nothing above them: `teardown` (ending things: a slot freed,
//!    a connection closed or reset, a listener stopped, an application released) and,
//!    above it, `data` (bytes between rings and the core, accepts into a listener's ring;
//!    it hands what it cannot move to `teardown`).
//! 3. Acting on applications: `splice` (the Splice command and the core's splice events
//!    routed to their owners), `commands` (context-queue entries, above `splice`) and
//!    `events` (the core's events), through the movers; `wake` (poll, then sleep).
//! 4. `admin` (`sluice ctl`'s requests: connections, listeners, counters, a connection's
//!    congestion control or rate), then `control` (attach, contexts, hang-ups, capture and
//!    admin requests), which runs a departing application's last commands; `capture`
//!    (sessions' taps at the engine's hook points, from the requests `control` admitted; it
//!    reaches nothing of the service).
//! 5. `service`: the engine's [`sluice_engine::App`], on top.
#![forbid(unsafe_code)]

mod access;
mod admin;
mod app;
mod capture;
mod commands;
mod config;
mod congestion;
mod control;
mod cores;
mod counters;
mod data;
mod error;
mod events;
mod handover;
mod links;
mod memory_groups;
mod modules;
mod mtp;
mod owners;
mod parts;
mod port_ranges;
mod queues;
mod quota;
mod replicas;
mod service;
mod shared;
mod slots;
mod splice;
mod teardown;
mod trace;
mod traffic_classes;
mod verbs;
mod wake;
mod wake_set;

pub use access::{AccessPolicy, Credentials, Denied};
pub use capture::CaptureCounters;
pub use config::ServiceConfig;
pub use counters::Counters;
pub use error::ServiceError;
pub use port_ranges::{PortRange, PortRangeError};
pub use quota::{Exceeded, Quotas};
pub use service::Service;
pub use verbs::VerbsLimits;
