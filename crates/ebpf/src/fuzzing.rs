//! The property behind the proptest and the coverage-guided target `ebpf_verify_run`: any
//! bytecode either fails verification or runs on any frame without panicking, within its
//! instruction budget, leaving the frame's bounds inside the buffer.

use crate::insn::{self, Insn, PSEUDO_MAP_FD};
use crate::maps::{MapDef, MapKind, Maps};
use crate::program::Program;
use crate::xdp::{Counters, Env, NoTrace, XdpContext};

/// Exploration budget for fuzzed programs (smaller than the kernel's, for speed).
pub const FUZZ_EXPLORED: usize = 20_000;

/// The maps every fuzzed program may reference (LDDW src 1, imm modulo their number).
pub fn fuzz_maps() -> Vec<MapDef> {
    let def = |name: &str, kind, key_size, value_size, max_entries| MapDef {
        name: name.into(),
        kind,
        key_size,
        value_size,
        max_entries,
        flags: 0,
    };
    vec![
        def("array", MapKind::Array, 4, 8, 4),
        def("hash", MapKind::Hash, 8, 16, 8),
        def("lru", MapKind::LruHash, 4, 4, 2),
        def("percpu", MapKind::PerCpuArray, 4, 8, 2),
    ]
}

/// A fuzz input decoded: a verified program and the frame to run it on.
#[derive(Debug)]
pub struct Case {
    /// The program the verifier accepted.
    pub program: Program,
    /// The maps it was verified against ([`fuzz_maps`]).
    pub maps: Vec<MapDef>,
    /// Frame length.
    pub len: usize,
    /// Bytes before the frame.
    pub headroom: usize,
    /// The frame's contents, cycled.
    pub fill: Vec<u8>,
}

/// Input layout: byte 0 frame length, byte 1 headroom, the next 256 bytes frame contents
/// (cycled), the rest instructions (8-byte slots). `None` if the verifier refuses it.
pub fn prepare(data: &[u8]) -> Option<Case> {
    if data.len() < 2 {
        return None;
    }
    let (len, headroom) = (data[0] as usize, data[1] as usize % 64);
    let fill = data.get(2..258.min(data.len())).unwrap_or(&[]);
    let code = data.get(258..).unwrap_or(&[]);
    let code = &code[..code.len() - code.len() % 8];
    let mut insns: Vec<Insn> = insn::decode(code).ok()?;
    let maps = fuzz_maps();
    for i in insns
        .iter_mut()
        .filter(|i| i.is_lddw() && i.src == PSEUDO_MAP_FD)
    {
        i.imm64 %= maps.len() as u64 + 1;
    }
    let program = Program::verify_within(insns, &maps, FUZZ_EXPLORED).ok()?;
    Some(Case {
        program,
        maps,
        len,
        headroom,
        fill: fill.to_vec(),
    })
}

/// [`prepare`], then run: panics (a finding) if a program the verifier accepted stops with
/// a `RunError`: the verifier and the interpreter disagree.
pub fn verify_and_run(data: &[u8]) -> Option<crate::Action> {
    let c = prepare(data)?;
    match run_on(&c.program, &c.maps, c.len, c.headroom, &c.fill) {
        Ok(action) => Some(action),
        Err(e) => panic!("verified program stopped at run time: {e}"),
    }
}

/// Runs a verified program on a frame of `len` bytes after `headroom`, filled from `fill`.
pub fn run_on(
    program: &Program,
    maps: &[MapDef],
    len: usize,
    headroom: usize,
    fill: &[u8],
) -> Result<crate::Action, crate::RunError> {
    let mut buf = [0u8; 64 + 256 + 64];
    for (i, b) in buf[headroom..headroom + len].iter_mut().enumerate() {
        *b = fill.get(i % fill.len().max(1)).copied().unwrap_or(i as u8);
    }
    let mut maps = Maps::new(maps).expect("the fuzz maps are valid");
    let mut counters = Counters::default();
    let mut trace = NoTrace;
    let mut ctx = XdpContext::new(&mut buf, headroom, len).expect("the frame fits");
    let mut env = Env {
        maps: &mut maps,
        now_ns: 1,
        cpu: 0,
        trace: &mut trace,
        counters: &mut counters,
    };
    let r = crate::run(program, &mut ctx, &mut env);
    assert!(
        ctx.data <= ctx.data_end && ctx.data_end <= ctx.buf.len(),
        "frame bounds escaped the buffer"
    );
    assert!(counters.insns <= program.budget(), "ran past the budget");
    r
}
