//! What the applications expect to read: every connection between the two stacks is a
//! [`Flow`] carrying two known pseudo-random byte streams, and this module keeps the
//! bookkeeping that makes "bytes delivered are a prefix of bytes written" checkable even
//! though the fuzzer forges segments.
//!
//! Why forged segments do not simply switch the check off: TCP accepts any segment that hits
//! the window, so a forged payload can legitimately be delivered. Data placement depends on
//! two things only — the receiver's idea of the sender's ISN, and the payload bytes at each
//! sequence number. So:
//!
//! * Every forged (non-pristine) frame that reaches TCP processing is parsed exactly as the
//!   core parses it. If it carries payload for a flow, the payload is compared with the
//!   stream at that sequence number: a truthful payload (say a truncated real segment) keeps
//!   the direction checkable; anything else taints the direction and its prefix check stops.
//!   A forged FIN taints the end-of-stream check only.
//! * When a handle is mapped to its flow, the receiver's view of the peer's ISN is compared
//!   with the ISN the peer really used. A forged handshake that desynchronizes them taints
//!   the direction.
//!
//! Everything else a forged segment can do (reset, stall the stream by acknowledging data
//! that was never received, shrink windows) cannot make wrong bytes appear, so most flows of
//! most cases stay fully checked. Forged segments do exclude the flow from the liveness check
//! (a blind in-window ACK may stall a stream for good, as RFC 9293 allows).

use std::fmt;

use crate::frames::Parsed;
use crate::net::Side;

/// One direction of a flow: a byte stream written by one application, read by the other.
#[derive(Clone, Debug, Default)]
pub struct Direction {
    /// Seed of the stream's pattern (`sluice_apps::pattern_fill`).
    pub seed: u64,
    /// Bytes the sending application handed to `send`.
    pub written: u64,
    /// Bytes the receiving application got from `recv`/`peek`.
    pub read: u64,
    /// Bytes the sending application means to write.
    pub target: u64,
    /// The prefix check no longer holds: forged data may have been delivered.
    pub data_tainted: bool,
    /// The end-of-stream check no longer holds: a forged FIN may have been accepted.
    pub fin_tainted: bool,
    /// The receiving application saw end of stream.
    pub eof: bool,
    /// The sending application closed its side (FIN queued, or abort).
    pub shut: bool,
}

impl Direction {
    fn taint(&mut self) {
        self.data_tainted = true;
        self.fin_tainted = true;
    }
}

/// Client-to-server direction index.
pub const C2S: usize = 0;
/// Server-to-client direction index.
pub const S2C: usize = 1;

/// A connection between the two stacks, identified by its ports (the addresses are fixed).
#[derive(Clone, Debug)]
pub struct Flow {
    /// The active opener.
    pub client: Side,
    /// The client's (ephemeral) port.
    pub client_port: u16,
    /// The server's (listening) port.
    pub server_port: u16,
    /// The ISN of the client's SYN.
    pub client_iss: u32,
    /// ISNs of SYN-ACKs the server sent on this tuple (several if half-open connections
    /// came and went), newest last.
    pub server_iss_seen: Vec<u32>,
    /// The ISN of the server connection the application accepted.
    pub server_iss: Option<u32>,
    /// Index of the client application's handle.
    pub client_handle: Option<usize>,
    /// Index of the server application's handle.
    pub server_handle: Option<usize>,
    /// The client's view of the server's ISN.
    pub client_irs: Option<u32>,
    /// The server's view of the client's ISN.
    pub server_irs: Option<u32>,
    /// [`C2S`] and [`S2C`].
    pub dirs: [Direction; 2],
    /// A forged segment for this tuple reached one of the stacks.
    pub forged: bool,
    /// The latest (seq, ack, tsval) seen from each end, [`C2S`] then [`S2C`]: anchors for
    /// injected segments.
    pub last: [Option<(u32, u32, u32)>; 2],
}

impl Flow {
    /// The side receiving direction `d`.
    pub fn receiver(&self, d: usize) -> Side {
        if d == C2S {
            self.client.other()
        } else {
            self.client
        }
    }

    /// The direction that `side` receives.
    pub fn dir_into(&self, side: Side) -> usize {
        if side == self.client {
            S2C
        } else {
            C2S
        }
    }

    /// The ISN of the sender of direction `d`, if known.
    fn sender_iss(&self, d: usize) -> Option<u32> {
        if d == C2S {
            Some(self.client_iss)
        } else {
            self.server_iss
        }
    }

