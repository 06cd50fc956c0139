//! A server program running on one side, reachable from sluice-b once it accepts.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use sluice_device::DeviceError;
use sluice_lab::NS_CLIENT;

use super::error::AppsError;
use super::process::{Supervised, STOP_GRACE};

/// How long a server gets to accept its first connection.
pub const START_LIMIT: Duration = Duration::from_secs(20);
/// How long a server must stay up after the port first accepted.
const SETTLE: Duration = Duration::from_millis(300);

/// A server program on one side (or in sluice-b, as the peer of a client program),
/// stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    proc: Supervised,
    name: String,
    place: String,
    addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `cmd` (already wrapped for where it runs, which `place` names in errors) with
    /// its output in `<log_stem>.out/.err`, and waits until `addr` accepts connections from
    /// sluice-b.
    pub fn start(
        cmd: Command,
        name: &str,
        place: &str,
        addr: SocketAddr,
        log_stem: &Path,
    ) -> Result<ServerProcess, AppsError> {
        let proc = Supervised::spawn(cmd, name, log_stem, false)?;
        let mut server = ServerProcess {
            proc,
            name: name.to_string(),
            place: place.to_string(),
            addr,
        };
        server.wait_accepting(START_LIMIT)?;
        // Something else may hold the port (a leftover server): then this program fails to
        // bind and exits right away, after the probe already connected to the other one.
        thread::sleep(SETTLE);
        server.check_alive()?;
        Ok(server)
    }

    /// Where clients reach it.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id (the leader of its process group).
    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// Stops it (SIGTERM) and returns everything it printed on stdout (a report it prints
    /// when it stops); fails if it had already died.
    pub fn stop_with_stdout(mut self) -> Result<String, AppsError> {
        self.check_alive()?;
        self.proc.stop(STOP_GRACE);
        Ok(self.proc.stdout_log())
    }

    /// The end of its output.
    pub fn log_tail(&self) -> String {
        self.proc.log_tail()
    }

    /// Fails (with its log) if the server has exited: a check that passed against a server
    /// that crashed at the end should not pass.
    pub fn check_alive(&mut self) -> Result<(), AppsError> {
        match self.proc.exited() {
            None => Ok(()),
            Some(status) => Err(self.start_error(format!("has exited ({status})"))),
        }
    }

    /// Stops it now; fails if it had already died.
    pub fn stop(mut self) -> Result<(), AppsError> {
        self.check_alive()?;
        self.proc.stop(STOP_GRACE);
        Ok(())
    }

    fn start_error(&self, detail: String) -> AppsError {
        AppsError::ServerStart {
            program: self.name.clone(),
            place: self.place.clone(),
            detail,
            log_tail: self.proc.log_tail(),
        }
    }

    /// Polls a TCP connect from sluice-b until it succeeds, the program exits, or `limit`.
    fn wait_accepting(&mut self, limit: Duration) -> Result<(), AppsError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let addr = self.addr;
        thread::Builder::new()
            .name("port-probe".into())
            .spawn(move || probe_from_clients(addr, &flag, &tx))
            .map_err(|e| AppsError::io("spawn the port probe", e))?;
        let deadline = Instant::now() + limit;
        let result = loop {
            if let Some(status) = self.proc.exited() {
                break Err(self.start_error(format!("exited before accepting ({status})")));
            }
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Ok(())) => break Ok(()),
                Ok(Err(e)) => {
                    break Err(self.start_error(format!(
                        "cannot enter {NS_CLIENT} to probe {}: {e}",
                        self.addr
                    )))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(self.start_error("the port probe stopped".into()))
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    break Err(self.start_error(format!(
                        "{} did not accept a connection from {NS_CLIENT} within {limit:?}",
                        self.addr
                    )))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        };
        stop.store(true, Ordering::Relaxed);
        result
    }
}

/// From a thread moved into sluice-b: connect to `addr` until it works or `stop` is set.
fn probe_from_clients(
    addr: SocketAddr,
    stop: &AtomicBool,
    tx: &mpsc::Sender<Result<(), DeviceError>>,
) {
    if let Err(e) = sluice_device::netns::enter(NS_CLIENT) {
        let _ = tx.send(Err(e));
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
            let _ = tx.send(Ok(()));
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
}
