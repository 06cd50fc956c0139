//! The engine's admin requests as a Rust API (issue 19 item 1c; docs/ctl.md, docs/ebpf.md):
//! what `sluice ctl` sends, for programs that manage a running engine themselves — list
//! connections, listeners and counters, set a connection's congestion control or rate, load
//! and unload eBPF modules, and read and write their maps while traffic flows.
//!
//! An [`Admin`] is a session of its own on the engine's control socket (Hello, then admin
//! requests; uid 0 or the engine's uid), not an attached application: it maps no region.
//! Lists come page by page; the calls here follow the pages to the end.
//!
//! ```no_run
//! let admin = sluice::admin::Admin::open(&sluice::socket_path_from_env())?;
//! let (object, section) = (std::fs::read("firewall.o").unwrap(), "xdp");
//! let id = admin.module_load("ingress", "firewall", section, &object)?;
//! admin.map_set(id, "rules", &[10, 0, 0, 2, 10, 0, 0, 1, 0x9c, 0x40, 0, 80, 6, 0, 0, 0], &[0; 8])?;
//! for (key, hits) in admin.map_dump(id, "rules")? {
//!     println!("{key:02x?} {hits:02x?}");
//! }
//! # Ok::<(), sluice::admin::AdminError>(())
//! ```

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use sluice_shm::admin::{from_hex, to_hex};
pub use sluice_shm::admin::{
    AdminReply, AdminRequest, ConnRef, ConnRow, ListenerRow, ModuleRow, OwnerRow, MAX_OBJECT,
};
use sluice_shm::control::{
    connect_to, recv_message, send_message, Reply, Request, PROTOCOL_VERSION,
};
pub use sluice_shm::trace::TraceRow;
use sluice_shm::ShmError;

/// A map entry as (key, value) bytes in the map's layout.
pub type MapEntry = (Vec<u8>, Vec<u8>);

/// Rows asked for per page (the engine sends fewer when they would not fit one message).
pub const PAGE_ROWS: u32 = 256;
/// Most pages followed for one list: a bound against an engine that never ends one.
const MAX_PAGES: usize = 1 << 20;

/// Why an admin call failed.
#[derive(Debug)]
pub enum AdminError {
    /// The engine's socket could not be reached, or the conversation broke.
    Socket(PathBuf, ShmError),
    /// The engine refused; its reason (it begins with an errno name, such as `ENOENT:`, or
    /// "permission denied" for a uid not allowed).
    Refused(String),
    /// The engine answered something else than the request asks for.
    Unexpected(String),
    /// A module object larger than [`MAX_OBJECT`] bytes (it cannot fit one message).
    ObjectTooBig(usize),
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::Socket(path, e) => write!(f, "engine at {}: {e}", path.display()),
            AdminError::Refused(reason) => write!(f, "the engine refused: {reason}"),
            AdminError::Unexpected(what) => write!(f, "unexpected answer from the engine: {what}"),
            AdminError::ObjectTooBig(n) => write!(
                f,
                "the object is {n} bytes; the control socket carries at most {MAX_OBJECT}"
            ),
        }
    }
}

impl std::error::Error for AdminError {}

/// An admin session with a running engine.
pub struct Admin {
    path: PathBuf,
    sock: OwnedFd,
}

impl Admin {
    /// Connects to the engine's socket at `path` and says Hello as `sluice-admin`.
    pub fn open(path: &Path) -> Result<Admin, AdminError> {
        Self::open_as(path, "sluice-admin")
    }

