//! Maps: array, hash, per-CPU array and LRU hash, preallocated at creation (a program's update
//! never allocates), shared by programs and the control plane. The engine serializes access
//! (one thread at a time), so there are no locks here; `Maps` is `Send`.

use crate::error::{LoadError, MapError};

/// Kernel map type numbers (enum bpf_map_type) for the kinds supported.
pub mod map_type {
    /// BPF_MAP_TYPE_HASH
    pub const HASH: u32 = 1;
    /// BPF_MAP_TYPE_ARRAY
    pub const ARRAY: u32 = 2;
    /// BPF_MAP_TYPE_PERCPU_ARRAY
    pub const PERCPU_ARRAY: u32 = 6;
    /// BPF_MAP_TYPE_LRU_HASH
    pub const LRU_HASH: u32 = 9;
}

/// map_update_elem flags.
pub mod update_flags {
    /// Create or replace.
    pub const ANY: u64 = 0;
    /// Create only.
    pub const NOEXIST: u64 = 1;
    /// Replace only.
    pub const EXIST: u64 = 2;
}

/// The largest key a map may declare (a key is built on the 512-byte stack).
pub const MAX_KEY_SIZE: u32 = 512;
/// The largest value a map may declare.
pub const MAX_VALUE_SIZE: u32 = 1 << 16;
/// The most entries a map may declare (the interpreter's value addresses have 24 bits).
pub const MAX_ENTRIES: u32 = 1 << 22;
/// The most bytes of storage one map may reserve.
pub const MAX_MAP_BYTES: u64 = 256 << 20;
/// The most bytes of storage one set of maps may reserve together.
pub const MAX_TOTAL_BYTES: u64 = 512 << 20;
/// The most maps one set may hold.
pub const MAX_MAPS: usize = 4096;

/// What kind of map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// Fixed-size array indexed by a u32 key; entries always exist, zeroed at creation.
    Array,
    /// Hash table of at most max_entries keys.
    Hash,
    /// An array with one value per CPU (flow-group core); one CPU for now.
    PerCpuArray,
    /// Hash table that evicts the least recently used key when full.
    LruHash,
}

impl MapKind {
    /// From the kernel's map type number.
    pub fn from_type(t: u32) -> Option<MapKind> {
        match t {
            map_type::HASH => Some(MapKind::Hash),
            map_type::ARRAY => Some(MapKind::Array),
            map_type::PERCPU_ARRAY => Some(MapKind::PerCpuArray),
            map_type::LRU_HASH => Some(MapKind::LruHash),
            _ => None,
        }
    }
}

/// A map as the object declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDef {
    /// The map's symbol name.
    pub name: String,
    /// Its kind.
    pub kind: MapKind,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Maximum number of entries.
    pub max_entries: u32,
    /// map_flags (kept, not interpreted).
    pub flags: u32,
}

impl MapDef {
    /// Bytes of storage the map reserves with `cpus` values per key (keys, values, links).
    pub fn storage_bytes(&self, cpus: usize) -> u64 {
        let cpus = if self.kind == MapKind::PerCpuArray {
            cpus.max(1) as u64
        } else {
            1
        };
        (self.max_entries as u64).saturating_mul(
            (self.value_size as u64)
                .saturating_mul(cpus)
                .saturating_add(self.key_size as u64 + 16),
        )
    }

    /// Checks the limits this crate supports; `Err` names what is wrong.
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |why| Err(LoadError::MapDef(self.name.clone(), why));
        if self.key_size == 0 || self.key_size > MAX_KEY_SIZE {
            return bad("key size must be 1..=512 bytes");
        }
        if self.value_size == 0 || self.value_size > MAX_VALUE_SIZE {
            return bad("value size must be 1..=65536 bytes");
        }
        if self.max_entries == 0 || self.max_entries > MAX_ENTRIES {
            return bad("max_entries must be 1..=4194304");
        }
        if matches!(self.kind, MapKind::Array | MapKind::PerCpuArray) && self.key_size != 4 {
            return bad("array keys are 4 bytes");
        }
        if self.storage_bytes(1) > MAX_MAP_BYTES {
            return bad("more than 256 MiB of storage");
        }
        Ok(())
    }
}

/// Index of a map in its `Maps` set.
pub type MapId = usize;

