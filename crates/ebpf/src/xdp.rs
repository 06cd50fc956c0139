//! What a program sees and returns: the xdp_md context over a frame, the XDP actions, and the
//! environment of a run (maps, the engine's clock, the trace sink, counters).

use crate::maps::Maps;

/// XDP return codes (enum xdp_action).
pub mod code {
    /// XDP_ABORTED: a program error; dropped and counted.
    pub const ABORTED: u64 = 0;
    /// XDP_DROP
    pub const DROP: u64 = 1;
    /// XDP_PASS
    pub const PASS: u64 = 2;
    /// XDP_TX
    pub const TX: u64 = 3;
    /// XDP_REDIRECT
    pub const REDIRECT: u64 = 4;
}

/// Why a frame is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The program returned XDP_DROP.
    Program,
    /// The program returned XDP_ABORTED.
    Aborted,
    /// The program returned a number that is no XDP action.
    InvalidAction(u64),
}

/// What the pipeline does with the frame (flextoe.txt 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// XDP_PASS: on to the next stage.
    Pass,
    /// XDP_DROP, XDP_ABORTED or an invalid return code.
    Drop(DropReason),
    /// XDP_TX: back out of the port it came in on.
    Tx,
    /// XDP_REDIRECT: to the control plane, or to `XdpContext::redirect` if the program set it.
    Redirect,
}

impl Action {
    /// The action of a program's return value.
    pub fn from_return(r0: u64) -> Action {
        match r0 {
            code::ABORTED => Action::Drop(DropReason::Aborted),
            code::DROP => Action::Drop(DropReason::Program),
            code::PASS => Action::Pass,
            code::TX => Action::Tx,
            code::REDIRECT => Action::Redirect,
            other => Action::Drop(DropReason::InvalidAction(other)),
        }
    }
}

/// A frame as the program sees it (struct xdp_md): `buf[data..data_end]` is the frame, the
/// bytes before `data` are headroom for bpf_xdp_adjust_head.
#[derive(Debug)]
pub struct XdpContext<'a> {
    /// The buffer: headroom, then the frame, then tailroom.
    pub buf: &'a mut [u8],
    /// Start of the frame in `buf` (moved by bpf_xdp_adjust_head).
    pub data: usize,
    /// End of the frame in `buf`.
    pub data_end: usize,
    /// xdp_md.ingress_ifindex
    pub ingress_ifindex: u32,
    /// xdp_md.rx_queue_index
    pub rx_queue_index: u32,
    /// Set by bpf_redirect: the target of an XDP_REDIRECT.
    pub redirect: Option<u32>,
}

impl<'a> XdpContext<'a> {
    /// A frame of `len` bytes at `headroom` in `buf`; `None` if it does not fit.
    pub fn new(buf: &'a mut [u8], headroom: usize, len: usize) -> Option<XdpContext<'a>> {
        let end = headroom.checked_add(len)?;
        (end <= buf.len()).then_some(XdpContext {
            buf,
            data: headroom,
            data_end: end,
            ingress_ifindex: 0,
            rx_queue_index: 0,
            redirect: None,
        })
    }

    /// The frame's bytes now.
    pub fn frame(&self) -> &[u8] {
        &self.buf[self.data..self.data_end]
    }
}

/// Where bpf_trace_printk goes (the engine's log); called with the format bytes and the
/// three arguments, unformatted, so a run allocates nothing.
pub trait TraceSink {
    /// One bpf_trace_printk call.
    fn print(&mut self, fmt: &[u8], args: [u64; 3]);

    /// One bpf_sluice_region_read: the host copies `out.len()` bytes of the regions it lets
    /// the program read (an offload handler's, docs/offload.md) at `addr` into `out`; false
    /// outside them. The data-path's hooks have no region.
    fn region_read(&mut self, _addr: u64, _out: &mut [u8]) -> bool {
        false
    }
}

/// A sink that discards.
#[derive(Debug, Default)]
pub struct NoTrace;

impl TraceSink for NoTrace {
    fn print(&mut self, _fmt: &[u8], _args: [u64; 3]) {}
}

/// Counters of runs by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Runs started.
    pub runs: u64,
    /// XDP_PASS.
    pub passed: u64,
    /// XDP_DROP.
    pub dropped: u64,
    /// XDP_ABORTED (dropped).
    pub aborted: u64,
    /// Unknown return codes (dropped).
    pub invalid_action: u64,
    /// XDP_TX.
    pub tx: u64,
    /// XDP_REDIRECT.
    pub redirected: u64,
    /// Runs stopped by a `RunError` (the caller drops the frame).
    pub run_errors: u64,
    /// Instructions executed.
    pub insns: u64,
}

impl Counters {
    /// Counts a finished run's outcome (not `runs`, which counts starts).
    pub fn record(&mut self, r: &Result<Action, crate::RunError>) {
        match r {
            Ok(Action::Pass) => self.passed += 1,
            Ok(Action::Tx) => self.tx += 1,
            Ok(Action::Redirect) => self.redirected += 1,
            Ok(Action::Drop(DropReason::Program)) => self.dropped += 1,
            Ok(Action::Drop(DropReason::Aborted)) => self.aborted += 1,
            Ok(Action::Drop(DropReason::InvalidAction(_))) => self.invalid_action += 1,
            Err(_) => self.run_errors += 1,
        }
    }
}

/// Everything a run may touch besides the frame.
pub struct Env<'a> {
    /// The maps the program was verified against.
    pub maps: &'a mut Maps,
    /// The engine's clock, for bpf_ktime_get_ns.
    pub now_ns: u64,
    /// The flow-group core, for per-CPU maps and bpf_get_smp_processor_id.
    pub cpu: u32,
    /// bpf_trace_printk's destination.
    pub trace: &'a mut dyn TraceSink,
    /// Outcome counters.
    pub counters: &'a mut Counters,
}
