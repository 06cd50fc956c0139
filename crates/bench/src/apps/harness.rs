//! The harness: starts a server program on a side (with the engine under it for
//! Side::Engine) and runs clients in sluice-b; or, the other way round, starts a server in
//! sluice-b (the peer) and runs client programs on a side ([`ClientHost`]).

use std::cell::Cell;
use std::ffi::OsStr;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use sluice_lab::{command, CLIENT_IP, NS_CLIENT};

use super::engine::EngineProcess;
use super::error::AppsError;
use super::process::{run_bounded, run_captured};
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
    /// Where clients reach the program (in sluice-b; for a peer, on a side).
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The program's pid, and its engine's on Side::Engine (for their CPU time).
    pub fn pids(&self) -> (u32, Option<u32>) {
        (
            self.server.pid(),
            self.engine.as_ref().map(EngineProcess::pid),
        )
    }

    /// The engine's control socket on Side::Engine (for `sluice ctl`, `sluice capture`).
    pub fn engine_socket(&self) -> Option<&Path> {
        self.engine.as_ref().map(EngineProcess::socket)
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

    /// Stops the program and then the engine, and returns the engine's stderr log (its
    /// counters at the end), None on Linux; fails if either had died.
    pub fn stop_with_engine_log(mut self) -> Result<Option<String>, AppsError> {
        self.check_alive()?;
        let Running { server, engine } = self;
        server.stop()?;
        Ok(engine.map(EngineProcess::stop_with_log))
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

/// A side running client programs (against a peer in sluice-b): `sluice run --lab` over
/// its own engine on Side::Engine, `ip netns exec sluice-k` on Side::Linux. Dropping it
/// stops the engine.
#[derive(Debug)]
pub struct ClientHost<'h> {
    harness: &'h Harness,
    side: Side,
    run_dir: PathBuf,
    engine: Option<EngineProcess>,
}

impl ClientHost<'_> {
    /// The side the clients run on.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Runs `program ARGS` on the side to completion, killing it after `limit`, and
    /// returns its output whatever its exit status (the caller judges it); fails if it
    /// could not start, overran `limit`, or the engine died under it.
    pub fn run<S: AsRef<OsStr>>(
        &mut self,
        program: Program,
        args: &[S],
        limit: Duration,
    ) -> Result<Output, AppsError> {
        let mut cmd = match &self.engine {
            Some(engine) => self.harness.run_on_engine(engine, &[]),
            None => netns_exec(self.side.namespace())?,
        };
        cmd.arg(super::program::find(program)?)
            .args(args)
            .current_dir(&self.run_dir);
        let what = format!(
            "{} on {}",
            std::iter::once(program.name.to_string())
                .chain(
                    args.iter()
                        .map(|a| a.as_ref().to_string_lossy().into_owned())
                )
                .collect::<Vec<_>>()
                .join(" "),
            self.side
        );
        let out = run_captured(cmd, &what, limit).map_err(|e| self.with_engine_log(e))?;
        self.check_alive()?;
        Ok(out)
    }

    /// Fails (with its log) if the engine has exited.
    pub fn check_alive(&mut self) -> Result<(), AppsError> {
        match &mut self.engine {
            Some(engine) => engine.check_alive(),
            None => Ok(()),
        }
    }

    /// Adds the engine's log to a client's failure.
    pub fn with_engine_log(&self, e: AppsError) -> AppsError {
        match (&self.engine, e) {
            (Some(engine), AppsError::Client { what, detail }) => AppsError::client(
                what,
                format!("{detail}\n  engine log:\n{}", indent(&engine.log_tail())),
            ),
            (_, e) => e,
        }
    }

    /// Stops the engine; fails if it had died.
    pub fn stop(mut self) -> Result<(), AppsError> {
        self.check_alive()?;
        drop(self.engine.take());
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

    /// Replaces the extra `sluice engine` arguments of engines started from now on.
    pub fn set_engine_args(&mut self, args: &[String]) {
        self.engine_args = args.to_vec();
    }

    /// The `sluice` binary it runs.
    pub fn sluice(&self) -> &Path {
        &self.sluice
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
        self.start_with(app, side, &[])
    }

    /// [`Harness::start`] with more `sluice run` flags on Side::Engine (e.g.
    /// `--teardown-offload`); ignored on Linux.
    pub fn start_with(
        &self,
        app: App,
        side: Side,
        run_args: &[&str],
    ) -> Result<Running, AppsError> {
        let run_dir = self.run_dir(&format!("{}-{side}", app.name()))?;
        let program = super::program::find(app.program())?;
        let args = app.args(side.server_ip(), &run_dir, &self.content)?;
        let (engine, mut cmd) = self.launcher(side, &run_dir, run_args)?;
        cmd.arg(&program).args(&args).current_dir(&run_dir);
        let server = ServerProcess::start(
            cmd,
            app.program().name,
            side.name(),
            side.server_addr(app.port()),
            &run_dir.join(app.name()),
        );
        match server {
            Ok(server) => Ok(Running { server, engine }),
            Err(e) => Err(with_engine_log(e, engine.as_ref())),
        }
    }

    /// Starts `app` on Linux in sluice-b (10.77.0.2, where the clients run): the peer of a
    /// client program running on a side ([`Harness::client_host`]). Waits until it accepts.
    pub fn start_peer(&self, app: App) -> Result<Running, AppsError> {
        let run_dir = self.run_dir(&format!("{}-peer", app.name()))?;
        let program = super::program::find(app.program())?;
        let args = app.args(CLIENT_IP, &run_dir, &self.content)?;
        let mut cmd = netns_exec(NS_CLIENT)?;
        cmd.arg(&program).args(&args).current_dir(&run_dir);
        let server = ServerProcess::start(
            cmd,
            app.program().name,
            &format!("the peer in {NS_CLIENT}"),
            SocketAddr::V4(SocketAddrV4::new(CLIENT_IP, app.port())),
            &run_dir.join(app.name()),
        )?;
        Ok(Running {
            server,
            engine: None,
        })
    }

    /// `side`, ready to run client programs (against a peer from [`Harness::start_peer`]):
    /// on Side::Engine this starts an engine, kept for every run until the host is dropped.
    pub fn client_host(&self, side: Side) -> Result<ClientHost<'_>, AppsError> {
        let run_dir = self.run_dir(&format!("clients-{side}"))?;
        let engine = match side {
            Side::Linux => None,
            Side::Engine => Some(self.start_engine(&run_dir)?),
        };
        Ok(ClientHost {
            harness: self,
            side,
            run_dir,
            engine,
        })
    }

    /// A fresh numbered directory for one run's logs and files.
    fn run_dir(&self, what: &str) -> Result<PathBuf, AppsError> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        self.dir.subdir(&format!("{n:02}-{what}"))
    }

    /// `sluice engine --lab` with its socket and logs in `run_dir`.
    fn start_engine(&self, run_dir: &Path) -> Result<EngineProcess, AppsError> {
        EngineProcess::start(
            &self.sluice,
            &self.backend,
            &self.engine_args,
            &run_dir.join("engine.sock"),
            &run_dir.join("engine"),
        )
    }

    /// The engine a program on `side` needs (Side::Engine), and the launcher command that
    /// runs it there, ready for the program and its arguments: `ip netns exec sluice-k` on
    /// Linux, `sluice run --socket S --lab --` on the engine.
    fn launcher(
        &self,
        side: Side,
        run_dir: &Path,
        run_args: &[&str],
    ) -> Result<(Option<EngineProcess>, Command), AppsError> {
        match side {
            Side::Linux => Ok((None, netns_exec(side.namespace())?)),
            Side::Engine => {
                let engine = self.start_engine(run_dir)?;
                let cmd = self.run_on_engine(&engine, run_args);
                Ok((Some(engine), cmd))
            }
        }
    }

    /// `sluice run --socket S --lab [RUN_ARGS] --`: a program attached to `engine`, in
    /// sluice-a.
    fn run_on_engine(&self, engine: &EngineProcess, run_args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.sluice);
        cmd.args(["run", "--socket"])
            .arg(engine.socket())
            .arg("--lab")
            .args(run_args)
            .arg("--");
        cmd
    }

    /// `ip netns exec sluice-b PROGRAM`, ready for arguments.
    pub fn client(&self, program: Program) -> Result<Command, AppsError> {
        let mut cmd = netns_exec(NS_CLIENT)?;
        cmd.arg(super::program::find(program)?);
        Ok(cmd)
    }

    /// Runs `sluice appcheck ARGS` in sluice-b and returns its one-line summary.
    pub fn appcheck<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        limit: Duration,
    ) -> Result<String, AppsError> {
        let mut cmd = netns_exec(NS_CLIENT)?;
        cmd.arg(&self.sluice).arg("appcheck").args(args);
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

/// `ip netns exec NS`, ready for the program and its arguments.
fn netns_exec(ns: &str) -> Result<Command, AppsError> {
    let mut cmd = Command::new(command::find(command::IP)?);
    cmd.args(["netns", "exec", ns]);
    Ok(cmd)
}

/// A server's start failure with the engine's log added (the cause is often there).
fn with_engine_log(e: AppsError, engine: Option<&EngineProcess>) -> AppsError {
    match (e, engine) {
        (
            AppsError::ServerStart {
                program,
                place,
                detail,
                log_tail,
            },
            Some(engine),
        ) => AppsError::ServerStart {
            program,
            place,
            detail,
            log_tail: format!("{log_tail}\n(engine log)\n{}", engine.log_tail()),
        },
        (e, _) => e,
    }
}

/// `text` indented for nesting in an error message.
fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
