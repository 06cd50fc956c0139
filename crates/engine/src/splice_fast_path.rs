//! The splice fast path in eBPF (issue 19 item 2; flextoe.txt listing 1): the entries the
//! shipped `splice` module (crates/ebpf/programs/splice.c) reads, written from the rewrites
//! the TCP core hands over (`Stack::splice_fast_path`) and deleted when the splice ends.
//! The byte layout here is splice.c's `struct splice_key` and `struct splice_rule`.

use std::fmt;

use sluice_tcp::SpliceRewrite;

use crate::hook_point::HookPoint;
use crate::hooks::Hooks;
use crate::modules::ModuleId;

/// The map of the splice module.
pub const MAP: &str = "splices";
/// Bytes of a key: the IPv4 addresses and TCP ports as a frame carries them.
pub const KEY_LEN: usize = 12;
/// Bytes of a value (`struct splice_rule`).
pub const VALUE_LEN: usize = 72;
/// Where the packet and byte counters sit in a value.
const COUNTERS_AT: usize = 56;

/// Why the fast path's entries were not written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FastPathError {
    /// No ingress module has a map named [`MAP`].
    NoModule,
    /// The map refused an entry (full, or not the layout above).
    Map(String),
}

impl fmt::Display for FastPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FastPathError::NoModule => write!(f, "no ingress module has a map {MAP:?}"),
            FastPathError::Map(e) => write!(f, "splice map: {e}"),
        }
    }
}

impl std::error::Error for FastPathError {}

/// The key frames of `r`'s direction arrive with.
pub fn key(r: &SpliceRewrite) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k[..4].copy_from_slice(&r.in_ip.octets());
    k[4..8].copy_from_slice(&r.local_ip.octets());
    k[8..10].copy_from_slice(&r.in_port.to_be_bytes());
    k[10..12].copy_from_slice(&r.in_local_port.to_be_bytes());
    k
}

/// The value for `r`, whose other direction is `partner`; counters zero.
pub fn value(r: &SpliceRewrite, partner: &SpliceRewrite) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    v[..6].copy_from_slice(&r.out_mac);
    v[6..12].copy_from_slice(&r.local_mac);
    v[12..16].copy_from_slice(&r.out_ip.octets());
    v[16..18].copy_from_slice(&r.out_local_port.to_be_bytes());
    v[18..20].copy_from_slice(&r.out_remote_port.to_be_bytes());
    // The deltas are the program's own integers: host order.
    v[20..24].copy_from_slice(&r.seq_delta.to_ne_bytes());
    v[24..28].copy_from_slice(&r.ack_delta.to_ne_bytes());
    v[28..32].copy_from_slice(&r.ts_delta.to_ne_bytes());
    v[32..36].copy_from_slice(&r.tsecr_delta.to_ne_bytes());
    v[36] = r.wscale_in;
    v[37] = r.wscale_out;
    v[40..52].copy_from_slice(&key(partner));
    v
}

/// Frames and payload bytes a value says were sent on the fast path.
pub fn counts(value: &[u8]) -> Option<(u64, u64)> {
    let c = value.get(COUNTERS_AT..COUNTERS_AT + 16)?;
    let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
    Some((word(&c[..8]), word(&c[8..])))
}

/// The ingress module that holds the splice map (the first loaded).
pub fn module(hooks: &Hooks) -> Option<ModuleId> {
    hooks
        .modules()
        .modules()
        .iter()
        .find(|m| m.at == HookPoint::Ingress && m.maps.id(MAP).is_some())
        .map(|m| m.id)
}

/// Writes both directions' entries into the splice module's map.
pub fn install(hooks: &mut Hooks, rw: &[SpliceRewrite; 2]) -> Result<(), FastPathError> {
    let id = module(hooks).ok_or(FastPathError::NoModule)?;
    let mut chain = hooks.modules_mut();
    let m = chain.module_mut(id).ok_or(FastPathError::NoModule)?;
    let map = m.maps.id(MAP).ok_or(FastPathError::NoModule)?;
    for (r, p) in [(&rw[0], &rw[1]), (&rw[1], &rw[0])] {
        m.maps
            .set(map, &key(r), &value(r, p), 0)
            .map_err(|e| FastPathError::Map(e.to_string()))?;
    }
    Ok(())
}

/// Deletes both directions' entries (absent ones are fine); returns the frames the fast
/// path sent for them.
pub fn remove(hooks: &mut Hooks, rw: &[SpliceRewrite; 2]) -> u64 {
    let Some(id) = module(hooks) else {
        return 0;
    };
    let mut chain = hooks.modules_mut();
    let Some(m) = chain.module_mut(id) else {
        return 0;
    };
    let Some(map) = m.maps.id(MAP) else {
        return 0;
    };
    let mut frames = 0;
    for r in rw {
        let k = key(r);
        if let Ok(Some(v)) = m.maps.get(map, &k) {
            frames += counts(v).map_or(0, |(f, _)| f);
        }
        let _ = m.maps.delete(map, &k);
    }
    frames
}