    /// As [`Admin::open`], under the name `name` (what the engine logs and lists).
    pub fn open_as(path: &Path, name: &str) -> Result<Admin, AdminError> {
        let fail = |e| AdminError::Socket(path.to_owned(), e);
        let sock = connect_to(path).map_err(fail)?;
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            name: name.into(),
        };
        send_message(sock.as_fd(), &hello, &[]).map_err(fail)?;
        let admin = Admin {
            path: path.to_owned(),
            sock,
        };
        // The region and doorbell the engine hands over with Welcome are dropped.
        match admin.receive()? {
            Reply::Welcome { .. } => Ok(admin),
            Reply::Refused { reason } => Err(AdminError::Refused(reason)),
            other => Err(AdminError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next message from the engine (blocking).
    pub fn receive(&self) -> Result<Reply, AdminError> {
        match recv_message::<Reply>(self.sock.as_fd()) {
            Ok(Some((reply, _fds))) => Ok(reply),
            Ok(None) => Err(AdminError::Unexpected("nothing".into())),
            Err(e) => Err(AdminError::Socket(self.path.clone(), e)),
        }
    }

    /// One admin request and its answer.
    pub fn ask(&self, req: AdminRequest) -> Result<AdminReply, AdminError> {
        send_message(self.sock.as_fd(), &Request::Admin(req), &[])
            .map_err(|e| AdminError::Socket(self.path.clone(), e))?;
        match self.receive()? {
            Reply::Admin(a) => Ok(a),
            Reply::Refused { reason } => Err(AdminError::Refused(reason)),
            other => Err(AdminError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Every row of a paged list: `request` asks for a page from a cursor, `page` takes the
    /// rows and the next cursor out of the reply (Err: not this list's reply).
    pub fn all_pages<T>(
        &self,
        request: impl Fn(u32) -> AdminRequest,
        page: impl Fn(AdminReply) -> Result<(Vec<T>, Option<u32>), AdminReply>,
    ) -> Result<Vec<T>, AdminError> {
        let mut all = Vec::new();
        let mut cursor = 0;
        for _ in 0..MAX_PAGES {
            let (rows, next) = page(self.ask(request(cursor))?)
                .map_err(|other| AdminError::Unexpected(format!("{other:?}")))?;
            all.extend(rows);
            match next {
                Some(n) if n > cursor => cursor = n,
                // A cursor that does not advance would loop forever.
                Some(n) => return Err(AdminError::Unexpected(format!("a page stuck at {n}"))),
                None => return Ok(all),
            }
        }
        Ok(all)
    }

    /// Every listener.
    pub fn listeners(&self) -> Result<Vec<ListenerRow>, AdminError> {
        self.all_pages(
            |cursor| AdminRequest::Listeners {
                cursor,
                max: PAGE_ROWS,
            },
            |reply| match reply {
                AdminReply::Listeners { rows, next } => Ok((rows, next)),
                other => Err(other),
            },
        )
    }

    /// Every connection.
    pub fn conns(&self) -> Result<Vec<ConnRow>, AdminError> {
        self.all_pages(
            |cursor| AdminRequest::Conns {
                cursor,
                max: PAGE_ROWS,
            },
            |reply| match reply {
                AdminReply::Conns { rows, next } => Ok((rows, next)),
                other => Err(other),
            },
        )
    }

    /// Every counter, by name (core, service, engine loop, device).
    pub fn counters(&self) -> Result<Vec<(String, u64)>, AdminError> {
        self.all_pages(
            |cursor| AdminRequest::Counters {
                cursor,
                max: PAGE_ROWS,
            },
            |reply| match reply {
                AdminReply::Counters { rows, next } => Ok((rows, next)),
                other => Err(other),
            },
        )
    }

    /// Sets connection `conn`'s congestion control ("dctcp", "timely", "reno", "cubic", "bbr").
    pub fn set_congestion(&self, conn: ConnRef, algorithm: &str) -> Result<(), AdminError> {
        done(self.ask(AdminRequest::SetCongestion {
            conn,
            algorithm: algorithm.into(),
        })?)
    }

    /// Fixes connection `conn`'s rate in bits per second (0: the policy's own again).
    pub fn set_rate(&self, conn: ConnRef, bits_per_sec: u64) -> Result<(), AdminError> {
        done(self.ask(AdminRequest::SetRate { conn, bits_per_sec })?)
    }

    /// Loads `object` (a clang-built eBPF ELF) at `hook` ("ingress" or "egress") from its
    /// section `section`, naming it `name`; the module's id. A program the verifier refuses
    /// is [`AdminError::Refused`] with `verifier: insn N: reason`.
    pub fn module_load(
        &self,
        hook: &str,
        name: &str,
        section: &str,
        object: &[u8],
    ) -> Result<u32, AdminError> {
        if object.len() > MAX_OBJECT {
            return Err(AdminError::ObjectTooBig(object.len()));
        }
        match self.ask(AdminRequest::ModuleLoad {
            hook: hook.into(),
            name: name.into(),
            section: section.into(),
            object: to_hex(object),
        })? {
            AdminReply::ModuleLoaded { id } => Ok(id),
            other => Err(AdminError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Unloads module `id` (with its maps).
    pub fn module_unload(&self, id: u32) -> Result<(), AdminError> {
        done(self.ask(AdminRequest::ModuleUnload { id })?)
    }

    /// Every loaded module with its counters, in load order.
    pub fn modules(&self) -> Result<Vec<ModuleRow>, AdminError> {
        match self.ask(AdminRequest::ModuleList)? {
            AdminReply::Modules { rows } => Ok(rows),
            other => Err(AdminError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Every entry of module `module`'s map `map` as (key, value) bytes in the map's layout
    /// (array entries that are all zeros are left out).
    pub fn map_dump(&self, module: u32, map: &str) -> Result<Vec<MapEntry>, AdminError> {
        let rows = self.all_pages(
            |cursor| AdminRequest::MapDump {
                module,
                map: map.into(),
                cursor,
                max: PAGE_ROWS,
            },
            |reply| match reply {
                AdminReply::MapEntries { rows, next } => Ok((rows, next)),
                other => Err(other),
            },
        )?;
        rows.iter()
            .map(|(k, v)| Ok((unhex(k)?, unhex(v)?)))
            .collect()
    }

    /// The value of `key` in module `module`'s map `map`; None if the key is absent.
    pub fn map_get(
        &self,
        module: u32,
        map: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, AdminError> {
        let req = AdminRequest::MapGet {
            module,
            map: map.into(),
            key: to_hex(key),
        };
        match self.ask(req) {
            Ok(AdminReply::MapValue { value }) => Ok(Some(unhex(&value)?)),
            Ok(other) => Err(AdminError::Unexpected(format!("{other:?}"))),
            // The engine's answer for a key that is not there.
            Err(AdminError::Refused(r)) if r.starts_with("ENOENT: no key") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Inserts or replaces `key`'s value (BPF_ANY).
    pub fn map_set(
        &self,
        module: u32,
        map: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), AdminError> {
        done(self.ask(AdminRequest::MapSet {
            module,
            map: map.into(),
            key: to_hex(key),
            value: to_hex(value),
        })?)
    }

    /// Deletes `key` (refused for arrays, and for a key that is not there).
    pub fn map_delete(&self, module: u32, map: &str, key: &[u8]) -> Result<(), AdminError> {
        done(self.ask(AdminRequest::MapDelete {
            module,
            map: map.into(),
            key: to_hex(key),
        })?)
    }

    /// Turns tracepoint `name` (or "all") on or off (docs/tracepoints.md).
    pub fn trace_set(&self, name: &str, on: bool) -> Result<(), AdminError> {
        done(self.ask(AdminRequest::TraceSet {
            name: name.into(),
            on,
        })?)
    }

    /// Every tracepoint, on or off, with its hits, and the events lost from the full ring.
    pub fn traces(&self) -> Result<(Vec<TraceRow>, u64), AdminError> {
        match self.ask(AdminRequest::TraceList)? {
            AdminReply::Traces { rows, lost } => Ok((rows, lost)),
            other => Err(AdminError::Unexpected(format!("{other:?}"))),
        }
    }
}

fn done(reply: AdminReply) -> Result<(), AdminError> {
    match reply {
        AdminReply::Done => Ok(()),
        other => Err(AdminError::Unexpected(format!("{other:?}"))),
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, AdminError> {
    from_hex(s).map_err(|e| AdminError::Unexpected(format!("hex from the engine: {e}")))
}
