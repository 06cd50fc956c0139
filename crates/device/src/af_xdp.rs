//! AF_XDP: an XDP socket on one queue of an interface, frames moved through the UMEM rings.
//!
//! One UMEM (a memory region cut into equal frames) is shared by the four rings: the fill
//! ring hands empty frames to the kernel for receiving, the RX ring returns them filled, the
//! TX ring hands written frames to the kernel, and the completion ring returns them once
//! sent. The UMEM is split once at open: `rx_frames` frames circulate between fill and RX,
//! `tx_frames` between a free list, TX and completion. Every ring is at least as large as
//! the frames that can be in it, so producing never fails and nothing is allocated per
//! packet.
//!
//! The XDP program is libxdp's default AF_XDP program (it redirects every frame of the
//! queue to the socket bound there); libxdp loads and attaches it when the socket is
//! created and detaches it when the last socket closes. Where the kernel refuses BPF
//! trampolines, libxdp cannot chain programs, so the interface must have no other XDP
//! program.
//!
//! Modes: [`XdpMode::Drv`] runs the program in the driver (veth supports it),
//! [`XdpMode::Skb`] in the generic path after the skb is built. Zero-copy needs driver
//! support (not veth); [`ZeroCopy::Auto`] lets the kernel fall back to copying, and
//! [`AfXdp::zero_copy`] reports what the bind got (XDP_OPTIONS).
//!
//! Checksums: AF_XDP carries no checksum metadata, yet a local Linux sender over veth leaves
//! TCP/UDP checksums to offload (the field holds only the pseudo-header sum). Such a frame
//! is recognised by exactly that field value and completed in software; a frame whose
//! correct checksum happens to equal its pseudo-header sum is rewritten with the same value,
//! so completing is harmless there. Transmitted frames get full checksums in software
//! (there are no offloads).
//!
//! Large frames: a frame longer than a UMEM frame is dropped by the kernel (counted in
//! `rx_dropped`). In DRV mode on veth the kernel turns segmentation offload off on the peer
//! while the program is attached, so frames arrive wire-sized whatever the peer's TSO/GSO
//! setting; in SKB mode the peer must have TSO and GSO off (`ethtool -K PEER tso off gso off`).

use std::io;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use sluice_wire::EthernetAddress;
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::checksum::complete_if_partial;
use crate::error::DeviceError;
use crate::sys;
use crate::xdp_config::{AfXdpConfig, XdpMode, ZeroCopy};
use crate::{queued_plain, Device, DeviceStats, RxChecksum, RxMeta, TxFrame};

/// What opening an XDP socket and attaching its program needs.
const NEEDS_XDP: &str = "root, or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_IPC_LOCK";
/// Length of an Ethernet header without a VLAN tag.
const ETH_HLEN: usize = 14;
/// How long to wait between attempts to bind a queue that is still busy.
const BIND_RETRY_STEP: Duration = Duration::from_millis(100);

/// An AF_XDP socket bound to one queue of an Ethernet interface, with its UMEM.
pub struct AfXdp {
    name: String,
    mac: EthernetAddress,
    max_frame: usize,
    batch: usize,
    config: AfXdpConfig,
    zero_copy: bool,
    umem: Umem,
    fill: FillQueue,
    comp: CompQueue,
    rx: RxQueue,
    tx: TxQueue,
    /// Descriptors the RX ring filled in the current burst (scratch, `batch` long).
    rx_descs: Box<[FrameDesc]>,
    /// Received frames handed back to neither ring yet (waiting for fill-ring room).
    rx_refill: Vec<FrameDesc>,
    /// Transmit frames owned by user space and free to write.
    tx_free: Vec<FrameDesc>,
    /// Written transmit frames not yet on the TX ring.
    tx_queued: Vec<FrameDesc>,
    /// Frames on the TX ring or in flight, not yet returned on the completion ring.
    tx_in_flight: usize,
    /// Descriptors the completion ring returned (scratch, `tx_frames` long).
    comp_descs: Box<[FrameDesc]>,
    stats: DeviceStats,
}

