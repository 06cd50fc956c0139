//! `sluice run [--socket PATH] [--lab] [--preload PATH] [--verbs|--no-verbs] -- PROGRAM
//! ARGS...`: runs an unmodified program over the engine.
//!
//! Its sockets go to the engine through the preload library; its verbs (libibverbs) go to the
//! engine's RDMA transport through the Sluice verbs device, which `sluice run` makes visible
//! to the program ([`super::verbs_device`]): by default when run as root and the program
//! links libibverbs (the provider is built and the engine answers); `--verbs` insists (for a
//! program that loads libibverbs at run time, and without root through a user namespace),
//! `--no-verbs` leaves libibverbs alone.
//!
//! It finds `libsluice_preload.so` (next to the `sluice` executable unless told otherwise;
//! the rule is `sluice_shm::preload_library`'s, shared with the tests),
//! puts it first in `LD_PRELOAD`, points `SLUICE_SOCKET` at the engine, optionally enters
//! the lab's engine namespace, and then execs the program: the process becomes the
//! program, so its signals, exit status and parent are exactly the program's own.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;
use sluice_shm::preload_library::{locate, Missing};

use sluice_shm::preload_library::PRELOAD_ENV;
/// The engine's control socket for applications (read by libsluice).
const SOCKET_ENV: &str = sluice_shm::control::SOCKET_ENV;

/// Arguments of `sluice run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The engine's control socket (default: $SLUICE_SOCKET, else /run/sluice/engine.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Run inside the lab's engine namespace (sluice-a), where `sluice engine --lab` runs.
    #[arg(long)]
    lab: bool,
    /// The preload library (default: $SLUICE_PRELOAD, else libsluice_preload.so next to
    /// the sluice executable).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// Offload every engine socket's close to the engine's teardown stage (AccelTCP 4.2;
    /// sets SLUICE_TEARDOWN_OFFLOAD=1 for the program).
    #[arg(long)]
    teardown_offload: bool,
    /// Make the Sluice verbs device (sluice0) visible to the program, or fail.
    #[arg(long, conflicts_with = "no_verbs")]
    verbs: bool,
    /// Do not set up the verbs device.
    #[arg(long)]
    no_verbs: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

/// Why `sluice run` could not start the program.
#[derive(Debug)]
pub enum RunError {
    /// The preload library is not where it was looked for.
    PreloadMissing {
        /// Where it was looked for.
        path: PathBuf,
        /// Which rule chose that place.
        how: &'static str,
    },
    /// The current directory or executable could not be determined.
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Entering the lab's engine namespace failed.
    Netns(sluice_device::DeviceError),
    /// `--verbs` was asked for and the device could not be set up.
    Verbs(super::verbs_device::VerbsDeviceError),
    /// exec failed (the program does not exist, is not executable, ...).
    Exec {
        /// The program.
        program: OsString,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::PreloadMissing { path, how } => {
                let missing = Missing {
                    path: path.clone(),
                    how,
                };
                write!(f, "{missing}")
            }
            RunError::Io { what, source } => write!(f, "{what}: {source}"),
            RunError::Netns(e) => write!(
                f,
                "entering the lab's engine namespace: {e} (is the lab up? `sluice lab up`)"
            ),
            RunError::Verbs(e) => write!(f, "the verbs device: {e}"),
            RunError::Exec { program, source } => {
                write!(f, "cannot run {}: {source}", Path::new(program).display())
            }
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Io { source, .. } | RunError::Exec { source, .. } => Some(source),
            RunError::Netns(e) => Some(e),
            RunError::Verbs(e) => Some(e),
            RunError::PreloadMissing { .. } => None,
        }
    }
}

/// `LD_PRELOAD` with `lib` first and whatever was there after it.
pub fn ld_preload(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        // ld.so separates entries with spaces or colons.
        v.push(":");
        v.push(e);
    }
    v
}

/// Sets up the verbs device (this process enters its mount namespace) and returns the
/// program's environment for it.
fn verbs_env(
    exe: &Path,
    socket: &Path,
) -> Result<Vec<(&'static str, OsString)>, super::verbs_device::VerbsDeviceError> {
    use super::verbs_device::{engine_ip, enter, locate_provider};
    let provider = std::path::absolute(locate_provider(exe)?).map_err(|source| {
        super::verbs_device::VerbsDeviceError::Os {
            what: "resolving the provider's path".into(),
            source,
        }
    })?;
    let ip = engine_ip(socket)?;
    enter(&provider, ip)
}

