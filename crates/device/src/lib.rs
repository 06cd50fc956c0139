//! Batch-oriented device backends for Sluice: the frames in and out of the engine.
//!
//! Every backend implements [`Device`]: receive a burst of frames without blocking, queue a
//! burst into preallocated transmit slots, send the burst with one syscall (or as few as the
//! kernel interface allows), and sleep in poll(2) when there is nothing to do. Buffers are
//! allocated once when the device opens; nothing is allocated per packet.
//!
//! Backends:
//! - [`AfPacket`]: a packet socket bound to one interface, batched with recvmmsg/sendmmsg;
//!   learns per frame from PACKET_AUXDATA whether the sender left the checksum to offload.
//! - [`Tap`]: a TAP device with IFF_VNET_HDR (virtio_net_hdr_v1), checksum offload negotiated.
//! - [`AfXdp`]: an AF_XDP socket on one interface queue (xsk-rs over libxdp, libxdp's default
//!   XDP program), frames through the UMEM rings; DRV or SKB attach mode ([`XdpMode`]),
//!   zero-copy where the driver offers it, copy mode otherwise (veth). Behind the `af_xdp`
//!   feature (on by default), the only part that needs libxdp to build; its configuration
//!   types ([`AfXdpConfig`], [`XdpMode`]) are there without it.
//! - [`pair()`]: two in-memory ends joined back to back, for tests without root.
//! - The simulator's wire (`sluice_sim::sim_wire`, `--backend sim`) implements the trait
//!   too; it lives beside the simulator so this crate need not depend on it.
//!
//! [`Impaired`] wraps any of them with seeded loss and reordering (fault injection on the
//! engine's side, since the kernel here has no netem).
//!
//! TPACKET_V3 rings come later, behind the same trait.
//!
//! Frames whose transport checksum the local sender left to offload (Linux over veth, bridges
//! and TAP) are completed in software before they are handed up ([`checksum`]), so the core's
//! checksum verification passes; [`RxMeta::checksum`] says what the kernel reported. AF_XDP
//! reports nothing, so it recognises such frames by their checksum field
//! ([`complete_if_partial`]).
//!
//! [`netns::enter`] moves the calling thread into a named network namespace (the lab's
//! `sluice-a`) before a backend is opened there.
//!
//! This crate touches the OS, so `unsafe` is allowed here, each block with a SAFETY comment.

/// The end of the [`Device`] impl of a backend with a descriptor of its own (AF_PACKET,
/// TAP), written once: sleep in poll(2) on `self.$fd` (its SYN lane's, `$lane`, and an
/// extra descriptor), woken at once while frames wait to be flushed (`self.pending()`), and
/// the device's fixed facts (`max_frame`, `mac`, `stats` fields; `$tso` gives the largest
/// TSO frame).
macro_rules! fd_device_tail {
    (fd: $fd:ident, lane: $lane:expr, max_tso_frame: $tso:expr) => {
        fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
            sys::wait_device(
                self.$fd.as_raw_fd(),
                self.pending() > 0,
                [($lane)(self), None],
                timeout,
            )
        }

        fn wait_also(
            &mut self,
            extra: BorrowedFd<'_>,
            timeout: Option<Duration>,
        ) -> Result<(), DeviceError> {
            sys::wait_device(
                self.$fd.as_raw_fd(),
                self.pending() > 0,
                [($lane)(self), Some(extra.as_raw_fd())],
                timeout,
            )
        }

        fn max_frame(&self) -> usize {
            self.max_frame
        }

        fn max_tso_frame(&self) -> usize {
            ($tso)(self)
        }

        fn mac(&self) -> EthernetAddress {
            self.mac
        }

        fn stats(&self) -> DeviceStats {
            self.stats
        }
    };
}

mod af_packet;
#[cfg(feature = "af_xdp")]
mod af_xdp;
pub mod checksum;
mod error;
mod filter;
mod impair;
pub mod netns;
mod pair;
mod ring;
mod rx_ring;
mod syn_lane;
mod sys;
mod tap;
mod tx_batch;
mod tx_ring;
mod virtio;
mod xdp_config;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