const NIL: u32 = u32::MAX;

/// Preallocated chained hash table with an optional LRU order.
#[derive(Debug)]
struct HashTable {
    lru: bool,
    buckets: Vec<u32>,
    /// Bucket chain, or the free list for unused slots.
    next: Vec<u32>,
    used: Vec<bool>,
    keys: Vec<u8>,
    free: u32,
    len: u32,
    /// LRU list: most recent at `head`, evicted from `tail`.
    prev_lru: Vec<u32>,
    next_lru: Vec<u32>,
    head: u32,
    tail: u32,
    hasher: ahash::RandomState,
}

#[derive(Debug)]
enum Store {
    /// Keys are the indices (kept as bytes for the control plane's iteration).
    Array {
        keys: Vec<u8>,
    },
    Hash(HashTable),
}

/// One map's storage.
#[derive(Debug)]
pub struct Map {
    def: MapDef,
    cpus: usize,
    /// max_entries x cpus values, key-major (a key's per-CPU values are contiguous).
    values: Vec<u8>,
    store: Store,
}

impl Map {
    fn new(def: &MapDef, cpus: usize) -> Result<Map, LoadError> {
        def.validate()?;
        let cpus = if def.kind == MapKind::PerCpuArray {
            cpus.max(1)
        } else {
            1
        };
        let n = def.max_entries as usize;
        if n.saturating_mul(cpus) > 1 << 24 {
            // The interpreter's map value addresses hold a 24-bit value unit.
            return Err(LoadError::MapDef(
                def.name.clone(),
                "max_entries x CPUs above 2^24",
            ));
        }
        let values = vec![0u8; n * cpus * def.value_size as usize];
        let store = match def.kind {
            MapKind::Array | MapKind::PerCpuArray => Store::Array {
                keys: (0..def.max_entries).flat_map(u32::to_le_bytes).collect(),
            },
            MapKind::Hash | MapKind::LruHash => {
                let nb = n.next_power_of_two();
                Store::Hash(HashTable {
                    lru: def.kind == MapKind::LruHash,
                    buckets: vec![NIL; nb],
                    next: (1..=n as u32)
                        .map(|i| if i as usize == n { NIL } else { i })
                        .collect(),
                    used: vec![false; n],
                    keys: vec![0u8; n * def.key_size as usize],
                    free: 0,
                    len: 0,
                    prev_lru: vec![NIL; n],
                    next_lru: vec![NIL; n],
                    head: NIL,
                    tail: NIL,
                    // Fixed seeds: the engine is deterministic; a seed from the caller is future work.
                    hasher: ahash::RandomState::with_seeds(0x5eed, 0x51c3, 0xeb9f, 0x7a11),
                })
            }
        };
        Ok(Map {
            def: def.clone(),
            cpus,
            values,
            store,
        })
    }

    /// The declaration.
    pub fn def(&self) -> &MapDef {
        &self.def
    }

    /// Number of entries present (arrays: always max_entries).
    pub fn len(&self) -> usize {
        match &self.store {
            Store::Array { .. } => self.def.max_entries as usize,
            Store::Hash(h) => h.len as usize,
        }
    }

