//! AF_PACKET: a raw packet socket bound to one interface, batched with recvmmsg/sendmmsg.
//!
//! Each burst is one syscall each way. PACKET_AUXDATA tells per frame whether the sender left
//! the transport checksum to offload (TP_STATUS_CSUMNOTREADY, the normal case for a local
//! Linux sender over veth) or the kernel already verified it (TP_STATUS_CSUM_VALID); partial
//! checksums are completed in software before the frame is handed up. Our own transmissions
//! are not looped back (PACKET_IGNORE_OUTGOING, with a PACKET_OUTGOING filter as backstop).
//!
//! Large frames: a local Linux TCP sender over veth hands up to 64 KB TSO/GSO frames to the
//! peer unsegmented; a packet socket receives them whole. Frames longer than
//! [`AfPacketConfig::rx_frame_size`] are dropped and counted in `rx_truncated`. Either size
//! the receive buffers for them (65 536 + 14 bytes) or turn TSO/GSO off on the sending side.
//!
//! Offloads ([`AfPacketConfig::vnet_hdr`], PACKET_VNET_HDR): every frame in and out carries a
//! virtio-net header. On receive it says whether the checksum is partial and where it starts;
//! on transmit it lets the engine hand the kernel 64 KB segments with a GSO size (TSO: the
//! kernel, or the veth peer's receiver, segments them) and partial checksums.
//!
//! Transmit ring ([`AfPacketConfig::tx_ring_frames`], PACKET_TX_RING): frames are written into
//! memory mapped from the kernel, which sends the ring's pages without copying them
//! ([`crate::tx_ring`]); without it, sendmmsg copies each frame. Receiving stays batched
//! recvmmsg, or ([`AfPacketConfig::rx_ring_frames`], PACKET_RX_RING) a mapped TPACKET_V2 ring
//! ([`crate::rx_ring`]) that saves the system calls, not the copy.
//!
//! VLAN: the kernel may strip an 802.1Q tag into the auxdata; such frames are handed up
//! untagged (the lab uses no VLANs).

use std::cell::Cell;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;
use std::time::Duration;

use sluice_wire::EthernetAddress;

use crate::checksum::{rx_checksum, RxEvidence};
use crate::error::DeviceError;
use crate::rx_ring::RxRing;
use crate::syn_lane::{self, LaneFilter};
use crate::sys::{self, NEEDS_NET_RAW};
use crate::tx_batch::TxBatch;
use crate::tx_ring::TxRing;
use crate::virtio::{self, VirtioNetHdr};
use crate::{queued_plain, Device, DeviceStats, RxMeta, TxFrame};

/// Length of an Ethernet header without a VLAN tag.
const ETH_HLEN: usize = 14;
/// Bytes reserved per frame for control messages (one `tpacket_auxdata`).
const CMSG_BYTES: usize = 64;
/// Largest batch accepted.
const MAX_BATCH: usize = 1024;
/// EINVALs in a row from recvmmsg taken as dropped frames before it is reported as an error
/// (a persistent one is not about a frame).
const MAX_EINVAL_STREAK: u32 = 1024;
/// After a read that found the SYN lane empty, the bursts that go by before it is read
/// again. An empty read is a system call for nothing (a fifth of a receiving engine's
/// CPU when it was read after every burst); a lane that had SYNs is read after every
/// burst until it is empty, so a flood is drained as fast as before, and a SYN waits at
/// most this many bursts longer.
const SYN_LANE_IDLE_SKIP: u8 = 8;

