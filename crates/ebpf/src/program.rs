//! A verified, immutable program and the maps it was verified against.

use crate::elf::Object;
use crate::error::{LoadError, VerifyError};
use crate::insn::Insn;
use crate::maps::{MapDef, Maps};
use crate::verifier::{self, MAX_EXPLORED};

/// A program the verifier accepted; run it with [`crate::run`].
#[derive(Clone, Debug)]
pub struct Program {
    insns: Vec<Insn>,
    maps: Vec<MapDef>,
    budget: u64,
}

/// Why a module could not be loaded: the object, or the verifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleError {
    /// The ELF object.
    Load(LoadError),
    /// The verifier refused the program.
    Verify(VerifyError),
}

impl std::fmt::Display for ModuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModuleError::Load(e) => write!(f, "load: {e}"),
            ModuleError::Verify(e) => write!(f, "verifier: {e}"),
        }
    }
}

impl std::error::Error for ModuleError {}

impl From<LoadError> for ModuleError {
    fn from(e: LoadError) -> Self {
        ModuleError::Load(e)
    }
}

impl From<VerifyError> for ModuleError {
    fn from(e: VerifyError) -> Self {
        ModuleError::Verify(e)
    }
}

impl Program {
    /// Verifies instructions that reference `maps` by index (LDDW with src 1, imm = index).
    pub fn verify(insns: Vec<Insn>, maps: &[MapDef]) -> Result<Program, VerifyError> {
        Program::verify_within(insns, maps, MAX_EXPLORED)
    }

    /// As `verify`, with a smaller exploration budget (fuzzing, tests).
    pub fn verify_within(
        insns: Vec<Insn>,
        maps: &[MapDef],
        max_explored: usize,
    ) -> Result<Program, VerifyError> {
        let v = verifier::verify(&insns, maps, max_explored)?;
        // No run is longer than the longest explored path, which is at most all of them.
        Ok(Program {
            insns,
            maps: maps.to_vec(),
            budget: v.explored as u64,
        })
    }

    /// Verifies a section of a parsed object (`"xdp"` finds `xdp` or `xdp/NAME`).
    pub fn from_object(obj: &Object, section: &str) -> Result<Program, ModuleError> {
        Ok(Program::verify(obj.program(section)?.to_vec(), &obj.maps)?)
    }

    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The most instructions one run may execute.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The map declarations the program was verified against.
    pub fn maps(&self) -> &[MapDef] {
        &self.maps
    }

    /// Whether `maps` has the maps this program was verified against (kinds and sizes).
    pub fn matches(&self, maps: &Maps) -> bool {
        maps.len() >= self.maps.len()
            && self.maps.iter().zip(maps.defs()).all(|(a, b)| {
                a.kind == b.kind && a.key_size == b.key_size && a.value_size == b.value_size
            })
    }
}

/// Parses an object, creates its maps and verifies one section: ready to run.
pub fn load(bytes: &[u8], section: &str) -> Result<(Program, Maps), ModuleError> {
    let obj = Object::parse(bytes)?;
    let program = Program::from_object(&obj, section)?;
    let maps = Maps::new(&obj.maps)?;
    Ok((program, maps))
}
