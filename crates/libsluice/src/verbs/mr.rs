//! Memory regions (`ibv_reg_mr`): bytes of the application that the engine reads and writes
//! for its QPs, shared through a sealed memfd (docs/verbs.md "Memory regions").

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_shm::verbs::{VerbsReply, VerbsRequest};

use crate::verbs::control::{self, unexpected};
use crate::verbs::device::{PdInner, ProtectionDomain};
use crate::verbs::error::VerbsError;
use crate::verbs::remap::{self, Shared};

/// `ibv_access_flags`.
pub mod access {
    /// IBV_ACCESS_LOCAL_WRITE.
    pub const LOCAL_WRITE: u32 = 1;
    /// IBV_ACCESS_REMOTE_WRITE.
    pub const REMOTE_WRITE: u32 = 2;
    /// IBV_ACCESS_REMOTE_READ.
    pub const REMOTE_READ: u32 = 4;
    /// Every flag a region may carry here (atomics, MW binding and the rest are refused).
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ;
}

/// A registered memory region. Its key serves as lkey and rkey; dropping it deregisters it.
#[derive(Debug)]
pub struct MemoryRegion {
    pd: Arc<PdInner>,
    key: u32,
    addr: usize,
    len: usize,
    access: u32,
    /// Memory this region allocated (unmapped after deregistering): its mapped length.
    owned: Option<usize>,
    deregistered: AtomicBool,
}

impl ProtectionDomain {
    /// New memory of `len` bytes, shared with the engine from the start, registered with
    /// `access` ([`access`]).
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<MemoryRegion, VerbsError> {
        check_access(access)?;
        let (addr, mapped, memfd) = remap::alloc(len)?;
        let shared = Shared {
            memfd,
            file_offset: 0,
        };
        self.register(addr, len, access, shared, Some(mapped))
            .inspect_err(|_| remap::free(addr, mapped))
    }

    /// Registers `len` bytes at `addr` with `access`: their pages are remapped onto a memfd
    /// shared with the engine, keeping their content (see docs/verbs.md).
    ///
    /// # Safety
    /// `addr .. addr + len` is memory of this process, readable and writable, that stays
    /// mapped while the region exists; its pages (page-aligned around it) are replaced by a
    /// shared read-write mapping of the same bytes, and no other thread stores into them
    /// during the call.
    pub unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: u32,
    ) -> Result<MemoryRegion, VerbsError> {
        check_access(access)?;
        if addr.is_null() {
            return Err(VerbsError::Invalid("address"));
        }
        // SAFETY: the caller's contract is share's.
        let shared = unsafe { remap::share(addr as usize, len) }?;
        self.register(addr as usize, len, access, shared, None)
    }

    fn register(
        &self,
        addr: usize,
        len: usize,
        access: u32,
        shared: Shared,
        owned: Option<usize>,
    ) -> Result<MemoryRegion, VerbsError> {
        let req = VerbsRequest::RegMr {
            pd: self.0.pd,
            addr: addr as u64,
            len: len as u64,
            access,
            file_offset: shared.file_offset,
        };
        match control::call(&self.0.sluice, req, &[shared.memfd.as_fd()])? {
            VerbsReply::Mr { key } => Ok(MemoryRegion {
                pd: self.0.clone(),
                key,
                addr,
                len,
                access,
                owned,
                deregistered: AtomicBool::new(false),
            }),
            other => Err(unexpected(other)),
        }
    }
}

fn check_access(access: u32) -> Result<(), VerbsError> {
    if access & !access::ALL != 0 {
        return Err(VerbsError::Invalid("access flags"));
    }
    // The verbs require LOCAL_WRITE with REMOTE_WRITE (a peer's write is a local write too).
    if access & access::REMOTE_WRITE != 0 && access & access::LOCAL_WRITE == 0 {
        return Err(VerbsError::Invalid("REMOTE_WRITE without LOCAL_WRITE"));
    }
    Ok(())
}

