//! `sluice capture [--socket PATH] [--hook ingress|egress|both] [-s SNAPLEN] [-c COUNT]
//! [--ring FRAMES] -w FILE.pcap [FILTER...]`: tcpdump-style capture from a running engine
//! (docs/capture.md). The filter (tcpdump's language) is compiled here by libpcap; the engine
//! runs it on each frame at the hook and sends what matches; this side writes pcap. On exit
//! it prints "N packets captured, M dropped by engine", as tcpdump reports its kernel's drops.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, shutdown, MsgFlags, Shutdown};
use signal_hook::consts::{SIGINT, SIGTERM};
use sluice_shm::capture::{
    CaptureHook, CaptureRequest, RecordHeader, KIND_END, MAX_SNAPLEN, RECORD_HEADER,
};
use sluice_shm::control::{connect_to, recv_message, send_message, Reply, Request, SOCKET_ENV};

use super::capture_filter::{self, FilterError};
use super::pcap_file::PcapWriter;

/// How long, after it stops, the command waits for the engine's last records.
const DRAIN: Duration = Duration::from_secs(1);

/// Where to tap the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HookArg {
    /// Received frames, before classification.
    Ingress,
    /// Frames handed to the device.
    Egress,
    /// Both.
    Both,
}

impl HookArg {
    /// Its name on the command line.
    fn name(self) -> &'static str {
        match self {
            HookArg::Ingress => "ingress",
            HookArg::Egress => "egress",
            HookArg::Both => "both",
        }
    }
}

/// `sluice capture`'s arguments.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// The engine's control socket (default: $SLUICE_SOCKET, else /run/sluice/engine.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The hook point(s) to tap.
    #[arg(long, value_enum, default_value = "both")]
    hook: HookArg,
    /// Bytes kept of each frame (tcpdump's -s; 0 means the maximum, 262144).
    #[arg(short = 's', long = "snaplen", default_value_t = MAX_SNAPLEN)]
    snaplen: u32,
    /// Stop after this many frames (tcpdump's -c).
    #[arg(short = 'c', long = "count")]
    count: Option<u64>,
    /// Frames of the snap length the engine buffers for this session before it drops.
    #[arg(long, default_value_t = 4096)]
    ring: u32,
    /// The pcap file to write ("-": standard output).
    #[arg(short = 'w', long = "write")]
    write: PathBuf,
    /// A tcpdump filter expression (its words are joined, as tcpdump does).
    filter: Vec<String>,
}

/// Why `sluice capture` failed.
#[derive(Debug)]
pub enum CaptureError {
    /// The filter did not compile.
    Filter(FilterError),
    /// The engine could not be reached.
    Connect(String),
    /// The engine refused the session (the reason it gave).
    Refused(String),
    /// The engine answered something else.
    Protocol(String),
    /// Writing the pcap file failed.
    Io(io::Error),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Filter(e) => write!(f, "{e}"),
            CaptureError::Connect(e) => write!(f, "cannot reach the engine: {e}"),
            CaptureError::Refused(r) => write!(f, "the engine refused the capture: {r}"),
            CaptureError::Protocol(m) => write!(f, "capture session: {m}"),
            CaptureError::Io(e) => write!(f, "pcap file: {e}"),
        }
    }
}

impl std::error::Error for CaptureError {}

impl From<io::Error> for CaptureError {
    fn from(e: io::Error) -> Self {
        CaptureError::Io(e)
    }
}

/// What a session got.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    captured: u64,
    dropped: u64,
}