pub use af_packet::{AfPacket, AfPacketConfig};
#[cfg(feature = "af_xdp")]
pub use af_xdp::AfXdp;
pub use checksum::{complete_checksum_at, complete_if_partial, complete_partial_checksum};
pub use error::DeviceError;
pub use xdp_config::{AfXdpConfig, ParseXdpModeError, XdpMode, ZeroCopy};

pub use filter::{is_tcp_fin, TxFilter};
pub use impair::{ImpairConfig, ImpairStats, Impaired, Impairment};
pub use pair::{pair, PairConfig, PairEnd};
pub use sluice_wire::EthernetAddress;
pub use tap::{Tap, TapConfig, VIRTIO_NET_HDR_LEN};
pub use tx_batch::TxBatch;

/// What the device knows about a received frame's transport checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxChecksum {
    /// Nothing is known; the core must verify it.
    Unverified,
    /// The device or kernel verified the checksum (TP_STATUS_CSUM_VALID, VIRTIO_NET_HDR_F_DATA_VALID).
    Verified,
    /// A local sender left the checksum to offload (the frame never crossed a wire, so,
    /// like Linux, it needs no verification); the device completed it in software unless
    /// configured not to (`complete_partial: false`), in which case the field is not valid.
    Partial,
}

/// One received frame's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// What is known about the frame's transport checksum.
    pub checksum: RxChecksum,
}

/// Counters a device keeps; drops are counted here rather than reported as errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Frames handed to the receive callback.
    pub rx_frames: u64,
    /// Frames dropped because they did not fit a receive buffer (e.g. 64 KB GSO frames).
    pub rx_truncated: u64,
    /// Frames whose partial checksum was completed in software.
    pub rx_checksum_completed: u64,
    /// Frames marked partial whose checksum could not be completed (not IPv4 TCP/UDP, malformed).
    pub rx_checksum_incomplete: u64,
    /// Frames dropped on receive for another reason (short virtio-net header, GSO not enabled).
    pub rx_dropped: u64,
    /// SYNs the kernel dropped because the SYN lane's buffer was full (AF_PACKET with
    /// [`AfPacketConfig::syn_lane`]; PACKET_STATISTICS): the share of a flood shed unread.
    pub rx_syns_shed: u64,
    /// Frames the kernel accepted for transmission.
    pub tx_frames: u64,
    /// Frames dropped on transmit (refused by the kernel, queue full, no peer).
    pub tx_dropped: u64,
    /// Flushes that stopped early because the kernel's send buffer was full.
    pub tx_blocked: u64,
    /// Received frames dropped by fault injection ([`Impaired`]).
    pub impaired_rx_dropped: u64,
    /// Received frames delivered late by fault injection.
    pub impaired_rx_reordered: u64,
    /// Transmitted frames dropped by fault injection.
    pub impaired_tx_dropped: u64,
    /// Transmitted frames sent late by fault injection.
    pub impaired_tx_reordered: u64,
}

/// One frame a transmit callback wrote into its slot, with the offloads it asks of the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxFrame {
    /// Frame length in bytes.
    pub len: usize,
    /// Split the TCP payload into segments of this many bytes (TSO/GSO); 0 sends the frame as
    /// it is. Only devices whose [`Device::max_tso_frame`] exceeds `max_frame` accept it.
    pub gso_size: u16,
    /// The IPv4 frame's TCP checksum field holds only the pseudo-header sum (with the segment
    /// length); the device, the kernel behind it, or the receiver's offload completes it.
    pub csum_partial: bool,
}

impl TxFrame {
    /// A plain frame of `len` bytes with complete checksums.
    pub fn plain(len: usize) -> Self {
        TxFrame {
            len,
            gso_size: 0,
            csum_partial: false,
        }
    }
}

