//! The crate's typed errors: loading an object, verifying a program, running it, maps.

use std::fmt;

/// Why an ELF object could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// Not a little-endian 64-bit BPF ELF object, or a malformed one.
    Elf(String),
    /// No section of that name holds a program.
    NoSection(String),
    /// The program section's bytes are not instructions.
    Decode(crate::insn::DecodeError),
    /// The `.BTF` section is malformed (reason).
    Btf(&'static str),
    /// A map definition the loader cannot use (map name, reason).
    MapDef(String, &'static str),
    /// A relocation the loader does not support (instruction index, reason).
    Relocation(usize, String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Elf(e) => write!(f, "not a BPF ELF object: {e}"),
            LoadError::NoSection(s) => write!(f, "no program section {s:?}"),
            LoadError::Decode(e) => write!(f, "{e}"),
            LoadError::Btf(e) => write!(f, "bad BTF: {e}"),
            LoadError::MapDef(m, e) => write!(f, "map {m:?}: {e}"),
            LoadError::Relocation(i, e) => write!(f, "insn {i}: relocation: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// A refusal by the verifier: the instruction and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// Index of the refused instruction (8-byte slots, as llvm-objdump numbers them).
    pub insn: usize,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "insn {}: {}", self.insn, self.reason)
    }
}

impl std::error::Error for VerifyError {}

/// Why the verifier refuses a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Empty program.
    Empty,
    /// More than `MAX_INSNS` instructions.
    TooLong(usize),
    /// An opcode this verifier does not know or allow.
    BadOpcode(u8),
    /// A register number above R10, or a write to R10.
    BadRegister(u8),
    /// A jump target outside the program or into an LDDW's second slot.
    JumpOutOfRange(i64),
    /// Execution can run past the last instruction.
    FallThrough,
    /// No path from the entry reaches this instruction.
    Unreachable,
    /// The exploration exceeded its budget: a loop that is not provably bounded.
    Complexity(usize),
    /// A register read before it was written.
    UninitRegister(u8),
    /// A packet read/write not proven within data..data_end.
    PacketOutOfBounds {
        /// Read or write.
        write: bool,
        /// Bytes accessed.
        size: usize,
        /// Lowest offset from data.
        lo: i64,
        /// Highest offset from data.
        hi: i64,
        /// Bytes proven by a data_end comparison.
        proven: u64,
    },
    /// A stack access outside the 512-byte frame.
    StackOutOfBounds(i64, usize),
    /// A stack read of bytes never written.
    StackUninit(i64, usize),
    /// A stack access with an offset not known exactly.
    StackVariableOffset,
    /// A context access other than the xdp_md fields with their sizes.
    BadContextAccess(i64, usize),
    /// A map value access outside its declared size.
    MapValueOutOfBounds {
        /// Lowest offset.
        lo: i64,
        /// Highest offset.
        hi: i64,
        /// Bytes accessed.
        size: usize,
        /// The declared value size.
        value_size: u32,
    },
    /// A map lookup's result used before a null check.
    MaybeNull(u8),
    /// Memory access through a register that is not a valid pointer (its kind).
    NotAPointer(u8, &'static str),
    /// A pointer stored where the program could leak it (packet, map value, context).
    PointerLeak,
    /// Arithmetic the verifier does not allow on this kind of pointer.
    BadPointerArithmetic(&'static str),
    /// A packet pointer used after bpf_xdp_adjust_head invalidated it.
    InvalidatedPacketPointer(u8),
    /// A call to a helper not on the whitelist.
    UnknownHelper(i32),
    /// bpf-to-bpf calls are not supported in this slice.
    BpfToBpfCall,
    /// A helper argument of the wrong type (helper, argument number, what was wanted).
    BadHelperArg(&'static str, u8, &'static str),
    /// A division or modulo by a register that can be zero.
    DivisionByZero,
    /// R0 is not a scalar at exit.
    BadReturn,
    /// A legacy packet access (LD ABS/IND), which XDP does not have.
    LegacyPacketAccess,
    /// An LDDW referencing a map that does not exist.
    BadMapReference(u32),
    /// A comparison whose outcome depends on where memory is (what was compared).
    PointerComparison(&'static str),
    /// A stack read (by the program or a helper) of a spilled pointer's bytes as a number.
    SpilledPointerRead(i64, usize),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Empty => write!(f, "empty program"),
            Reason::TooLong(n) => write!(f, "{n} instructions is more than {}", crate::insn::MAX_INSNS),
            Reason::BadOpcode(op) => write!(f, "unknown or unsupported opcode {op:#04x}"),
            Reason::BadRegister(r) => write!(f, "bad register r{r}"),
            Reason::JumpOutOfRange(t) => write!(f, "jump to {t} out of range"),
            Reason::FallThrough => write!(f, "execution falls off the end of the program"),
            Reason::Unreachable => write!(f, "unreachable instruction"),
            Reason::Complexity(n) => {
                write!(f, "more than {n} instructions explored: a loop that is not provably bounded")
            }
            Reason::UninitRegister(r) => write!(f, "r{r} read before it is written"),
            Reason::PacketOutOfBounds { write, size, lo, hi, proven } => {
                let what = if *write { "write" } else { "read" };
                if lo == hi {
                    write!(f, "packet {what} of {size} bytes at offset {lo} not proven within data_end ({proven} bytes proven)")
                } else {
                    write!(f, "packet {what} of {size} bytes at offset {lo}..={hi} not proven within data_end ({proven} bytes proven)")
                }
            }
            Reason::StackOutOfBounds(o, s) => write!(f, "stack access of {s} bytes at fp{o:+} outside the 512-byte frame"),
            Reason::StackUninit(o, s) => write!(f, "stack read of {s} bytes at fp{o:+} reads uninitialized bytes"),
            Reason::StackVariableOffset => write!(f, "stack access at a variable offset"),
            Reason::BadContextAccess(o, s) => write!(f, "xdp_md access of {s} bytes at offset {o} is not a readable field"),
            Reason::MapValueOutOfBounds { lo, hi, size, value_size } => write!(
                f,
                "map value access of {size} bytes at offset {lo}..={hi} outside its {value_size} bytes"
            ),
            Reason::MaybeNull(r) => write!(f, "r{r} may be NULL (map lookup result not checked)"),
            Reason::NotAPointer(r, k) => write!(f, "memory access through r{r}, which is {k}"),
            Reason::PointerLeak => write!(f, "a pointer stored into packet, map value or context memory"),
            Reason::BadPointerArithmetic(w) => write!(f, "pointer arithmetic not allowed: {w}"),
            Reason::InvalidatedPacketPointer(r) => {
                write!(f, "r{r} is a packet pointer invalidated by bpf_xdp_adjust_head")
            }
            Reason::UnknownHelper(h) => write!(f, "call to helper {h}, which is not allowed"),
            Reason::BpfToBpfCall => write!(f, "bpf-to-bpf calls are not supported"),
            Reason::BadHelperArg(h, a, w) => write!(f, "{h}: argument {a} must be {w}"),
            Reason::DivisionByZero => write!(f, "division or modulo by a register that can be zero"),
            Reason::BadReturn => write!(f, "R0 is not a scalar at exit"),
            Reason::LegacyPacketAccess => write!(f, "legacy LD_ABS/LD_IND packet access"),
            Reason::BadMapReference(m) => write!(f, "reference to map {m}, which does not exist"),
            Reason::PointerComparison(w) => write!(f, "pointer comparison prohibited: {w}"),
            Reason::SpilledPointerRead(o, s) => {
                write!(f, "stack read of {s} bytes at fp{o:+} would read a spilled pointer as a number")
            }
        }
    }
}

/// Why a run stopped (each is counted; the frame is then dropped by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunError {
    /// A memory access outside its region (a verifier bug caught at run time).
    OutOfBounds(usize),
    /// The per-run instruction budget ran out.
    Budget,
    /// An instruction the interpreter cannot execute (a verifier bug caught at run time).
    BadInsn(usize),
    /// The program refers to a map the given `Maps` does not have.
    MapMismatch(usize),
    /// A helper failed in a way the program cannot be told about.
    Helper(usize),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::OutOfBounds(i) => write!(f, "insn {i}: memory access out of bounds"),
            RunError::Budget => write!(f, "instruction budget exhausted"),
            RunError::BadInsn(i) => write!(f, "insn {i}: cannot execute"),
            RunError::MapMismatch(i) => write!(f, "insn {i}: program and maps do not match"),
            RunError::Helper(i) => write!(f, "insn {i}: helper failed"),
        }
    }
}

impl std::error::Error for RunError {}

/// Why a control-plane map operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// No such map.
    NoMap,
    /// The key is not `key_size` bytes.
    KeySize(usize),
    /// The value is not `value_size` bytes (or `value_size` x CPUs for per-CPU maps).
    ValueSize(usize),
    /// An array index at or past max_entries.
    Index(u32),
    /// The map is full (hash maps; LRU maps evict instead).
    Full,
    /// The key is not there.
    NotFound,
    /// Array entries cannot be deleted.
    NotDeletable,
    /// update flags: BPF_NOEXIST on an existing key.
    Exists,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::NoMap => write!(f, "no such map"),
            MapError::KeySize(n) => write!(f, "key of {n} bytes does not match the map's key size"),
            MapError::ValueSize(n) => {
                write!(f, "value of {n} bytes does not match the map's value size")
            }
            MapError::Index(i) => write!(f, "index {i} past the array's max_entries"),
            MapError::Full => write!(f, "map is full"),
            MapError::NotFound => write!(f, "no such key"),
            MapError::NotDeletable => write!(f, "array entries cannot be deleted"),
            MapError::Exists => write!(f, "key exists (BPF_NOEXIST)"),
        }
    }
}

impl std::error::Error for MapError {}
