//! Capture sessions on an engine running the service over the in-memory pair (no root
//! needed; docs/capture.md): a session's filter selects frames at the ingress and egress
//! hook points and the engine sends them, stamped and cut at the snap length, on the
//! session's socket; a bad filter is refused with the instruction; sessions are bounded, and
//! one whose client closed is detached, making room for the next.

mod support;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use nix::sys::socket::{recv, MsgFlags};
use sluice_shm::capture::{CaptureHook, CaptureRequest, RecordHeader, KIND_FRAME, RECORD_HEADER};
use sluice_shm::control::{connect_to, recv_message, send_message, Reply, Request};
use support::{Net, ENGINE_IP};

/// `tcp port 5555` for IPv4 without options, hand-assembled (libpcap's shape).
fn tcp_port_5555() -> Vec<(u16, u8, u8, u32)> {
    vec![
        (0x28, 0, 0, 12),     // ldh [12]
        (0x15, 0, 8, 0x0800), // jeq IPv4
        (0x30, 0, 0, 23),     // ldb [23]
        (0x15, 0, 6, 6),      // jeq TCP
        (0xb1, 0, 0, 14),     // ldxb 4*([14]&0xf)
        (0x48, 0, 0, 14),     // ldh [x + 14]: source port
        (0x15, 2, 0, 5555),
        (0x48, 0, 0, 16), // ldh [x + 16]: destination port
        (0x15, 0, 1, 5555),
        (0x06, 0, 0, 65535),
        (0x06, 0, 0, 0),
    ]
}

fn ask(net: &Net, filter: Vec<(u16, u8, u8, u32)>) -> Result<OwnedFd, String> {
    let control = connect_to(&net.socket).expect("connect");
    let req = CaptureRequest {
        hook: CaptureHook::Both,
        snaplen: 60,
        ring: 64,
        filter,
    };
    send_message(control.as_fd(), &Request::Capture(req), &[]).expect("send");
    match recv_message::<Reply>(control.as_fd()).expect("answer") {
        Some((Reply::Capture { .. }, mut fds)) if fds.len() == 1 => Ok(fds.remove(0)),
        Some((Reply::Refused { reason }, _)) => Err(reason),
        other => panic!("unexpected answer {other:?}"),
    }
}

/// The next record on `session`, pumping the peer while waiting.
fn next_record(net: &mut Net, session: &OwnedFd) -> (RecordHeader, Vec<u8>) {
    let mut buf = vec![0u8; 4096];
    net.peer.until("a capture record", |_| {
        match recv(session.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => {
                let h = RecordHeader::decode(&buf[..n]).expect("a record");
                Some((h, buf[RECORD_HEADER..n].to_vec()))
            }
            Err(_) => None,
        }
    })
}

/// TCP ports and flags of an Ethernet + IPv4 (no options) + TCP frame.
fn tcp_of(frame: &[u8]) -> (u16, u16, u8) {
    (
        u16::from_be_bytes([frame[34], frame[35]]),
        u16::from_be_bytes([frame[36], frame[37]]),
        frame[47],
    )
}

#[test]
fn a_session_sees_the_filtered_frames_at_both_hooks() {
    let mut net = Net::start("capture-frames");
    let session = ask(&net, tcp_port_5555()).expect("capture starts");
    // Nothing listens on 5555: the peer's SYN comes in (ingress), the engine's RST goes out
    // (egress). A SYN to another port is filtered out.
    net.peer.connect(ENGINE_IP, 5556);
    net.peer.connect(ENGINE_IP, 5555);
    let (h, syn) = next_record(&mut net, &session);
    assert_eq!(h.kind, KIND_FRAME);
    assert!(h.orig_len as usize > syn.len(), "cut at the snap length");
    assert_eq!(syn.len(), 60);
    assert!(h.ts_ns > 1_600_000_000_000_000_000, "a wall-clock time");
    let (_, dport, flags) = tcp_of(&syn);
    assert_eq!(
        (dport, flags & 0x02),
        (5555, 0x02),
        "the peer's SYN to 5555"
    );
    let (_, rst) = next_record(&mut net, &session);
    let (sport, _, flags) = tcp_of(&rst);
    assert_eq!(
        (sport, flags & 0x04),
        (5555, 0x04),
        "the engine's RST from 5555"
    );
    // The SYN to 5556 and its RST passed the hooks but not the filter.
    for _ in 0..50 {
        net.peer.pump();
    }
    let mut buf = [0u8; 256];
    while let Ok(n) = recv(session.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
        let (sport, dport, _) = tcp_of(&buf[RECORD_HEADER..n]);
        assert!(sport == 5555 || dport == 5555, "port 5556 got through");
    }
    net.stop();
}