    /// Whether the map holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn vs(&self) -> usize {
        self.def.value_size as usize
    }

    /// The value unit (index in value_size units) of a key for `cpu`, if present.
    pub(crate) fn find(&mut self, key: &[u8], cpu: usize, touch: bool) -> Option<u32> {
        let cpus = self.cpus;
        match &mut self.store {
            Store::Array { .. } => {
                let idx = u32::from_le_bytes(key.try_into().ok()?);
                (idx < self.def.max_entries).then(|| idx * cpus as u32 + (cpu % cpus) as u32)
            }
            Store::Hash(h) => {
                let ks = self.def.key_size as usize;
                let slot = h.find(key, ks)?;
                if touch && h.lru {
                    h.unlink_lru(slot);
                    h.push_lru(slot);
                }
                Some(slot)
            }
        }
    }

    /// All value storage (max_entries x CPUs units of value_size bytes, key-major). It is
    /// allocated once when the map is created and never moves, so a JIT may hand out host
    /// pointers into it for the map's life.
    pub fn values_mut(&mut self) -> &mut [u8] {
        &mut self.values
    }

    /// The bytes of a value unit (an index in value_size units), writable.
    pub fn unit_mut(&mut self, unit: u32) -> Option<&mut [u8]> {
        let vs = self.vs();
        self.values
            .get_mut(unit as usize * vs..(unit as usize + 1) * vs)
    }

    /// Insert or replace `key` with `value` (value_size bytes, or value_size x CPUs for a
    /// per-CPU array, or value_size broadcast to every CPU).
    pub fn update(&mut self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        let ks = self.def.key_size as usize;
        let vs = self.vs();
        if key.len() != ks {
            return Err(MapError::KeySize(key.len()));
        }
        if value.len() != vs && value.len() != vs * self.cpus {
            return Err(MapError::ValueSize(value.len()));
        }
        if flags > update_flags::EXIST {
            return Err(MapError::ValueSize(value.len()));
        }
        let cpus = self.cpus;
        let first = match &mut self.store {
            Store::Array { .. } => {
                let idx =
                    u32::from_le_bytes(key.try_into().map_err(|_| MapError::KeySize(key.len()))?);
                if idx >= self.def.max_entries {
                    return Err(MapError::Index(idx));
                }
                if flags == update_flags::NOEXIST {
                    return Err(MapError::Exists);
                }
                idx as usize * cpus
            }
            Store::Hash(h) => match h.find(key, ks) {
                Some(_) if flags == update_flags::NOEXIST => return Err(MapError::Exists),
                Some(slot) => {
                    if h.lru {
                        h.unlink_lru(slot);
                        h.push_lru(slot);
                    }
                    slot as usize
                }
                None if flags == update_flags::EXIST => return Err(MapError::NotFound),
                None => h.insert(key, ks)? as usize,
            },
        };
        let dst = &mut self.values[first * vs..(first + cpus) * vs];
        if value.len() == dst.len() {
            dst.copy_from_slice(value);
        } else {
            for chunk in dst.chunks_exact_mut(vs) {
                chunk.copy_from_slice(value);
            }
        }
        Ok(())
    }

    /// Removes `key` (hash maps only).
    pub fn delete(&mut self, key: &[u8]) -> Result<(), MapError> {
        let ks = self.def.key_size as usize;
        if key.len() != ks {
            return Err(MapError::KeySize(key.len()));
        }
        match &mut self.store {
            Store::Array { .. } => Err(MapError::NotDeletable),
            Store::Hash(h) => h.remove(key, ks).ok_or(MapError::NotFound),
        }
    }

    /// A key's value (all CPUs' values, concatenated, for a per-CPU array).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, MapError> {
        if key.len() != self.def.key_size as usize {
            return Err(MapError::KeySize(key.len()));
        }
        let Some(unit) = self.find(key, 0, false) else {
            return Ok(None);
        };
        let vs = self.vs();
        let n = self.cpus;
        Ok(self
            .values
            .get(unit as usize * vs..(unit as usize + n) * vs))
    }

    /// Every (key, value) present, in storage order (per-CPU values concatenated).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let ks = self.def.key_size as usize;
        let stride = self.vs() * self.cpus;
        let (keys, used): (&[u8], Option<&[bool]>) = match &self.store {
            Store::Array { keys } => (keys, None),
            Store::Hash(h) => (&h.keys, Some(&h.used)),
        };
        (0..self.def.max_entries as usize)
            .filter(move |&i| used.is_none_or(|u| u[i]))
            .map(move |i| {
                (
                    &keys[i * ks..(i + 1) * ks],
                    &self.values[i * stride..(i + 1) * stride],
                )
            })
    }
}

impl HashTable {
    fn bucket(&self, key: &[u8]) -> usize {
        (self.hasher.hash_one(key) as usize) & (self.buckets.len() - 1)
    }

    fn find(&self, key: &[u8], ks: usize) -> Option<u32> {
        let mut s = self.buckets[self.bucket(key)];
        while s != NIL {
            if &self.keys[s as usize * ks..(s as usize + 1) * ks] == key {
                return Some(s);
            }
            s = self.next[s as usize];
        }
        None
    }

