//! Helper calls: the whitelist and each helper's argument types.

use super::state::State;
use super::value::{Range, Val};
use crate::error::Reason;
use crate::helpers::{Helper, MAX_HELPER_MEM};
use crate::maps::MapDef;

fn scalar(st: &State, h: Helper, r: u8) -> Result<Range, Reason> {
    match st.regs[r as usize] {
        Val::Scalar(x) => Ok(x),
        Val::Uninit => Err(Reason::UninitRegister(r)),
        _ => Err(Reason::BadHelperArg(h.name(), r, "a scalar")),
    }
}

fn const_size(st: &State, h: Helper, r: u8, max: u64) -> Result<u64, Reason> {
    match scalar(st, h, r)?.known() {
        Some(n) if n <= max => Ok(n),
        _ => Err(Reason::BadHelperArg(
            h.name(),
            r,
            "a known size within 512 bytes",
        )),
    }
}

fn map(st: &State, h: Helper, r: u8) -> Result<u32, Reason> {
    match st.regs[r as usize] {
        Val::MapPtr(m) => Ok(m),
        Val::Uninit => Err(Reason::UninitRegister(r)),
        _ => Err(Reason::BadHelperArg(h.name(), r, "a map")),
    }
}

/// Checks `r` points at `size` readable bytes: written stack, proven packet, or map value.
fn mem(st: &State, maps: &[MapDef], h: Helper, r: u8, size: u64) -> Result<(), Reason> {
    let size_i = size as i64;
    match st.regs[r as usize] {
        Val::Stack(off) => st.stack_readable(off, size as usize),
        Val::Pkt {
            id,
            off,
            vmin,
            vmax,
        } => {
            let proven = st.proven(id);
            if off + vmin < 0 || off + size_i > proven {
                let (lo, hi) = (off + vmin, off + vmax);
                return Err(Reason::PacketOutOfBounds {
                    write: false,
                    size: size as usize,
                    lo,
                    hi,
                    proven: proven.max(0) as u64,
                });
            }
            Ok(())
        }
        Val::MapValue { map, lo, hi } => {
            let value_size = maps[map as usize].value_size;
            if lo < 0 || hi + size_i > value_size as i64 {
                return Err(Reason::MapValueOutOfBounds {
                    lo,
                    hi,
                    size: size as usize,
                    value_size,
                });
            }
            Ok(())
        }
        Val::MapValueOrNull { .. } => Err(Reason::MaybeNull(r)),
        Val::Uninit => Err(Reason::UninitRegister(r)),
        Val::Invalid => Err(Reason::InvalidatedPacketPointer(r)),
        _ => Err(Reason::BadHelperArg(
            h.name(),
            r,
            "a pointer to stack, packet or map value",
        )),
    }
}

/// Checks a call's arguments and applies its effects: R0 set, R1-R5 clobbered.
pub fn call(st: &mut State, maps: &[MapDef], id: i32) -> Result<(), Reason> {
    let h = Helper::from_id(id).ok_or(Reason::UnknownHelper(id))?;
    let ret = match h {
        Helper::MapLookupElem => {
            let m = map(st, h, 1)?;
            mem(st, maps, h, 2, maps[m as usize].key_size as u64)?;
            st.next_id = st.next_id.wrapping_add(1);
            Val::MapValueOrNull {
                map: m,
                id: st.next_id,
            }
        }
        Helper::MapUpdateElem => {
            let m = map(st, h, 1)?;
            mem(st, maps, h, 2, maps[m as usize].key_size as u64)?;
            mem(st, maps, h, 3, maps[m as usize].value_size as u64)?;
            scalar(st, h, 4)?;
            Val::Scalar(Range::ANY)
        }
        Helper::MapDeleteElem => {
            let m = map(st, h, 1)?;
            mem(st, maps, h, 2, maps[m as usize].key_size as u64)?;
            Val::Scalar(Range::ANY)
        }
        Helper::KtimeGetNs => Val::Scalar(Range::ANY),
        Helper::GetSmpProcessorId => Val::Scalar(Range::U32),
        Helper::TracePrintk => {
            let n = const_size(st, h, 2, MAX_HELPER_MEM)?;
            if n == 0 {
                return Err(Reason::BadHelperArg(h.name(), 2, "a non-zero size"));
            }
            mem(st, maps, h, 1, n)?;
            for r in 3..=5 {
                // Unused arguments may be unwritten; a pointer would leak its address.
                if !matches!(st.regs[r as usize], Val::Uninit | Val::Scalar(_)) {
                    return Err(Reason::BadHelperArg(h.name(), r, "a scalar"));
                }
            }
            Val::Scalar(Range::ANY)
        }
        Helper::Redirect => {
            scalar(st, h, 1)?;
            scalar(st, h, 2)?;
            Val::Scalar(Range::ANY)
        }
        Helper::CsumDiff => {
            for (p, s) in [(1u8, 2u8), (3, 4)] {
                let n = const_size(st, h, s, MAX_HELPER_MEM)?;
                if n % 4 != 0 {
                    return Err(Reason::BadHelperArg(h.name(), s, "a multiple of 4"));
                }
                if n > 0 {
                    mem(st, maps, h, p, n)?;
                } else if !matches!(st.regs[p as usize], Val::Scalar(_)) {
                    return Err(Reason::BadHelperArg(h.name(), p, "NULL when its size is 0"));
                }
            }
            scalar(st, h, 5)?;
            Val::Scalar(Range::ANY)
        }
        Helper::RegionRead => {
            let n = const_size(st, h, 2, MAX_HELPER_MEM)?;
            if n == 0 {
                return Err(Reason::BadHelperArg(h.name(), 2, "a non-zero size"));
            }
            scalar(st, h, 3)?;
            match st.regs[1] {
                // The helper writes it: any bytes, and they need not be written before.
                Val::Stack(off) => {
                    for i in 0..n as i64 {
                        st.stack_write(off + i, 1, Val::Scalar(Range::bytes(1)))?;
                    }
                }
                // Proven packet or map value bytes, whose contents are never tracked.
                _ => mem(st, maps, h, 1, n)?,
            }
            Val::Scalar(Range::ANY)
        }
        Helper::XdpAdjustHead => {
            if st.regs[1] != Val::Ctx {
                return Err(Reason::BadHelperArg(h.name(), 1, "the context"));
            }
            scalar(st, h, 2)?;
            // The frame moved: every packet pointer is stale, and nothing is proven any more.
            st.for_each_val(|v| {
                if matches!(v, Val::Pkt { .. } | Val::PktEnd) {
                    *v = Val::Invalid;
                }
            });
            st.pkt_range = 0;
            st.var_ranges.clear();
            Val::Scalar(Range::ANY)
        }
    };
    st.regs[0] = ret;
    for r in 1..=5 {
        st.regs[r] = Val::Uninit;
    }
    Ok(())
}
