//! The helper functions a program may call (the whitelist), by the kernel's numbers
//! (enum bpf_func_id), so clang's `bpf_helper_defs.h` calls them unchanged, and their one
//! implementation ([`call`]), which the interpreter and the JIT (sluice-ebpf-jit) share.

use crate::error::{MapError, RunError};
use crate::maps::{MapKind, Maps};
use crate::xdp::{Env, XdpContext};

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
    /// long bpf_sluice_region_read(dst, size, addr): Sluice's own (id 0x5100, outside the
    /// kernel's numbers): `size` bytes (a known size within 512) of the offload regions at
    /// application address `addr` into `dst`; 0, or -EFAULT outside them (docs/offload.md).
    RegionRead,
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
            REGION_READ_ID => Helper::RegionRead,
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
            Helper::RegionRead => "bpf_sluice_region_read",
        }
    }
}

/// bpf_sluice_region_read's helper id: far above the kernel's, so no kernel helper is shadowed.
pub const REGION_READ_ID: i32 = 0x5100;

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

/// R1 at entry: the xdp_md pointer. Not an address (its top byte tags the context), so no
/// region check ever accepts it; only the context loads the verifier allows read through it.
pub const CTX_POINTER: u64 = 1 << 56;

const MAP_TAG: u64 = 5;
const TAG_SHIFT: u32 = 56;

/// The value an LDDW with PSEUDO_MAP_FD loads: map `index`, tagged (not an address).
pub fn map_pointer(index: u64) -> u64 {
    (MAP_TAG << TAG_SHIFT) | (index & ((1 << TAG_SHIFT) - 1))
}

/// The map index of a map pointer.
pub fn map_of(addr: u64) -> Option<usize> {
    (addr >> TAG_SHIFT == MAP_TAG).then_some((addr & ((1 << TAG_SHIFT) - 1)) as usize)
}

const EINVAL: u64 = (-22i64) as u64;
const ENOENT: u64 = (-2i64) as u64;
const EEXIST: u64 = (-17i64) as u64;
const E2BIG: u64 = (-7i64) as u64;
const EFAULT: u64 = (-14i64) as u64;

/// How a runtime's pointers name memory: the interpreter's tagged addresses or the JIT's host
/// addresses. Helpers reach memory only through this, so both runtimes share their semantics.
pub trait Memory {
    /// The `len` bytes at `addr` if they lie inside the frame (data..data_end), the stack or
    /// one map value; `None` otherwise.
    fn bytes<'b>(
        &'b mut self,
        ctx: &'b mut XdpContext<'_>,
        maps: &'b mut Maps,
        addr: u64,
        len: usize,
    ) -> Option<&'b mut [u8]>;

    /// The address bpf_map_lookup_elem returns for value unit `unit` of map `map`.
    fn value_addr(&mut self, maps: &mut Maps, map: usize, unit: u32) -> u64;
}

/// Copies `out.len()` bytes at `addr` into `out`.
fn copy_in<M: Memory + ?Sized>(
    mem: &mut M,
    ctx: &mut XdpContext<'_>,
    maps: &mut Maps,
    addr: u64,
    out: &mut [u8],
    pc: usize,
) -> Result<(), RunError> {
    let len = out.len();
    out.copy_from_slice(
        mem.bytes(ctx, maps, addr, len)
            .ok_or(RunError::OutOfBounds(pc))?,
    );
    Ok(())
}

