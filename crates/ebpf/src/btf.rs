//! Just enough BTF (Documentation/bpf/btf.rst) to read libbpf-style map definitions: the
//! variables of the `.maps` data section, each a struct whose members encode the map's
//! parameters — `__uint(name, N)` is `int (*name)[N]`, `__type(name, T)` is `T *name`.

use crate::error::LoadError;
use crate::maps::{MapDef, MapKind};

const MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;
/// How many typedef/const/pointer steps a size resolution follows (cycles are malformed BTF).
const MAX_DEPTH: usize = 32;

/// One BTF type: its header and where its kind-specific data starts.
#[derive(Clone, Copy, Debug)]
struct Type {
    name_off: u32,
    kind: u32,
    vlen: u32,
    size_or_type: u32,
    extra: usize,
}

/// A parsed `.BTF` section: types by id (id 0 is void) and the string table.
pub struct Btf<'a> {
    types: Vec<Type>,
    data: &'a [u8],
    strings: &'a [u8],
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, LoadError> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(LoadError::Btf("truncated"))
}

impl<'a> Btf<'a> {
    /// Parses the section's header and type records.
    pub fn parse(section: &'a [u8]) -> Result<Btf<'a>, LoadError> {
        let magic = section.get(0..2).map(|m| u16::from_le_bytes([m[0], m[1]]));
        if magic != Some(MAGIC) {
            return Err(LoadError::Btf("bad magic (not little-endian BTF)"));
        }
        let hdr_len = u32_at(section, 4)? as usize;
        let type_off = u32_at(section, 8)? as usize;
        let type_len = u32_at(section, 12)? as usize;
        let str_off = u32_at(section, 16)? as usize;
        let str_len = u32_at(section, 20)? as usize;
        let range = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off)?;
            section.get(start..start.checked_add(len)?)
        };
        let data = range(type_off, type_len).ok_or(LoadError::Btf("type section out of range"))?;
        let strings =
            range(str_off, str_len).ok_or(LoadError::Btf("string section out of range"))?;
        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            vlen: 0,
            size_or_type: 0,
            extra: 0,
        }];
        let mut at = 0;
        while at < data.len() {
            let info = u32_at(data, at + 4)?;
            let t = Type {
                name_off: u32_at(data, at)?,
                kind: (info >> 24) & 0x1f,
                vlen: info & 0xffff,
                size_or_type: u32_at(data, at + 8)?,
                extra: at + 12,
            };
            let vlen = t.vlen as usize;
            let extra = match t.kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
                KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
                0..=19 => 0,
                _ => return Err(LoadError::Btf("unknown type kind")),
            };
            at = t.extra + extra;
            if at > data.len() {
                return Err(LoadError::Btf("truncated type"));
            }
            types.push(t);
        }
        Ok(Btf {
            types,
            data,
            strings,
        })
    }

    fn ty(&self, id: u32) -> Result<Type, LoadError> {
        self.types
            .get(id as usize)
            .copied()
            .ok_or(LoadError::Btf("type id out of range"))
    }

    fn name(&self, off: u32) -> &'a str {
        let s = self.strings.get(off as usize..).unwrap_or(&[]);
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        std::str::from_utf8(&s[..end]).unwrap_or("")
    }

    /// Skips typedef/const/volatile/restrict/type-tag to the type they qualify.
    fn strip(&self, mut id: u32) -> Result<(u32, Type), LoadError> {
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Ok((id, t)),
            }
        }
        Err(LoadError::Btf("type chain too deep"))
    }

    /// The size in bytes of a type.
    fn size_of(&self, id: u32, depth: usize) -> Result<u64, LoadError> {
        if depth > MAX_DEPTH {
            return Err(LoadError::Btf("type chain too deep"));
        }
        let (_, t) = self.strip(id)?;
        match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => {
                Ok(t.size_or_type as u64)
            }
            KIND_PTR => Ok(8),
            KIND_ARRAY => {
                let elem = u32_at(self.data, t.extra)?;
                let n = u32_at(self.data, t.extra + 8)? as u64;
                Ok(n.saturating_mul(self.size_of(elem, depth + 1)?))
            }
            _ => Err(LoadError::Btf("type has no size")),
        }
    }

    /// The map definitions of the `.maps` data section, by variable name.
    pub fn maps(&self) -> Result<Vec<MapDef>, LoadError> {
        let mut out = Vec::new();
        for t in &self.types {
            if t.kind != KIND_DATASEC || self.name(t.name_off) != ".maps" {
                continue;
            }
            for v in 0..t.vlen as usize {
                let var_id = u32_at(self.data, t.extra + 12 * v)?;
                let var = self.ty(var_id)?;
                if var.kind != KIND_VAR {
                    return Err(LoadError::Btf(".maps entry is not a variable"));
                }
                out.push(self.map_def(self.name(var.name_off), var.size_or_type)?);
            }
        }
        Ok(out)
    }

    fn map_def(&self, name: &str, struct_id: u32) -> Result<MapDef, LoadError> {
        let bad = |why| LoadError::MapDef(name.to_string(), why);
        let (_, st) = self.strip(struct_id)?;
        if st.kind != KIND_STRUCT {
            return Err(bad("definition is not a struct"));
        }
        let (mut kind, mut key, mut value, mut max, mut flags) = (None, None, None, None, 0);
        for m in 0..st.vlen as usize {
            let at = st.extra + 12 * m;
            let mname = self.name(u32_at(self.data, at)?);
            let (_, mt) = self.strip(u32_at(self.data, at + 4)?)?;
            if mt.kind != KIND_PTR {
                return Err(bad("member is not __uint/__type (a pointer)"));
            }
            // __uint(x, N): pointer to an array of N ints; __type(x, T): pointer to T.
            let uint = || -> Result<u32, LoadError> {
                let (_, arr) = self.strip(mt.size_or_type)?;
                if arr.kind != KIND_ARRAY {
                    return Err(bad("__uint member is not a pointer to an array"));
                }
                u32_at(self.data, arr.extra + 8)
            };
            let size = || -> Result<u32, LoadError> {
                u32::try_from(self.size_of(mt.size_or_type, 0)?).map_err(|_| bad("type too large"))
            };
            match mname {
                "type" => kind = Some(uint()?),
                "max_entries" => max = Some(uint()?),
                "map_flags" => flags = uint()?,
                "key_size" => key = Some(uint()?),
                "value_size" => value = Some(uint()?),
                "key" => key = Some(size()?),
                "value" => value = Some(size()?),
                _ => return Err(bad("unsupported member (pinning, inner maps, ...)")),
            }
        }
        let t = kind.ok_or(bad("no type"))?;
        let def = MapDef {
            name: name.to_string(),
            kind: MapKind::from_type(t).ok_or(bad(
                "map type not supported (array, hash, percpu_array, lru_hash)",
            ))?,
            key_size: key.ok_or(bad("no key or key_size"))?,
            value_size: value.ok_or(bad("no value or value_size"))?,
            max_entries: max.ok_or(bad("no max_entries"))?,
            flags,
        };
        def.validate()?;
        Ok(def)
    }
}