    /// Whether both applications hold mapped handles, so reads can be verified.
    pub fn checkable(&self) -> bool {
        self.client_handle.is_some() && self.server_handle.is_some()
    }

    /// (local port, remote port) as seen from `side`.
    pub fn ports_at(&self, side: Side) -> (u16, u16) {
        if side == self.client {
            (self.client_port, self.server_port)
        } else {
            (self.server_port, self.client_port)
        }
    }
}

/// A forged segment for a tuple that had no flow yet; applied when the flow appears.
#[derive(Clone, Copy, Debug)]
struct EarlyForgery {
    receiver: Side,
    local_port: u16,
    remote_port: u16,
    data: bool,
    fin: bool,
}

/// All flows of a case.
#[derive(Default)]
pub struct Flows {
    /// The flows, in order of first SYN.
    pub list: Vec<Flow>,
    seed: u64,
    early: Vec<EarlyForgery>,
}

const MAX_ISS_SEEN: usize = 8;
const MAX_EARLY: usize = 64;

/// SplitMix64: derives independent stream seeds from the case seed.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether `bytes` are the stream of `seed` from `offset` on.
pub fn matches_stream(seed: u64, offset: u64, bytes: &[u8]) -> bool {
    let mut expect = vec![0u8; bytes.len()];
    sluice_apps::pattern_fill(seed, offset, &mut expect);
    expect == bytes
}

