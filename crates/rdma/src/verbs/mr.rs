//! Memory regions and their keys (IB spec vol. 1 10.6; ibv_reg_mr(3)). An application
//! registers a range of its memory in a protection domain with access rights and gets a
//! key (the same value serves as lkey and rkey); every access the transport makes on its
//! behalf or on a peer's, local or remote, goes through [`MrTable::check`], which is the
//! one place that decides whether bytes may be read or written.
//!
//! Keys carry the table index and an 8-bit generation, as the IB key's "key" byte does,
//! so a key kept after deregistration does not reach the next region in the slot.

use std::fmt;

use super::access::Access;

/// A protection domain's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PdId(pub u32);

/// A memory key (lkey and rkey alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(pub u32);

/// A registered range: `len` bytes at the application's address `addr`, which are the
/// bytes at `offset` of its memory `backing` (in the engine, the application's shared
/// region; in tests, a buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Its protection domain.
    pub pd: PdId,
    /// First address, as the application sees it.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Rights.
    pub access: Access,
    /// Which memory of the application backs it.
    pub backing: u32,
    /// Where `addr` lies in that memory.
    pub offset: u64,
}

/// Where an access lands: the backing memory and the offset of its first byte there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The backing memory.
    pub backing: u32,
    /// Offset of the first byte.
    pub offset: u64,
}

/// Why [`MrTable::register`] refused (nothing was registered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// The table holds its configured number of regions.
    Full,
    /// A zero-length region.
    ZeroLength,
    /// `addr + len` or `offset + len` passes 2^64.
    Overflow,
    /// A flag this transport does not implement.
    UnknownAccess,
    /// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (IB spec 10.6.3.1: refused).
    RemoteWriteNeedsLocalWrite,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegisterError::Full => "memory region table full",
            RegisterError::ZeroLength => "zero-length memory region",
            RegisterError::Overflow => "memory region wraps past the end of the address space",
            RegisterError::UnknownAccess => "unsupported access flag",
            RegisterError::RemoteWriteNeedsLocalWrite => {
                "remote write or atomic access requires local write"
            }
        })
    }
}

impl std::error::Error for RegisterError {}

/// Why [`MrTable::check`] refused an access. The transport maps it to a completion status
/// (a local work request: IBV_WC_LOC_PROT_ERR) or a NAK (a peer's: remote access error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// No region has this key (never registered, deregistered, or a stale generation).
    InvalidKey,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The range is not inside the region.
    OutOfBounds,
    /// The region does not grant the right asked for.
    NotPermitted,
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessError::InvalidKey => "invalid memory key",
            AccessError::WrongPd => "memory region of another protection domain",
            AccessError::OutOfBounds => "access outside the memory region",
            AccessError::NotPermitted => "access not permitted by the memory region",
        })
    }
}

impl std::error::Error for AccessError {}

/// The most regions a table can index (24 bits of key).
pub const MAX_REGIONS: usize = (1 << 24) - 2;

#[derive(Clone, Copy, Debug)]
struct Slot {
    region: Option<Region>,
    generation: u8,
}

/// The registered regions, bounded.
#[derive(Debug)]
pub struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    limit: usize,
    live: usize,
}

impl MrTable {
    /// An empty table holding at most `limit` regions (capped at [`MAX_REGIONS`]).
    pub fn new(limit: usize) -> MrTable {
        MrTable {
            slots: Vec::new(),
            free: Vec::new(),
            limit: limit.min(MAX_REGIONS),
            live: 0,
        }
    }

    /// Regions registered.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Registers `region`; its key.
    pub fn register(&mut self, region: Region) -> Result<Key, RegisterError> {
        if region.len == 0 {
            return Err(RegisterError::ZeroLength);
        }
        if region.addr.checked_add(region.len).is_none()
            || region.offset.checked_add(region.len).is_none()
        {
            return Err(RegisterError::Overflow);
        }
        if !Access::KNOWN.contains(region.access) {
            return Err(RegisterError::UnknownAccess);
        }
        let remote_writes = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC);
        if region.access.0 & remote_writes.0 != 0 && !region.access.contains(Access::LOCAL_WRITE) {
            return Err(RegisterError::RemoteWriteNeedsLocalWrite);
        }
        if self.live >= self.limit {
            return Err(RegisterError::Full);
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    region: None,
                    generation: 0,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.region = Some(region);
        self.live += 1;
        Ok(key(index, slot.generation))
    }

    /// Deregisters the region of `key` and returns it.
    pub fn deregister(&mut self, key: Key) -> Result<Region, AccessError> {
        let index = self.index(key).ok_or(AccessError::InvalidKey)?;
        let region = self.slots[index as usize]
            .region
            .take()
            .ok_or(AccessError::InvalidKey)?;
        self.free.push(index);
        self.live -= 1;
        Ok(region)
    }

    /// The region of `key`, if registered.
    pub fn get(&self, key: Key) -> Option<&Region> {
        let index = self.index(key)?;
        self.slots[index as usize].region.as_ref()
    }