/// Runs `sluice capture`.
pub fn run(args: &CaptureArgs) -> Result<(), CaptureError> {
    let snaplen = if args.snaplen == 0 {
        MAX_SNAPLEN
    } else {
        args.snaplen
    };
    if snaplen > MAX_SNAPLEN {
        return Err(CaptureError::Protocol(format!(
            "-s {snaplen}: the most is {MAX_SNAPLEN}"
        )));
    }
    let filter = capture_filter::compile(&args.filter.join(" ")).map_err(CaptureError::Filter)?;
    let socket = args
        .socket
        .clone()
        .or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(sluice_shm::control::DEFAULT_SOCKET));
    let hook = match args.hook {
        HookArg::Ingress => CaptureHook::Ingress,
        HookArg::Egress => CaptureHook::Egress,
        HookArg::Both => CaptureHook::Both,
    };
    let session = open_session(
        &socket,
        CaptureRequest {
            hook,
            snaplen,
            ring: args.ring,
            filter,
        },
    )?;
    let out: Box<dyn Write> = if args.write.as_os_str() == "-" {
        Box::new(io::stdout().lock())
    } else {
        Box::new(File::create(&args.write)?)
    };
    let mut pcap = PcapWriter::new(BufWriter::new(out), snaplen)?;
    eprintln!(
        "sluice capture: listening on {} ({}), link-type EN10MB (Ethernet), snapshot length \
         {snaplen} bytes",
        socket.display(),
        args.hook.name()
    );
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).map_err(CaptureError::Io)?;
    }
    let totals = capture(&session, &mut pcap, args.count, &stop)?;
    pcap.flush()?;
    eprintln!(
        "{} packets captured, {} dropped by engine",
        totals.captured, totals.dropped
    );
    Ok(())
}

/// Asks the engine at `socket` for a session; its record socket.
fn open_session(socket: &std::path::Path, req: CaptureRequest) -> Result<OwnedFd, CaptureError> {
    let control = connect_to(socket)
        .map_err(|e| CaptureError::Connect(format!("{}: {e}", socket.display())))?;
    send_message(control.as_fd(), &Request::Capture(req), &[])
        .map_err(|e| CaptureError::Connect(e.to_string()))?;
    match recv_message::<Reply>(control.as_fd()) {
        Ok(Some((Reply::Capture { .. }, mut fds))) if fds.len() == 1 => Ok(fds.remove(0)),
        Ok(Some((Reply::Refused { reason }, _))) => Err(CaptureError::Refused(reason)),
        Ok(Some((other, _))) => Err(CaptureError::Protocol(format!(
            "unexpected answer {other:?}"
        ))),
        Ok(None) => Err(CaptureError::Protocol("no answer".into())),
        Err(e) => Err(CaptureError::Protocol(e.to_string())),
    }
}

/// Reads records until `count` frames, a signal, or the engine going away; then ends the
/// session and reads the engine's last records (for the drop count).
fn capture<W: Write>(
    session: &OwnedFd,
    pcap: &mut PcapWriter<W>,
    count: Option<u64>,
    stop: &AtomicBool,
) -> Result<Totals, CaptureError> {
    let mut totals = Totals::default();
    let mut buf = vec![0u8; RECORD_HEADER + MAX_SNAPLEN as usize];
    let full = |t: &Totals| count.is_some_and(|c| t.captured >= c);
    // Phase 1: capture. Phase 2 (after shutdown): drain until the end record or EOF.
    let mut draining: Option<Instant> = None;
    loop {
        if draining.is_none() && (full(&totals) || stop.load(Ordering::Relaxed)) {
            pcap.flush()?;
            // The engine sees the shutdown, sends its totals and closes.
            let _ = shutdown(session.as_raw_fd(), Shutdown::Write);
            draining = Some(Instant::now() + DRAIN);
        }
        let wait = match draining {
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                left.min(Duration::from_millis(200))
            }
            None => Duration::from_millis(200),
        };
        let mut fds = [PollFd::new(session.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => {
                pcap.flush()?;
                continue;
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(CaptureError::Protocol(format!("poll: {e}"))),
        }
        let n = match recv(session.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => break, // The engine closed the session.
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        };
        let Some(h) = RecordHeader::decode(&buf[..n]) else {
            return Err(CaptureError::Protocol(
                "a record that does not decode".into(),
            ));
        };
        totals.dropped = totals.dropped.max(h.dropped);
        if h.kind == KIND_END {
            break;
        }
        if !full(&totals) {
            pcap.write(h.ts_ns, h.orig_len, &buf[RECORD_HEADER..n])?;
            totals.captured += 1;
        }
    }
    Ok(totals)
}