impl Flows {
    /// Flows whose streams derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Flows {
            list: Vec::new(),
            seed,
            early: Vec::new(),
        }
    }

    /// The flow a segment received by `to` from the other side belongs to.
    pub fn find(&self, to: Side, local_port: u16, remote_port: u16) -> Option<usize> {
        self.list
            .iter()
            .position(|f| f.ports_at(to) == (local_port, remote_port))
    }

    /// Learns from a frame the stack `from` emitted: SYNs create flows, SYN-ACKs give the
    /// server's ISN, and every segment refreshes the anchors for injection.
    pub fn observe(&mut self, from: Side, seg: &Parsed<'_>) {
        use sluice_wire::tcp::TcpFlags;
        let t = &seg.tcp;
        let syn = seg.has(TcpFlags::SYN);
        let ack = seg.has(TcpFlags::ACK);
        if syn && !ack && self.find(from, t.src_port, t.dst_port).is_none() {
            self.create(from, t.src_port, t.dst_port, t.seq.0);
        }
        let Some(i) = self.find(from, t.src_port, t.dst_port) else {
            return;
        };
        let f = &mut self.list[i];
        if syn && ack && from != f.client && f.server_handle.is_some() {
            // A second server incarnation on the tuple (only forged segments make one while
            // the client's connection lives): the client may end up talking to it.
            f.forged = true;
            f.dirs[C2S].taint();
            f.dirs[S2C].taint();
        }
        if syn && ack && from != f.client && !f.server_iss_seen.contains(&t.seq.0) {
            if f.server_iss_seen.len() == MAX_ISS_SEEN {
                f.server_iss_seen.remove(0);
            }
            f.server_iss_seen.push(t.seq.0);
        }
        let d = f.dir_into(from.other());
        let ts = t.options.timestamp.map_or(0, |(v, _)| v);
        f.last[d] = Some((t.seq.0, t.ack.0, ts));
    }

    fn create(&mut self, client: Side, client_port: u16, server_port: u16, iss: u32) {
        let key = mix(self.seed ^ mix(u64::from(client_port) << 16 | u64::from(server_port)))
            ^ client as u64;
        let mut f = Flow {
            client,
            client_port,
            server_port,
            client_iss: iss,
            server_iss_seen: Vec::new(),
            server_iss: None,
            client_handle: None,
            server_handle: None,
            client_irs: None,
            server_irs: None,
            dirs: [
                Direction {
                    seed: mix(key),
                    ..Default::default()
                },
                Direction {
                    seed: mix(key ^ 1),
                    ..Default::default()
                },
            ],
            forged: false,
            last: [None, None],
        };
        // Forgeries that reached this tuple before its SYN was seen.
        for e in &self.early {
            if f.ports_at(e.receiver) == (e.local_port, e.remote_port) {
                f.forged = true;
                let d = f.dir_into(e.receiver);
                f.dirs[d].data_tainted |= e.data;
                f.dirs[d].fin_tainted |= e.fin;
            }
        }
        self.list.push(f);
    }

    /// Accounts for a forged segment that `to` will process (it passed the same parsing and
    /// checksum verification as in the core).
    pub fn on_forged(&mut self, to: Side, seg: &Parsed<'_>) {
        use sluice_wire::tcp::TcpFlags;
        if seg.src_ip != to.other().ip() {
            return; // not on any flow's tuple: the stacks only talk to each other
        }
        let t = &seg.tcp;
        let fin = seg.has(TcpFlags::FIN);
        let data = !seg.payload.is_empty();
        let Some(i) = self.find(to, t.dst_port, t.src_port) else {
            if (data || fin) && self.early.len() < MAX_EARLY {
                self.early.push(EarlyForgery {
                    receiver: to,
                    local_port: t.dst_port,
                    remote_port: t.src_port,
                    data,
                    fin,
                });
            }
            return;
        };
        let f = &mut self.list[i];
        f.forged = true;
        let d = f.dir_into(to);
        if fin {
            f.dirs[d].fin_tainted = true;
        }
        if !data {
            return;
        }
        let truthful = !seg.has(TcpFlags::SYN)
            && f.sender_iss(d).is_some_and(|iss| {
                let offset = u64::from(t.seq.0.wrapping_sub(iss.wrapping_add(1)));
                let dir = &f.dirs[d];
                offset + seg.payload.len() as u64 <= dir.written
                    && matches_stream(dir.seed, offset, seg.payload)
            });
        if !truthful {
            f.dirs[d].data_tainted = true;
        }
    }

    /// Maps an active opener's handle: its ISN (`snd_una - 1` before any data) names the flow.
    pub fn map_client(&mut self, side: Side, iss: u32, handle: usize, irs: u32) -> Option<usize> {
        let i = self
            .list
            .iter()
            .position(|f| f.client == side && f.client_iss == iss && f.client_handle.is_none())?;
        let f = &mut self.list[i];
        f.client_handle = Some(handle);
        f.client_irs = Some(irs);
        Self::check_isns(f);
        Some(i)
    }

    /// Maps a passive opener's handle by the ISN of one of its SYN-ACKs.
    ///
    /// A flow already mapped can match again: a SYN-cookie ACK from the client (say its
    /// FIN, in flight when the server aborted) revives the server side with the same ISN,
    /// as cookies allow. The client then talks to a connection the case does not track, so
    /// the flow stops being checked.
    pub fn map_server(&mut self, side: Side, iss: u32, handle: usize, irs: u32) -> Option<usize> {
        let i = self
            .list
            .iter()
            .position(|f| f.client == side.other() && f.server_iss_seen.contains(&iss))?;
        let f = &mut self.list[i];
        if f.server_handle.is_some() {
            f.forged = true;
            f.dirs[C2S].taint();
            f.dirs[S2C].taint();
            return None;
        }
        f.server_handle = Some(handle);
        f.server_iss = Some(iss);
        f.server_irs = Some(irs);
        Self::check_isns(f);
        Some(i)
    }

    /// Taints a direction whose receiver does not agree with its sender on the sender's ISN:
    /// only a forged handshake can cause that, and then its data lands at shifted offsets.
    fn check_isns(f: &mut Flow) {
        if f.server_irs.is_some_and(|irs| irs != f.client_iss) {
            f.dirs[C2S].taint();
        }
        if let (Some(irs), Some(iss)) = (f.client_irs, f.server_iss) {
            if irs != iss {
                f.dirs[S2C].taint();
            }
        }
    }

    /// Checks bytes the application of `side` read on flow `i` and advances the stream.
    pub fn on_read(&mut self, i: usize, side: Side, bytes: &[u8]) -> Result<(), StreamViolation> {
        let f = &mut self.list[i];
        let d = f.dir_into(side);
        let checkable = f.checkable();
        let at = StreamAt::of(f, d);
        let dir = &mut f.dirs[d];
        if bytes.is_empty() {
            return Ok(());
        }
        if dir.eof && !dir.fin_tainted && !dir.data_tainted {
            return Err(StreamViolation::ReadAfterEof {
                at,
                bytes: bytes.len(),
            });
        }
        if !checkable {
            // Data before both ends are known can only be forged; stop checking.
            dir.data_tainted = true;
        }
        if !dir.data_tainted {
            if dir.read + bytes.len() as u64 > dir.written {
                return Err(StreamViolation::Overrun {
                    at,
                    delivered: dir.read + bytes.len() as u64,
                    written: dir.written,
                });
            }
            if !matches_stream(dir.seed, dir.read, bytes) {
                let mut expect = vec![0u8; bytes.len()];
                sluice_apps::pattern_fill(dir.seed, dir.read, &mut expect);
                let first = expect
                    .iter()
                    .zip(bytes)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(StreamViolation::WrongByte {
                    at,
                    offset: dir.read + first as u64,
                    got: bytes[first],
                    written: expect[first],
                    read_len: bytes.len(),
                    read_from: dir.read,
                });
            }
        }
        dir.read += bytes.len() as u64;
        Ok(())
    }

    /// Checks an end of stream seen by the application of `side` on flow `i`: a FIN only
    /// follows all the data, and only once the sender closed.
    pub fn on_eof(&mut self, i: usize, side: Side) -> Result<(), StreamViolation> {
        let f = &mut self.list[i];
        let d = f.dir_into(side);
        let checkable = f.checkable();
        let at = StreamAt::of(f, d);
        let dir = &mut f.dirs[d];
        dir.eof = true;
        if !checkable || dir.data_tainted || dir.fin_tainted {
            return Ok(());
        }
        if !dir.shut {
            return Err(StreamViolation::EofWithoutClose { at });
        }
        if dir.read != dir.written {
            return Err(StreamViolation::EarlyEof {
                at,
                read: dir.read,
                written: dir.written,
            });
        }
        Ok(())
    }
}

