//! Differential testing against the interpreter: the same program on the same frame and maps
//! must give the same result (action or error), frame bytes, bounds, redirect target,
//! counters, trace output and map contents. The property behind the proptest, the
//! coverage-guided target `ebpf_jit_differential` and the in-tree fuzzer's case.

use sluice_ebpf::fuzzing::{self, Case};
use sluice_ebpf::{Action, Counters, Env, Maps, Program, RunError, TraceSink, XdpContext};

use crate::Compiled;

/// Everything a run can change, for comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The action or error.
    pub result: Result<Action, RunError>,
    /// The whole buffer after the run (headroom, frame, tailroom).
    pub buf: Vec<u8>,
    /// `data` and `data_end` after the run.
    pub bounds: (usize, usize),
    /// bpf_redirect's target.
    pub redirect: Option<u32>,
    /// The counters of this one run.
    pub counters: Counters,
    /// bpf_trace_printk calls.
    pub trace: Vec<(Vec<u8>, [u64; 3])>,
    /// Every map's (key, value) pairs, in storage order.
    pub maps: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
}

#[derive(Default)]
struct Record(Vec<(Vec<u8>, [u64; 3])>);

impl TraceSink for Record {
    fn print(&mut self, fmt: &[u8], args: [u64; 3]) {
        self.0.push((fmt.to_vec(), args));
    }
}

/// Every map's contents.
pub fn dump(maps: &Maps) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    (0..maps.len())
        .map(|m| {
            maps.iter(m)
                .map(|it| it.map(|(k, v)| (k.to_vec(), v.to_vec())).collect())
                .unwrap_or_default()
        })
        .collect()
}

/// Runs `run` on `buf` (frame at `headroom`, `len` bytes) with `maps`: what it changed.
pub fn observe(
    run: impl FnOnce(&mut XdpContext<'_>, &mut Env<'_>) -> Result<Action, RunError>,
    maps: &mut Maps,
    mut buf: Vec<u8>,
    headroom: usize,
    len: usize,
    now_ns: u64,
) -> Outcome {
    let mut counters = Counters::default();
    let mut trace = Record::default();
    let (result, bounds, redirect) = {
        let Some(mut ctx) = XdpContext::new(&mut buf, headroom, len) else {
            return Outcome {
                result: Err(RunError::OutOfBounds(0)),
                buf,
                bounds: (headroom, headroom),
                redirect: None,
                counters,
                trace: trace.0,
                maps: dump(maps),
            };
        };
        ctx.ingress_ifindex = 3;
        ctx.rx_queue_index = 1;
        let mut env = Env {
            maps: &mut *maps,
            now_ns,
            cpu: 0,
            trace: &mut trace,
            counters: &mut counters,
        };
        let result = run(&mut ctx, &mut env);
        (result, (ctx.data, ctx.data_end), ctx.redirect)
    };
    Outcome {
        result,
        buf,
        bounds,
        redirect,
        counters,
        trace: trace.0,
        maps: dump(maps),
    }
}

/// The interpreter's and the JIT's outcome of one run each, from equal maps and buffers.
pub fn both(
    program: &Program,
    compiled: &mut Compiled,
    interp_maps: &mut Maps,
    jit_maps: &mut Maps,
    buf: &[u8],
    headroom: usize,
    len: usize,
) -> (Outcome, Outcome) {
    let i = observe(
        |ctx, env| sluice_ebpf::run(program, ctx, env),
        interp_maps,
        buf.to_vec(),
        headroom,
        len,
        7,
    );
    let j = observe(
        |ctx, env| compiled.run(ctx, env),
        jit_maps,
        buf.to_vec(),
        headroom,
        len,
        7,
    );
    (i, j)
}

/// A fuzz case's buffer, as `sluice_ebpf::fuzzing::run_on` builds it.
pub fn case_buf(c: &Case) -> Vec<u8> {
    let mut buf = vec![0u8; 64 + 256 + 64];
    for (i, b) in buf[c.headroom..c.headroom + c.len].iter_mut().enumerate() {
        *b = c
            .fill
            .get(i % c.fill.len().max(1))
            .copied()
            .unwrap_or(i as u8);
    }
    buf
}

/// The fuzz property: bytes in `sluice_ebpf::fuzzing`'s layout that verify run identically
/// under the JIT and the interpreter, twice in a row on the same maps (so that state the
/// first run left is read by the second). Panics on any difference; `None` if refused.
pub fn check(data: &[u8]) -> Option<Action> {
    let c = fuzzing::prepare(data)?;
    let mut compiled = match Compiled::compile(&c.program) {
        Ok(j) => j,
        // Only where there is no JIT; a verified program the JIT refuses is a finding.
        Err(crate::JitError::Unavailable) => return None,
        Err(e) => panic!("the JIT refused a verified program: {e}"),
    };
    let mut im = Maps::new(&c.maps).expect("the fuzz maps are valid");
    let mut jm = Maps::new(&c.maps).expect("the fuzz maps are valid");
    let buf = case_buf(&c);
    let mut action = None;
    for round in 0..2 {
        let (i, j) = both(
            &c.program,
            &mut compiled,
            &mut im,
            &mut jm,
            &buf,
            c.headroom,
            c.len,
        );
        assert_eq!(i, j, "JIT and interpreter differ (round {round})");
        action = i.result.ok();
    }
    action
}
