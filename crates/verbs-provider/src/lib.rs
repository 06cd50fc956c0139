//! `libsluice-rdmav34.so`: Sluice's provider for rdma-core's libibverbs (Debian bookworm's
//! 44.0, private ABI 34), so that unmodified verbs programs (perftest, ibverbs-utils) run over
//! the Sluice engine. The provider is C (`csrc/provider.c`: libibverbs' provider interface is
//! a C ABI of structs and function tables); every verb it serves calls libsluice's C API
//! (`sluice_rdma_*`, docs/verbs.md), which this library links in.
//!
//! `sluice run --verbs` makes libibverbs find it: a device tree under `SYSFS_PATH`, a
//! `/dev/infiniband` node in a private mount namespace, and `RDMAV_DRIVERS`
//! (docs/notes/issue-16/provider.md).
#![forbid(unsafe_code)]

// The C API the provider calls lives in libsluice: keep it linked.
use sluice as _;

/// Whether this build carries the provider (false when libibverbs-dev was missing).
pub const HAS_PROVIDER: bool = !cfg!(sluice_no_provider);
