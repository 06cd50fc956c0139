//! Traffic classes from a classifier module (issue 19 item 2; flextoe.txt 5.1): a module
//! with the maps `flows` (5-tuple -> class, written by the program as frames pass) and
//! `class_rate` (class -> bits per second, written by the control plane) classifies; the
//! control plane reads the class of a new connection here and programs its rate into the flow
//! scheduler (`Stack::set_rate`). Rates stay the control plane's to program (DESIGN.md: the
//! data-path reports, the policy programs), so the core's scheduler shapes each connection
//! as with `sluice ctl set-rate`, and a module needs no helper of the engine's own.
//! crates/ebpf/programs/classify.c is the shipped classifier.

use std::net::SocketAddrV4;

use crate::modules::{Chain, Module, ModuleId};

/// The classifier's map of classified flows: `struct five_tuple` -> `__u32` class.
pub const FLOWS_MAP: &str = "flows";
/// The classifier's map of rates: `__u32` class -> `__u64` bits per second (0: none).
pub const RATES_MAP: &str = "class_rate";
/// IANA protocol number of TCP, the last field of the key.
const TCP: u8 = 6;

/// A connection's traffic class as a classifier recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowClass {
    /// The class (1..; 0 is no class and never recorded).
    pub class: u32,
    /// The class's rate in bits per second; 0: the congestion policy's own.
    pub rate_bps: u64,
    /// The classifier module that recorded it.
    pub module: ModuleId,
}

/// The key of `flows` for a frame from `src` to `dst`: `struct five_tuple` (addresses and
/// ports in network order, the protocol, three bytes of padding).
pub fn five_tuple(src: SocketAddrV4, dst: SocketAddrV4, proto: u8) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&src.ip().octets());
    k[4..8].copy_from_slice(&dst.ip().octets());
    k[8..10].copy_from_slice(&src.port().to_be_bytes());
    k[10..12].copy_from_slice(&dst.port().to_be_bytes());
    k[12] = proto;
    k
}

/// Whether `m` is a classifier (it has both maps).
pub fn is_classifier(m: &Module) -> bool {
    m.maps.id(FLOWS_MAP).is_some() && m.maps.id(RATES_MAP).is_some()
}

/// The class of the TCP connection `local` <-> `remote` from the first classifier in load
/// order that recorded it, in either direction (egress sees local -> remote, ingress the
/// reverse); None if no classifier did, or its maps are not laid out as expected.
pub fn lookup(chain: &mut Chain, local: SocketAddrV4, remote: SocketAddrV4) -> Option<FlowClass> {
    let keys = [
        five_tuple(local, remote, TCP),
        five_tuple(remote, local, TCP),
    ];
    for i in 0..chain.modules().len() {
        let id = chain.modules()[i].id;
        let Some(m) = chain.module_mut(id).filter(|m| is_classifier(m)) else {
            continue;
        };
        let (flows, rates) = (m.maps.id(FLOWS_MAP)?, m.maps.id(RATES_MAP)?);
        let class = keys.iter().find_map(|k| {
            let v = m.maps.get(flows, k).ok()??;
            Some(u32::from_le_bytes(v.try_into().ok()?))
        });
        let Some(class) = class.filter(|&c| c != 0) else {
            continue;
        };
        // A class past the rates array has no rate (the shipped program never records one).
        let rate_bps = match m.maps.get(rates, &class.to_le_bytes()) {
            Ok(Some(v)) => u64::from_le_bytes(v.try_into().ok()?),
            _ => 0,
        };
        return Some(FlowClass {
            class,
            rate_bps,
            module: id,
        });
    }
    None
}
