//! The verifier's abstract machine state on one path: registers, the 512-byte stack frame
//! (which bytes are written, which 8-byte slots hold a spilled register) and how many packet
//! bytes a data_end comparison has proven.

use super::value::{Range, Val};
use crate::error::Reason;
use crate::insn::REGS;

/// The stack frame's size in bytes.
pub const STACK_SIZE: i64 = 512;
const SLOTS: usize = (STACK_SIZE / 8) as usize;

/// One 8-byte stack slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The register stored by an aligned 8-byte store, if the slot still holds it whole.
    pub spill: Option<Val>,
    /// Bit i: byte i of the slot has been written.
    pub init: u8,
}

/// The abstract state on one path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// R0..R10.
    pub regs: [Val; REGS],
    /// The frame, lowest address (fp-512) first.
    pub stack: [Slot; SLOTS],
    /// Bytes after data proven readable by a data_end comparison (pointers of id 0).
    pub pkt_range: i64,
    /// The same for pointers with a variable part: (id, bytes after data + var).
    pub var_ranges: Vec<(u32, i64)>,
    /// The next id for a lookup result.
    pub next_id: u32,
}

impl State {
    /// The state at entry: R1 = ctx, R10 = fp, the rest unwritten.
    pub fn entry() -> State {
        let mut regs = [Val::Uninit; REGS];
        regs[1] = Val::Ctx;
        regs[10] = Val::Stack(0);
        State {
            regs,
            stack: [Slot {
                spill: None,
                init: 0,
            }; SLOTS],
            pkt_range: 0,
            var_ranges: Vec::new(),
            next_id: 0,
        }
    }

    /// Checks fp+off..+size lies in the frame; the first byte's index from fp-512.
    fn frame(off: i64, size: usize) -> Result<usize, Reason> {
        if off < -STACK_SIZE || off + size as i64 > 0 {
            return Err(Reason::StackOutOfBounds(off, size));
        }
        Ok((off + STACK_SIZE) as usize)
    }

    /// Reads size bytes at fp+off: every byte must be written; an aligned 8-byte read of a
    /// spilled register gives that register back.
    pub fn stack_read(&self, off: i64, size: usize) -> Result<Val, Reason> {
        let start = Self::frame(off, size)?;
        for b in start..start + size {
            if self.stack[b / 8].init & (1 << (b % 8)) == 0 {
                return Err(Reason::StackUninit(off, size));
            }
        }
        if size == 8 && start % 8 == 0 {
            if let Some(v) = self.stack[start / 8].spill {
                return Ok(v);
            }
        }
        // Part of a spilled pointer read as a number would differ between runtimes (the
        // kernel refuses it for unprivileged programs).
        self.no_spilled_pointer(off, start, size)?;
        Ok(Val::Scalar(Range::bytes(size)))
    }

    /// Checks size bytes at fp+off are readable as plain bytes (helper arguments): written,
    /// and no spilled pointer among them, whose address the helper would read.
    pub fn stack_readable(&self, off: i64, size: usize) -> Result<(), Reason> {
        self.stack_read(off, size)?;
        self.no_spilled_pointer(off, Self::frame(off, size)?, size)
    }

    fn no_spilled_pointer(&self, off: i64, start: usize, size: usize) -> Result<(), Reason> {
        let pointer = |s: &Slot| matches!(s.spill, Some(v) if !matches!(v, Val::Scalar(_)));
        if self.stack[start / 8..(start + size).div_ceil(8)]
            .iter()
            .any(pointer)
        {
            return Err(Reason::SpilledPointerRead(off, size));
        }
        Ok(())
    }

    /// Writes `v` (size bytes) at fp+off.
    pub fn stack_write(&mut self, off: i64, size: usize, v: Val) -> Result<(), Reason> {
        let start = Self::frame(off, size)?;
        let pointer = !matches!(v, Val::Scalar(_));
        if size == 8 && start % 8 == 0 {
            self.stack[start / 8] = Slot {
                spill: Some(v),
                init: 0xff,
            };
            return Ok(());
        }
        if pointer {
            // A partial pointer spill could be read back as a number: refused, as the kernel does.
            return Err(Reason::PointerLeak);
        }
        for b in start..start + size {
            let slot = &mut self.stack[b / 8];
            if matches!(slot.spill, Some(v) if !matches!(v, Val::Scalar(_))) {
                // The pointer's other bytes must not be read back as a number: unwritten.
                slot.init = 0;
            }
            slot.spill = None;
            slot.init |= 1 << (b % 8);
        }
        Ok(())
    }

    /// Bytes proven after the base of packet pointers of `id`.
    pub fn proven(&self, id: u32) -> i64 {
        if id == 0 {
            return self.pkt_range;
        }
        self.var_ranges
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0, |r| r.1)
    }

    /// Records that `n` bytes after the base of pointers of `id` are within data_end.
    pub fn prove(&mut self, id: u32, n: i64) {
        if id == 0 {
            self.pkt_range = self.pkt_range.max(n);
        } else if let Some(r) = self.var_ranges.iter_mut().find(|(i, _)| *i == id) {
            r.1 = r.1.max(n);
        } else {
            self.var_ranges.push((id, n));
        }
    }

    /// Applies `f` to every register and spilled slot (null checks, invalidation).
    pub fn for_each_val(&mut self, mut f: impl FnMut(&mut Val)) {
        self.regs.iter_mut().for_each(&mut f);
        for s in self.stack.iter_mut() {
            if let Some(v) = s.spill.as_mut() {
                f(v);
            }
        }
    }
}