    /// Whether `len` bytes at `addr` under `key` may be accessed from protection domain
    /// `pd` with rights `need`; where they are if so. Nothing else decides that.
    pub fn check(
        &self,
        key: Key,
        pd: PdId,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Placement, AccessError> {
        let r = self.get(key).ok_or(AccessError::InvalidKey)?;
        if r.pd != pd {
            return Err(AccessError::WrongPd);
        }
        let end = addr.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        // `register` made sure r.addr + r.len does not overflow.
        if addr < r.addr || end > r.addr + r.len {
            return Err(AccessError::OutOfBounds);
        }
        if !r.access.contains(need) {
            return Err(AccessError::NotPermitted);
        }
        Ok(Placement {
            backing: r.backing,
            offset: r.offset + (addr - r.addr),
        })
    }

    /// The slot a key names, if its generation is current.
    fn index(&self, key: Key) -> Option<u32> {
        let index = (key.0 >> 8).checked_sub(1)?;
        let slot = self.slots.get(index as usize)?;
        (slot.generation == key.0 as u8 && slot.region.is_some()).then_some(index)
    }
}

/// Key of slot `index` at `generation` (index + 1, so that key 0 names nothing).
fn key(index: u32, generation: u8) -> Key {
    Key(((index + 1) << 8) | u32::from(generation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn region(pd: u32, addr: u64, len: u64, access: Access) -> Region {
        Region {
            pd: PdId(pd),
            addr,
            len,
            access,
            backing: 7,
            offset: 4096,
        }
    }

    #[test]
    fn registration_refuses_what_the_spec_refuses() {
        let mut t = MrTable::new(2);
        let rw = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
        assert_eq!(
            t.register(region(1, 0, 0, rw)),
            Err(RegisterError::ZeroLength)
        );
        assert_eq!(
            t.register(region(1, u64::MAX, 2, rw)),
            Err(RegisterError::Overflow)
        );
        assert_eq!(
            t.register(region(1, 0, 8, Access::REMOTE_WRITE)),
            Err(RegisterError::RemoteWriteNeedsLocalWrite)
        );
        assert_eq!(
            t.register(region(1, 0, 8, Access(1 << 6))),
            Err(RegisterError::UnknownAccess)
        );
        t.register(region(1, 0, 8, rw)).unwrap();
        t.register(region(1, 0, 8, rw)).unwrap();
        assert_eq!(t.register(region(1, 0, 8, rw)), Err(RegisterError::Full));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn checks_keys_domains_bounds_and_rights() {
        let mut t = MrTable::new(8);
        let k = t
            .register(region(1, 0x1000, 0x100, Access::REMOTE_READ))
            .unwrap();
        let ok = t.check(k, PdId(1), 0x1010, 0x10, Access::REMOTE_READ);
        assert_eq!(
            ok,
            Ok(Placement {
                backing: 7,
                offset: 4096 + 0x10
            })
        );
        // The whole region, and a zero-length access at its end.
        assert!(t.check(k, PdId(1), 0x1000, 0x100, Access::empty()).is_ok());
        assert!(t.check(k, PdId(1), 0x1100, 0, Access::empty()).is_ok());
        assert_eq!(
            t.check(k, PdId(1), 0x10ff, 2, Access::empty()),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, PdId(1), 0xfff, 1, Access::empty()),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, PdId(1), u64::MAX, 2, Access::empty()),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, PdId(2), 0x1000, 1, Access::empty()),
            Err(AccessError::WrongPd)
        );
        assert_eq!(
            t.check(k, PdId(1), 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessError::NotPermitted)
        );
        assert_eq!(
            t.check(Key(0), PdId(1), 0x1000, 1, Access::empty()),
            Err(AccessError::InvalidKey)
        );
    }

    #[test]
    fn a_stale_key_does_not_reach_the_next_region_in_its_slot() {
        let mut t = MrTable::new(1);
        let old = t.register(region(1, 0, 64, Access::REMOTE_READ)).unwrap();
        t.deregister(old).unwrap();
        assert_eq!(t.deregister(old), Err(AccessError::InvalidKey));
        let new = t.register(region(1, 0, 64, Access::REMOTE_READ)).unwrap();
        assert_ne!(old, new);
        assert_eq!(
            t.check(old, PdId(1), 0, 1, Access::REMOTE_READ),
            Err(AccessError::InvalidKey)
        );
        assert!(t.check(new, PdId(1), 0, 1, Access::REMOTE_READ).is_ok());
    }

    proptest! {
        /// Against a brute-force model: an access is allowed exactly when a live region
        /// with that key covers every byte, in the same domain, with the rights; and the
        /// placement is the byte's offset in the backing.
        #[test]
        fn check_agrees_with_a_reference_model(
            regs in proptest::collection::vec((0u32..3, 0u64..1 << 20, 1u64..4096, 0u32..16), 1..12),
            drop_mask in any::<u16>(),
            probes in proptest::collection::vec(
                (0usize..16, 0u32..3, 0u64..(1 << 20) + 8192, 0u64..8192, 0u32..16), 1..64),
        ) {
            let mut t = MrTable::new(64);
            let mut model: Vec<(Key, Region, bool)> = Vec::new();
            for (i, &(pd, addr, len, access)) in regs.iter().enumerate() {
                let mut access = Access(access);
                if access.0 & 0b1010 != 0 {
                    access = access.union(Access::LOCAL_WRITE);
                }
                let r = Region { pd: PdId(pd), addr, len, access, backing: i as u32, offset: addr * 3 };
                let k = t.register(r).unwrap();
                model.push((k, r, true));
            }
            for (i, m) in model.iter_mut().enumerate() {
                if drop_mask & (1 << i) != 0 {
                    t.deregister(m.0).unwrap();
                    m.2 = false;
                }
            }
            for (which, pd, addr, len, need) in probes {
                let (k, r, live) = model[which % model.len()];
                let need = Access(need);
                let got = t.check(k, PdId(pd), addr, len, need);
                let allowed = live
                    && r.pd.0 == pd
                    && addr >= r.addr
                    && addr + len <= r.addr + r.len
                    && r.access.contains(need);
                prop_assert_eq!(got.is_ok(), allowed, "{:?} {:?}", got, r);
                if let Ok(p) = got {
                    prop_assert_eq!(p.backing, r.backing);
                    prop_assert_eq!(p.offset, r.offset + (addr - r.addr));
                }
            }
        }
    }
}
