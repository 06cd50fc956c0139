//! TAP: a layer-2 tun device with IFF_VNET_HDR, so the kernel can hand over frames whose
//! checksum it left to offload.
//!
//! Every frame read or written is prefixed with a 12-byte `virtio_net_hdr_v1`
//! (TUNSETVNETHDRSZ 12, little-endian: TUNSETVNETLE). With [`TapConfig::checksum_offload`]
//! the device advertises TUN_F_CSUM, so the kernel passes frames with partial checksums
//! (VIRTIO_NET_HDR_F_NEEDS_CSUM) instead of completing them itself; this backend completes
//! them from `csum_start`/`csum_offset` before handing them up.
//!
//! Large segments ([`TapConfig::tso`]): the device advertises TUN_F_TSO4, so the kernel hands
//! over 64 KB TCP segments whole (the core accepts them), and the engine may write 64 KB
//! segments with a GSO header (`TxFrame::gso_size`) and partial checksums, which the kernel
//! segments or passes on as GSO packets.
//!
//! The tun file descriptor has no batched read or write, so a burst is one read(2) per frame
//! and one write(2) per queued frame; io_uring or multi-queue TAP can batch it later.
//!
//! The TAP is the engine's wire: the MAC the engine uses ([`TapConfig::mac`]) is not the TAP
//! netdev's own MAC (that one belongs to the kernel side of the link).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use sluice_wire::EthernetAddress;

use crate::checksum::rx_checksum;
use crate::error::DeviceError;
use crate::sys::{self, NEEDS_NET_ADMIN};
use crate::tx_batch::TxBatch;
use crate::virtio::{self, VirtioNetHdr};
use crate::{Device, DeviceStats, RxMeta, TxFrame};

/// Length of the `virtio_net_hdr_v1` that prefixes every frame (flags, gso_type, hdr_len, gso_size, csum_start, csum_offset, num_buffers).
pub const VIRTIO_NET_HDR_LEN: usize = 12;
/// Length of an Ethernet header without a VLAN tag.
const ETH_HLEN: usize = 14;
/// Receive buffer: the header plus the largest frame the kernel can hand over.
const RX_BUF_LEN: usize = VIRTIO_NET_HDR_LEN + 65_536 + ETH_HLEN + 4;
/// Largest batch accepted.
const MAX_BATCH: usize = 1024;

/// Configuration of a [`Tap`] device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapConfig {
    /// Frames received or queued for transmission per burst (1 to 1024).
    pub batch: usize,
    /// The MAC address the engine uses on this link (not the TAP netdev's own).
    pub mac: EthernetAddress,
    /// Advertise TUN_F_CSUM: the kernel hands over partial checksums and this device completes them.
    pub checksum_offload: bool,
    /// Set the TAP interface up after creating or attaching it (needs CAP_NET_ADMIN).
    pub bring_up: bool,
    /// Large segments both ways (TUN_F_TSO4; needs `checksum_offload`).
    pub tso: bool,
    /// Complete partial checksums in software before handing frames up; off when the
    /// consumer trusts [`RxChecksum::Partial`] frames as Linux does (they never crossed a wire).
    pub complete_partial: bool,
}

impl Default for TapConfig {
    fn default() -> Self {
        TapConfig {
            batch: 64,
            mac: EthernetAddress([0x02, 0x73, 0x6c, 0x00, 0x00, 0x01]),
            checksum_offload: true,
            bring_up: true,
            tso: true,
            complete_partial: true,
        }
    }
}

/// A TAP device opened with a virtio-net header, with preallocated buffers.
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
    mac: EthernetAddress,
    max_frame: usize,
    /// Largest frame a transmit slot holds: `max_frame`, or a 64 KB segment with TSO.
    max_tx_frame: usize,
    /// Whether partial checksums are completed before frames are handed up.
    complete_partial: bool,
    batch: usize,
    rx_buf: Box<[u8]>,
    /// `batch` slots of `VIRTIO_NET_HDR_LEN + max_tx_frame` bytes, each led by its header
    /// (a queued frame's length counts the header).
    tx: TxBatch,
    stats: DeviceStats,
}

