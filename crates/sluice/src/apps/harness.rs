//! The harness: starts a program on a side (with the engine under it for Side::Engine) and
//! runs clients in sluice-b.

use std::cell::Cell;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice_lab::{command, NS_CLIENT};

use super::engine::EngineProcess;
use super::error::AppsError;
use super::process::run_bounded;
use super::program::Program;
use super::server::ServerProcess;
use super::servers::App;
use super::side::Side;
use super::workdir::{Content, WorkDir};

/// Runs programs on either side of the lab; holds the temporary directory for their logs,
/// configuration and content. The lab itself must be up (the caller holds it).
#[derive(Debug)]
pub struct Harness {
    sluice: PathBuf,
    backend: String,
    engine_args: Vec<String>,
    dir: WorkDir,
    content: Content,
    runs: Cell<u32>,
}

/// A program running on one side: the server, and the engine under it on Side::Engine.
/// Dropping it stops the server first, then the engine.
#[derive(Debug)]
pub struct Running {
    server: ServerProcess,
    engine: Option<EngineProcess>,
}

impl Running {
    /// Where clients in sluice-b reach the program.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Fails (with the logs) if the program or its engine has exited.
    pub fn check_alive(&mut self) -> Result<(), AppsError> {
        self.server.check_alive()?;
        if let Some(engine) = &mut self.engine {
            engine.check_alive()?;
        }
        Ok(())
    }

    /// Adds the server's (and the engine's) log to a client's failure: the cause is often
    /// there.
    pub fn with_server_log(&self, e: AppsError) -> AppsError {
        let detail = match e {
            AppsError::Client { detail, .. }
            | AppsError::Protocol(detail)
            | AppsError::Mismatch(detail) => detail,
            e => return e,
        };
        let mut detail = format!(
            "{detail}\n  server log:\n{}",
            indent(&self.server.log_tail())
        );
        if let Some(engine) = &self.engine {
            detail.push_str(&format!("\n  engine log:\n{}", indent(&engine.log_tail())));
        }
        AppsError::client(format!("client of {}", self.server.addr()), detail)
    }

    /// Stops the program and then the engine; fails if either had died.
    pub fn stop(mut self) -> Result<(), AppsError> {
        self.check_alive()?;
        let Running { server, engine } = self;
        server.stop()?;
        drop(engine);
        Ok(())
    }
}

impl Harness {
    /// A harness using the `sluice` binary at `sluice` (for `appcheck`, `engine` and `run`)
    /// and engine backend `backend` (af_packet, tap or af_xdp).
    pub fn new(sluice: impl Into<PathBuf>, backend: &str) -> Result<Harness, AppsError> {
        let dir = WorkDir::create("sluice-apps")?;
        let content = Content::write(dir.path())?;
        Ok(Harness {
            sluice: sluice.into(),
            backend: backend.to_string(),
            engine_args: Vec::new(),
            dir,
            content,
            runs: Cell::new(0),
        })
    }

    /// Extra arguments for `sluice engine` (e.g. `--app-idle-us 0`).
    pub fn with_engine_args(mut self, args: &[String]) -> Harness {
        self.engine_args = args.to_vec();
        self
    }

    /// The files the web servers serve.
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// The temporary directory (logs are kept there until the harness is dropped).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts `app` on `side` and waits until it accepts connections from sluice-b.
    pub fn start(&self, app: App, side: Side) -> Result<Running, AppsError> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let run_dir = self.dir.subdir(&format!("{n:02}-{}-{side}", app.name()))?;
        let program = app.program().find()?;
        let args = app.args(side, &run_dir, &self.content)?;
        let (engine, mut cmd) = match side {
            Side::Linux => {
                let mut cmd = Command::new(command::find(command::IP)?);
                cmd.args(["netns", "exec", side.namespace()]);
                (None, cmd)
            }
            Side::Engine => {
                let socket = run_dir.join("engine.sock");
                let engine = EngineProcess::start(
                    &self.sluice,
                    &self.backend,
                    &self.engine_args,
                    &socket,
                    &run_dir.join("engine"),
                )?;
                let mut cmd = Command::new(&self.sluice);
                cmd.args(["run", "--socket"])
                    .arg(engine.socket())
                    .args(["--lab", "--"]);
                (Some(engine), cmd)
            }
        };
        cmd.arg(&program).args(&args).current_dir(&run_dir);
        let server = ServerProcess::start(
            cmd,
            app.program().name,
            side,
            side.server_addr(app.port()),
            &run_dir.join(app.name()),
        );
        match (server, &engine) {
            (Ok(server), _) => Ok(Running { server, engine }),
            (
                Err(AppsError::ServerStart {
                    program,
                    side,
                    detail,
                    log_tail,
                }),
                Some(engine),
            ) => Err(AppsError::ServerStart {
                program,
                side,
                detail,
                log_tail: format!("{log_tail}\n(engine log)\n{}", engine.log_tail()),
            }),
            (Err(e), _) => Err(e),
        }
    }

    /// `ip netns exec sluice-b PROGRAM`, ready for arguments.
    pub fn client(&self, program: Program) -> Result<Command, AppsError> {
        let mut cmd = Command::new(command::find(command::IP)?);
        cmd.args(["netns", "exec", NS_CLIENT]).arg(program.find()?);
        Ok(cmd)
    }

    /// Runs `sluice appcheck ARGS` in sluice-b and returns its one-line summary.
    pub fn appcheck<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        limit: Duration,
    ) -> Result<String, AppsError> {
        let mut cmd = Command::new(command::find(command::IP)?);
        cmd.args(["netns", "exec", NS_CLIENT])
            .arg(&self.sluice)
            .arg("appcheck")
            .args(args);
        let what = format!(
            "sluice appcheck {}",
            args.iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let out = run_bounded(cmd, &what, limit)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// `text` indented for nesting in an error message.
fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
