//! The switched lab's namespace names, a leaf: the default lab ([`crate::netns`]) needs them
//! to list and delete every lab namespace, and the switched lab builds on the default one.

/// The namespace the switch runs in.
pub const NS_SWITCH: &str = "sluice-s";
/// Most client namespaces.
pub const MAX_CLIENTS: u8 = 64;

/// Prefix of the client namespaces' names (`sluice-c1`, `sluice-c2`, ...).
pub(super) const CLIENT_NS_PREFIX: &str = "sluice-c";

/// Client `i`'s namespace (1-based).
pub fn client_ns(i: u8) -> String {
    format!("{CLIENT_NS_PREFIX}{i}")
}

/// Whether `ns` is one of the switched lab's namespaces (sluice-s, sluice-c1..).
pub fn is_switched_namespace(ns: &str) -> bool {
    ns == NS_SWITCH
        || ns
            .strip_prefix(CLIENT_NS_PREFIX)
            .and_then(|n| n.parse::<u8>().ok())
            .is_some_and(|n| (1..=MAX_CLIENTS).contains(&n) && ns == client_ns(n))
}