/// Runs a tun ioctl whose argument is a pointer to one `c_int`.
fn ioctl_int_ptr(file: &File, request: libc::Ioctl, value: libc::c_int) -> io::Result<()> {
    let mut v = value;
    // SAFETY: the tun ioctls used with this helper read (and may write) one c_int through
    // the pointer, which points to a live local for the duration of the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), request, &mut v as *mut libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Tap {
    /// Creates (or attaches to an existing persistent) TAP device `name` in the calling thread's network namespace.
    ///
    /// Fails with a typed error when /dev/net/tun is missing, the process lacks
    /// CAP_NET_ADMIN, the TAP is attached elsewhere (EBUSY) or the name belongs to another
    /// kind of interface.
    pub fn open(name: &str, config: TapConfig) -> Result<Tap, DeviceError> {
        if config.batch == 0 || config.batch > MAX_BATCH {
            return Err(DeviceError::InvalidConfig("batch must be 1 to 1024 frames"));
        }
        if config.tso && !config.checksum_offload {
            return Err(DeviceError::InvalidConfig(
                "tso needs checksum_offload (TUN_F_TSO4 requires TUN_F_CSUM)",
            ));
        }
        let ifname = sys::interface_name(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => {
                    DeviceError::TunUnavailable
                }
                _ => DeviceError::from_io("open /dev/net/tun", NEEDS_NET_ADMIN, "", e),
            })?;

        let mut req = sys::ifreq(ifname);
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as _;
        sys::ioctl_ifreq(file.as_raw_fd(), libc::TUNSETIFF, &mut req).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EINVAL) => DeviceError::NotTap {
                    name: name.to_owned(),
                },
                _ => DeviceError::from_io(
                    "create or attach the TAP device",
                    NEEDS_NET_ADMIN,
                    name,
                    e,
                ),
            }
        })?;
        let name = sys::ifreq_name(&req);

        let tun_err = |op, e| DeviceError::from_io(op, NEEDS_NET_ADMIN, &name, e);
        ioctl_int_ptr(
            &file,
            libc::TUNSETVNETHDRSZ,
            VIRTIO_NET_HDR_LEN as libc::c_int,
        )
        .map_err(|e| tun_err("set the virtio-net header size", e))?;
        // Little-endian headers on every host; refused only by kernels without the flag,
        // where the legacy (native, little-endian on x86 and Arm) order applies.
        let _ = ioctl_int_ptr(&file, libc::TUNSETVNETLE, 1);
        let mut offload: libc::c_uint = 0;
        if config.checksum_offload {
            offload |= libc::TUN_F_CSUM;
        }
        if config.tso {
            offload |= libc::TUN_F_TSO4;
        }
        // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of TUN_F_*
        // flags), not through a pointer.
        let r = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                libc::c_ulong::from(offload),
            )
        };
        if r < 0 {
            return Err(tun_err("set the TAP offloads", io::Error::last_os_error()));
        }

        let control = sys::control_socket()?;
        if config.bring_up {
            sys::set_interface_up(control.as_raw_fd(), &name)?;
        }
        let mut mtu_req = sys::ifreq(sys::interface_name(&name)?);
        sys::ioctl_ifreq(control.as_raw_fd(), libc::SIOCGIFMTU, &mut mtu_req)
            .map_err(|e| tun_err("read the TAP's MTU", e))?;
        // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member.
        let mtu = usize::try_from(unsafe { mtu_req.ifr_ifru.ifru_mtu }).unwrap_or(1500);
        let max_frame = mtu + ETH_HLEN;
        let max_tx_frame = if config.tso {
            max_frame.max(ETH_HLEN + 65_535)
        } else {
            max_frame
        };
        Ok(Tap {
            file,
            name,
            mac: config.mac,
            max_frame,
            max_tx_frame,
            complete_partial: config.complete_partial,
            batch: config.batch,
            rx_buf: vec![0u8; RX_BUF_LEN].into_boxed_slice(),
            tx: TxBatch::new(config.batch, VIRTIO_NET_HDR_LEN + max_tx_frame),
            stats: DeviceStats::default(),
        })
    }

    /// The TAP interface's name (as the kernel completed it).
    pub fn interface(&self) -> &str {
        &self.name
    }

    /// Frames queued for transmission and not yet written.
    pub fn pending(&self) -> usize {
        self.tx.pending()
    }
}