/// Configuration of an [`AfPacket`] device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Frames received or queued for transmission per burst (1 to 1024).
    pub batch: usize,
    /// Bytes per receive buffer; longer frames are dropped and counted in `rx_truncated`.
    pub rx_frame_size: usize,
    /// Transmit straight to the driver, skipping the qdisc (PACKET_QDISC_BYPASS).
    pub qdisc_bypass: bool,
    /// Socket receive and send buffer in bytes (SO_RCVBUFFORCE/SO_SNDBUFFORCE, falling back to the capped variants); None keeps the kernel default.
    pub socket_buffer: Option<usize>,
    /// Exchange a virtio-net header with every frame (PACKET_VNET_HDR): send large segments (TSO) and partial checksums.
    pub vnet_hdr: bool,
    /// Complete partial checksums in software before handing frames up; off when the
    /// consumer trusts [`RxChecksum::Partial`] frames as Linux does (they never crossed a wire).
    pub complete_partial: bool,
    /// Transmit through a mapped ring of this many 64 KB frames (PACKET_TX_RING: the kernel
    /// sends the ring's pages without copying them); 0 sends with sendmmsg. Over veth the
    /// kernel copies such frames anyway when another namespace's socket receives them
    /// (skb_copy_ubufs), so there sendmmsg is faster; the ring pays off on a physical NIC.
    pub tx_ring_frames: usize,
    /// Receive through a mapped ring of this many 68 KB frames (PACKET_RX_RING: no system
    /// call while frames wait); 0 receives with recvmmsg. Not together with a TX ring. In
    /// the lab it measured no faster than recvmmsg (the copy and veth dominate), so the
    /// engine uses recvmmsg.
    pub rx_ring_frames: usize,
    /// Receive TCP SYNs (without ACK) on a second socket with this buffer in bytes, read
    /// after each burst of other frames while it has SYNs, and after every few bursts or a
    /// sleep when it had none ([`crate::syn_lane`]): a SYN flood then delays and drops only
    /// SYNs, never the frames of established connections. None: one socket.
    pub syn_lane: Option<usize>,
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            batch: 64,
            rx_frame_size: 2048,
            qdisc_bypass: false,
            socket_buffer: Some(4 << 20),
            vnet_hdr: false,
            complete_partial: true,
            tx_ring_frames: 0,
            rx_ring_frames: 0,
            syn_lane: None,
        }
    }
}

impl AfPacketConfig {
    /// The SYN lane's buffer for an engine: about two thousand SYNs, 20 ms of a flood of
    /// 100k a second. It rides out the spells when the engine's thread is not running (a
    /// dropped SYN costs its client a 1 s retransmission; in the lab, 256 KiB lost 1.4 %
    /// of a 100k/s flood and legitimate connects waited 1 s at p99, 4 MiB none).
    pub const SYN_LANE_BUFFER: usize = 2 << 20;

    /// The default configuration with receive buffers large enough for 64 KB GSO frames.
    pub fn large_frames() -> Self {
        AfPacketConfig {
            rx_frame_size: 65_536 + ETH_HLEN + 4,
            ..AfPacketConfig::default()
        }
    }

    /// Large receive buffers plus offloads: large segments and partial checksums both ways.
    /// The socket buffer holds more than a TCP receive window of 64 KB frames (each costs
    /// about twice its size in kernel memory), so a window's worth is never dropped here.
    pub fn offload() -> Self {
        AfPacketConfig {
            vnet_hdr: true,
            socket_buffer: Some(32 << 20),
            ..AfPacketConfig::large_frames()
        }
    }
}

/// A control-message buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; CMSG_BYTES]);

/// A packet socket bound to one Ethernet interface, with preallocated burst buffers.
pub struct AfPacket {
    fd: OwnedFd,
    name: String,
    mac: EthernetAddress,
    max_frame: usize,
    /// Whether every frame carries a virtio-net header (PACKET_VNET_HDR).
    vnet: bool,
    /// Whether partial checksums are completed before frames are handed up.
    complete_partial: bool,
    batch: usize,
    rx_frame_size: usize,
    rx_buf: Box<[u8]>,
    rx_names: Box<[libc::sockaddr_ll]>,
    rx_cmsgs: Box<[CmsgBuf]>,
    rx_iovs: Box<[libc::iovec]>,
    rx_hdrs: Box<[libc::mmsghdr]>,
    /// One virtio-net header per receive slot (unused without `vnet`).
    rx_vnet: Box<[[u8; virtio::HDR_LEN]]>,
    /// One virtio-net header per transmit slot (unused without `vnet`).
    tx_vnet: Box<[[u8; virtio::HDR_LEN]]>,
    /// The sendmmsg slots (none with a ring); bytes per slot: `max_frame`, or a 64 KB large
    /// segment with offloads. Queued frames are `head..count`, not yet accepted by the kernel.
    tx: TxBatch,
    tx_iovs: Box<[libc::iovec]>,
    tx_hdrs: Box<[libc::mmsghdr]>,
    /// The mapped transmit ring, when frames go out through it instead of sendmmsg.
    tx_ring: Option<TxRing>,
    /// Frames handed to the ring since the last kick.
    ring_unsent: usize,
    /// The mapped receive ring, when frames arrive through it instead of recvmmsg.
    rx_ring: Option<RxRing>,
    /// Receives in a row that failed with EINVAL (frames the kernel could not describe).
    rx_einval_streak: u32,
    /// The socket that receives SYNs, when they have a lane of their own.
    syn_lane: Option<Box<AfPacket>>,
    /// Bursts left before the SYN lane is read again (see [`SYN_LANE_IDLE_SKIP`]); a
    /// cell, so that going to sleep (which takes `&self`) can clear it.
    syn_lane_skip: Cell<u8>,
    stats: DeviceStats,
}

