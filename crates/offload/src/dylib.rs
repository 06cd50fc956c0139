//! Rust handlers loaded at run time from a shared library (docs/offload.md "Rust handlers
//! from a shared library"): `libloading` opens it, `sluice_offload_handler_v1` gives its
//! table ([`sluice_offload_api::LibraryV1`]), whose ABI version and struct sizes are checked
//! before anything else is read; a handler is then called with Table 2's API as a
//! [`HostV1`] over the request's [`OffloadCtx`].
//!
//! The one module of this crate with `unsafe`: opening a library and calling through its C
//! ABI is the OS boundary. Loading runs the library's code in the engine, so only an
//! operator (uid 0 or the engine's uid) may register one (docs/offload.md).
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use libloading::Library;
use sluice_offload_api::{
    status, HandlerV1, HostV1, LibraryV1, ABI_VERSION, ENTRY_SYMBOL, MAX_HANDLERS,
};

use crate::api::{DmaId, Handler, HandlerError, OffloadCtx};

/// Why a library was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DylibError {
    /// It could not be opened (the loader's message).
    Open(String),
    /// It has no `sluice_offload_handler_v1`.
    MissingEntry(String),
    /// Its table is of another ABI version.
    WrongVersion {
        /// The version it says.
        found: u32,
    },
    /// A struct's size is not what this ABI version has.
    WrongSize {
        /// Which struct.
        what: &'static str,
        /// The size the library says.
        found: u32,
        /// The size here.
        expected: u32,
    },
    /// The table is malformed (a null array, too many handlers, a null name).
    BadTable(&'static str),
    /// No handler of that name; the names it has.
    NoSuchHandler {
        /// The name asked for.
        name: String,
        /// The library's handlers.
        available: Vec<String>,
    },
}

impl fmt::Display for DylibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DylibError::Open(e) => write!(f, "cannot open the handler library: {e}"),
            DylibError::MissingEntry(e) => {
                write!(f, "not a handler library: no sluice_offload_handler_v1 ({e})")
            }
            DylibError::WrongVersion { found } => write!(
                f,
                "handler library of ABI version {found}; this engine loads version {ABI_VERSION}"
            ),
            DylibError::WrongSize {
                what,
                found,
                expected,
            } => write!(
                f,
                "handler library's {what} is {found} bytes, not {expected}: built against another sluice-offload-api"
            ),
            DylibError::BadTable(why) => write!(f, "handler library's table is malformed: {why}"),
            DylibError::NoSuchHandler { name, available } => write!(
                f,
                "no handler {name:?} in the library (it has: {})",
                available.join(", ")
            ),
        }
    }
}

impl std::error::Error for DylibError {}

/// A handler of a loaded library (the library stays loaded while any handler of it lives).
pub struct DylibHandler {
    name: String,
    handle: extern "C" fn(*const HostV1) -> u32,
    // Dropped last: `handle` is code of this library.
    _library: Arc<Library>,
}

impl fmt::Debug for DylibHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DylibHandler({})", self.name)
    }
}

/// The names of `lib`'s handlers, and their entries, after the checks.
fn handlers(
    lib: &Library,
) -> Result<Vec<(String, extern "C" fn(*const HostV1) -> u32)>, DylibError> {
    // SAFETY: the symbol is declared with the type the ABI gives it (sluice-offload-api's
    // export_handlers! defines it so); a library that lies about it is an operator's error
    // the ABI cannot detect, which is why loading one is an operator's act.
    let entry = unsafe { lib.get::<extern "C" fn() -> *const LibraryV1>(ENTRY_SYMBOL) }
        .map_err(|e| DylibError::MissingEntry(e.to_string()))?;
    let table = entry();
    // SAFETY: the entry returns null or a static table that lives as long as the library;
    // only its first two u32s (version, size) are read before they are checked.
    let (version, size) = match unsafe { table.cast::<[u32; 2]>().as_ref() } {
        Some(h) => (h[0], h[1]),
        None => return Err(DylibError::BadTable("null table")),
    };
    if version != ABI_VERSION {
        return Err(DylibError::WrongVersion { found: version });
    }
    let expected = std::mem::size_of::<LibraryV1>() as u32;
    if size != expected {
        return Err(DylibError::WrongSize {
            what: "LibraryV1",
            found: size,
            expected,
        });
    }
    // SAFETY: version and size match: the table is a LibraryV1 (non-null, checked above).
    let table = unsafe { &*table };
    let expected = std::mem::size_of::<HandlerV1>() as u32;
    if table.handler_size != expected {
        return Err(DylibError::WrongSize {
            what: "HandlerV1",
            found: table.handler_size,
            expected,
        });
    }
    let count = table.count as usize;
    if count > MAX_HANDLERS {
        return Err(DylibError::BadTable("more handlers than MAX_HANDLERS"));
    }
    if count > 0 && table.handlers.is_null() {
        return Err(DylibError::BadTable("null handler array"));
    }
    let list: &[HandlerV1] = if count == 0 {
        &[]
    } else {
        // SAFETY: a non-null static array of `count` HandlerV1s of the checked size.
        unsafe { std::slice::from_raw_parts(table.handlers, count) }
    };
    list.iter()
        .map(|h| {
            if h.name.is_null() {
                return Err(DylibError::BadTable("a handler without a name"));
            }
            // SAFETY: a non-null NUL-terminated static string of the library.
            let name = unsafe { CStr::from_ptr(h.name) }
                .to_string_lossy()
                .into_owned();
            Ok((name, h.handle))
        })
        .collect()
}

