//! Zero copy (FlexiNS 3.2, Laminar 4.3): the application reads received bytes where the
//! engine put them and writes bytes to send where the engine will take them. Thanks to the
//! double mapping, the readable bytes and the free space are each one contiguous slice.
//!
//! The engine writes only RX bytes past `rx_tail` and reads only TX bytes before `tx_tail`,
//! never the bytes a slice covers until the application hands them back (`rx_consume`,
//! `tx_commit`). Committed TX bytes stay the engine's until `tx_head` passes them: with
//! header-only TX (the default, docs/service.md) the ring is the connection's send buffer,
//! read again for retransmissions, and `tx_head` moves as the peer acknowledges. The TX
//! slice is a guard ([`TxSlice`]): one at a time per socket, so two calls never lend out
//! overlapping `&mut` bytes.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;

use sluice_shm::{Command, Dir};

use crate::error::{Error, Op};
use crate::socket::Socket;

impl Socket {
    /// The readable bytes in place; `Ok(empty)` at end of stream; `Err(WouldBlock)` if none
    /// yet (never blocks: wait for readiness first). Use the slice before `rx_consume` gives
    /// its bytes back: after that the engine may overwrite them.
    pub fn rx_slice(&self) -> Result<&[u8], Error> {
        let (ptr, len) = self.rx_peek_raw()?;
        // SAFETY: ptr..ptr+len lies in this socket's RX ring, mapped for as long as the
        // region (held by self's Arc<Sluice>). No Rust code writes the RX ring (only the
        // engine process does, past rx_tail, until the bytes are consumed: then at worst the
        // slice shows newer plain bytes, see sluice_shm::Ring::with_slice).
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Releases `n` bytes returned by rx_slice (`n` is clamped to what is readable).
    pub fn rx_consume(&self, n: usize) -> Result<(), Error> {
        self.usable()?;
        let block = self.block();
        let mut line = self.lock_line();
        let tail = block.rx_tail().load(Ordering::Acquire);
        let avail = tail.saturating_sub(line.rx_head).min(self.ring_size());
        self.advance_rx(&mut line, (n as u64).min(avail));
        Ok(())
    }

    /// The free space of the TX ring in place (a guard that derefs to `&mut [u8]`);
    /// `Err(WouldBlock)` if full (never blocks); `Err(Os(EBUSY))` while another `TxSlice`
    /// of this socket is alive. While the guard lives, `send` on this socket fails with
    /// `Err(Os(EBUSY))` as well (it would write the bytes the guard lends).
    pub fn tx_slice(&self) -> Result<TxSlice<'_>, Error> {
        if self.tx_lent.swap(true, Ordering::Acquire) {
            return Err(Error::Os(libc::EBUSY));
        }
        match self.tx_reserve_raw() {
            Ok((ptr, len)) => Ok(TxSlice {
                sock: self,
                ptr,
                len,
            }),
            Err(e) => {
                self.tx_lent.store(false, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Sends the first `n` bytes of the last tx_slice (`n` clamped to its length).
    pub fn tx_commit(&self, n: usize) -> Result<(), Error> {
        self.usable()?;
        let mut line = self.lock_line();
        let n = n.min(line.tx_reserved);
        if n == 0 {
            return Ok(());
        }
        self.commit_tx(&mut line, n as u64);
        drop(line);
        self.sluice()
            .post(Command::Send { slot: self.slot() })
            .map_err(|e| e.for_op(Op::Write))
    }

    /// The readable bytes as a raw pointer and length (the C API's `sluice_rx_peek`); the
    /// pointer stays valid until those bytes are consumed or the socket is closed.
    pub(crate) fn rx_peek_raw(&self) -> Result<(*const u8, usize), Error> {
        if !self.recv_allowed().map_err(|e| e.for_op(Op::Read))? {
            return Ok((std::ptr::NonNull::dangling().as_ptr(), 0));
        }
        let block = self.block();
        let f = block.flags().load(Ordering::Acquire);
        let line = self.lock_line();
        let tail = block.rx_tail().load(Ordering::Acquire);
        let avail = tail.saturating_sub(line.rx_head).min(self.ring_size()) as usize;
        if avail == 0 {
            drop(line);
            return match self.rx_empty_outcome(f).map_err(|e| e.for_op(Op::Read))? {
                Some(_) => Ok((std::ptr::NonNull::dangling().as_ptr(), 0)),
                None => Err(Error::WouldBlock),
            };
        }
        // SAFETY: avail <= ring_size, so the run is inside the double mapping; the pointer
        // is handed out, not dereferenced here (callers uphold the aliasing contract).
        let s = unsafe { self.ring(Dir::Rx).slice(line.rx_head, avail) };
        Ok((s.as_ptr(), avail))
    }

    /// The free TX space as a raw pointer and length (the C API's `sluice_tx_reserve`);
    /// remembered as the reservation `tx_commit` may commit.
    pub(crate) fn tx_reserve_raw(&self) -> Result<(*mut u8, usize), Error> {
        if !self.send_allowed().map_err(|e| e.for_op(Op::Write))? {
            return Err(Error::WouldBlock);
        }
        let block = self.block();
        let size = self.ring_size();
        let mut line = self.lock_line();
        let head = block.tx_head().load(Ordering::Acquire);
        let free = (size - line.tx_tail.saturating_sub(head).min(size)) as usize;
        if free == 0 {
            line.tx_reserved = 0;
            return Err(Error::WouldBlock);
        }
        line.tx_reserved = free;
        // SAFETY: free <= ring_size, inside the double mapping; see tx_slice for aliasing.
        let s = unsafe { self.ring(Dir::Tx).slice_mut(line.tx_tail, free) };
        Ok((s.as_mut_ptr(), free))
    }
}

/// The free space of a socket's TX ring, lent by [`Socket::tx_slice`]: write the bytes to
/// send, then [`Socket::tx_commit`] them. Only one lives per socket at a time, so the
/// `&mut [u8]` it derefs to is never aliased in this process.
pub struct TxSlice<'a> {
    sock: &'a Socket,
    ptr: *mut u8,
    len: usize,
}

impl TxSlice<'_> {
    /// Bytes of free space.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no space (never true for a slice `tx_slice` returned).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte, for filling the space with a system call (read, pread, recv).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl std::fmt::Debug for TxSlice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxSlice").field("len", &self.len).finish()
    }
}

impl Deref for TxSlice<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is the free part of the socket's TX ring (from tx_tail to
        // tx_head + ring_size), mapped as long as the region the socket holds; the engine
        // reads only bytes before tx_tail, and the tx_lent flag makes this guard the only
        // one lending these bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for TxSlice<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; `&mut self` makes the returned slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for TxSlice<'_> {
    fn drop(&mut self) {
        self.sock.tx_lent.store(false, Ordering::Release);
    }
}
