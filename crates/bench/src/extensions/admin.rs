//! The admin requests the extension bench sends a running `sluice engine` itself (as
//! `sluice ctl` does, over one session): the firewall's 10k rules would be 10k `sluice ctl
//! map set` processes, each attaching anew.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use sluice_shm::admin::{to_hex, AdminReply, AdminRequest, ModuleRow};
use sluice_shm::control::{
    connect_to, recv_message, send_message, Reply, Request, PROTOCOL_VERSION,
};

/// Rows asked for per map dump page.
const PAGE_ROWS: u32 = 256;
/// Most pages followed: a bound against an engine whose cursor never ends.
const MAX_PAGES: usize = 1 << 16;

/// An attached admin session (root or the engine's uid).
pub struct Session {
    path: PathBuf,
    sock: OwnedFd,
}

impl Session {
    /// Connects to the engine's socket and says Hello.
    pub fn open(path: &Path) -> Result<Session, String> {
        let sock = connect_to(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            name: "sluice-bench".into(),
        };
        let s = Session {
            path: path.to_owned(),
            sock,
        };
        send_message(s.sock.as_fd(), &hello, &[]).map_err(|e| s.fail(e))?;
        match s.receive()? {
            Reply::Welcome { .. } => Ok(s),
            other => Err(format!("hello answered {other:?}")),
        }
    }

    fn fail(&self, e: impl std::fmt::Display) -> String {
        format!("{}: {e}", self.path.display())
    }

    fn receive(&self) -> Result<Reply, String> {
        match recv_message::<Reply>(self.sock.as_fd()) {
            Ok(Some((reply, _fds))) => Ok(reply),
            Ok(None) => Err(self.fail("the engine closed the session")),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// One request and its answer.
    fn ask(&self, req: AdminRequest) -> Result<AdminReply, String> {
        send_message(self.sock.as_fd(), &Request::Admin(req), &[]).map_err(|e| self.fail(e))?;
        match self.receive()? {
            Reply::Admin(a) => Ok(a),
            other => Err(format!("admin request answered {other:?}")),
        }
    }

    /// The engine's modules with their counters.
    pub fn modules(&self) -> Result<Vec<ModuleRow>, String> {
        match self.ask(AdminRequest::ModuleList)? {
            AdminReply::Modules { rows } => Ok(rows),
            other => Err(format!("module list answered {other:?}")),
        }
    }

    /// The module named `name` (the first, if loaded twice).
    pub fn module(&self, name: &str) -> Result<ModuleRow, String> {
        self.modules()?
            .into_iter()
            .find(|m| m.name == name)
            .ok_or_else(|| format!("no module {name} is loaded"))
    }

    /// Writes `key` = `value` into module `module`'s map `map`.
    pub fn map_set(&self, module: u32, map: &str, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.ask(AdminRequest::MapSet {
            module,
            map: map.to_string(),
            key: to_hex(key),
            value: to_hex(value),
        })? {
            AdminReply::Done => Ok(()),
            other => Err(format!("map set answered {other:?}")),
        }
    }

    /// The entries of module `module`'s map `map`, counted page by page (what `sluice ctl
    /// map dump` lists).
    pub fn map_entries(&self, module: u32, map: &str) -> Result<u64, String> {
        let (mut n, mut cursor) = (0u64, 0u32);
        for _ in 0..MAX_PAGES {
            match self.ask(AdminRequest::MapDump {
                module,
                map: map.to_string(),
                cursor,
                max: PAGE_ROWS,
            })? {
                AdminReply::MapEntries { rows, next } => {
                    n += rows.len() as u64;
                    match next {
                        Some(c) if c > cursor => cursor = c,
                        Some(c) => return Err(format!("map dump stuck at cursor {c}")),
                        None => return Ok(n),
                    }
                }
                other => return Err(format!("map dump answered {other:?}")),
            }
        }
        Err(format!("map dump did not end within {MAX_PAGES} pages"))
    }
}
