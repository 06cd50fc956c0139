//! The MTP lab's namespace names, a leaf: the default lab ([`crate::netns`]) needs them to
//! list and delete every lab namespace, and the MTP lab builds on the default one.

/// The namespace of switch S1 (engine A's side).
pub const NS_MTP_S1: &str = "sluice-m1";
/// The namespace of switch S2 (engine E's side).
pub const NS_MTP_S2: &str = "sluice-m2";

/// Whether `ns` is one of the MTP lab's namespaces.
pub fn is_mtp_namespace(ns: &str) -> bool {
    ns == NS_MTP_S1 || ns == NS_MTP_S2
}
