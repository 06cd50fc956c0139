//! An eBPF module as the command line names it (`sluice engine --module`, `sluice ctl
//! module load`): `FILE.o[:SECTION]` (section `xdp` by default), or the name of a program
//! that ships with Sluice (`firewall`, `vlan_strip`, ...: sluice_ebpf::programs::SHIPPED).

use std::fmt;
use std::path::Path;

/// A module's object, read.
#[derive(Debug)]
pub struct ModuleFile {
    /// What to call it: the file's name, or the shipped program's.
    pub name: String,
    /// The ELF section.
    pub section: String,
    /// The object's bytes.
    pub bytes: Vec<u8>,
}

/// Why a module could not be read.
#[derive(Debug)]
pub struct ModuleFileError(pub String);

impl fmt::Display for ModuleFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ModuleFileError {}

/// Reads `FILE.o[:SECTION]` or a shipped program's name; at most `max` bytes.
pub fn read(spec: &str, max: usize) -> Result<ModuleFile, ModuleFileError> {
    if let Some((bytes, section)) = sluice_ebpf::programs::shipped(spec) {
        return Ok(ModuleFile {
            name: spec.to_string(),
            section: section.to_string(),
            bytes: bytes.to_vec(),
        });
    }
    // The section follows the last ':' unless that is part of the path (no '/' after it).
    let (file, section) = match spec.rsplit_once(':') {
        Some((f, s)) if !s.contains('/') || s.starts_with("xdp") => (f, s),
        _ => (spec, "xdp"),
    };
    let meta = std::fs::metadata(file).map_err(|e| {
        ModuleFileError(format!("{file}: {e} (and no shipped program of that name)"))
    })?;
    if meta.len() > max as u64 {
        return Err(ModuleFileError(format!(
            "{file}: {} bytes; an object of at most {max} bytes fits the control socket",
            meta.len()
        )));
    }
    let bytes = std::fs::read(file).map_err(|e| ModuleFileError(format!("{file}: {e}")))?;
    let name = Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into_owned());
    Ok(ModuleFile {
        name,
        section: section.to_string(),
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_names_files_and_sections() {
        let m = read("firewall", 1 << 20).unwrap();
        assert_eq!((m.name.as_str(), m.section.as_str()), ("firewall", "xdp"));
        assert_eq!(m.bytes, sluice_ebpf::programs::FIREWALL);
        let dir = std::env::temp_dir().join(format!("sluice-module-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("drop.o");
        std::fs::write(&path, sluice_ebpf::programs::DROP).unwrap();
        let spec = format!("{}:xdp/drop_all", path.display());
        let m = read(&spec, 1 << 20).unwrap();
        assert_eq!(
            (m.name.as_str(), m.section.as_str()),
            ("drop.o", "xdp/drop_all")
        );
        let m = read(&path.display().to_string(), 1 << 20).unwrap();
        assert_eq!(m.section, "xdp");
        let e = read(&path.display().to_string(), 100).unwrap_err();
        assert!(e.0.contains("at most 100 bytes"), "{e}");
        assert!(read("/nonexistent.o", 100).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
