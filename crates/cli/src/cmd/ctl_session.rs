//! What every `sluice ctl` command shares: the admin session (libsluice's [`Admin`] with
//! the CLI's errors), the error type, and the JSON output (docs/ctl.md).

use std::fmt;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sluice::admin::{Admin, AdminError};
use sluice_shm::admin::{AdminReply, AdminRequest, ConnRef, ConnRow, ListenerRow};
use sluice_shm::ShmError;

/// The version of the JSON documents `--json` prints (docs/ctl.md).
pub const JSON_SCHEMA: u32 = 1;

/// Why `sluice ctl` failed.
#[derive(Debug)]
pub enum CtlError {
    /// The engine's socket could not be reached, or the conversation broke.
    Socket(PathBuf, ShmError),
    /// The engine refused (the reason begins "permission denied" for a uid not allowed).
    Refused(String),
    /// The engine answered something else than the request asks for.
    Unexpected(String),
    /// No connection matches what the command line named.
    NoSuchConn(String),
    /// Standard output could not be written.
    Output(String),
    /// A module's object or a hex argument on the command line.
    Argument(String),
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CtlError::Socket(path, e) => write!(f, "engine at {}: {e}", path.display()),
            CtlError::Refused(reason) => write!(f, "the engine refused: {reason}"),
            CtlError::Unexpected(what) => write!(f, "unexpected answer from the engine: {what}"),
            CtlError::NoSuchConn(what) => write!(f, "no connection {what}"),
            CtlError::Output(e) => write!(f, "cannot write the output: {e}"),
            CtlError::Argument(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for CtlError {}

/// An admin session: libsluice's [`Admin`] (the client code lives there, shared with
/// programs that manage an engine natively), with the CLI's errors.
pub(crate) struct Session(Admin);

impl From<AdminError> for CtlError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Socket(path, e) => CtlError::Socket(path, e),
            AdminError::Refused(reason) => CtlError::Refused(reason),
            AdminError::Unexpected(what) => CtlError::Unexpected(what),
            e @ AdminError::ObjectTooBig(_) => CtlError::Argument(e.to_string()),
        }
    }
}

impl Session {
    /// Connects and says Hello (the region and doorbell the engine hands over are dropped).
    pub(crate) fn open(path: &Path) -> Result<Session, CtlError> {
        Ok(Session(Admin::open_as(path, "sluice-ctl")?))
    }

    /// One admin request and its answer.
    pub(crate) fn ask(&self, req: AdminRequest) -> Result<AdminReply, CtlError> {
        Ok(self.0.ask(req)?)
    }

    /// Every row of a paged list: `request` asks for a page from a cursor, `page` takes the
    /// rows and the next cursor out of the reply (None: not this list's reply).
    pub(crate) fn all_pages<T>(
        &self,
        request: impl Fn(u32) -> AdminRequest,
        page: impl Fn(AdminReply) -> Result<(Vec<T>, Option<u32>), AdminReply>,
    ) -> Result<Vec<T>, CtlError> {
        Ok(self.0.all_pages(request, page)?)
    }

    /// Every listener, page by page.
    pub(crate) fn listeners(&self) -> Result<Vec<ListenerRow>, CtlError> {
        Ok(self.0.listeners()?)
    }

    /// Every connection, page by page.
    pub(crate) fn conns(&self) -> Result<Vec<ConnRow>, CtlError> {
        Ok(self.0.conns()?)
    }

    /// Every counter, page by page.
    pub(crate) fn counters(&self) -> Result<Vec<(String, u64)>, CtlError> {
        Ok(self.0.counters()?)
    }

    /// The connection `spec` names: SLOT.GENERATION, or LOCAL-REMOTE looked up in the list.
    pub(crate) fn resolve(&self, spec: &str) -> Result<ConnRef, CtlError> {
        if let Some((slot, generation)) = spec.split_once('.') {
            if let (Ok(slot), Ok(generation)) = (slot.parse(), generation.parse()) {
                return Ok(ConnRef { slot, generation });
            }
        }
        let Some((local, remote)) = spec.split_once('-') else {
            return Err(CtlError::NoSuchConn(format!(
                "{spec:?}: name it SLOT.GENERATION or LOCAL_IP:PORT-REMOTE_IP:PORT"
            )));
        };
        let (Ok(local), Ok(remote)) = (local.parse::<SocketAddrV4>(), remote.parse()) else {
            return Err(CtlError::NoSuchConn(format!(
                "{spec:?}: addresses are IPv4 IP:PORT"
            )));
        };
        self.conns()?
            .into_iter()
            .find(|c| c.local == local && c.remote == remote)
            .map(|c| c.id)
            .ok_or_else(|| CtlError::NoSuchConn(spec.to_string()))
    }
}

/// Pretty JSON and a newline.
pub(crate) fn to_json<T: Serialize>(doc: &T) -> Result<String, CtlError> {
    serde_json::to_string_pretty(doc)
        .map(|s| s + "\n")
        .map_err(|e| CtlError::Output(e.to_string()))
}