    fn insert(&mut self, key: &[u8], ks: usize) -> Result<u32, MapError> {
        if self.free == NIL {
            if !self.lru || self.tail == NIL {
                return Err(MapError::Full);
            }
            let victim = self.tail;
            let vkey = victim as usize * ks;
            // Copy out the victim's key via its bucket walk: unlink by slot.
            let b = (self.hasher.hash_one(&self.keys[vkey..vkey + ks]) as usize)
                & (self.buckets.len() - 1);
            self.unlink_bucket(b, victim);
            self.release(victim);
        }
        let slot = self.free;
        self.free = self.next[slot as usize];
        self.keys[slot as usize * ks..(slot as usize + 1) * ks].copy_from_slice(key);
        let b = self.bucket(key);
        self.next[slot as usize] = self.buckets[b];
        self.buckets[b] = slot;
        self.used[slot as usize] = true;
        self.len += 1;
        if self.lru {
            self.push_lru(slot);
        }
        Ok(slot)
    }

    fn remove(&mut self, key: &[u8], ks: usize) -> Option<()> {
        let slot = self.find(key, ks)?;
        let b = self.bucket(key);
        self.unlink_bucket(b, slot);
        self.release(slot);
        Some(())
    }

    fn unlink_bucket(&mut self, b: usize, slot: u32) {
        if self.buckets[b] == slot {
            self.buckets[b] = self.next[slot as usize];
            return;
        }
        let mut s = self.buckets[b];
        while s != NIL {
            if self.next[s as usize] == slot {
                self.next[s as usize] = self.next[slot as usize];
                return;
            }
            s = self.next[s as usize];
        }
    }

    /// Returns a slot (already out of its bucket) to the free list.
    fn release(&mut self, slot: u32) {
        if self.lru {
            self.unlink_lru(slot);
        }
        self.used[slot as usize] = false;
        self.next[slot as usize] = self.free;
        self.free = slot;
        self.len -= 1;
    }

    fn unlink_lru(&mut self, s: u32) {
        let (p, n) = (self.prev_lru[s as usize], self.next_lru[s as usize]);
        if p == NIL {
            self.head = n
        } else {
            self.next_lru[p as usize] = n
        }
        if n == NIL {
            self.tail = p
        } else {
            self.prev_lru[n as usize] = p
        }
        self.prev_lru[s as usize] = NIL;
        self.next_lru[s as usize] = NIL;
    }

