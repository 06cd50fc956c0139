//! The payload bytes the QPs move through [`Memory`], counted on the way (the engine's
//! memory touched, [`super::Touched`]): a wrapper the stack puts around the memory for one
//! call.

use std::cell::Cell;

use crate::qp::Memory;

/// `mem`, counting the bytes read from and written to it.
pub(super) struct Metered<'a, M: Memory> {
    mem: &'a mut M,
    /// Bytes read (payloads gathered for transmission); a Cell as `Memory::read` takes &self.
    read: Cell<u64>,
    /// Bytes written (payloads placed).
    written: u64,
}

impl<'a, M: Memory> Metered<'a, M> {
    /// Counts from zero.
    pub fn new(mem: &'a mut M) -> Self {
        Metered {
            mem,
            read: Cell::new(0),
            written: 0,
        }
    }

    /// Bytes read so far.
    pub fn read_bytes(&self) -> u64 {
        self.read.get()
    }

    /// Bytes written so far.
    pub fn written_bytes(&self) -> u64 {
        self.written
    }
}

impl<M: Memory> Memory for Metered<'_, M> {
    fn read(&self, backing: u32, offset: u64, out: &mut [u8]) -> bool {
        let ok = self.mem.read(backing, offset, out);
        if ok {
            self.read.set(self.read.get() + out.len() as u64);
        }
        ok
    }

    fn write(&mut self, backing: u32, offset: u64, data: &[u8]) -> bool {
        let ok = self.mem.write(backing, offset, data);
        if ok {
            self.written += data.len() as u64;
        }
        ok
    }
}
