//! The attach protocol: an application connects to the engine's Unix socket
//! (SOCK_SEQPACKET, one message per packet), says hello, and receives its region and the
//! engine's doorbell; each application thread then asks for a context and receives the
//! context's eventfd. Messages are JSON; descriptors travel as SCM_RIGHTS. The socket stays
//! open for the application's lifetime: when it closes, the engine cleans up after the
//! application, and when the engine goes away, the application sees the hang-up.

use std::io::{IoSlice, IoSliceMut};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::socket::{
    accept4, bind, connect, listen, recvmsg, sendmsg, socket, AddressFamily, Backlog,
    ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::admin::{AdminReply, AdminRequest};
use crate::capture::CaptureRequest;
use crate::error::sys;
use crate::mtp::{MtpReply, MtpRequest};
use crate::verbs::{VerbsReply, VerbsRequest};
use crate::{Layout, ShmError};

/// Version of the attach protocol (and of the region it hands out).
pub const PROTOCOL_VERSION: u32 = 1;
pub use crate::message::MAX_MESSAGE;
/// Most descriptors in one message.
pub const MAX_FDS: usize = 4;
/// Where the engine listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/sluice/engine.sock";
/// The environment variable naming the engine's socket for applications.
pub const SOCKET_ENV: &str = "SLUICE_SOCKET";
/// How a Refused reply's reason begins when the engine's access policy refused the
/// attaching uid (the application reports EACCES).
pub const ACCESS_DENIED: &str = "permission denied";
/// How a Refused reply's reason begins when attaching would cross one of the engine's
/// quotas (applications per uid): the application reports EAGAIN, as fork over
/// RLIMIT_NPROC.
pub const QUOTA_EXCEEDED: &str = "quota exceeded";

/// What the engine tells an application about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// The engine's IPv4 address.
    pub ip: Ipv4Addr,
    /// Prefix length of its subnet.
    pub prefix_len: u8,
    /// Its default gateway, if it has one (destinations off-subnet go through the engine
    /// only then).
    pub gateway: Option<Ipv4Addr>,
    /// How long application threads poll before sleeping, in microseconds.
    pub app_idle_us: u64,
}

/// Application to engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// First message: who is attaching.
    Hello {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// The application's process id (for logs).
        pid: u32,
        /// The application's name (for logs).
        name: String,
    },
    /// A context for a new application thread.
    NewContext,
    /// A control-path verb (docs/verbs.md); descriptors as the verb says.
    Verbs(VerbsRequest),
    /// An MTP request (docs/mtp.md "Messages in service mode"); descriptors as it says.
    Mtp(MtpRequest),
    /// Instead of Hello: a capture session (docs/capture.md; root or the engine's uid).
    Capture(CaptureRequest),
    /// An admin request (docs/ctl.md): uid 0 or the engine's own uid only.
    Admin(AdminRequest),
}

/// Engine to application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Attached. Descriptors: the region's memfd, then the engine's doorbell eventfd.
    Welcome {
        /// The application's id in the engine (for logs).
        app: u32,
        /// The region's layout.
        layout: Layout,
        /// About the engine.
        engine: EngineInfo,
    },
    /// A context. Descriptor: the context's eventfd (the engine signals it).
    Context {
        /// The context's index in the region.
        index: u32,
    },
    /// The answer to a verb.
    Verbs(VerbsReply),
    /// The answer to an MTP request.
    Mtp(MtpReply),
    /// A capture session started. Descriptor: the session's socket (records, see
    /// [`crate::capture`]); closing it ends the session.
    Capture {
        /// The session's tap in the engine (for logs).
        tap: u32,
    },
    /// The answer to an admin request.
    Admin(AdminReply),
    /// The request was refused.
    Refused {
        /// Why.
        reason: String,
    },
}