// SAFETY: the raw pointers inside the iovec/mmsghdr arrays point only into heap buffers owned
// by this same value (they do not move when the value moves), and are used only through
// `&mut self`; nothing is shared with another thread.
unsafe impl Send for AfPacket {}

impl std::fmt::Debug for AfPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacket")
            .field("interface", &self.name)
            .field("mac", &self.mac)
            .field("max_frame", &self.max_frame)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// An all-zero `mmsghdr`.
fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is a C struct of integers and raw pointers; all-zero is a valid value
    // (null pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

/// An all-zero `sockaddr_ll`.
fn zeroed_sockaddr_ll() -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is a C struct of integers and a byte array; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

impl AfPacket {
    /// Opens a packet socket on `interface` in the calling thread's network namespace.
    ///
    /// Fails with a typed error when the process lacks CAP_NET_RAW, the interface does not
    /// exist, is not Ethernet or is down.
    pub fn open(interface: &str, config: AfPacketConfig) -> Result<AfPacket, DeviceError> {
        let filter = config.syn_lane.map(|_| LaneFilter::AllButSyns);
        let mut dev = AfPacket::open_filtered(interface, config, filter)?;
        if let Some(bytes) = config.syn_lane {
            let lane = AfPacketConfig {
                batch: config.batch,
                socket_buffer: Some(bytes),
                complete_partial: config.complete_partial,
                ..AfPacketConfig::default()
            };
            let lane = AfPacket::open_filtered(interface, lane, Some(LaneFilter::SynsOnly))?;
            dev.syn_lane = Some(Box::new(lane));
        }
        Ok(dev)
    }