impl MemoryRegion {
    /// The key (lkey and rkey).
    pub fn key(&self) -> u32 {
        self.key
    }

    /// The first byte's address (what work requests and the peer name).
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes (never: a region has at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access flags it was registered with.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// The first byte (the engine may write the bytes at any time while work is posted).
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    fn span(&self, offset: usize, n: usize) -> Result<*mut u8, VerbsError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok((self.addr + offset) as *mut u8),
            _ => Err(VerbsError::Invalid("offset past the region")),
        }
    }

    /// Copies `out.len()` bytes from `offset` of the region.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), VerbsError> {
        let p = self.span(offset, out.len())?;
        // SAFETY: p..p+len is inside the region, mapped while it exists (alloc_mr's own
        // mapping, or memory reg_mr's caller vouched for); the engine may store into it
        // concurrently, which at worst gives a torn copy, as with an RNIC.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` to `offset` of the region.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), VerbsError> {
        let p = self.span(offset, data.len())?;
        // SAFETY: as in read_at.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// The inline QP's receive side (docs/verbs.md "The inline QP"): whether a flagged
    /// message arrived in the slot `offset .. offset + slot_len` (its trailer's valid byte
    /// set); if so its payload is copied to `out`, the valid byte cleared for the slot's
    /// next message, and its length returned. A trailer announcing more than the slot or
    /// `out` holds is refused (EINVAL), its valid byte cleared.
    pub fn poll_inline_recv(
        &self,
        offset: usize,
        slot_len: usize,
        out: &mut [u8],
    ) -> Result<Option<usize>, VerbsError> {
        use sluice_shm::verbs::pipe::flag;
        use std::sync::atomic::AtomicU8;
        let Some(t_at) = slot_len
            .checked_sub(flag::TRAILER_BYTES)
            .and_then(|t| offset.checked_add(t))
        else {
            return Err(VerbsError::Invalid("slot shorter than the trailer"));
        };
        let p = self.span(t_at, flag::TRAILER_BYTES)?;
        // SAFETY: the valid byte lies inside the region (span checked it), mapped while
        // it exists; the engine stores to it concurrently, hence the atomic access.
        let valid = unsafe { AtomicU8::from_ptr(p.add(flag::TRAILER_BYTES - 1)) };
        if valid.load(Ordering::Acquire) != flag::VALID {
            return Ok(None);
        }
        let mut t = [0u8; flag::TRAILER_BYTES];
        self.read_at(t_at, &mut t)?;
        let len = flag::arrived(&t).unwrap_or(0) as usize;
        if len > slot_len - flag::TRAILER_BYTES || len > out.len() {
            valid.store(0, Ordering::Release);
            return Err(VerbsError::Invalid("trailer length past the slot"));
        }
        self.read_at(t_at - len, &mut out[..len])?;
        // Cleared after the copy: the slot is free for the peer's next message.
        valid.store(0, Ordering::Release);
        Ok(Some(len))
    }

    /// Deregisters it now, reporting the engine's answer.
    pub fn dereg(self) -> Result<(), VerbsError> {
        self.dereg_once()
    }

    fn dereg_once(&self) -> Result<(), VerbsError> {
        if self.deregistered.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let r = if self.pd.sluice.is_alive() {
            control::call_done(&self.pd.sluice, VerbsRequest::DeregMr { key: self.key })
        } else {
            Ok(())
        };
        // Unmapped only after the engine let go of the region (or is gone).
        if let Some(mapped) = self.owned {
            remap::free(self.addr, mapped);
        }
        r
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let _ = self.dereg_once();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_are_checked() {
        assert!(check_access(access::LOCAL_WRITE | access::REMOTE_WRITE).is_ok());
        assert!(check_access(access::REMOTE_READ).is_ok());
        assert!(check_access(access::REMOTE_WRITE).is_err());
        assert!(check_access(8).is_err(), "REMOTE_ATOMIC is not carried");
    }
}