impl std::fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdp")
            .field("interface", &self.name)
            .field("mac", &self.mac)
            .field("mode", &self.config.mode)
            .field("zero_copy", &self.zero_copy)
            .field("queue_id", &self.config.queue_id)
            .field("max_frame", &self.max_frame)
            .finish_non_exhaustive()
    }
}

/// The UMEM and socket rings of one successful bind.
type Bound = (Umem, Vec<FrameDesc>, TxQueue, RxQueue, FillQueue, CompQueue);

impl AfXdp {
    /// Opens an AF_XDP socket on `interface` (in the calling thread's network namespace),
    /// attaching libxdp's default program in `config.mode`.
    ///
    /// Fails with a typed error when the process lacks privilege, the interface does not
    /// exist, is not Ethernet or is down, the XDP program cannot be attached in that mode,
    /// zero-copy was required and refused, or the UMEM cannot be locked in memory.
    pub fn open(interface: &str, config: AfXdpConfig) -> Result<AfXdp, DeviceError> {
        config.validate()?;
        sys::interface_name(interface)?;
        let ctl = sys::control_socket()?;
        let info = sys::interface_info(ctl.as_raw_fd(), interface)?;
        drop(ctl);
        if !info.up {
            return Err(DeviceError::InterfaceDown {
                name: interface.to_owned(),
            });
        }
        let umem_bytes = u64::from(config.umem_frames()) * u64::from(config.frame_size);
        raise_memlock_limit(umem_bytes);

        let (umem, mut descs, tx, rx, mut fill, comp) = bind_with_retry(interface, &config)?;
        let fd = rx.fd().as_raw_fd();
        let zero_copy = query_zero_copy(fd).map_err(|source| DeviceError::Os {
            op: "read the AF_XDP socket's options",
            source,
        })?;
        if config.zero_copy == ZeroCopy::Required && !zero_copy {
            return Err(DeviceError::ZeroCopyUnavailable {
                name: interface.to_owned(),
            });
        }

        // The first rx_frames frames circulate through fill/RX, the rest through TX/completion.
        let tx_free = descs.split_off(config.rx_frames as usize);
        // SAFETY: the descriptors come from this UMEM and none is on any ring yet.
        let filled = unsafe { fill.produce(&descs) };
        if filled != descs.len() {
            return Err(DeviceError::InvalidConfig(
                "the fill ring could not take every receive frame",
            ));
        }

        let frame_capacity = (config.frame_size - libxdp_headroom()) as usize;
        let max_frame = (info.mtu + ETH_HLEN).min(frame_capacity);
        let batch = config.batch;
        let tx_frames = config.tx_frames as usize;
        let mut dev = AfXdp {
            name: interface.to_owned(),
            mac: info.mac,
            max_frame,
            batch,
            config,
            zero_copy,
            umem,
            fill,
            comp,
            rx,
            tx,
            rx_descs: vec![FrameDesc::default(); batch].into_boxed_slice(),
            rx_refill: Vec::with_capacity(config.rx_frames as usize),
            tx_free,
            tx_queued: Vec::with_capacity(tx_frames),
            tx_in_flight: 0,
            comp_descs: vec![FrameDesc::default(); tx_frames].into_boxed_slice(),
            stats: DeviceStats::default(),
        };
        // Copy mode and zero-copy drivers that set need_wakeup only receive after a kick.
        if dev.fill.needs_wakeup() {
            dev.fill
                .wakeup(dev.rx.fd_mut(), 0)
                .map_err(|source| DeviceError::Os {
                    op: "wake the AF_XDP fill ring",
                    source,
                })?;
        }
        Ok(dev)
    }

    /// The interface this socket is bound to.
    pub fn interface(&self) -> &str {
        &self.name
    }

    /// Where the XDP program runs.
    pub fn mode(&self) -> XdpMode {
        self.config.mode
    }