/// Where a stream check failed: a flow's ports, its client, and the direction.
#[derive(Clone, Copy, Debug)]
pub struct StreamAt {
    /// The client's port.
    pub client_port: u16,
    /// The server's port.
    pub server_port: u16,
    /// The active opener.
    pub client: Side,
    /// [`C2S`] or [`S2C`].
    pub dir: usize,
}

impl StreamAt {
    fn of(f: &Flow, dir: usize) -> StreamAt {
        StreamAt {
            client_port: f.client_port,
            server_port: f.server_port,
            client: f.client,
            dir,
        }
    }
}

impl fmt::Display for StreamAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "flow {}:{} ({:?} client) {}",
            self.client_port,
            self.server_port,
            self.client,
            dir_name(self.dir)
        )
    }
}

/// A stream check that failed: what an application read is not what its peer wrote.
#[derive(Clone, Debug)]
pub enum StreamViolation {
    /// Bytes were read after the end of stream.
    ReadAfterEof {
        /// The flow and direction.
        at: StreamAt,
        /// Bytes read.
        bytes: usize,
    },
    /// More bytes were delivered than written.
    Overrun {
        /// The flow and direction.
        at: StreamAt,
        /// Bytes delivered, this read included.
        delivered: u64,
        /// Bytes written.
        written: u64,
    },
    /// A delivered byte is not the written one.
    WrongByte {
        /// The flow and direction.
        at: StreamAt,
        /// The byte's stream offset.
        offset: u64,
        /// The byte delivered.
        got: u8,
        /// The byte written.
        written: u8,
        /// The read's length.
        read_len: usize,
        /// The read's stream offset.
        read_from: u64,
    },
    /// End of stream, but the sender never closed.
    EofWithoutClose {
        /// The flow and direction.
        at: StreamAt,
    },
    /// End of stream before all the written data.
    EarlyEof {
        /// The flow and direction.
        at: StreamAt,
        /// Bytes delivered.
        read: u64,
        /// Bytes written.
        written: u64,
    },
}

impl fmt::Display for StreamViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamViolation::ReadAfterEof { at, bytes } => {
                write!(f, "{at}: {bytes} bytes read after end of stream")
            }
            StreamViolation::Overrun {
                at,
                delivered,
                written,
            } => write!(
                f,
                "{at}: {delivered} bytes delivered, only {written} written"
            ),
            StreamViolation::WrongByte {
                at,
                offset,
                got,
                written,
                read_len,
                read_from,
            } => write!(
                f,
                "{at}: delivered byte at stream offset {offset} is {got:#04x}, written \
                 {written:#04x} (read of {read_len} bytes from offset {read_from})"
            ),
            StreamViolation::EofWithoutClose { at } => {
                write!(f, "{at}: end of stream but the sender never closed")
            }
            StreamViolation::EarlyEof { at, read, written } => {
                write!(f, "{at}: end of stream after {read} of {written} bytes")
            }
        }
    }
}

fn dir_name(d: usize) -> &'static str {
    if d == C2S {
        "client->server"
    } else {
        "server->client"
    }
}