/// Runs the program; returns only if it could not be started.
pub fn run(args: &RunArgs) -> Result<(), RunError> {
    let exe = std::env::current_exe().map_err(|source| RunError::Io {
        what: "finding the sluice executable",
        source,
    })?;
    let env_preload = std::env::var_os(PRELOAD_ENV);
    let path = locate(args.preload.as_deref(), env_preload.as_deref(), &exe)
        .map_err(|Missing { path, how }| RunError::PreloadMissing { path, how })?
        .announce("sluice run");
    // Absolute paths: the program may change directory before it opens a socket.
    let lib = std::path::absolute(&path).map_err(|source| RunError::Io {
        what: "resolving the preload library's path",
        source,
    })?;
    let socket = args
        .socket
        .clone()
        .or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(sluice_shm::control::DEFAULT_SOCKET));
    let socket = std::path::absolute(&socket).map_err(|source| RunError::Io {
        what: "resolving the engine socket's path",
        source,
    })?;
    if args.lab {
        sluice_device::netns::enter(sluice_lab::NS_ENGINE).map_err(RunError::Netns)?;
    }
    let (program, rest) = args
        .command
        .split_first()
        .expect("clap requires the program");
    let preload = ld_preload(&lib, std::env::var_os("LD_PRELOAD").as_deref());
    // SLUICE_SOCKET is always set: a program run with `sluice run` asked for the engine, so
    // an unreachable engine is an error (ECONNREFUSED), never a silent fallback to Linux.
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .env("LD_PRELOAD", preload)
        .env(SOCKET_ENV, &socket);
    if args.teardown_offload {
        cmd.env(sluice_shm::TEARDOWN_OFFLOAD_ENV, "1");
    }
    let by_default = !args.no_verbs
        && nix::unistd::getuid().is_root()
        && super::verbs_device::links_libibverbs(program);
    if args.verbs || by_default {
        match verbs_env(&exe, &socket) {
            Ok(env) => {
                cmd.envs(env);
            }
            Err(e) if args.verbs => return Err(RunError::Verbs(e)),
            // By default the device is a convenience: a program that uses no verbs must run.
            Err(e) => eprintln!("sluice run: no verbs device ({e}); --no-verbs silences this"),
        }
    }
    let err = cmd.exec();
    Err(RunError::Exec {
        program: program.clone(),
        source: err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shm::preload_library::{preload_path, PRELOAD_NAME};

    #[test]
    fn the_flag_beats_the_environment_which_beats_the_executables_directory() {
        let exe = Path::new("/opt/sluice/bin/sluice");
        let (p, how) = preload_path(
            Some(Path::new("/x/lib.so")),
            Some(OsStr::new("/y/lib.so")),
            exe,
        );
        assert_eq!((p.as_path(), how), (Path::new("/x/lib.so"), "--preload"));
        let (p, _) = preload_path(None, Some(OsStr::new("/y/lib.so")), exe);
        assert_eq!(p, Path::new("/y/lib.so"));
        let (p, _) = preload_path(None, Some(OsStr::new("")), exe);
        assert_eq!(p, Path::new("/opt/sluice/bin/libsluice_preload.so"));
    }

    #[test]
    fn cargo_test_builds_are_found_in_deps() {
        let dir = std::env::temp_dir().join(format!("sluice-run-cmd-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("deps")).unwrap();
        let exe = dir.join("sluice");
        std::fs::write(dir.join("deps").join(PRELOAD_NAME), b"").unwrap();
        let (p, _) = preload_path(None, None, &exe);
        assert_eq!(
            p,
            dir.join("deps").join(PRELOAD_NAME),
            "only the deps/ copy exists"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.join(PRELOAD_NAME), b"").unwrap();
        let (p, _) = preload_path(None, None, &exe);
        assert_eq!(p, dir.join(PRELOAD_NAME), "the newer copy wins");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_library_goes_first_in_ld_preload() {
        let lib = Path::new("/l/libsluice_preload.so");
        assert_eq!(
            ld_preload(lib, None),
            OsString::from("/l/libsluice_preload.so")
        );
        assert_eq!(
            ld_preload(lib, Some(OsStr::new("/other.so"))),
            OsString::from("/l/libsluice_preload.so:/other.so")
        );
    }

    #[test]
    fn a_missing_library_says_how_to_build_it() {
        let e = RunError::PreloadMissing {
            path: PathBuf::from("/nowhere/libsluice_preload.so"),
            how: "next to the sluice executable",
        };
        let s = e.to_string();
        assert!(s.contains("cargo build --release -p sluice-preload"), "{s}");
        assert!(s.contains("--preload"), "{s}");
    }
}