    /// Whether the bind got zero-copy (false: the kernel copies frames into the UMEM).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Frames written and not yet handed to the kernel, plus those the kernel has not
    /// completed.
    pub fn pending(&self) -> usize {
        self.tx_queued.len() + self.tx_in_flight
    }

    /// The kernel's counters for this socket (XDP_STATISTICS).
    pub fn kernel_stats(&self) -> Result<xsk_rs::socket::XdpStatistics, DeviceError> {
        self.rx
            .fd()
            .xdp_statistics()
            .map_err(|source| DeviceError::Os {
                op: "read the AF_XDP statistics",
                source,
            })
    }

    /// Takes sent frames back from the completion ring into the free list.
    fn reclaim(&mut self) {
        // SAFETY: the completion ring belongs to this UMEM, and the descriptors it returns
        // are frames this device put on the TX ring, now owned by user space again.
        let n = unsafe { self.comp.consume(&mut self.comp_descs) };
        self.tx_free.extend_from_slice(&self.comp_descs[..n]);
        self.tx_in_flight -= n.min(self.tx_in_flight);
        self.stats.tx_frames += n as u64;
    }

    /// Gives received frames back to the kernel through the fill ring.
    fn refill(&mut self) -> Result<(), DeviceError> {
        if self.rx_refill.is_empty() {
            return Ok(());
        }
        // SAFETY: the descriptors are frames of this UMEM that the RX ring returned and that
        // no longer back any slice handed out (the receive callback has returned).
        let n = unsafe { self.fill.produce(&self.rx_refill) };
        if n == self.rx_refill.len() {
            self.rx_refill.clear();
        }
        if n > 0 && self.fill.needs_wakeup() {
            self.fill
                .wakeup(self.rx.fd_mut(), 0)
                .map_err(|source| DeviceError::Os {
                    op: "wake the AF_XDP fill ring",
                    source,
                })?;
        }
        Ok(())
    }

    /// Kicks the kernel to transmit what is on the TX ring (copy mode sends from sendto).
    fn kick(&mut self) -> Result<(), DeviceError> {
        self.tx.wakeup().map_err(|source| {
            DeviceError::from_io("kick AF_XDP transmission", NEEDS_XDP, &self.name, source)
        })
    }

    /// Sleeps until the socket may have work, `extra` (if any) is readable, or `timeout`.
    fn wait_with(
        &mut self,
        extra: Option<RawFd>,
        timeout: Option<Duration>,
    ) -> Result<(), DeviceError> {
        let mut events = libc::POLLIN;
        let free = self.tx.nb_free_exact();
        if free != self.config.tx_frames {
            // Frames still on the TX ring: send them rather than sleep, unless the kernel
            // took none of them (then sleep until it can, instead of spinning).
            self.flush()?;
            if self.tx.nb_free_exact() != free {
                return Ok(());
            }
            events |= libc::POLLOUT;
        }
        if self.rx.nb_avail(1) > 0 {
            return Ok(());
        }
        sys::poll_fds(self.rx.fd().as_raw_fd(), events, extra, timeout).map(|_| ())
    }
}

