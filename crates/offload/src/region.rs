//! Regions of application memory a handler may access (Table 2's register_dma_region): the
//! bytes of a memory region the server registered, shared between the transport (which
//! serves RDMA READs from them) and the offload threads.

use std::fmt;
use std::sync::{Arc, RwLock};

use sluice_rdma::qp::Memory;

/// Bytes a handler may reach: a [`SharedRegion`], or (in the engine's service) an
/// application's mapped memory-region file. Shared with the offload threads, so Send + Sync.
pub trait RegionMemory: Send + Sync + fmt::Debug {
    /// Its length.
    fn len(&self) -> usize;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `out.len()` bytes at `offset` into `out`; false if they are not all there.
    fn read_at(&self, offset: u64, out: &mut [u8]) -> bool;
    /// Copies `data` to `offset`; false if it does not fit.
    fn write_at(&self, offset: u64, data: &[u8]) -> bool;
}

/// Bytes shared between the transport and the offload threads. Backing `0` names it for the
/// transport ([`Memory`]); offsets index it.
#[derive(Clone, Debug, Default)]
pub struct SharedRegion(Arc<RwLock<Vec<u8>>>);

impl SharedRegion {
    /// A region holding `bytes`.
    pub fn new(bytes: Vec<u8>) -> SharedRegion {
        SharedRegion(Arc::new(RwLock::new(bytes)))
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.0.read().map_or(0, |b| b.len())
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes at `offset` into `out`; false if they are not all there.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> bool {
        let Ok(b) = self.0.read() else { return false };
        let Some(s) = usize::try_from(offset)
            .ok()
            .and_then(|o| b.get(o..o.checked_add(out.len())?))
        else {
            return false;
        };
        out.copy_from_slice(s);
        true
    }

    /// Copies `data` to `offset`; false if it does not fit.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> bool {
        let Ok(mut b) = self.0.write() else {
            return false;
        };
        let Some(d) = usize::try_from(offset)
            .ok()
            .and_then(|o| b.get_mut(o..o.checked_add(data.len())?))
        else {
            return false;
        };
        d.copy_from_slice(data);
        true
    }
}

impl RegionMemory for SharedRegion {
    fn len(&self) -> usize {
        SharedRegion::len(self)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> bool {
        SharedRegion::read_at(self, offset, out)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> bool {
        SharedRegion::write_at(self, offset, data)
    }
}

impl Memory for SharedRegion {
    fn read(&self, _backing: u32, offset: u64, out: &mut [u8]) -> bool {
        self.read_at(offset, out)
    }

    fn write(&mut self, _backing: u32, offset: u64, data: &[u8]) -> bool {
        self.write_at(offset, data)
    }
}

/// Regions registered for handlers, by the application address of their first byte.
#[derive(Clone, Debug, Default)]
pub struct RegionTable {
    regions: Vec<(u64, u64, Arc<dyn RegionMemory>)>,
}

/// Regions one engine registers at most.
pub const MAX_REGIONS: usize = 64;

impl RegionTable {
    /// Registers `len` bytes of `region` from its offset 0, addressed by the application from
    /// `addr`. False if the table is full, the range overflows or overlaps one registered.
    pub fn register(&mut self, addr: u64, len: u64, region: SharedRegion) -> bool {
        self.register_memory(addr, len, Arc::new(region))
    }

    /// Registers `len` bytes of any [`RegionMemory`] from its offset 0 at application
    /// address `addr`; the same refusals as [`RegionTable::register`].
    pub fn register_memory(&mut self, addr: u64, len: u64, region: Arc<dyn RegionMemory>) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        if self.regions.len() >= MAX_REGIONS
            || len > region.len() as u64
            || self
                .regions
                .iter()
                .any(|&(a, l, _)| addr < a + l && a < end)
        {
            return false;
        }
        self.regions.push((addr, len, region));
        true
    }

    /// The region holding all of `[addr, addr + len)`, and the offset of `addr` in it.
    pub fn find(&self, addr: u64, len: u64) -> Option<(&dyn RegionMemory, u64)> {
        let end = addr.checked_add(len)?;
        self.regions
            .iter()
            .find(|&&(a, l, _)| addr >= a && end <= a + l)
            .map(|(a, _, r)| (r.as_ref(), addr - a))
    }

    /// Regions registered.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}