impl DylibHandler {
    /// Loads `path` and takes its handler `name`; refused clearly if the library cannot be
    /// opened, has no entry point, is of another ABI version or struct size, or has no such
    /// handler.
    pub fn load(path: &Path, name: &str) -> Result<DylibHandler, DylibError> {
        // SAFETY: opening runs the library's initialisers in this process: trusting it is
        // the operator's decision (only an operator may register a library).
        let lib = unsafe { Library::new(path) }.map_err(|e| DylibError::Open(e.to_string()))?;
        let list = handlers(&lib)?;
        let Some(&(_, handle)) = list.iter().find(|(n, _)| n == name) else {
            return Err(DylibError::NoSuchHandler {
                name: name.to_string(),
                available: list.into_iter().map(|(n, _)| n).collect(),
            });
        };
        Ok(DylibHandler {
            name: name.to_string(),
            handle,
            _library: Arc::new(lib),
        })
    }

    /// The names of the handlers `path` exports (after the same checks as a load).
    pub fn list(path: &Path) -> Result<Vec<String>, DylibError> {
        // SAFETY: as in `load`.
        let lib = unsafe { Library::new(path) }.map_err(|e| DylibError::Open(e.to_string()))?;
        Ok(handlers(&lib)?.into_iter().map(|(n, _)| n).collect())
    }

    /// Its name in the library.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The engine's state behind a [`HostV1`] for one request.
struct Host<'c, 'a> {
    ctx: &'c mut OffloadCtx<'a>,
    /// The first error a call met: it is the request's status, whatever the handler says.
    error: Option<HandlerError>,
}

/// Runs `f` on the host state `p` points to; its status (a panic here, which the checks
/// should make impossible, is an error rather than an unwind through C).
fn with(p: *mut c_void, f: impl FnOnce(&mut Host<'_, '_>) -> Result<(), HandlerError>) -> u32 {
    // SAFETY: `p` is the `Host` that `DylibHandler::handle` put in the HostV1 it passed;
    // that call is still running (the handler calls back only during it), and nothing else
    // holds a reference to the Host meanwhile.
    let Some(h) = (unsafe { p.cast::<Host<'_, '_>>().as_mut() }) else {
        return status::BAD_REQUEST;
    };
    if let Some(e) = h.error {
        return e.code();
    }
    let r = catch_unwind(AssertUnwindSafe(|| f(h))).unwrap_or(Err(HandlerError::Panicked));
    match r {
        Ok(()) => status::OK,
        Err(e) => {
            h.error = Some(e);
            e.code()
        }
    }
}

/// Writes `v` to `out` if it is not null.
fn put<T>(out: *mut T, v: T) {
    // SAFETY: the handler passes null or a pointer to its own local (sluice-offload-api's
    // Ctx always passes a local).
    if let Some(o) = unsafe { out.as_mut() } {
        *o = v;
    }
}

extern "C" fn h_request(p: *mut c_void, len: *mut usize) -> *const u8 {
    let mut out: (*const u8, usize) = (std::ptr::null(), 0);
    with(p, |h| {
        let r = h.ctx.request();
        out = (r.as_ptr(), r.len());
        Ok(())
    });
    put(len, out.1);
    out.0
}

extern "C" fn h_resp_cap(p: *mut c_void) -> usize {
    let mut cap = 0;
    with(p, |h| {
        cap = h.ctx.resp_cap();
        Ok(())
    });
    cap
}

extern "C" fn h_step(p: *mut c_void) -> u32 {
    with(p, |h| h.ctx.step())
}

extern "C" fn h_alloc_resp(p: *mut c_void, size: usize) -> u32 {
    with(p, |h| h.ctx.alloc_resp(size))
}

extern "C" fn h_resp(p: *mut c_void, len: *mut usize) -> *mut u8 {
    let mut out: (*mut u8, usize) = (std::ptr::null_mut(), 0);
    with(p, |h| {
        if let Some(r) = h.ctx.resp_mut() {
            out = (r.as_mut_ptr(), r.len());
        }
        Ok(())
    });
    put(len, out.1);
    out.0
}

fn id_of(d: DmaId) -> u32 {
    d.index()
}

extern "C" fn h_submit_read(p: *mut c_void, addr: u64, at: usize, len: usize, id: *mut u32) -> u32 {
    with(p, |h| {
        let d = h.ctx.submit_read(addr, at, len)?;
        put(id, id_of(d));
        Ok(())
    })
}

extern "C" fn h_submit_write(
    p: *mut c_void,
    addr: u64,
    at: usize,
    len: usize,
    id: *mut u32,
) -> u32 {
    with(p, |h| {
        let d = h.ctx.submit_write(addr, at, len)?;
        put(id, id_of(d));
        Ok(())
    })
}

extern "C" fn h_wait(p: *mut c_void, id: u32) -> u32 {
    with(p, |h| h.ctx.wait(DmaId::from_index(id)))
}

extern "C" fn h_submit_resp(p: *mut c_void, size: usize) -> u32 {
    with(p, |h| h.ctx.submit_resp(size))
}

impl Handler for DylibHandler {
    fn handle(&self, ctx: &mut OffloadCtx<'_>) -> Result<(), HandlerError> {
        let mut host = Host { ctx, error: None };
        let api = HostV1 {
            size: std::mem::size_of::<HostV1>() as u32,
            ctx: (&mut host as *mut Host<'_, '_>).cast::<c_void>(),
            request: h_request,
            resp_cap: h_resp_cap,
            step: h_step,
            alloc_resp: h_alloc_resp,
            resp: h_resp,
            submit_read: h_submit_read,
            submit_write: h_submit_write,
            wait: h_wait,
            submit_resp: h_submit_resp,
        };
        // The library's boundary (export_handlers!) catches its panics; an unwind that
        // still reached here would abort, as any unwind out of extern "C" does.
        let code = (self.handle)(&api);
        if let Some(e) = host.error {
            return Err(e);
        }
        match HandlerError::from_code(code) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}
