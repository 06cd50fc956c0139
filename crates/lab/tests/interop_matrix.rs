//! The interoperability matrix against Linux kernel TCP (needs root: the tests are
//! `#[ignore]`d, and scripts/test.sh runs them as root).
//!
//! Every case moves 64 MiB each way — a Linux client into the engine's sink, and the
//! engine's source into a Linux server — verified by SHA-256, over the AF_PACKET, TAP and
//! AF_XDP (DRV mode) backends: plain; with engine-side fault injection (1 % loss, 1 % reordering, both
//! directions of the engine's device); and with the Linux peer's options varied in sluice-b
//! (timestamps, SACK or window scaling off, ECN on, MTU 1280, segmentation offloads on/off).
//! Each case builds its own lab, so settings never leak from one case into the next.
//! AF_XDP in generic (SKB) mode runs the cases where the peer's segmentation matters.

mod lab_support;

use lab_support::{run_case, run_case_with, Impair, Peer, NO_IMPAIR};
use sluice_device::XdpMode;
use sluice_engine::setup::{Backend, EngineOptions};
use sluice_lab::presets::LabPreset;

/// One case over every backend: a module with an `af_packet`, a `tap` and an `af_xdp` test.
macro_rules! case {
    ($(#[$doc:meta])* $name:ident, $impair:expr, $peer:expr) => {
        $(#[$doc])*
        mod $name {
            use super::*;

            #[test]
            #[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
            fn af_packet() {
                run_case(Backend::AfPacket, $impair, $peer);
            }

            #[test]
            #[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
            fn tap() {
                run_case(Backend::Tap, $impair, $peer);
            }

            #[test]
            #[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
            fn af_xdp() {
                run_case(Backend::AfXdp, $impair, $peer);
            }
        }
    };
}

case!(
    /// Default Linux settings (timestamps, SACK, window scaling on; GSO/GRO as veth does).
    plain,
    NO_IMPAIR,
    &[]
);
case!(
    /// 1 % of the engine's frames, in and out, dropped.
    loss_1_percent,
    Some(Impair {
        loss: 0.01,
        reorder: 0.0
    }),
    &[]
);
case!(
    /// 1 % of the engine's frames, in and out, delivered after the next one.
    reorder_1_percent,
    Some(Impair {
        loss: 0.0,
        reorder: 0.01
    }),
    &[]
);
case!(
    /// RFC 7323 timestamps off on the Linux side.
    linux_timestamps_off,
    NO_IMPAIR,
    &[Peer::Sysctl("net.ipv4.tcp_timestamps", "0")]
);
case!(
    /// RFC 2018 SACK off on the Linux side.
    linux_sack_off,
    NO_IMPAIR,
    &[Peer::Sysctl("net.ipv4.tcp_sack", "0")]
);
case!(
    /// RFC 7323 window scaling off on the Linux side: 64 KiB windows at most.
    linux_window_scaling_off,
    NO_IMPAIR,
    &[Peer::Sysctl("net.ipv4.tcp_window_scaling", "0")]
);
case!(
    /// RFC 3168 ECN requested by Linux on its own connections, accepted on others.
    linux_ecn_on,
    NO_IMPAIR,
    &[Peer::Sysctl("net.ipv4.tcp_ecn", "1")]
);
case!(
    /// MTU 1280 on the client side of the wire: Linux announces MSS 1240, and a segment
    /// from the engine larger than that could not cross sl-a-br (veth drops frames above the
    /// receiving device's MTU), so the transfer only completes if the engine respects it.
    linux_mtu_1280,
    NO_IMPAIR,
    &[Peer::Mtu(1280)]
);
case!(
    /// TSO, GSO and GRO on in sluice-b: 64 KB segments towards the engine.
    linux_offloads_on,
    NO_IMPAIR,
    &[Peer::Offloads(true)]
);
case!(
    /// TSO, GSO and GRO off in sluice-b: only wire-sized segments.
    linux_offloads_off,
    NO_IMPAIR,
    &[Peer::Offloads(false)]
);

/// AF_XDP with the XDP program in generic (SKB) mode, where the peer's 64 KB GSO frames
/// would not fit a UMEM frame: the engine's setup turns TSO/GSO off on sl-a-br for it, so
/// the cases that vary the peer's segmentation must pass too.
mod af_xdp_skb {
    use super::*;

    /// The lab engine over AF_XDP in SKB mode.
    fn skb() -> EngineOptions {
        EngineOptions {
            xdp_mode: XdpMode::Skb,
            ..EngineOptions::lab(Backend::AfXdp)
        }
    }

    #[test]
    #[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
    fn plain() {
        run_case_with(skb(), NO_IMPAIR, &[]);
    }

    #[test]
    #[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
    fn linux_offloads_on() {
        run_case_with(skb(), NO_IMPAIR, &[Peer::Offloads(true)]);
    }

    #[test]
    #[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
    fn linux_offloads_off() {
        run_case_with(skb(), NO_IMPAIR, &[Peer::Offloads(false)]);
    }
}