impl Device for AfXdp {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        // Frames a full fill ring could not take last time go back first.
        self.refill()?;
        // SAFETY: the RX ring belongs to this UMEM; it overwrites the scratch descriptors.
        let n = unsafe { self.rx.consume(&mut self.rx_descs) };
        for i in 0..n {
            let desc = &mut self.rx_descs[i];
            // SAFETY: the RX ring returned `desc`, so its frame belongs to this UMEM and is
            // owned by user space until it goes back on the fill ring below; no other slice
            // into this frame exists.
            let mut data = unsafe { self.umem.data_mut(desc) };
            let frame = data.contents_mut();
            let checksum = if self.config.detect_partial_checksums && complete_if_partial(frame) {
                self.stats.rx_checksum_completed += 1;
                RxChecksum::Partial
            } else {
                RxChecksum::Unverified
            };
            f(frame, RxMeta { checksum });
        }
        self.stats.rx_frames += n as u64;
        self.rx_refill.extend_from_slice(&self.rx_descs[..n]);
        self.refill()?;
        Ok(n)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        if self.tx_queued.len() >= self.batch {
            return Ok(false);
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let Some(mut desc) = self.tx_free.pop() else {
            return Ok(false);
        };
        let max_frame = self.max_frame;
        let queued = {
            // SAFETY: `desc` came from the free list, so its frame belongs to this UMEM, is
            // on no ring and no other slice into it exists.
            let mut data = unsafe { self.umem.data_mut(&mut desc) };
            // Open the whole frame for writing; the length is set to what was written.
            data.cursor().set_pos(max_frame);
            let slot = &mut data.contents_mut()[..max_frame];
            let written = queued_plain(f(slot), slot, &mut self.stats);
            let len = match written {
                Ok(Some(len)) => len,
                _ => 0,
            };
            data.cursor().set_pos(len);
            written
        };
        match queued {
            Ok(Some(_)) => {
                self.tx_queued.push(desc);
                Ok(true)
            }
            Ok(None) => {
                self.tx_free.push(desc);
                Ok(true)
            }
            Err(e) => {
                self.tx_free.push(desc);
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        if !self.tx_queued.is_empty() {
            // SAFETY: the queued descriptors are frames of this UMEM written by
            // transmit_with, on no ring; the TX ring holds tx_frames entries, as many as
            // there are transmit frames, so it has room for all of them.
            let n = unsafe { self.tx.produce(&self.tx_queued) };
            if n == self.tx_queued.len() {
                self.tx_in_flight += n;
                self.tx_queued.clear();
            } else {
                self.stats.tx_blocked += 1;
            }
        }
        // Copy mode sends a bounded batch per kick: kick until the kernel took everything.
        for _ in 0..(self.config.tx_frames as usize / 16 + 2) {
            let before = self.tx.nb_free_exact();
            if before == self.config.tx_frames || !self.tx.needs_wakeup() {
                break;
            }
            self.kick()?;
            if self.tx.nb_free_exact() == before {
                self.stats.tx_blocked += 1;
                break;
            }
        }
        self.reclaim();
        Ok(())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        self.wait_with(None, timeout)
    }

    fn wait_also(
        &mut self,
        extra: BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> Result<(), DeviceError> {
        self.wait_with(Some(extra.as_raw_fd()), timeout)
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn stats(&self) -> DeviceStats {
        let mut stats = self.stats;
        // The kernel drops what does not fit a UMEM frame or finds no fill-ring frame.
        if let Ok(k) = self.kernel_stats() {
            stats.rx_dropped += k.rx_dropped() + k.rx_ring_full() + k.rx_invalid_descs();
            stats.tx_dropped += k.tx_invalid_descs();
        }
        stats
    }
}

/// The headroom libxdp reserves in front of each frame for the XDP program (XDP_PACKET_HEADROOM).
fn libxdp_headroom() -> u32 {
    UmemConfig::default().xdp_headroom()
}

/// Builds the UMEM and binds the socket, retrying while the queue is busy (EBUSY: a socket
/// on it closed just now) for up to `config.bind_timeout`.
fn bind_with_retry(interface: &str, config: &AfXdpConfig) -> Result<Bound, DeviceError> {
    let started = Instant::now();
    loop {
        match bind(interface, config) {
            Err(BindError::Busy) if started.elapsed() < config.bind_timeout => {
                std::thread::sleep(BIND_RETRY_STEP);
            }
            Err(BindError::Busy) => {
                return Err(DeviceError::XdpAttach {
                    name: interface.to_owned(),
                    mode: config.mode.name(),
                    source: io::Error::from_raw_os_error(libc::EBUSY),
                })
            }
            Err(BindError::Failed(e)) => return Err(e),
            Ok(bound) => return Ok(bound),
        }
    }
}

/// Why one bind attempt failed.
enum BindError {
    /// The queue is still bound (EBUSY); worth retrying.
    Busy,
    /// Anything else.
    Failed(DeviceError),
}

/// One attempt: a fresh UMEM (a failed create leaves its rings half set up) and a socket.
fn bind(interface: &str, config: &AfXdpConfig) -> Result<Bound, BindError> {
    let size = |n: u32| QueueSize::new(n).map_err(|_| invalid("ring sizes must be powers of two"));
    let umem_config = UmemConfig::builder()
        .frame_size(FrameSize::new(config.frame_size).map_err(|_| invalid("bad frame size"))?)
        .fill_queue_size(size(config.rx_frames)?)
        .comp_queue_size(size(config.tx_frames)?)
        .build()
        .map_err(|_| invalid("frame_size leaves no room after the XDP headroom"))?;
    let frames = NonZeroU32::new(config.umem_frames()).ok_or(invalid("no UMEM frames"))?;
    let (umem, descs) = Umem::new(umem_config, frames, false).map_err(|e| {
        let source = io_source(&e);
        BindError::Failed(match source.raw_os_error() {
            Some(libc::ENOBUFS) | Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => {
                DeviceError::LockedMemory {
                    bytes: u64::from(config.umem_frames()) * u64::from(config.frame_size),
                    limit: memlock_limit(),
                }
            }
            _ => DeviceError::from_io("create the AF_XDP UMEM", NEEDS_XDP, interface, source),
        })
    })?;

    let mut bind_flags = BindFlags::XDP_USE_NEED_WAKEUP;
    match config.zero_copy {
        ZeroCopy::Off => bind_flags |= BindFlags::XDP_COPY,
        ZeroCopy::Required => bind_flags |= BindFlags::XDP_ZEROCOPY,
        // Neither flag: the kernel tries zero-copy and falls back to copying.
        ZeroCopy::Auto if config.mode == XdpMode::Skb => bind_flags |= BindFlags::XDP_COPY,
        ZeroCopy::Auto => {}
    }
    let xdp_flags = match config.mode {
        XdpMode::Skb => XdpFlags::XDP_FLAGS_SKB_MODE,
        XdpMode::Drv => XdpFlags::XDP_FLAGS_DRV_MODE,
    };
    let socket_config = SocketConfig::builder()
        .rx_queue_size(size(config.rx_frames)?)
        .tx_queue_size(size(config.tx_frames)?)
        .xdp_flags(xdp_flags)
        .bind_flags(bind_flags)
        .build();
    let ifname: Interface = interface
        .parse()
        .map_err(|_| BindError::Failed(invalid_name(interface)))?;
    // SAFETY: this UMEM is new and used by no other socket; if another socket holds this
    // interface and queue, the kernel refuses the bind (EBUSY) rather than share it.
    let created = unsafe { Socket::new(socket_config, &umem, &ifname, config.queue_id) };
    let (tx, rx, rings) = created.map_err(|e| {
        let source = io_source(&e);
        match source.raw_os_error() {
            Some(libc::EBUSY) => BindError::Busy,
            Some(libc::EPERM) | Some(libc::EACCES) => {
                BindError::Failed(DeviceError::PermissionDenied {
                    op: "open an AF_XDP socket and attach its XDP program",
                    needs: NEEDS_XDP,
                })
            }
            Some(libc::ENODEV) | Some(libc::ENXIO) => {
                BindError::Failed(DeviceError::NoSuchInterface {
                    name: interface.to_owned(),
                })
            }
            Some(libc::EAFNOSUPPORT) => BindError::Failed(DeviceError::Os {
                op: "open an AF_XDP socket (the kernel lacks CONFIG_XDP_SOCKETS)",
                source,
            }),
            Some(libc::EOPNOTSUPP) if config.zero_copy == ZeroCopy::Required => {
                BindError::Failed(DeviceError::ZeroCopyUnavailable {
                    name: interface.to_owned(),
                })
            }
            _ => BindError::Failed(DeviceError::XdpAttach {
                name: interface.to_owned(),
                mode: config.mode.name(),
                source,
            }),
        }
    })?;
    let (fill, comp) = rings.ok_or(invalid(
        "the new UMEM came without fill and completion rings",
    ))?;
    Ok((umem, descs, tx, rx, fill, comp))
}

/// An invalid-configuration bind failure.
fn invalid(why: &'static str) -> BindError {
    BindError::Failed(DeviceError::InvalidConfig(why))
}

/// The interface-name error for a name that cannot be a C string.
fn invalid_name(interface: &str) -> DeviceError {
    DeviceError::InvalidInterfaceName {
        name: interface.to_owned(),
    }
}

/// The OS error behind an xsk-rs error (its `source`), or a generic one.
fn io_source(e: &dyn std::error::Error) -> io::Error {
    e.source()
        .and_then(|s| s.downcast_ref::<io::Error>())
        .and_then(io::Error::raw_os_error)
        .map_or_else(
            || io::Error::other(e.to_string()),
            io::Error::from_raw_os_error,
        )
}

/// Whether the socket's bind got zero-copy (getsockopt XDP_OPTIONS).
fn query_zero_copy(fd: libc::c_int) -> io::Result<bool> {
    let mut opts = libc::xdp_options { flags: 0 };
    let mut len = std::mem::size_of::<libc::xdp_options>() as libc::socklen_t;
    // SAFETY: `opts` is a valid xdp_options that lives for the call and `len` is its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_OPTIONS,
            (&mut opts as *mut libc::xdp_options).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

/// The current RLIMIT_MEMLOCK soft limit in bytes (None: unlimited or unreadable).
fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit that lives for the call.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    (r == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Raises RLIMIT_MEMLOCK so the UMEM can be pinned without CAP_IPC_LOCK (root has it and
/// is not charged); failure is left for the UMEM registration to report.
fn raise_memlock_limit(umem_bytes: u64) {
    let Some(current) = memlock_limit() else {
        return;
    };
    // The rings and the XDP program's map are locked too: leave generous room.
    let wanted = current.saturating_add(umem_bytes.saturating_mul(2));
    let mut lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `lim` is a valid rlimit that lives for the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } == 0 {
        return;
    }
    // Without CAP_SYS_RESOURCE only the soft limit can move, up to the hard one.
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `hard` is a valid rlimit that lives for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut hard) } != 0 {
        return;
    }
    lim.rlim_max = hard.rlim_max;
    lim.rlim_cur = wanted.min(hard.rlim_max);
    // SAFETY: as above.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::checksum;
    use sluice_wire::ipv4::{self, Ipv4Repr};

    #[test]
    fn bad_configs_are_refused_before_any_syscall() {
        let cases = [
            AfXdpConfig {
                batch: 0,
                ..AfXdpConfig::default()
            },
            AfXdpConfig {
                batch: 2048,
                ..AfXdpConfig::default()
            },
            AfXdpConfig {
                rx_frames: 1000,
                ..AfXdpConfig::default()
            },
            AfXdpConfig {
                tx_frames: 32,
                batch: 64,
                ..AfXdpConfig::default()
            },
            AfXdpConfig {
                tx_frames: 1 << 17,
                ..AfXdpConfig::default()
            },
            AfXdpConfig {
                frame_size: 3000,
                ..AfXdpConfig::default()
            },
            AfXdpConfig {
                mode: XdpMode::Skb,
                zero_copy: ZeroCopy::Required,
                ..AfXdpConfig::default()
            },
        ];
        for config in cases {
            assert!(
                matches!(
                    AfXdp::open("lo", config),
                    Err(DeviceError::InvalidConfig(_))
                ),
                "{config:?}"
            );
        }
        assert!(AfXdpConfig::default().validate().is_ok());
        assert!(matches!(
            AfXdp::open("this-name-is-too-long", AfXdpConfig::default()),
            Err(DeviceError::InvalidInterfaceName { .. })
        ));
    }

    #[test]
    fn modes_parse_and_print() {
        assert_eq!("skb".parse::<XdpMode>(), Ok(XdpMode::Skb));
        assert_eq!("drv".parse::<XdpMode>(), Ok(XdpMode::Drv));
        assert!("native"
            .parse::<XdpMode>()
            .unwrap_err()
            .to_string()
            .contains("skb, drv"));
        assert_eq!(XdpMode::Drv.to_string(), "drv");
    }

    #[test]
    fn missing_interface_or_privilege_is_a_typed_error() {
        match AfXdp::open("sl-nonexistent", AfXdpConfig::default()) {
            Err(DeviceError::NoSuchInterface { name }) => assert_eq!(name, "sl-nonexistent"),
            Err(DeviceError::PermissionDenied { .. }) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }

    #[test]
    fn loopback_is_not_ethernet() {
        match AfXdp::open("lo", AfXdpConfig::default()) {
            Err(DeviceError::NotEthernet { hardware_type, .. }) => assert_eq!(hardware_type, 772),
            Err(DeviceError::PermissionDenied { .. }) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }

    /// An Ethernet/IPv4/TCP frame 10.77.0.2 → 10.77.0.1 with `payload` and a full checksum.
    fn tcp_frame(payload: &[u8]) -> Vec<u8> {
        use sluice_wire::ipv4::Ecn;
        use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};
        let (src, dst) = (
            sluice_wire::Ipv4Addr::new(10, 77, 0, 2),
            sluice_wire::Ipv4Addr::new(10, 77, 0, 1),
        );
        let header = TcpHeader {
            src_port: 40000,
            dst_port: 5001,
            seq: SeqNumber(7),
            ack: SeqNumber(9),
            flags: TcpFlags::ACK,
            window: 512,
            urgent: 0,
            options: TcpOptions::default(),
        };
        let tcp_len = header.header_len() + payload.len();
        let mut frame = vec![0u8; ETH_HLEN + 20 + tcp_len];
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = Ipv4Repr {
            src,
            dst,
            protocol: ipv4::PROTOCOL_TCP,
            payload_len: tcp_len as u16,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 1,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
        };
        ip.emit(&mut frame[ETH_HLEN..]).unwrap();
        let l4 = &mut frame[ETH_HLEN + 20..];
        header.emit(l4).unwrap();
        l4[header.header_len()..].copy_from_slice(payload);
        sluice_wire::tcp::fill_checksum(l4, src, dst);
        frame
    }

    #[test]
    fn partial_checksums_are_recognised_and_completed() {
        let full = tcp_frame(b"hello, sluice");
        let l4 = ETH_HLEN + 20;
        // What Linux hands over with CHECKSUM_PARTIAL: the pseudo-header sum only.
        let mut partial = full.clone();
        let tcp_len = (partial.len() - l4) as u16;
        let pseudo = checksum::fold(checksum::pseudo_header_v4(
            sluice_wire::Ipv4Addr::new(10, 77, 0, 2),
            sluice_wire::Ipv4Addr::new(10, 77, 0, 1),
            ipv4::PROTOCOL_TCP,
            tcp_len,
        ));
        partial[l4 + 16..l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
        assert_ne!(partial, full);
        assert!(complete_if_partial(&mut partial));
        assert_eq!(partial, full);

        // A complete checksum is left alone, and so is a corrupted one.
        let mut same = full.clone();
        assert!(!complete_if_partial(&mut same));
        assert_eq!(same, full);
        let mut corrupt = full.clone();
        corrupt[l4 + 16] ^= 0x40;
        assert!(!complete_if_partial(&mut corrupt));
        assert_eq!(corrupt[l4 + 16], full[l4 + 16] ^ 0x40);

        // Not IPv4 TCP/UDP, or truncated: untouched.
        let mut arp = full.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(!complete_if_partial(&mut arp));
        let mut short = partial[..l4 + 10].to_vec();
        assert!(!complete_if_partial(&mut short));
    }
}
