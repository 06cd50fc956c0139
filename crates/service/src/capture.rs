//! Capture sessions (`sluice capture`, docs/capture.md): a client that may (root or the
//! engine's uid; the control plane checks) asks for one instead of saying Hello; the engine
//! attaches a tap at the hook points it names, which runs the client's classic BPF filter
//! on each frame and sends what matches, cut at the snap length and stamped with the time,
//! over a socket pair whose other end goes back to the client. The engine never waits for
//! the client: a full socket drops the frame and counts it. The session ends when the client
//! shuts down or closes its end (the tap's last record then gives the totals).

use std::os::fd::{AsFd, OwnedFd};
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_engine::cbpf::{Insn, Program};
use sluice_engine::hooks::{HookPoint, Hooks, Points, Tap, MAX_TAPS};
use sluice_shm::capture::{
    client_done, send_record, session_pair, CaptureHook, CaptureRequest, RecordHeader, Sent,
    KIND_END, KIND_FRAME, MAX_SNAPLEN, RECORD_HEADER,
};
use sluice_shm::control::{send_message, Reply};

/// Most frames a session's ring may ask for.
const MAX_RING: u32 = 1 << 20;
/// The kernel's own bookkeeping per queued message, roughly (an skb), so that `ring`
/// frames fit in the send buffer.
const PER_MESSAGE_OVERHEAD: usize = 768;

/// The capture sessions' counters (monotonic since the service started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureCounters {
    /// Sessions started.
    pub started: u64,
    /// Requests refused (not root nor the engine's uid, a bad filter or snap length, the
    /// engine's maximum of sessions).
    pub refused: u64,
    /// Sessions ended (their client went away).
    pub ended: u64,
}