impl Device for Tap {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        let mut delivered = 0;
        for _ in 0..self.batch {
            let n = match self.file.read(&mut self.rx_buf) {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => break,
                    _ => {
                        return Err(DeviceError::from_io(
                            "read from the TAP",
                            NEEDS_NET_ADMIN,
                            &self.name,
                            e,
                        ))
                    }
                },
            };
            let Some((hdr, frame)) = self
                .rx_buf
                .get_mut(..n)
                .and_then(|b| b.split_first_chunk_mut::<VIRTIO_NET_HDR_LEN>())
            else {
                self.stats.rx_dropped += 1;
                continue;
            };
            let Some(hdr) = VirtioNetHdr::parse(hdr) else {
                self.stats.rx_dropped += 1;
                continue;
            };
            // A large TCP segment (TUN_F_TSO4) is handed up whole: the core takes segments
            // of any length. Other GSO types were not negotiated.
            if hdr.gso_type != virtio::GSO_NONE && hdr.gso_type != virtio::GSO_TCPV4 {
                self.stats.rx_dropped += 1;
                continue;
            }
            let checksum = rx_checksum(
                hdr.rx_evidence(),
                frame,
                self.complete_partial,
                &mut self.stats,
            );
            f(frame, RxMeta { checksum });
            delivered += 1;
        }
        self.stats.rx_frames += delivered as u64;
        Ok(delivered)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        let Some(slot) = self.tx.next_slot() else {
            return Ok(false);
        };
        let (hdr, frame) = slot.split_at_mut(VIRTIO_NET_HDR_LEN);
        let Some(tx) = f(frame).filter(|t| t.len > 0) else {
            return Ok(true);
        };
        if tx.len > frame.len() || (tx.gso_size == 0 && tx.len > self.max_frame) {
            return Err(DeviceError::FrameTooLong {
                len: tx.len,
                max: if tx.gso_size == 0 {
                    self.max_frame
                } else {
                    frame.len()
                },
            });
        }
        // The kernel completes partial checksums (NEEDS_CSUM) and segments large frames.
        let Some(h) = VirtioNetHdr::for_tx(&frame[..tx.len], &tx) else {
            self.stats.tx_dropped += 1;
            return Ok(true);
        };
        hdr.fill(0);
        h.emit(hdr);
        self.tx.commit(VIRTIO_NET_HDR_LEN + tx.len, 0);
        Ok(true)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        while self.tx.pending() > 0 {
            let (frame, _) = self.tx.frame(self.tx.head());
            let len = frame.len();
            match self.file.write(frame) {
                // One write is one frame; the tun driver takes all of it or fails.
                Ok(written) => {
                    self.tx.advance(1);
                    if written == len {
                        self.stats.tx_frames += 1;
                    } else {
                        self.stats.tx_dropped += 1;
                    }
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) => {
                        self.stats.tx_blocked += 1;
                        break;
                    }
                    Some(libc::EINVAL) | Some(libc::EMSGSIZE) | Some(libc::ENOBUFS) => {
                        self.tx.advance(1);
                        self.stats.tx_dropped += 1;
                    }
                    errno => {
                        self.stats.tx_dropped += self.tx.clear() as u64;
                        // Writing to a TAP that is down fails with EIO.
                        if errno == Some(libc::EIO) {
                            return Err(DeviceError::InterfaceDown {
                                name: self.name.clone(),
                            });
                        }
                        return Err(DeviceError::from_io(
                            "write to the TAP",
                            NEEDS_NET_ADMIN,
                            &self.name,
                            e,
                        ));
                    }
                },
            }
        }
        self.tx.reset_if_sent();
        Ok(())
    }

    fd_device_tail!(
        fd: file,
        lane: |_: &Tap| None,
        max_tso_frame: |d: &Tap| d.max_tx_frame
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnet_header_is_little_endian() {
        let h = [1u8, 0, 0x36, 0, 0, 0, 34, 0, 16, 0, 0, 0];
        let parsed = VirtioNetHdr::parse(&h).unwrap();
        assert_eq!(
            (parsed.flags, parsed.gso_type, parsed.hdr_len),
            (virtio::F_NEEDS_CSUM, virtio::GSO_NONE, 0x36)
        );
        assert_eq!((parsed.csum_start, parsed.csum_offset), (34, 16));
    }

    #[test]
    fn tso_without_checksum_offload_is_refused() {
        let bad = TapConfig {
            tso: true,
            checksum_offload: false,
            ..TapConfig::default()
        };
        assert!(matches!(
            Tap::open("sl-tap", bad),
            Err(DeviceError::InvalidConfig(_))
        ));
    }

    #[test]
    fn bad_names_and_configs_are_typed_errors() {
        let zero = TapConfig {
            batch: 0,
            ..TapConfig::default()
        };
        assert!(matches!(
            Tap::open("sl-tap", zero),
            Err(DeviceError::InvalidConfig(_))
        ));
        assert!(matches!(
            Tap::open("", TapConfig::default()),
            Err(DeviceError::InvalidInterfaceName { .. })
        ));
    }

    #[test]
    fn an_existing_non_tap_name_is_refused() {
        // "lo" exists in every namespace and is not a TAP.
        match Tap::open("lo", TapConfig::default()) {
            Err(DeviceError::NotTap { name }) => assert_eq!(name, "lo"),
            Err(DeviceError::PermissionDenied { .. }) | Err(DeviceError::TunUnavailable) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }
}