impl From<usize> for TxFrame {
    fn from(len: usize) -> Self {
        TxFrame::plain(len)
    }
}

/// How long the default [`Device::wait_also`] sleeps on a device that cannot poll an extra
/// descriptor together with its own (at most this late to notice the extra one).
pub const EXTRA_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// A batch-oriented network device: bursts of Ethernet frames in and out.
pub trait Device {
    /// Receives a burst of frames (up to the device's batch size) without blocking; calls `f` once per frame with the frame bytes (slices into reused buffers, no allocation per packet).
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError>;
    /// Lets `f` write one frame into the next free transmit slot (of `max_tso_frame()` bytes); `f` returns what it wrote or None (nothing queued). Returns Ok(false) if no slot is free (call flush).
    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError>;
    /// Sends every queued frame (one syscall per burst: sendmmsg, or ring kick).
    fn flush(&mut self) -> Result<(), DeviceError>;
    /// Blocks until a frame may be readable or `timeout` passes (poll(2) on the fd).
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError>;
    /// Like [`Device::wait`], but also returns when `extra` becomes readable (the engine's
    /// service sleeps on its epoll descriptor this way). Spurious wake-ups are allowed.
    ///
    /// The default suits devices without a descriptor of their own: it returns at once if
    /// `extra` is readable, else waits on the device for at most [`EXTRA_POLL_INTERVAL`],
    /// so `extra` is looked at again within that interval.
    fn wait_also(
        &mut self,
        extra: BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> Result<(), DeviceError> {
        if sys::readable_now(extra.as_raw_fd())? {
            return Ok(());
        }
        let bounded = timeout.map_or(EXTRA_POLL_INTERVAL, |t| t.min(EXTRA_POLL_INTERVAL));
        self.wait(Some(bounded))
    }
    /// The largest frame (Ethernet header included, FCS excluded) this device can send.
    fn max_frame(&self) -> usize;
    /// The largest frame the device accepts with a [`TxFrame::gso_size`] (segmentation
    /// offload); equal to `max_frame()` when it has none.
    fn max_tso_frame(&self) -> usize {
        self.max_frame()
    }
    /// The MAC address the engine uses as its own on this device.
    fn mac(&self) -> EthernetAddress;
    /// The device's counters so far.
    fn stats(&self) -> DeviceStats;
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        (**self).receive(f)
    }
    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        (**self).transmit_with(f)
    }
    fn flush(&mut self) -> Result<(), DeviceError> {
        (**self).flush()
    }
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        (**self).wait(timeout)
    }
    fn wait_also(
        &mut self,
        extra: BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> Result<(), DeviceError> {
        (**self).wait_also(extra, timeout)
    }
    fn max_frame(&self) -> usize {
        (**self).max_frame()
    }
    fn max_tso_frame(&self) -> usize {
        (**self).max_tso_frame()
    }
    fn mac(&self) -> EthernetAddress {
        (**self).mac()
    }
    fn stats(&self) -> DeviceStats {
        (**self).stats()
    }
}

/// Checks a transmit callback's answer against the slot it was given, for a device without
/// offloads: a partial checksum is completed in software here; a large segment is refused.
fn queued_plain(
    frame: Option<TxFrame>,
    slot: &mut [u8],
    stats: &mut DeviceStats,
) -> Result<Option<usize>, DeviceError> {
    match frame {
        None | Some(TxFrame { len: 0, .. }) => Ok(None),
        Some(TxFrame { len, gso_size, .. }) if gso_size != 0 => {
            Err(DeviceError::NoSegmentationOffload { len })
        }
        Some(TxFrame {
            len, csum_partial, ..
        }) if len <= slot.len() => {
            if csum_partial && !checksum::complete_partial_checksum(&mut slot[..len]) {
                stats.tx_dropped += 1;
                return Ok(None);
            }
            Ok(Some(len))
        }
        Some(TxFrame { len, .. }) => Err(DeviceError::FrameTooLong {
            len,
            max: slot.len(),
        }),
    }
}
