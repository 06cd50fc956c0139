//! The loader: a clang-built BPF ELF object (`clang -O2 -g -target bpf -c prog.c`) into its
//! program sections (instructions, with map references relocated) and map definitions
//! (BTF-style `.maps` and legacy `SEC("maps") struct bpf_map_def`).

use crate::btf::Btf;
use crate::error::LoadError;
use crate::insn::{self, Insn, PSEUDO_MAP_FD};
use crate::maps::{MapDef, MapKind};
use object::{
    Object as _, ObjectSection as _, ObjectSymbol as _, RelocationFlags, RelocationTarget,
    SectionIndex,
};

/// R_BPF_64_64: a 64-bit immediate (LDDW) relocation, how clang references a map.
const R_BPF_64_64: u32 = 1;
/// R_BPF_64_32: a call relocation (bpf-to-bpf calls).
const R_BPF_64_32: u32 = 10;
/// Legacy `struct bpf_map_def`: five u32 fields.
const LEGACY_DEF_SIZE: u64 = 20;
/// ELF SHF_EXECINSTR.
const SHF_EXECINSTR: u64 = 0x4;

/// A parsed object: its program sections and its maps.
#[derive(Clone, Debug)]
pub struct Object {
    /// Map definitions; a relocated LDDW's immediate is an index into this.
    pub maps: Vec<MapDef>,
    programs: Vec<(String, Vec<Insn>)>,
}

impl Object {
    /// Parses and relocates an object.
    pub fn parse(bytes: &[u8]) -> Result<Object, LoadError> {
        let file = object::File::parse(bytes).map_err(|e| LoadError::Elf(e.to_string()))?;
        if file.architecture() != object::Architecture::Bpf
            || !file.is_little_endian()
            || !file.is_64()
        {
            return Err(LoadError::Elf(
                "not a little-endian 64-bit BPF object".into(),
            ));
        }
        // Maps, located by (section, offset) for relocations.
        let mut maps = Vec::new();
        let mut map_at: Vec<(SectionIndex, u64, usize)> = Vec::new();
        let btf_maps = match file.section_by_name(".BTF") {
            Some(s) => {
                let data = s.data().map_err(|e| LoadError::Elf(e.to_string()))?;
                Btf::parse(data)?.maps()?
            }
            None => Vec::new(),
        };
        for sym in file.symbols() {
            let Some(sec_idx) = sym.section_index() else {
                continue;
            };
            let Ok(sec) = file.section_by_index(sec_idx) else {
                continue;
            };
            let sec_name = sec.name().unwrap_or("");
            let name = sym.name().unwrap_or("").to_string();
            if sym.kind() == object::SymbolKind::Section || name.is_empty() {
                continue;
            }
            let def = match sec_name {
                ".maps" => btf_maps
                    .iter()
                    .find(|d| d.name == name)
                    .cloned()
                    .ok_or_else(|| LoadError::MapDef(name.clone(), "no BTF definition in .maps"))?,
                "maps" => legacy_def(&name, sec.data().unwrap_or(&[]), sym.address())?,
                _ => continue,
            };
            map_at.push((sec_idx, sym.address(), maps.len()));
            maps.push(def);
        }
        if maps.len() > crate::maps::MAX_MAPS {
            return Err(LoadError::MapDef(String::new(), "more than 4096 maps"));
        }
        let mut programs = Vec::new();
        for sec in file.sections() {
            let object::SectionFlags::Elf { sh_flags, .. } = sec.flags() else {
                continue;
            };
            if sh_flags.0 & SHF_EXECINSTR == 0 || sec.size() == 0 {
                continue;
            }
            let name = sec
                .name()
                .map_err(|e| LoadError::Elf(e.to_string()))?
                .to_string();
            let data = sec.data().map_err(|e| LoadError::Elf(e.to_string()))?;
            let mut insns = insn::decode(data).map_err(LoadError::Decode)?;
            for (off, rel) in sec.relocations() {
                let i = (off / 8) as usize;
                let RelocationFlags::Elf { r_type, .. } = rel.flags() else {
                    return Err(LoadError::Relocation(i, "not an ELF relocation".into()));
                };
                if r_type.0 == R_BPF_64_32 {
                    return Err(LoadError::Relocation(
                        i,
                        "bpf-to-bpf calls are not supported".into(),
                    ));
                }
                if r_type.0 != R_BPF_64_64
                    || off % 8 != 0
                    || !insns.get(i).is_some_and(Insn::is_lddw)
                {
                    return Err(LoadError::Relocation(
                        i,
                        format!("unsupported relocation type {}", r_type.0),
                    ));
                }
                let RelocationTarget::Symbol(si) = rel.target() else {
                    return Err(LoadError::Relocation(
                        i,
                        "relocation without a symbol".into(),
                    ));
                };
                let sym = file
                    .symbol_by_index(si)
                    .map_err(|e| LoadError::Relocation(i, e.to_string()))?;
                let at = sym.address().wrapping_add(insns[i].imm as i64 as u64);
                let map = map_at
                    .iter()
                    .find(|(s, a, _)| Some(*s) == sym.section_index() && *a == at)
                    .map(|m| m.2);
                let Some(map) = map else {
                    let what = sym
                        .section_index()
                        .and_then(|s| file.section_by_index(s).ok());
                    let what = what
                        .and_then(|s| s.name().ok().map(str::to_string))
                        .unwrap_or_default();
                    return Err(LoadError::Relocation(
                        i,
                        format!(
                            "reference into {what:?} is not a map (global data is not supported)"
                        ),
                    ));
                };
                insns[i].src = PSEUDO_MAP_FD;
                insns[i].imm = map as i32;
                insns[i].imm64 = map as u64;
            }
            programs.push((name, insns));
        }
        Ok(Object { maps, programs })
    }

    /// The names of the sections that hold programs.
    pub fn sections(&self) -> impl Iterator<Item = &str> {
        self.programs.iter().map(|(n, _)| n.as_str())
    }

    /// The relocated instructions of a section: `name` exactly, or if `name` is "xdp", the
    /// first `xdp` or `xdp/...` section.
    pub fn program(&self, name: &str) -> Result<&[Insn], LoadError> {
        let exact = self.programs.iter().find(|(n, _)| n == name);
        let xdp = || {
            self.programs.iter().find(|(n, _)| {
                name == "xdp" && (n == "xdp" || n.starts_with("xdp/") || n == "xdp.frags")
            })
        };
        exact
            .or_else(xdp)
            .map(|(_, i)| i.as_slice())
            .ok_or_else(|| LoadError::NoSection(name.into()))
    }
}

fn legacy_def(name: &str, data: &[u8], at: u64) -> Result<MapDef, LoadError> {
    let bad = |why| LoadError::MapDef(name.to_string(), why);
    let start = usize::try_from(at).map_err(|_| bad("symbol out of range"))?;
    let b = data
        .get(start..start.saturating_add(LEGACY_DEF_SIZE as usize))
        .ok_or(bad("bpf_map_def outside the maps section"))?;
    let w = |k: usize| u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
    let def = MapDef {
        name: name.to_string(),
        kind: MapKind::from_type(w(0)).ok_or(bad(
            "map type not supported (array, hash, percpu_array, lru_hash)",
        ))?,
        key_size: w(1),
        value_size: w(2),
        max_entries: w(3),
        flags: w(4),
    };
    def.validate()?;
    Ok(def)
}
