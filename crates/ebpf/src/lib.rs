//! eBPF/XDP modules for Sluice's data-path (issue 19; flextoe.txt 3.3, 4): a loader for
//! clang-built BPF ELF objects, a load-time verifier, an interpreter, maps shared with the
//! control plane, and the helpers a program may call. docs/ebpf.md describes the ABI.
//!
//! ```text
//! let (program, mut maps) = sluice_ebpf::load(&object_bytes, "xdp")?;   // parse + verify
//! let mut ctx = XdpContext::new(&mut buf, headroom, len).unwrap();
//! let action = sluice_ebpf::run(&program, &mut ctx, &mut Env { maps: &mut maps, .. })?;
//! ```
#![forbid(unsafe_code)]

pub mod alu;
mod btf;
pub mod elf;
pub mod error;
pub mod fuzzing;
pub mod helpers;
pub mod insn;
mod interp;
pub mod maps;
mod program;
pub mod programs;
pub mod verifier;
pub mod xdp;

pub use elf::Object;
pub use error::{LoadError, MapError, Reason, RunError, VerifyError};
pub use interp::run;
pub use maps::{MapDef, MapId, MapKind, Maps};
pub use program::{load, ModuleError, Program};
pub use xdp::{Action, Counters, DropReason, Env, NoTrace, TraceSink, XdpContext};
