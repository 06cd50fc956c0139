//! What a Rust offload handler is built against (docs/offload.md "Rust handlers from a
//! shared library"): a `cdylib` exports `sluice_offload_handler_v1`, which returns a
//! [`LibraryV1`] naming its handlers; the engine loads it at registration, checks the ABI
//! version and the struct sizes, and calls a handler with a [`HostV1`], Table 2's API as C
//! function pointers. Handler authors use the safe [`Ctx`] and [`export_handlers!`], which
//! also catches a panic at the boundary (it becomes [`status::PANICKED`]).
//!
//! This crate touches the C ABI between two separately built binaries, so it holds the
//! `unsafe` of that boundary (each block says why it holds); it has no dependencies.

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The ABI version [`LibraryV1`] and [`HostV1`] describe.
pub const ABI_VERSION: u32 = 1;
/// The entry point's symbol (NUL-terminated, for the loader).
pub const ENTRY_SYMBOL: &[u8] = b"sluice_offload_handler_v1\0";
/// Handlers one library exports at most (the loader reads no more).
pub const MAX_HANDLERS: usize = 64;

/// Status codes (0 is success); the same numbers as `sluice_offload::HandlerError`.
pub mod status {
    /// Success.
    pub const OK: u32 = 0;
    /// An access outside every registered region.
    pub const OUTSIDE_REGION: u32 = 1;
    /// The step budget or the deadline ran out.
    pub const BUDGET_EXHAUSTED: u32 = 2;
    /// A response larger than allowed, or an access past the response.
    pub const RESPONSE_TOO_LARGE: u32 = 3;
    /// Too many reads/writes outstanding.
    pub const TOO_MANY_OUTSTANDING: u32 = 4;
    /// The request does not parse.
    pub const BAD_REQUEST: u32 = 5;
    /// The key was not found.
    pub const NOT_FOUND: u32 = 6;
    /// The handler returned without submitting a response.
    pub const NO_RESPONSE: u32 = 8;
    /// The handler panicked (caught at the library's boundary).
    pub const PANICKED: u32 = 9;
    /// The first code a handler may use for its own errors.
    pub const CUSTOM: u32 = 16;
}

/// Table 2's API as the engine hands it to a handler (ABI version 1). Every call returns a
/// status; after a non-zero one the engine answers with that status whatever the handler
/// does next.
#[repr(C)]
pub struct HostV1 {
    /// `size_of::<HostV1>()` as the engine built it.
    pub size: u32,
    /// The engine's state for this request (opaque; passed back to every call).
    pub ctx: *mut c_void,
    /// The request's bytes: its address, and its length in `*len`.
    pub request: extern "C" fn(ctx: *mut c_void, len: *mut usize) -> *const u8,
    /// The most bytes the response may have.
    pub resp_cap: extern "C" fn(ctx: *mut c_void) -> usize,
    /// One step of the budget (a handler that loops calls it per iteration).
    pub step: extern "C" fn(ctx: *mut c_void) -> u32,
    /// alloc_resp(size): a zeroed response of `size` bytes.
    pub alloc_resp: extern "C" fn(ctx: *mut c_void, size: usize) -> u32,
    /// The response allocated: its address (null if none), its length in `*len`.
    pub resp: extern "C" fn(ctx: *mut c_void, len: *mut usize) -> *mut u8,
    /// submit_dma(READ): `len` region bytes at `addr` into the response at `at`; the id in
    /// `*id`.
    pub submit_read:
        extern "C" fn(ctx: *mut c_void, addr: u64, at: usize, len: usize, id: *mut u32) -> u32,
    /// submit_dma(WRITE): the response's bytes `[at, at + len)` to region `addr`.
    pub submit_write:
        extern "C" fn(ctx: *mut c_void, addr: u64, at: usize, len: usize, id: *mut u32) -> u32,
    /// wait_dma_finish(id): `id` and everything submitted before it are done.
    pub wait: extern "C" fn(ctx: *mut c_void, id: u32) -> u32,
    /// submit_resp(size): the response's first `size` bytes are the answer.
    pub submit_resp: extern "C" fn(ctx: *mut c_void, size: usize) -> u32,
}

/// One handler a library exports.
#[repr(C)]
pub struct HandlerV1 {
    /// Its name (NUL-terminated): what a registration names after the path (`LIB.so:NAME`).
    pub name: *const c_char,
    /// Runs one request; 0 once the response is submitted, else a status.
    pub handle: extern "C" fn(host: *const HostV1) -> u32,
}

/// What `sluice_offload_handler_v1` returns: the library's handlers.
#[repr(C)]
pub struct LibraryV1 {
    /// [`ABI_VERSION`] as the library was built.
    pub abi_version: u32,
    /// `size_of::<LibraryV1>()` as the library was built.
    pub size: u32,
    /// `size_of::<HandlerV1>()` as the library was built.
    pub handler_size: u32,
    /// Handlers in `handlers`.
    pub count: u32,
    /// The handlers (a static array).
    pub handlers: *const HandlerV1,
}

// SAFETY: a LibraryV1 and its HandlerV1s are immutable statics of the library (names are
// string literals, functions are code); nothing is written through their pointers.
unsafe impl Sync for LibraryV1 {}
// SAFETY: as above.
unsafe impl Sync for HandlerV1 {}

/// A failed call: its status (non-zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub u32);

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offload status {}", self.0)
    }
}

impl std::error::Error for Status {}

fn ok(code: u32) -> Result<(), Status> {
    if code == status::OK {
        Ok(())
    } else {
        Err(Status(code))
    }
}