/// A session's tap: the filter, the snap length, the socket and its totals.
struct CaptureTap {
    sock: OwnedFd,
    /// None: every frame.
    filter: Option<Program>,
    snaplen: u32,
    dropped: u64,
    /// The client is gone: nothing more is sent.
    gone: bool,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Tap for CaptureTap {
    fn frame(&mut self, _at: HookPoint, frame: &[u8]) {
        if self.gone {
            return;
        }
        let wire_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        // Nonzero is a match; the session's snap length (not the filter's return, which
        // libpcap's dead handle fixes at 65535) says how much to keep, as in tcpdump.
        if self
            .filter
            .as_ref()
            .is_some_and(|p| p.run(frame, wire_len) == 0)
        {
            return;
        }
        let n = frame.len().min(self.snaplen as usize);
        let header = RecordHeader {
            kind: KIND_FRAME,
            orig_len: wire_len,
            ts_ns: now_ns(),
            dropped: self.dropped,
        };
        match send_record(self.sock.as_fd(), &header, &frame[..n]) {
            Sent::Queued => {}
            Sent::Full => self.dropped += 1,
            Sent::Gone => self.gone = true,
        }
    }

    fn poll_closed(&mut self) -> bool {
        if !self.gone && !client_done(self.sock.as_fd()) {
            return false;
        }
        // Best effort: a client that shut down its side reads the totals; if its socket is
        // full it has the count of the last record it reads.
        let end = RecordHeader {
            kind: KIND_END,
            orig_len: 0,
            ts_ns: now_ns(),
            dropped: self.dropped,
        };
        let _ = send_record(self.sock.as_fd(), &end, &[]);
        true
    }
}

/// Why a capture request was refused (the reason goes back to the client).
fn check(req: &CaptureRequest) -> Result<(Points, Option<Program>), String> {
    if req.snaplen == 0 || req.snaplen > MAX_SNAPLEN {
        return Err(format!(
            "snap length {} is outside 1..={MAX_SNAPLEN}",
            req.snaplen
        ));
    }
    if req.ring == 0 || req.ring > MAX_RING {
        return Err(format!(
            "ring of {} frames is outside 1..={MAX_RING}",
            req.ring
        ));
    }
    let filter = if req.filter.is_empty() {
        None
    } else {
        let insns: Vec<Insn> = req
            .filter
            .iter()
            .map(|&(code, jt, jf, k)| Insn { code, jt, jf, k })
            .collect();
        Some(Program::new(&insns).map_err(|e| format!("bad filter: {e}"))?)
    };
    let points = match req.hook {
        CaptureHook::Ingress => Points {
            ingress: true,
            egress: false,
        },
        CaptureHook::Egress => Points {
            ingress: false,
            egress: true,
        },
        CaptureHook::Both => Points::BOTH,
    };
    Ok((points, filter))
}

/// Starts the session `req` asked for on `sock` (the client's control connection, already
/// admitted) and answers it; refusals are answered with the reason.
pub(crate) fn start(
    sock: OwnedFd,
    req: &CaptureRequest,
    hooks: &mut Hooks,
    counters: &mut CaptureCounters,
    log: bool,
) {
    let refuse = |counters: &mut CaptureCounters, reason: String| {
        counters.refused += 1;
        if log {
            eprintln!("sluice engine: capture refused: {reason}");
        }
        let _ = send_message(sock.as_fd(), &Reply::Refused { reason }, &[]);
    };
    let (points, filter) = match check(req) {
        Ok(c) => c,
        Err(reason) => return refuse(counters, reason),
    };
    if hooks.taps() >= MAX_TAPS {
        return refuse(
            counters,
            format!("the engine serves its maximum of {MAX_TAPS} capture sessions"),
        );
    }
    let per_frame = req.snaplen as usize + RECORD_HEADER + PER_MESSAGE_OVERHEAD;
    let (engine_end, client_end) = match session_pair(per_frame.saturating_mul(req.ring as usize)) {
        Ok(p) => p,
        Err(e) => return refuse(counters, format!("cannot create the session's socket: {e}")),
    };
    let tap = CaptureTap {
        sock: engine_end,
        filter,
        snaplen: req.snaplen,
        dropped: 0,
        gone: false,
    };
    let id = match hooks.attach(points, Box::new(tap)) {
        Ok(id) => id,
        Err(e) => return refuse(counters, e.to_string()),
    };
    if send_message(
        sock.as_fd(),
        &Reply::Capture { tap: id.0 },
        &[client_end.as_fd()],
    )
    .is_err()
    {
        hooks.detach(id);
        counters.refused += 1;
        return;
    }
    counters.started += 1;
    if log {
        eprintln!(
            "sluice engine: capture session {} started ({:?}, snap length {}, {} filter \
             instructions)",
            id.0,
            req.hook,
            req.snaplen,
            req.filter.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(filter: Vec<(u16, u8, u8, u32)>) -> CaptureRequest {
        CaptureRequest {
            hook: CaptureHook::Both,
            snaplen: 96,
            ring: 64,
            filter,
        }
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        assert!(check(&request(vec![])).is_ok());
        let mut r = request(vec![]);
        r.snaplen = 0;
        assert!(check(&r).unwrap_err().contains("snap length"));
        r.snaplen = MAX_SNAPLEN + 1;
        assert!(check(&r).unwrap_err().contains("snap length"));
        let mut r = request(vec![]);
        r.ring = 0;
        assert!(check(&r).unwrap_err().contains("ring"));
        // A jump out of the program.
        let r = request(vec![(0x05, 0, 0, 5), (0x06, 0, 0, 0)]);
        assert!(check(&r).unwrap_err().contains("jump out of the program"));
        let r = request(vec![(0x06, 0, 0, 0); 4097]);
        assert!(check(&r).unwrap_err().contains("more than 4096"));
    }

    #[test]
    fn a_tap_sends_what_matches_cut_at_the_snap_length_and_counts_drops() {
        let (engine_end, client_end) = session_pair(1).unwrap();
        // `ret #40` for frames whose first byte is 1, else 0.
        let filter = Program::new(&[
            Insn::new(0x30, 0, 0, 0),
            Insn::new(0x15, 0, 1, 1),
            Insn::new(0x06, 0, 0, 40),
            Insn::new(0x06, 0, 0, 0),
        ])
        .unwrap();
        let mut tap = CaptureTap {
            sock: engine_end,
            filter: Some(filter),
            snaplen: 64,
            dropped: 0,
            gone: false,
        };
        let mut frame = vec![1u8; 100];
        tap.frame(HookPoint::Ingress, &frame);
        frame[0] = 2;
        tap.frame(HookPoint::Ingress, &frame);
        let mut buf = vec![0u8; 4096];
        let n = nix::sys::socket::recv(
            std::os::fd::AsRawFd::as_raw_fd(&client_end),
            &mut buf,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        )
        .unwrap();
        let h = RecordHeader::decode(&buf[..n]).unwrap();
        assert_eq!((h.kind, h.orig_len, h.dropped), (KIND_FRAME, 100, 0));
        assert_eq!(n - RECORD_HEADER, 64, "cut at the snap length");
        // The non-matching frame sent nothing.
        assert!(nix::sys::socket::recv(
            std::os::fd::AsRawFd::as_raw_fd(&client_end),
            &mut buf,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        )
        .is_err());
        // Nobody reads: the small socket fills and frames are dropped, never waited for.
        frame[0] = 1;
        for _ in 0..10_000 {
            tap.frame(HookPoint::Egress, &frame);
        }
        assert!(tap.dropped > 0);
        assert!(!tap.poll_closed());
        drop(client_end);
        assert!(tap.poll_closed());
    }
}