#[test]
fn bad_filters_are_refused_and_sessions_are_bounded() {
    let mut net = Net::start("capture-bounds");
    let reason = ask(&net, vec![(0x05, 0, 0, 9), (0x06, 0, 0, 0)]).unwrap_err();
    assert!(
        reason.contains("instruction 0: jump out of the program"),
        "{reason}"
    );
    let reason = ask(&net, vec![(0x06, 0, 0, 0); 4097]).unwrap_err();
    assert!(reason.contains("more than 4096"), "{reason}");
    let mut sessions: Vec<OwnedFd> = (0..8)
        .map(|i| ask(&net, vec![]).unwrap_or_else(|e| panic!("session {i}: {e}")))
        .collect();
    let reason = ask(&net, vec![]).unwrap_err();
    assert!(reason.contains("maximum of 8 capture sessions"), "{reason}");
    // A client that goes away ends its session; its place is free again.
    sessions.pop();
    std::thread::sleep(Duration::from_millis(20));
    let again = ask(&net, vec![]);
    assert!(again.is_ok(), "{again:?}");
    drop(sessions);
    net.stop();
}

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

/// Asks for a capture from a child process running as `nobody`: 0 if it was refused with
/// permission denied, 1 if it was given a session, 2 on anything else.
fn capture_as_nobody(path: &std::path::Path) -> i32 {
    use nix::sys::socket::{connect, send, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult, Gid, Uid};
    // Made before fork: the child only makes system calls.
    let ask = br#"{"Capture":{"hook":"Both","snaplen":60,"ring":8,"filter":[]}}"#;
    let addr = UnixAddr::new(path).expect("socket path");
    let denied = sluice_shm::control::ACCESS_DENIED.as_bytes();
    // SAFETY: the child makes only async-signal-safe system calls and leaves by _exit.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = (|| {
                if nix::unistd::setgroups(&[]).is_err()
                    || nix::unistd::setgid(Gid::from_raw(NOBODY)).is_err()
                    || nix::unistd::setuid(Uid::from_raw(NOBODY)).is_err()
                {
                    return 2;
                }
                let Ok(fd) = socket(
                    AddressFamily::Unix,
                    SockType::SeqPacket,
                    SockFlag::empty(),
                    None,
                ) else {
                    return 2;
                };
                if connect(fd.as_raw_fd(), &addr).is_err()
                    || send(fd.as_raw_fd(), ask, MsgFlags::empty()).is_err()
                {
                    return 2;
                }
                let mut buf = [0u8; 512];
                let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
                    return 2;
                };
                let reply = &buf[..n];
                if reply.windows(denied.len()).any(|w| w == denied) {
                    0
                } else if reply.starts_with(br#"{"Capture""#) {
                    1
                } else {
                    2
                }
            })();
            // SAFETY: leaves the forked child at once, without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None).expect("waitpid") {
            WaitStatus::Exited(_, code) => code,
            other => panic!("the child ended as {other:?}"),
        },
    }
}

#[test]
fn only_root_or_the_engines_uid_may_capture() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped only_root_or_the_engines_uid_may_capture: needs root to ask as nobody");
        return;
    }
    // nobody may attach applications here, and still may not capture.
    let net = Net::start_with("capture-access", |c| c.access.allow_uids = vec![NOBODY]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&net.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(capture_as_nobody(&net.socket), 0, "nobody is refused");
    assert!(ask(&net, vec![]).is_ok(), "root is not");
}