/// A handler's safe view of one request (Table 2's API).
pub struct Ctx<'a> {
    host: &'a HostV1,
}

impl Ctx<'_> {
    /// The request's bytes.
    pub fn request(&self) -> &[u8] {
        let mut len = 0usize;
        let p = (self.host.request)(self.host.ctx, &mut len);
        if p.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: the engine keeps the request's `len` bytes alive and unchanged for the
        // whole call to the handler, which outlives this borrow of the context.
        unsafe { std::slice::from_raw_parts(p, len) }
    }

    /// The most bytes the response may have.
    pub fn resp_cap(&self) -> usize {
        (self.host.resp_cap)(self.host.ctx)
    }

    /// One step of the budget.
    pub fn step(&mut self) -> Result<(), Status> {
        ok((self.host.step)(self.host.ctx))
    }

    /// Allocates a zeroed response of `size` bytes.
    pub fn alloc_resp(&mut self, size: usize) -> Result<(), Status> {
        ok((self.host.alloc_resp)(self.host.ctx, size))
    }

    /// The response allocated (empty if none).
    pub fn resp_mut(&mut self) -> &mut [u8] {
        let mut len = 0usize;
        let p = (self.host.resp)(self.host.ctx, &mut len);
        if p.is_null() || len == 0 {
            return &mut [];
        }
        // SAFETY: the engine's response buffer has `len` bytes, is not touched by the
        // engine until the handler's next call (which needs `&mut self`, ending this
        // borrow), and lives for the whole request.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }

    /// Submits a read of `len` region bytes at `addr` into the response at `at`.
    pub fn submit_read(&mut self, addr: u64, at: usize, len: usize) -> Result<u32, Status> {
        let mut id = 0u32;
        ok((self.host.submit_read)(
            self.host.ctx,
            addr,
            at,
            len,
            &mut id,
        ))?;
        Ok(id)
    }

    /// Submits a write of the response's `[at, at + len)` to region address `addr`.
    pub fn submit_write(&mut self, addr: u64, at: usize, len: usize) -> Result<u32, Status> {
        let mut id = 0u32;
        ok((self.host.submit_write)(
            self.host.ctx,
            addr,
            at,
            len,
            &mut id,
        ))?;
        Ok(id)
    }

    /// Waits for `id` and everything submitted before it.
    pub fn wait(&mut self, id: u32) -> Result<(), Status> {
        ok((self.host.wait)(self.host.ctx, id))
    }

    /// Submits the response's first `size` bytes.
    pub fn submit_resp(&mut self, size: usize) -> Result<(), Status> {
        ok((self.host.submit_resp)(self.host.ctx, size))
    }
}

/// A handler's panic is reported in one line, without a backtrace: the engine answers it
/// with [`status::PANICKED`] at once, and printing a backtrace (RUST_BACKTRACE) takes longer
/// than a requester's retransmission timer. The hook is this library's own (a cdylib has
/// its own copy of std): the engine's panics are untouched.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            eprintln!("sluice offload handler panicked: {info}");
        }));
    });
}

/// Runs `f` on the request `host` describes, for [`export_handlers!`]: its status, with a
/// panic caught here (unwinding out of an `extern "C"` function would abort the engine).
///
/// # Safety
/// `host` is null or points to a `HostV1` (with the `ctx` its functions expect) that stays
/// valid for the whole call: what the engine passes to a handler's `handle`.
pub unsafe fn run(host: *const HostV1, f: fn(&mut Ctx<'_>) -> Result<(), Status>) -> u32 {
    // SAFETY: the caller's contract; null is refused.
    let Some(host) = (unsafe { host.as_ref() }) else {
        return status::BAD_REQUEST;
    };
    if (host.size as usize) < std::mem::size_of::<HostV1>() {
        return status::BAD_REQUEST;
    }
    quiet_panics();
    match catch_unwind(AssertUnwindSafe(|| f(&mut Ctx { host }))) {
        Ok(Ok(())) => status::OK,
        Ok(Err(Status(code))) => code.max(1),
        Err(_) => status::PANICKED,
    }
}

/// Exports handlers from a `cdylib`: `export_handlers!("name" => function, ...)`, each
/// function a `fn(&mut Ctx<'_>) -> Result<(), Status>`. Defines `sluice_offload_handler_v1`.
#[macro_export]
macro_rules! export_handlers {
    ($($name:literal => $f:path),+ $(,)?) => {
        /// The library's handlers (sluice-offload-api's ABI version 1).
        // The exported symbol is the ABI (no_mangle counts as unsafe code).
        #[allow(unsafe_code)]
        #[no_mangle]
        pub extern "C" fn sluice_offload_handler_v1() -> *const $crate::LibraryV1 {
            static HANDLERS: &[$crate::HandlerV1] = &[$(
                $crate::HandlerV1 {
                    name: concat!($name, "\0").as_ptr() as *const ::std::ffi::c_char,
                    handle: {
                        extern "C" fn handle(host: *const $crate::HostV1) -> u32 {
                            // SAFETY: the engine calls `handle` with the HostV1 of the
                            // request it runs, valid for the call (the ABI's contract).
                            unsafe { $crate::run(host, $f) }
                        }
                        handle
                    },
                },
            )+];
            static LIBRARY: $crate::LibraryV1 = $crate::LibraryV1 {
                abi_version: $crate::ABI_VERSION,
                size: ::std::mem::size_of::<$crate::LibraryV1>() as u32,
                handler_size: ::std::mem::size_of::<$crate::HandlerV1>() as u32,
                count: HANDLERS.len() as u32,
                handlers: HANDLERS.as_ptr(),
            };
            &LIBRARY
        }
    };
}