    /// [`AfPacket::open`] of one socket, keeping only the frames `filter` keeps.
    fn open_filtered(
        interface: &str,
        config: AfPacketConfig,
        filter: Option<LaneFilter>,
    ) -> Result<AfPacket, DeviceError> {
        if config.batch == 0 || config.batch > MAX_BATCH {
            return Err(DeviceError::InvalidConfig("batch must be 1 to 1024 frames"));
        }
        if config.rx_ring_frames > 4096 || (config.rx_ring_frames > 0 && config.tx_ring_frames > 0)
        {
            return Err(DeviceError::InvalidConfig(
                "rx_ring_frames must be 0 (recvmmsg) to 4096, and not with a TX ring",
            ));
        }
        if config.tx_ring_frames > 4096 {
            return Err(DeviceError::InvalidConfig(
                "tx_ring_frames must be 0 (sendmmsg) to 4096",
            ));
        }
        if config.rx_frame_size < 64 || config.rx_frame_size > (1 << 20) {
            return Err(DeviceError::InvalidConfig(
                "rx_frame_size must be 64 bytes to 1 MiB",
            ));
        }
        sys::interface_name(interface)?;

        // Protocol 0: the socket receives nothing until bind() names the protocol and
        // interface, so no frame from another interface slips in between.
        // SAFETY: socket(2) takes no pointers; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(DeviceError::last_os(
                "open an AF_PACKET socket",
                NEEDS_NET_RAW,
                interface,
            ));
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if let Some(filter) = filter {
            // Before bind(), so no frame reaches the socket unfiltered.
            syn_lane::attach(fd.as_raw_fd(), filter).map_err(|e| {
                DeviceError::from_io("attach the SYN lane's filter", NEEDS_NET_RAW, interface, e)
            })?;
        }
        let info = sys::interface_info(fd.as_raw_fd(), interface)?;
        if !info.up {
            return Err(DeviceError::InterfaceDown {
                name: interface.to_owned(),
            });
        }

        let raw = fd.as_raw_fd();
        let opt_err = |op, e| DeviceError::from_io(op, NEEDS_NET_RAW, interface, e);
        if !config.vnet_hdr {
            // The checksum state per frame; with offloads the virtio-net header carries it.
            sys::set_int_option(raw, libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
                .map_err(|e| opt_err("enable PACKET_AUXDATA", e))?;
        }
        if config.vnet_hdr {
            sys::set_int_option(raw, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)
                .map_err(|e| opt_err("enable PACKET_VNET_HDR", e))?;
        }
        // After PACKET_VNET_HDR, which the kernel refuses once a ring exists.
        let tx_ring = match config.tx_ring_frames {
            0 => None,
            n => Some(TxRing::new(raw, n).map_err(|e| opt_err("map a PACKET_TX_RING", e))?),
        };
        let rx_ring = match config.rx_ring_frames {
            0 => None,
            n => Some(RxRing::new(raw, n).map_err(|e| opt_err("map a PACKET_RX_RING", e))?),
        };
        // Older kernels lack PACKET_IGNORE_OUTGOING; receive() filters PACKET_OUTGOING anyway.
        let _ = sys::set_int_option(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        if config.qdisc_bypass {
            sys::set_int_option(raw, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
                .map_err(|e| opt_err("enable PACKET_QDISC_BYPASS", e))?;
        }
        if let Some(bytes) = config.socket_buffer {
            let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
            for (forced, capped) in [
                (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
                (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
            ] {
                if sys::set_int_option(raw, libc::SOL_SOCKET, forced, bytes).is_err() {
                    sys::set_int_option(raw, libc::SOL_SOCKET, capped, bytes)
                        .map_err(|e| opt_err("size the socket buffers", e))?;
                }
            }
        }

        let mut addr = zeroed_sockaddr_ll();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = info.index;
        // SAFETY: `addr` is a valid sockaddr_ll and the length passed is its size.
        let r = unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(DeviceError::last_os(
                "bind the AF_PACKET socket to the interface",
                NEEDS_NET_RAW,
                interface,
            ));
        }

        let max_frame = info.mtu + ETH_HLEN;
        Ok(AfPacket::with_buffers(
            fd,
            interface.to_owned(),
            info.mac,
            max_frame,
            config,
            (tx_ring, rx_ring),
        ))
    }

    /// Allocates the burst buffers and points the message headers into them, once.
    fn with_buffers(
        fd: OwnedFd,
        name: String,
        mac: EthernetAddress,
        max_frame: usize,
        config: AfPacketConfig,
        (tx_ring, rx_ring): (Option<TxRing>, Option<RxRing>),
    ) -> AfPacket {
        let batch = config.batch;
        let rx_size = config.rx_frame_size;
        let vnet = config.vnet_hdr;
        let vnet_len = if vnet { virtio::HDR_LEN } else { 0 };
        // With offloads a slot holds the largest IPv4 packet behind its Ethernet header (in
        // a ring frame: what is left of 64 KB after the frame and virtio-net headers).
        let tx_slot = match (&tx_ring, vnet) {
            (Some(_), true) => max_frame.max(TxRing::MAX_DATA - vnet_len),
            (Some(_), false) => max_frame.min(TxRing::MAX_DATA),
            (None, true) => max_frame.max(ETH_HLEN + 65_535),
            (None, false) => max_frame,
        };
        // The sendmmsg buffers are not needed with a ring.
        let tx_slots = if tx_ring.is_some() { 0 } else { batch };
        let rx_buf_len = if rx_ring.is_some() {
            0
        } else {
            batch * rx_size
        };
        let iovs = if vnet { 2 } else { 1 };
        let empty_iov = libc::iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        };
        let mut dev = AfPacket {
            fd,
            name,
            mac,
            max_frame,
            vnet,
            complete_partial: config.complete_partial,
            batch,
            rx_frame_size: rx_size,
            rx_buf: vec![0u8; rx_buf_len].into_boxed_slice(),
            rx_names: vec![zeroed_sockaddr_ll(); batch].into_boxed_slice(),
            rx_cmsgs: vec![CmsgBuf([0; CMSG_BYTES]); batch].into_boxed_slice(),
            rx_iovs: vec![empty_iov; batch * iovs].into_boxed_slice(),
            rx_hdrs: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            rx_vnet: vec![[0; virtio::HDR_LEN]; batch].into_boxed_slice(),
            tx_vnet: vec![[0; virtio::HDR_LEN]; batch].into_boxed_slice(),
            tx: TxBatch::new(tx_slots, tx_slot),
            tx_iovs: vec![empty_iov; batch * iovs].into_boxed_slice(),
            tx_hdrs: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            tx_ring,
            ring_unsent: 0,
            rx_ring,
            rx_einval_streak: 0,
            syn_lane: None,
            syn_lane_skip: Cell::new(0),
            stats: DeviceStats::default(),
        };
        for i in 0..batch {
            // With offloads each message is [virtio-net header, frame]; the frame's iovec is
            // always the last one.
            let first = i * iovs;
            if vnet {
                dev.rx_iovs[first] = libc::iovec {
                    iov_base: dev.rx_vnet[i].as_mut_ptr().cast(),
                    iov_len: virtio::HDR_LEN,
                };
                dev.tx_iovs[first] = libc::iovec {
                    iov_base: dev.tx_vnet[i].as_mut_ptr().cast(),
                    iov_len: virtio::HDR_LEN,
                };
            }
            dev.rx_iovs[first + iovs - 1] = libc::iovec {
                iov_base: dev
                    .rx_buf
                    .get_mut(i * rx_size..)
                    .map_or(ptr::null_mut(), |b| b.as_mut_ptr().cast()),
                iov_len: rx_size,
            };
            let h = &mut dev.rx_hdrs[i].msg_hdr;
            h.msg_iov = &mut dev.rx_iovs[first];
            h.msg_iovlen = iovs as _;
            h.msg_name = (&mut dev.rx_names[i] as *mut libc::sockaddr_ll).cast();
            h.msg_control = (&mut dev.rx_cmsgs[i] as *mut CmsgBuf).cast();

            dev.tx_iovs[first + iovs - 1] = libc::iovec {
                iov_base: dev.tx.slot_ptr(i).cast(),
                iov_len: 0,
            };
            let h = &mut dev.tx_hdrs[i].msg_hdr;
            h.msg_iov = &mut dev.tx_iovs[first];
            h.msg_iovlen = iovs as _;
        }
        dev
    }

    /// The interface this socket is bound to.
    pub fn interface(&self) -> &str {
        &self.name
    }

    /// Frames queued for transmission and not yet accepted by the kernel.
    pub fn pending(&self) -> usize {
        self.tx.pending() + self.ring_unsent
    }

    /// The `tp_status` of frame `i`'s PACKET_AUXDATA control message, or 0 if it has none.
    fn aux_status(&self, i: usize) -> u32 {
        let hdr = &self.rx_hdrs[i].msg_hdr;
        if (hdr.msg_flags & libc::MSG_CTRUNC) != 0 {
            return 0;
        }
        // SAFETY: `hdr` describes a control buffer of `msg_controllen` bytes that the kernel
        // filled in the last recvmmsg; CMSG_FIRSTHDR/CMSG_NXTHDR stay within it and return
        // null at its end. The auxdata is read unaligned from within the same buffer after
        // checking the message is long enough to hold it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                let data_len = (*c).cmsg_len as usize;
                if (*c).cmsg_level == libc::SOL_PACKET
                    && (*c).cmsg_type == libc::PACKET_AUXDATA
                    && data_len
                        >= libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32)
                            as usize
                {
                    let aux: libc::tpacket_auxdata = ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    return aux.tp_status;
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
        0
    }

    /// Asks the kernel to send every frame handed to the ring (one empty send).
    fn kick_ring(&mut self) -> Result<(), DeviceError> {
        // SAFETY: send(2) with no buffer on this device's own socket: with a TX ring the
        // kernel takes the frames from the ring, and no user memory is passed.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r >= 0 {
            self.stats.tx_frames += self.ring_unsent as u64;
            self.ring_unsent = 0;
            return Ok(());
        }
        match sys::errno() {
            // The frames stay requested; the next kick sends them.
            libc::EAGAIN | libc::ENOBUFS | libc::EINTR => {
                self.stats.tx_blocked += 1;
                Ok(())
            }
            _ => Err(DeviceError::last_os(
                "send frames",
                NEEDS_NET_RAW,
                &self.name,
            )),
        }
    }

    /// Hands up to a batch of frames from the receive ring, giving each frame back to the
    /// kernel once handled.
    fn receive_from_ring(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> usize {
        let Some(ring) = self.rx_ring.as_mut() else {
            return 0;
        };
        let vnet_len = if self.vnet { virtio::HDR_LEN } else { 0 };
        let mut delivered = 0;
        for _ in 0..self.batch {
            let Some((slot, frame)) = ring.next_filled() else {
                break;
            };
            let end = slot.mac.checked_add(slot.snaplen);
            if slot.snaplen < slot.len {
                self.stats.rx_truncated += 1;
            } else if end.is_none_or(|e| e > frame.len()) || slot.mac < vnet_len {
                self.stats.rx_dropped += 1;
            } else if slot.pkttype != libc::PACKET_OUTGOING {
                let (head, rest) = frame.split_at_mut(slot.mac);
                let evidence = if self.vnet {
                    VirtioNetHdr::parse(&head[slot.mac - vnet_len..])
                        .map_or(RxEvidence::None, |h| h.rx_evidence())
                } else {
                    status_evidence(slot.status)
                };
                let data = &mut rest[..slot.snaplen];
                let checksum = rx_checksum(evidence, data, self.complete_partial, &mut self.stats);
                f(data, RxMeta { checksum });
                delivered += 1;
            }
            ring.release();
        }
        self.stats.rx_frames += delivered as u64;
        delivered
    }

    /// Drops every queued frame, counting them, after a fatal transmit error.
    fn drop_queue(&mut self) {
        self.stats.tx_dropped += self.tx.clear() as u64;
    }
}

/// What a packet status (PACKET_AUXDATA or a ring frame's `tp_status`) says about the
/// frame's transport checksum.
fn status_evidence(status: u32) -> RxEvidence {
    if status & libc::TP_STATUS_CSUMNOTREADY != 0 {
        RxEvidence::Partial
    } else if status & libc::TP_STATUS_CSUM_VALID != 0 {
        RxEvidence::Valid
    } else {
        RxEvidence::None
    }
}

/// Checks what a transmit callback wrote into `slot`. With offloads (`hdr` is the frame's
/// virtio-net header) the kernel completes partial checksums and segments large frames;
/// without, partial checksums are completed here and large frames refused. Returns the
/// length to send, or None (nothing written, or dropped and counted).
fn accept_tx(
    tx: Option<TxFrame>,
    slot: &mut [u8],
    hdr: Option<&mut [u8]>,
    max_frame: usize,
    stats: &mut DeviceStats,
) -> Result<Option<usize>, DeviceError> {
    let Some(hdr) = hdr else {
        let n = max_frame.min(slot.len());
        return queued_plain(tx, &mut slot[..n], stats);
    };
    let Some(tx) = tx.filter(|t| t.len > 0) else {
        return Ok(None);
    };
    if tx.len > slot.len() || (tx.gso_size == 0 && tx.len > max_frame) {
        let max = if tx.gso_size == 0 {
            max_frame
        } else {
            slot.len()
        };
        return Err(DeviceError::FrameTooLong { len: tx.len, max });
    }
    let Some(h) = VirtioNetHdr::for_tx(&slot[..tx.len], &tx) else {
        stats.tx_dropped += 1;
        return Ok(None);
    };
    h.emit(hdr);
    Ok(Some(tx.len))
}

/// The socket, so a caller serving several devices can poll(2) them together (the
/// software switch); reading or writing it directly would bypass the device's buffers.
impl std::os::fd::AsFd for AfPacket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AfPacket {
    /// The SYN lane's descriptor, if SYNs have one, for a sleep: a SYN may be what ends
    /// it, so the lane is read in the first burst after it.
    fn lane_fd(&self) -> Option<std::os::fd::RawFd> {
        self.syn_lane_skip.set(0);
        self.syn_lane.as_ref().map(|l| l.fd.as_raw_fd())
    }

    /// A burst from the SYN lane, if any and if it is the lane's turn, counted in this
    /// device's statistics.
    fn receive_syns(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        let Some(lane) = self.syn_lane.as_mut() else {
            return Ok(0);
        };
        let skip = self.syn_lane_skip.get();
        if skip > 0 {
            self.syn_lane_skip.set(skip - 1);
            return Ok(0);
        }
        let before = lane.stats;
        let n = lane.receive_own(f)?;
        let after = lane.stats;
        let s = &mut self.stats;
        s.rx_frames += after.rx_frames - before.rx_frames;
        s.rx_truncated += after.rx_truncated - before.rx_truncated;
        s.rx_dropped += after.rx_dropped - before.rx_dropped;
        s.rx_checksum_completed += after.rx_checksum_completed - before.rx_checksum_completed;
        s.rx_checksum_incomplete += after.rx_checksum_incomplete - before.rx_checksum_incomplete;
        if n > 0 {
            // Only while SYNs arrive: one more system call per burst of them.
            s.rx_syns_shed += sys::packet_drops(lane.fd.as_raw_fd());
        } else {
            self.syn_lane_skip.set(SYN_LANE_IDLE_SKIP);
        }
        Ok(n)
    }

    /// A burst from this socket alone.
    fn receive_own(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        if self.rx_ring.is_some() {
            return Ok(self.receive_from_ring(f));
        }
        for i in 0..self.batch {
            let m = &mut self.rx_hdrs[i];
            m.msg_len = 0;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m.msg_hdr.msg_controllen = CMSG_BYTES as _;
            m.msg_hdr.msg_flags = 0;
        }
        // SAFETY: `rx_hdrs` holds `batch` message headers whose name, iovec and control
        // pointers point into this device's own buffers of the stated lengths, all alive
        // and exclusively borrowed for the call; a null timeout is allowed.
        let n = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                self.rx_hdrs.as_mut_ptr(),
                self.batch as libc::c_uint,
                libc::MSG_DONTWAIT,
                ptr::null_mut(),
            )
        };
        if n < 0 {
            return match sys::errno() {
                libc::EAGAIN | libc::EINTR => Ok(0),
                // The kernel could not describe a frame in a virtio-net header (a GSO type
                // it has no header for) and dropped it.
                libc::EINVAL if self.vnet && self.rx_einval_streak < MAX_EINVAL_STREAK => {
                    self.rx_einval_streak += 1;
                    self.stats.rx_dropped += 1;
                    Ok(0)
                }
                _ => Err(DeviceError::last_os(
                    "receive frames",
                    NEEDS_NET_RAW,
                    &self.name,
                )),
            };
        }
        self.rx_einval_streak = 0;
        let mut delivered = 0;
        let vnet_len = if self.vnet { virtio::HDR_LEN } else { 0 };
        for i in 0..n as usize {
            let Some(len) = (self.rx_hdrs[i].msg_len as usize).checked_sub(vnet_len) else {
                self.stats.rx_dropped += 1;
                continue;
            };
            let flags = self.rx_hdrs[i].msg_hdr.msg_flags;
            if flags & libc::MSG_TRUNC != 0 || len > self.rx_frame_size {
                self.stats.rx_truncated += 1;
                continue;
            }
            if self.rx_names[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            // With offloads the virtio-net header says it all; the auxdata is parsed only
            // without one.
            let evidence = if self.vnet {
                VirtioNetHdr::parse(&self.rx_vnet[i]).map_or(RxEvidence::None, |h| h.rx_evidence())
            } else {
                status_evidence(self.aux_status(i))
            };
            let start = i * self.rx_frame_size;
            let frame = &mut self.rx_buf[start..start + len];
            let checksum = rx_checksum(evidence, frame, self.complete_partial, &mut self.stats);
            f(frame, RxMeta { checksum });
            delivered += 1;
        }
        self.stats.rx_frames += delivered as u64;
        Ok(delivered)
    }
}