    fn push_lru(&mut self, s: u32) {
        self.prev_lru[s as usize] = NIL;
        self.next_lru[s as usize] = self.head;
        if self.head != NIL {
            self.prev_lru[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }
}

/// The maps of one object, shared by its programs and the control plane.
#[derive(Debug)]
pub struct Maps {
    maps: Vec<Map>,
    /// Scratch for a program's map update whose value lives in map memory (no allocation per run).
    pub(crate) scratch: Vec<u8>,
}

impl Maps {
    /// Creates (and preallocates) every map, for one CPU.
    pub fn new(defs: &[MapDef]) -> Result<Maps, LoadError> {
        Maps::with_cpus(defs, 1)
    }

    /// Creates every map; per-CPU arrays get `cpus` values per key.
    pub fn with_cpus(defs: &[MapDef], cpus: usize) -> Result<Maps, LoadError> {
        if defs.len() > MAX_MAPS {
            return Err(LoadError::MapDef(String::new(), "more than 4096 maps"));
        }
        let total = defs
            .iter()
            .fold(0u64, |t, d| t.saturating_add(d.storage_bytes(cpus)));
        if total > MAX_TOTAL_BYTES {
            return Err(LoadError::MapDef(
                String::new(),
                "maps would reserve more than 512 MiB together",
            ));
        }
        let maps = defs
            .iter()
            .map(|d| Map::new(d, cpus))
            .collect::<Result<Vec<_>, _>>()?;
        let scratch = vec![
            0u8;
            defs.iter()
                .map(|d| d.value_size as usize)
                .max()
                .unwrap_or(0)
        ];
        Ok(Maps { maps, scratch })
    }

    /// Number of maps.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether there is no map.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// The id of the map of that name.
    pub fn id(&self, name: &str) -> Option<MapId> {
        self.maps.iter().position(|m| m.def.name == name)
    }

    /// A map by id.
    pub fn map(&self, id: MapId) -> Option<&Map> {
        self.maps.get(id)
    }

    /// A map by id, writable.
    pub fn map_mut(&mut self, id: MapId) -> Option<&mut Map> {
        self.maps.get_mut(id)
    }

    /// Control plane: a key's value (a copy is the caller's to make).
    pub fn get(&mut self, id: MapId, key: &[u8]) -> Result<Option<&[u8]>, MapError> {
        self.maps.get_mut(id).ok_or(MapError::NoMap)?.get(key)
    }

    /// Control plane: insert or replace (flags as map_update_elem's).
    pub fn set(&mut self, id: MapId, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        self.maps
            .get_mut(id)
            .ok_or(MapError::NoMap)?
            .update(key, value, flags)
    }

    /// Control plane: delete a key.
    pub fn delete(&mut self, id: MapId, key: &[u8]) -> Result<(), MapError> {
        self.maps.get_mut(id).ok_or(MapError::NoMap)?.delete(key)
    }

    /// Control plane: every (key, value) of a map.
    pub fn iter(&self, id: MapId) -> Result<impl Iterator<Item = (&[u8], &[u8])> + '_, MapError> {
        Ok(self.maps.get(id).ok_or(MapError::NoMap)?.iter())
    }

    pub(crate) fn maps_mut(&mut self) -> &mut [Map] {
        &mut self.maps
    }

    /// The definitions, in id order.
    pub fn defs(&self) -> impl Iterator<Item = &MapDef> {
        self.maps.iter().map(|m| &m.def)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(kind: MapKind, max: u32) -> MapDef {
        MapDef {
            name: "m".into(),
            kind,
            key_size: 4,
            value_size: 8,
            max_entries: max,
            flags: 0,
        }
    }

    #[test]
    fn hash_full_then_delete_frees_a_slot() {
        let mut m = Map::new(&def(MapKind::Hash, 2), 1).unwrap();
        m.update(&1u32.to_le_bytes(), &[1; 8], 0).unwrap();
        m.update(&2u32.to_le_bytes(), &[2; 8], 0).unwrap();
        assert_eq!(
            m.update(&3u32.to_le_bytes(), &[3; 8], 0),
            Err(MapError::Full)
        );
        m.delete(&1u32.to_le_bytes()).unwrap();
        m.update(&3u32.to_le_bytes(), &[3; 8], 0).unwrap();
        assert_eq!(m.get(&3u32.to_le_bytes()).unwrap(), Some(&[3u8; 8][..]));
        assert_eq!(m.get(&1u32.to_le_bytes()).unwrap(), None);
        assert_eq!(m.iter().count(), 2);
        assert_eq!(
            m.update(&3u32.to_le_bytes(), &[4; 8], update_flags::NOEXIST),
            Err(MapError::Exists)
        );
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut m = Map::new(&def(MapKind::LruHash, 2), 1).unwrap();
        m.update(&1u32.to_le_bytes(), &[1; 8], 0).unwrap();
        m.update(&2u32.to_le_bytes(), &[2; 8], 0).unwrap();
        // Touch 1, so 2 is the oldest.
        assert!(m.find(&1u32.to_le_bytes(), 0, true).is_some());
        m.update(&3u32.to_le_bytes(), &[3; 8], 0).unwrap();
        assert!(m.get(&2u32.to_le_bytes()).unwrap().is_none());
        assert!(m.get(&1u32.to_le_bytes()).unwrap().is_some());
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn percpu_array_values_per_cpu() {
        let mut m = Map::new(&def(MapKind::PerCpuArray, 4), 2).unwrap();
        m.update(&1u32.to_le_bytes(), &[7; 8], 0).unwrap();
        assert_eq!(m.get(&1u32.to_le_bytes()).unwrap().unwrap(), &[7u8; 16][..]);
        assert_eq!(
            m.update(&4u32.to_le_bytes(), &[7; 8], 0),
            Err(MapError::Index(4))
        );
        assert_eq!(m.delete(&1u32.to_le_bytes()), Err(MapError::NotDeletable));
        assert_eq!(m.iter().count(), 4);
    }

    #[test]
    fn limits_refused() {
        let mut d = def(MapKind::Array, 4);
        d.key_size = 8;
        assert!(Map::new(&d, 1).is_err());
        assert!(Map::new(&def(MapKind::Hash, 0), 1).is_err());
    }
}
