//! Bounds-checked big-endian field access.
//!
//! Every read returns zero and every write is a no-op when the field lies
//! outside the buffer, so no helper can panic. Callers check lengths once up
//! front (usually via `first_chunk`), after which the optimizer removes the
//! per-field checks.

use crate::EthernetAddress;
use std::net::Ipv4Addr;

/// Reads one byte at `off`, or 0 when out of bounds.
#[inline(always)]
pub(crate) fn u8_at(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

/// Reads a big-endian `u16` at `off`, or 0 when out of bounds.
#[inline(always)]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    match b.get(off..).and_then(<[u8]>::first_chunk::<2>) {
        Some(w) => u16::from_be_bytes(*w),
        None => 0,
    }
}

/// Reads a big-endian `u32` at `off`, or 0 when out of bounds.
#[inline(always)]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    match b.get(off..).and_then(<[u8]>::first_chunk::<4>) {
        Some(w) => u32::from_be_bytes(*w),
        None => 0,
    }
}

/// Reads an IPv4 address at `off`, or 0.0.0.0 when out of bounds.
#[inline(always)]
pub(crate) fn ipv4(b: &[u8], off: usize) -> Ipv4Addr {
    Ipv4Addr::from(be32(b, off))
}

/// Reads a MAC address at `off`, or all-zero when out of bounds.
#[inline(always)]
pub(crate) fn mac(b: &[u8], off: usize) -> EthernetAddress {
    match b.get(off..).and_then(<[u8]>::first_chunk::<6>) {
        Some(w) => EthernetAddress(*w),
        None => EthernetAddress::default(),
    }
}

/// Writes `bytes` at `off` if the whole range is in bounds.
#[inline(always)]
pub(crate) fn put<const N: usize>(b: &mut [u8], off: usize, bytes: [u8; N]) {
    if let Some(d) = b.get_mut(off..).and_then(<[u8]>::first_chunk_mut::<N>) {
        *d = bytes;
    }
}

/// Writes one byte at `off` if in bounds.
#[inline(always)]
pub(crate) fn put8(b: &mut [u8], off: usize, v: u8) {
    if let Some(d) = b.get_mut(off) {
        *d = v;
    }
}

/// Writes a big-endian `u16` at `off` if in bounds.
#[inline(always)]
pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    put(b, off, v.to_be_bytes());
}

/// Writes a big-endian `u32` at `off` if in bounds.
#[inline(always)]
pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    put(b, off, v.to_be_bytes());
}
