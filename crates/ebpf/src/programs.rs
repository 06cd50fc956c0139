//! The eBPF programs that ship with the crate (programs/*.c), built by build.rs with
//! `clang -O2 -g -target bpf`, as object bytes ready for [`crate::load`].

/// Returns XDP_PASS for every frame (section `xdp`).
pub const NULL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/null.o"));
/// Returns XDP_DROP for every frame (section `xdp/drop_all`).
pub const DROP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/drop.o"));
/// Removes one 802.1Q tag with bpf_xdp_adjust_head (section `xdp`).
pub const VLAN_STRIP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/vlan_strip.o"));
/// Drops IPv4 TCP/UDP frames whose 5-tuple is a key of the hash map `rules` (section `xdp`).
pub const FIREWALL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/firewall.o"));
/// Counts frames and bytes per destination port in the array map `port_counts` (section `xdp`).
pub const PORT_COUNTER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/port_counter.o"));
/// Swaps the Ethernet addresses and returns XDP_TX (section `xdp`).
pub const REFLECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/reflect.o"));
/// Pushes one 802.1Q tag whose VID/PCP are entry 0 of the array map `vlan` (section `xdp`).
pub const VLAN_INSERT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/vlan_insert.o"));
/// Counts packets and bytes per 4-tuple, both directions, in the LRU hash `conns` (section `xdp`).
pub const CONN_COUNTER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/conn_counter.o"));
/// Classifies flows into traffic classes (`rules`, `port_class`) recorded in `flows`, with
/// per-class rates in `class_rate` (section `xdp`).
pub const CLASSIFY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/classify.o"));
/// The splice fast path (flextoe.txt listing 1): rewrites frames of the 4-tuples in the hash
/// map `splices` for the other connection and returns XDP_TX (section `xdp`).
pub const SPLICE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/splice.o"));

/// The linked-list traversal offload handler (section `offload`; docs/offload.md): not a
/// data-path module, so not in [`SHIPPED`]; sluice-offload runs it.
pub const OFFLOAD_LIST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/offload_list.o"));

/// The shipped programs by name, as `sluice engine --module` and `sluice ctl module load`
/// accept them in place of a file: (name, object bytes, section).
pub const SHIPPED: &[(&str, &[u8], &str)] = &[
    ("null", NULL, "xdp"),
    ("drop", DROP, "xdp/drop_all"),
    ("vlan_strip", VLAN_STRIP, "xdp"),
    ("firewall", FIREWALL, "xdp"),
    ("port_counter", PORT_COUNTER, "xdp"),
    ("reflect", REFLECT, "xdp"),
    ("vlan_insert", VLAN_INSERT, "xdp"),
    ("conn_counter", CONN_COUNTER, "xdp"),
    ("classify", CLASSIFY, "xdp"),
    ("splice", SPLICE, "xdp"),
];

/// A shipped program by name: its object bytes and section.
pub fn shipped(name: &str) -> Option<(&'static [u8], &'static str)> {
    SHIPPED
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, bytes, section)| (bytes, section))
}

/// Programs the verifier must refuse (programs/bad/*.c), one per class of error.
pub mod bad {
    /// Reads byte 23 after proving 14.
    pub const OOB_READ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/oob_read.o"));
    /// Dereferences a map lookup's result without a null check.
    pub const NULL_UNCHECKED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/null_unchecked.o"));
    /// Loops over the Collatz sequence of the ingress ifindex: no bound proves its end.
    pub const UNBOUNDED_LOOP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/unbounded_loop.o"));
    /// Calls helper 12 (bpf_tail_call), not on the whitelist.
    pub const UNKNOWN_HELPER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/unknown_helper.o"));
    /// Reads past the end of an 8-byte map value.
    pub const VALUE_TOO_SMALL: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/value_too_small.o"));
}
