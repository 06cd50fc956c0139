//! `sluice capture`'s contract (docs/capture.md): the request a capture client sends as its
//! first message on the engine's socket (instead of Hello), and the records the engine then
//! sends it on a SOCK_SEQPACKET pair of its own, one record per message: a frame that passed
//! the hook and the filter, or the end of the session with its totals. The engine sends
//! without waiting: a full socket drops the frame, counted in the next record.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    sendmsg, setsockopt, socketpair, sockopt, AddressFamily, MsgFlags, SockFlag, SockType,
};
use serde::{Deserialize, Serialize};

use crate::error::sys;
use crate::ShmError;

/// Largest snap length (tcpdump's default and maximum, 256 KiB).
pub const MAX_SNAPLEN: u32 = 262_144;
/// Bytes of a record's header.
pub const RECORD_HEADER: usize = 24;
/// Most bytes the engine lets wait in one session's socket, whatever `ring` asks.
pub const MAX_RING_BYTES: usize = 64 << 20;
/// A record carrying a frame.
pub const KIND_FRAME: u32 = 1;
/// The last record of a session: its totals.
pub const KIND_END: u32 = 2;

/// Where a session taps the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaptureHook {
    /// Received frames, before classification.
    Ingress,
    /// Frames handed to the device.
    Egress,
    /// Both.
    Both,
}

/// What a capture client asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    /// The hook point(s).
    pub hook: CaptureHook,
    /// Bytes kept of each frame (1..=[`MAX_SNAPLEN`]).
    pub snaplen: u32,
    /// Frames of `snaplen` the session's socket holds before the engine drops.
    pub ring: u32,
    /// The classic BPF filter (libpcap's compiled form: code, jt, jf, k); empty: every frame.
    pub filter: Vec<(u16, u8, u8, u32)>,
}

/// A record's header, little-endian on the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`KIND_FRAME`] or [`KIND_END`].
    pub kind: u32,
    /// The frame's length on the wire (its bytes follow, cut at the snap length); for
    /// [`KIND_END`], 0.
    pub orig_len: u32,
    /// When the engine saw it, in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Frames that matched but were dropped because the socket was full, so far.
    pub dropped: u64,
}

impl RecordHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; RECORD_HEADER] {
        let mut b = [0u8; RECORD_HEADER];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.orig_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[16..24].copy_from_slice(&self.dropped.to_le_bytes());
        b
    }

    /// Reads a header from the start of a record; None if it is too short or of an
    /// unknown kind.
    pub fn decode(b: &[u8]) -> Option<RecordHeader> {
        let b = b.get(..RECORD_HEADER)?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        let h = RecordHeader {
            kind: u32_at(0),
            orig_len: u32_at(4),
            ts_ns: u64_at(8),
            dropped: u64_at(16),
        };
        matches!(h.kind, KIND_FRAME | KIND_END).then_some(h)
    }
}

/// A session's socket pair: the engine's end (non-blocking, its send buffer sized for
/// `ring_bytes` when the engine may), and the client's.
pub fn session_pair(ring_bytes: usize) -> Result<(OwnedFd, OwnedFd), ShmError> {
    let (engine, client) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )
    .map_err(sys("socketpair(capture)"))?;
    let bytes = ring_bytes.min(MAX_RING_BYTES);
    // Past net.core.wmem_max only a privileged engine can go (SO_SNDBUFFORCE); otherwise
    // the kernel's cap is the ring.
    if setsockopt(&engine, sockopt::SndBufForce, &bytes).is_err() {
        let _ = setsockopt(&engine, sockopt::SndBuf, &bytes);
    }
    // The client's end blocks: it waits for records.
    nix::fcntl::fcntl(
        &client,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .map_err(sys("fcntl(capture client)"))?;
    Ok((engine, client))
}

/// What became of a record the engine sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// It is on the socket.
    Queued,
    /// The socket was full: dropped.
    Full,
    /// The client went away.
    Gone,
}

/// Sends one record (header and data in one message) without blocking.
pub fn send_record(sock: BorrowedFd<'_>, header: &RecordHeader, data: &[u8]) -> Sent {
    let head = header.encode();
    let iov = [IoSlice::new(&head), IoSlice::new(data)];
    loop {
        match sendmsg::<()>(
            sock.as_raw_fd(),
            &iov,
            &[],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(_) => return Sent::Queued,
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) | Err(Errno::ENOBUFS) | Err(Errno::ENOMEM) => return Sent::Full,
            Err(_) => return Sent::Gone,
        }
    }
}

/// Whether the client shut down or closed its end (it writes nothing else), without blocking.
pub fn client_done(sock: BorrowedFd<'_>) -> bool {
    let mut b = [0u8; 1];
    match nix::sys::socket::recv(
        sock.as_raw_fd(),
        &mut b,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK,
    ) {
        // 0: end of file. Data: the client broke the protocol; end the session too.
        Ok(_) => true,
        Err(Errno::EAGAIN) | Err(Errno::EINTR) => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn records_round_trip_and_a_full_socket_drops() {
        let (engine, client) = session_pair(4096).unwrap();
        let h = RecordHeader {
            kind: KIND_FRAME,
            orig_len: 1514,
            ts_ns: 1_700_000_000_123_456_789,
            dropped: 3,
        };
        assert_eq!(RecordHeader::decode(&h.encode()), Some(h));
        assert_eq!(RecordHeader::decode(&[0u8; RECORD_HEADER]), None);
        assert_eq!(RecordHeader::decode(&h.encode()[..10]), None);
        assert_eq!(send_record(engine.as_fd(), &h, b"abc"), Sent::Queued);
        let mut buf = [0u8; 64];
        let n = nix::sys::socket::recv(client.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
        assert_eq!(n, RECORD_HEADER + 3);
        assert_eq!(&buf[RECORD_HEADER..n], b"abc");
        // Nobody reads: the socket fills and the engine is told, without blocking.
        let big = vec![0u8; 2048];
        let mut full = false;
        for _ in 0..10_000 {
            if send_record(engine.as_fd(), &h, &big) == Sent::Full {
                full = true;
                break;
            }
        }
        assert!(full);
        assert!(!client_done(engine.as_fd()));
        nix::sys::socket::shutdown(client.as_raw_fd(), nix::sys::socket::Shutdown::Write).unwrap();
        assert!(client_done(engine.as_fd()));
        drop(client);
        assert_eq!(send_record(engine.as_fd(), &h, b""), Sent::Gone);
    }
}