impl Device for AfPacket {
    /// A burst of frames, then (with a SYN lane) a burst of SYNs.
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        let n = self.receive_own(f)?;
        Ok(n + self.receive_syns(f)?)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        let vnet_len = if self.vnet { virtio::HDR_LEN } else { 0 };
        if let Some(ring) = self.tx_ring.as_mut() {
            if self.ring_unsent == self.batch {
                return Ok(false);
            }
            // A full ring is frames still held by skbs: the caller flushes and moves on.
            let Some(data) = ring.next_free() else {
                return Ok(false);
            };
            let (hdr, rest) = data.split_at_mut(vnet_len);
            let slot = &mut rest[..self.tx.slot_len()];
            let hdr = self.vnet.then_some(hdr);
            if let Some(len) = accept_tx(f(slot), slot, hdr, self.max_frame, &mut self.stats)? {
                ring.commit(vnet_len + len);
                self.ring_unsent += 1;
            }
            return Ok(true);
        }
        let i = self.tx.count();
        let Some(slot) = self.tx.next_slot() else {
            return Ok(false);
        };
        let hdr = self.vnet.then_some(&mut self.tx_vnet[i][..]);
        if let Some(len) = accept_tx(f(slot), slot, hdr, self.max_frame, &mut self.stats)? {
            let iovs = if self.vnet { 2 } else { 1 };
            self.tx_iovs[i * iovs + iovs - 1].iov_len = len;
            self.tx.commit(len, 0);
        }
        Ok(true)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        if self.ring_unsent > 0 {
            self.kick_ring()?;
        }
        while self.tx.pending() > 0 {
            let (head, n) = (self.tx.head(), self.tx.pending());
            for m in &mut self.tx_hdrs[head..head + n] {
                m.msg_len = 0;
            }
            // SAFETY: the `n` headers from the batch's head point at iovecs into this device's
            // own transmit buffer with lengths no larger than a slot; the socket is bound, so
            // no address is needed; everything is alive and exclusively borrowed for the call.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.tx_hdrs[head..].as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r >= 0 {
                self.tx.advance(r as usize);
                self.stats.tx_frames += r as u64;
                continue;
            }
            match sys::errno() {
                libc::EINTR => continue,
                // The send buffer is full: keep the rest queued for the next flush.
                libc::EAGAIN => {
                    self.stats.tx_blocked += 1;
                    break;
                }
                // The kernel refused or dropped this one frame; go on with the others.
                libc::EMSGSIZE | libc::EINVAL | libc::ENOBUFS => {
                    self.tx.advance(1);
                    self.stats.tx_dropped += 1;
                }
                _ => {
                    let err = DeviceError::last_os("send frames", NEEDS_NET_RAW, &self.name);
                    self.drop_queue();
                    return Err(err);
                }
            }
        }
        self.tx.reset_if_sent();
        Ok(())
    }

    fd_device_tail!(
        fd: fd,
        lane: |d: &AfPacket| d.lane_fd(),
        max_tso_frame: |d: &AfPacket| d.tx.slot_len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configs_are_refused_before_any_syscall() {
        let bad_batch = AfPacketConfig {
            batch: 0,
            ..AfPacketConfig::default()
        };
        assert!(matches!(
            AfPacket::open("lo", bad_batch),
            Err(DeviceError::InvalidConfig(_))
        ));
        let bad_size = AfPacketConfig {
            rx_frame_size: 10,
            ..AfPacketConfig::default()
        };
        assert!(matches!(
            AfPacket::open("lo", bad_size),
            Err(DeviceError::InvalidConfig(_))
        ));
        let huge_ring = AfPacketConfig {
            tx_ring_frames: 1 << 20,
            ..AfPacketConfig::offload()
        };
        assert!(matches!(
            AfPacket::open("lo", huge_ring),
            Err(DeviceError::InvalidConfig(_))
        ));
        assert!(matches!(
            AfPacket::open("this-name-is-too-long", AfPacketConfig::default()),
            Err(DeviceError::InvalidInterfaceName { .. })
        ));
    }

    #[test]
    fn missing_interface_or_privilege_is_a_typed_error() {
        match AfPacket::open("sl-nonexistent", AfPacketConfig::default()) {
            Err(DeviceError::NoSuchInterface { name }) => assert_eq!(name, "sl-nonexistent"),
            Err(DeviceError::PermissionDenied { .. }) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }

    #[test]
    fn loopback_is_not_ethernet() {
        // lo has hardware type ARPHRD_LOOPBACK (772); needs CAP_NET_RAW to get that far.
        match AfPacket::open("lo", AfPacketConfig::default()) {
            Err(DeviceError::NotEthernet { hardware_type, .. }) => assert_eq!(hardware_type, 772),
            Err(DeviceError::PermissionDenied { .. }) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }
}