/// A listening SOCK_SEQPACKET Unix socket at `path` (a stale socket file is replaced).
pub fn listen_at(path: &Path) -> Result<OwnedFd, ShmError> {
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| ShmError::Protocol(format!("cannot create {}: {e}", dir.display())))?;
        // A directory made here (/run/sluice) must let the engine's group reach the socket
        // whatever the engine's umask (a service's is often 077): 0755, the socket file's own
        // mode decides who may connect.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| ShmError::Protocol(format!("cannot chmod {}: {e}", dir.display())))?;
    }
    let _ = std::fs::remove_file(path);
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(sys("socket(AF_UNIX)"))?;
    let addr = UnixAddr::new(path).map_err(sys("socket path"))?;
    bind(fd.as_raw_fd(), &addr).map_err(sys("bind on the engine socket"))?;
    listen(&fd, Backlog::new(128).expect("128 is a valid backlog"))
        .map_err(sys("listen on the engine socket"))?;
    Ok(fd)
}

/// Accepts an application (non-blocking; None when nobody is waiting).
pub fn accept_app(listener: BorrowedFd<'_>) -> Result<Option<OwnedFd>, ShmError> {
    match accept4(
        listener.as_raw_fd(),
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    ) {
        // SAFETY: accept4 returned a new descriptor that nothing else owns.
        Ok(fd) => Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) })),
        Err(Errno::EAGAIN) | Err(Errno::EINTR) | Err(Errno::ECONNABORTED) => Ok(None),
        Err(e) => Err(ShmError::Sys {
            what: "accept on the engine socket",
            err: e,
        }),
    }
}

/// Connects to the engine's socket (blocking, close-on-exec).
pub fn connect_to(path: &Path) -> Result<OwnedFd, ShmError> {
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(sys("socket(AF_UNIX)"))?;
    let addr = UnixAddr::new(path).map_err(sys("socket path"))?;
    connect(fd.as_raw_fd(), &addr).map_err(sys("connect to the engine"))?;
    Ok(fd)
}

/// Sends one message with descriptors.
pub fn send_message<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), ShmError> {
    let body = serde_json::to_vec(msg).map_err(|e| ShmError::Protocol(e.to_string()))?;
    if body.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
        return Err(ShmError::Protocol("message too long".into()));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(
            sock.as_raw_fd(),
            &[IoSlice::new(&body)],
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(Errno::EPIPE) | Err(Errno::ECONNRESET) => return Err(ShmError::Disconnected),
            Err(e) => {
                return Err(ShmError::Sys {
                    what: "sendmsg on the control socket",
                    err: e,
                })
            }
        }
    }
}

/// Receives one message and its descriptors; None if the socket is non-blocking and empty.
/// A truncated message or one with too many descriptors is a protocol error (its
/// descriptors are closed).
pub fn recv_message<T: DeserializeOwned>(
    sock: BorrowedFd<'_>,
) -> Result<Option<(T, Vec<OwnedFd>)>, ShmError> {
    let mut body = vec![0u8; MAX_MESSAGE];
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, flags, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut body)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs().map_err(sys("control message"))? {
                    if let ControlMessageOwned::ScmRights(list) = c {
                        // SAFETY: SCM_RIGHTS installed these descriptors in this process
                        // for us; nothing else owns them.
                        fds.extend(
                            list.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                break (msg.bytes, msg.flags, fds);
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Ok(None),
            Err(Errno::ECONNRESET) => return Err(ShmError::Disconnected),
            Err(e) => {
                return Err(ShmError::Sys {
                    what: "recvmsg on the control socket",
                    err: e,
                })
            }
        }
    };
    if len == 0 && fds.is_empty() {
        return Err(ShmError::Disconnected);
    }
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
        return Err(ShmError::Protocol("truncated control message".into()));
    }
    let msg = serde_json::from_slice(&body[..len])
        .map_err(|e| ShmError::Protocol(format!("bad control message: {e}")))?;
    Ok(Some((msg, fds)))
}

/// Whether the peer hung up, without blocking (used by a sleeping application to notice
/// that the engine went away).
pub fn peer_gone(sock: BorrowedFd<'_>) -> bool {
    let mut pfd = [nix::poll::PollFd::new(
        sock.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    match nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO) {
        Ok(0) => false,
        Ok(_) => pfd[0].revents().is_some_and(|r| {
            r.intersects(nix::poll::PollFlags::POLLHUP | nix::poll::PollFlags::POLLERR)
        }),
        Err(_) => false,
    }
}