/// Calls helper `id` with R1-R5 = `args` at instruction `pc`: R0, or why the run stops.
pub fn call<M: Memory + ?Sized>(
    id: i32,
    args: [u64; 5],
    mem: &mut M,
    ctx: &mut XdpContext<'_>,
    env: &mut Env<'_>,
    pc: usize,
) -> Result<u64, RunError> {
    let h = Helper::from_id(id).ok_or(RunError::BadInsn(pc))?;
    let [r1, r2, r3, r4, r5] = args;
    let mut key = [0u8; crate::maps::MAX_KEY_SIZE as usize];
    let map = || map_of(r1).ok_or(RunError::Helper(pc));
    let key_size = |maps: &Maps, m: usize| {
        maps.map(m)
            .map(|m| m.def().key_size as usize)
            .ok_or(RunError::MapMismatch(pc))
    };
    Ok(match h {
        Helper::MapLookupElem => {
            let m = map()?;
            let ks = key_size(env.maps, m)?;
            copy_in(mem, ctx, env.maps, r2, &mut key[..ks], pc)?;
            let cpu = env.cpu as usize;
            let map_ref = env.maps.map_mut(m).ok_or(RunError::MapMismatch(pc))?;
            match map_ref.find(&key[..ks], cpu, true) {
                Some(unit) => mem.value_addr(env.maps, m, unit),
                None => 0,
            }
        }
        Helper::MapUpdateElem => {
            let m = map()?;
            let ks = key_size(env.maps, m)?;
            copy_in(mem, ctx, env.maps, r2, &mut key[..ks], pc)?;
            let vs = env
                .maps
                .map(m)
                .ok_or(RunError::MapMismatch(pc))?
                .def()
                .value_size as usize;
            // The value may live in a map: copy it out first (into preallocated scratch).
            let mut scratch = std::mem::take(&mut env.maps.scratch);
            let copied = match scratch.get_mut(..vs) {
                Some(dst) => copy_in(mem, ctx, env.maps, r3, dst, pc),
                None => Err(RunError::Helper(pc)),
            };
            let result = copied.map(|_| {
                let cpu = env.cpu as usize;
                let mr = env.maps.map_mut(m)?;
                if mr.def().kind == MapKind::PerCpuArray {
                    // A program updates its own CPU's value only.
                    if r4 == crate::maps::update_flags::NOEXIST {
                        return Some(EEXIST);
                    }
                    let unit = mr.find(&key[..ks], cpu, false)?;
                    mr.unit_mut(unit)?.copy_from_slice(&scratch[..vs]);
                    return Some(0);
                }
                Some(match mr.update(&key[..ks], &scratch[..vs], r4) {
                    Ok(()) => 0,
                    Err(MapError::Full) => E2BIG,
                    Err(MapError::Exists) => EEXIST,
                    Err(MapError::NotFound) => ENOENT,
                    Err(_) => EINVAL,
                })
            });
            env.maps.scratch = scratch;
            result?.unwrap_or(EINVAL)
        }
        Helper::MapDeleteElem => {
            let m = map()?;
            let ks = key_size(env.maps, m)?;
            copy_in(mem, ctx, env.maps, r2, &mut key[..ks], pc)?;
            match env.maps.delete(m, &key[..ks]) {
                Ok(()) => 0,
                Err(MapError::NotFound) => ENOENT,
                Err(_) => EINVAL,
            }
        }
        Helper::KtimeGetNs => env.now_ns,
        Helper::GetSmpProcessorId => env.cpu as u64,
        Helper::TracePrintk => {
            let n = usize::try_from(r2).map_err(|_| RunError::Helper(pc))?;
            let fmt = mem
                .bytes(ctx, env.maps, r1, n)
                .ok_or(RunError::OutOfBounds(pc))?;
            env.trace.print(fmt, [r3, r4, r5]);
            n as u64
        }
        Helper::Redirect => {
            ctx.redirect = Some(r1 as u32);
            if r2 == 0 {
                crate::xdp::code::REDIRECT
            } else {
                crate::xdp::code::ABORTED
            }
        }
        Helper::CsumDiff => {
            let max = MAX_HELPER_MEM;
            if r2 > max || r4 > max || !r2.is_multiple_of(4) || !r4.is_multiple_of(4) {
                return Ok(EINVAL);
            }
            let (mut from, mut to) = ([0u8; 512], [0u8; 512]);
            let (nf, nt) = (r2 as usize, r4 as usize);
            if nf > 0 {
                copy_in(mem, ctx, env.maps, r1, &mut from[..nf], pc)?;
            }
            if nt > 0 {
                copy_in(mem, ctx, env.maps, r3, &mut to[..nt], pc)?;
            }
            csum_diff(&from[..nf], &to[..nt], r5 as u32) as u64
        }
        Helper::RegionRead => {
            let n = usize::try_from(r2).map_err(|_| RunError::Helper(pc))?;
            let mut tmp = [0u8; MAX_HELPER_MEM as usize];
            let tmp = tmp.get_mut(..n).ok_or(RunError::Helper(pc))?;
            if !env.trace.region_read(r3, tmp) {
                return Ok(EFAULT);
            }
            mem.bytes(ctx, env.maps, r1, n)
                .ok_or(RunError::OutOfBounds(pc))?
                .copy_from_slice(tmp);
            0
        }
        Helper::XdpAdjustHead => {
            let delta = r2 as i32 as i64;
            let data = ctx.data as i64 + delta;
            if data < 0 || data + MIN_FRAME as i64 > ctx.data_end as i64 {
                EINVAL
            } else {
                ctx.data = data as usize;
                0
            }
        }
    })
}
