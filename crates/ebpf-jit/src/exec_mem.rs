//! Executable memory, W^X: an anonymous mapping written while read-write, then made
//! read-execute before anything runs it; never writable and executable at once.

use crate::JitError;

/// A read-execute mapping holding machine code; unmapped on drop.
#[derive(Debug)]
pub struct ExecMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is immutable (PROT_READ | PROT_EXEC) after `new` returns and owned by
// this value alone, so sharing or moving it between threads cannot race.
unsafe impl Send for ExecMem {}
// SAFETY: as above: nothing writes the mapping after `new`.
unsafe impl Sync for ExecMem {}

impl ExecMem {
    /// Maps `code` read-execute (the tail of its last page filled with int3).
    pub fn new(code: &[u8]) -> Result<ExecMem, JitError> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let len = code.len().div_ceil(page).max(1) * page;
        // SAFETY: a fresh private anonymous mapping (no file, no fixed address) aliases nothing.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(JitError::Memory("mmap"));
        }
        let mem = ExecMem {
            ptr: ptr as *mut u8,
            len,
        };
        // SAFETY: the mapping is `len` >= code.len() bytes, read-write, and ours alone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(mem.ptr, len) };
        bytes[..code.len()].copy_from_slice(code);
        bytes[code.len()..].fill(0xcc);
        // SAFETY: the whole mapping, which we own; from here on it is never written.
        if unsafe { libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            return Err(JitError::Memory("mprotect"));
        }
        Ok(mem)
    }

    /// The first instruction's address.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }
}

impl Drop for ExecMem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no code in it runs any more, since
        // running it needs a borrow of the `Compiled` that owns this.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}
