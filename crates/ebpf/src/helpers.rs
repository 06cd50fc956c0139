//! The helper functions a program may call (the whitelist), by the kernel's numbers
//! (enum bpf_func_id), so clang's `bpf_helper_defs.h` calls them unchanged.

/// A whitelisted helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    /// void *bpf_map_lookup_elem(map, key): the value or NULL.
    MapLookupElem,
    /// long bpf_map_update_elem(map, key, value, flags).
    MapUpdateElem,
    /// long bpf_map_delete_elem(map, key).
    MapDeleteElem,
    /// u64 bpf_ktime_get_ns(): the engine's clock, passed in.
    KtimeGetNs,
    /// long bpf_trace_printk(fmt, fmt_size, a, b, c): to the engine's trace sink.
    TracePrintk,
    /// u32 bpf_get_smp_processor_id(): the flow-group core (0 for now).
    GetSmpProcessorId,
    /// long bpf_redirect(ifindex, flags): XDP_REDIRECT with a target.
    Redirect,
    /// s64 bpf_csum_diff(from, from_size, to, to_size, seed): a 32-bit one's complement diff.
    CsumDiff,
    /// long bpf_xdp_adjust_head(ctx, delta): moves data; invalidates packet pointers.
    XdpAdjustHead,
}

impl Helper {
    /// The helper of a kernel id, if whitelisted.
    pub fn from_id(id: i32) -> Option<Helper> {
        Some(match id {
            1 => Helper::MapLookupElem,
            2 => Helper::MapUpdateElem,
            3 => Helper::MapDeleteElem,
            5 => Helper::KtimeGetNs,
            6 => Helper::TracePrintk,
            8 => Helper::GetSmpProcessorId,
            23 => Helper::Redirect,
            28 => Helper::CsumDiff,
            44 => Helper::XdpAdjustHead,
            _ => return None,
        })
    }

    /// The C name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Helper::MapLookupElem => "bpf_map_lookup_elem",
            Helper::MapUpdateElem => "bpf_map_update_elem",
            Helper::MapDeleteElem => "bpf_map_delete_elem",
            Helper::KtimeGetNs => "bpf_ktime_get_ns",
            Helper::TracePrintk => "bpf_trace_printk",
            Helper::GetSmpProcessorId => "bpf_get_smp_processor_id",
            Helper::Redirect => "bpf_redirect",
            Helper::CsumDiff => "bpf_csum_diff",
            Helper::XdpAdjustHead => "bpf_xdp_adjust_head",
        }
    }
}

/// The largest buffer bpf_csum_diff and bpf_trace_printk accept, in bytes.
pub const MAX_HELPER_MEM: u64 = 512;
/// The shortest frame bpf_xdp_adjust_head leaves (an Ethernet header).
pub const MIN_FRAME: usize = 14;

/// bpf_csum_diff's arithmetic: seed + sum(to words) + sum(!from words), folded to 32 bits with
/// end-around carry (the kernel's csum_partial over the difference; equal modulo 0xffff).
pub fn csum_diff(from: &[u8], to: &[u8], seed: u32) -> u32 {
    let mut s = seed as u64;
    for w in from.chunks_exact(4) {
        s += !u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    for w in to.chunks_exact(4) {
        s += u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    while s >> 32 != 0 {
        s = (s & 0xffff_ffff) + (s >> 32);
    }
    s as u32
}
