//! Admin requests on the engine's control socket (`sluice ctl`, docs/ctl.md): after Hello,
//! a client of uid 0 or of the engine's own uid may list connections, listeners and
//! counters, and set a connection's congestion control or rate. Lists come in pages of at
//! most [`PAGE_BYTES`], well within one control message ([`MAX_MESSAGE`]): the client asks
//! again from the cursor a reply returns until it returns none.

use std::net::SocketAddrV4;

use serde::{Deserialize, Serialize};

use crate::message::MAX_MESSAGE;
use crate::trace::{TraceEventRow, TraceRow};

/// Largest eBPF object a ModuleLoad carries: its hex encoding and the request's envelope
/// must fit one control message.
pub const MAX_OBJECT: usize = (MAX_MESSAGE - 4096) / 2;

/// Room left in a page's message for the reply's envelope (variant names, cursor).
const ENVELOPE: usize = 160;

/// Most bytes of rows in one page: a page is built in the engine's loop, between frames, so
/// its work stays small however large a control message may be (capture filters and module
/// objects need 128 KiB; a listing does not).
pub const PAGE_BYTES: usize = 16 << 10;

const _: () = assert!(PAGE_BYTES + ENVELOPE <= MAX_MESSAGE);

/// A connection as the engine names it: its core slot and the slot's generation (a stale
/// pair, naming a connection since gone, is refused rather than misdirected).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnRef {
    /// The core's slot.
    pub slot: u32,
    /// The slot's generation.
    pub generation: u32,
}

/// A client's admin request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Live connections from core slot `cursor` on, at most `max` of them.
    Conns {
        /// The first slot to look at (0, then the `next` of the previous page).
        cursor: u32,
        /// Most rows wanted (the engine may send fewer to fit the message).
        max: u32,
    },
    /// Listeners from listener index `cursor` on.
    Listeners {
        /// The first index to look at.
        cursor: u32,
        /// Most rows wanted.
        max: u32,
    },
    /// Counters from row `cursor` on (core, service, engine loop, device, in that order).
    Counters {
        /// The first row.
        cursor: u32,
        /// Most rows wanted.
        max: u32,
    },
    /// Sets a connection's congestion-control algorithm (a Linux TCP_CONGESTION name).
    SetCongestion {
        /// The connection.
        conn: ConnRef,
        /// "dctcp", "timely", "reno", "cubic" or "bbr".
        algorithm: String,
    },
    /// Fixes a connection's rate in bits per second (0: the policy's own again).
    SetRate {
        /// The connection.
        conn: ConnRef,
        /// Bits per second of Ethernet frames.
        bits_per_sec: u64,
    },
    /// Loads an eBPF module at a hook point (the object's bytes, verified by the engine).
    ModuleLoad {
        /// "ingress", "established" or "egress".
        hook: String,
        /// What to call it (the file's name).
        name: String,
        /// The ELF section ("xdp" finds `xdp` or `xdp/NAME`).
        section: String,
        /// The object's bytes in hex (at most [`MAX_OBJECT`] bytes).
        object: String,
    },
    /// Unloads module `id`.
    ModuleUnload {
        /// The module.
        id: u32,
    },
    /// Every loaded module with its counters.
    ModuleList,
    /// A page of a module's map, from entry `cursor` (array entries that are all zeros are
    /// left out).
    MapDump {
        /// The module.
        module: u32,
        /// The map's name.
        map: String,
        /// The first entry.
        cursor: u32,
        /// Most entries wanted.
        max: u32,
    },
    /// One key's value.
    MapGet {
        /// The module.
        module: u32,
        /// The map's name.
        map: String,
        /// The key in hex.
        key: String,
    },
    /// Inserts or replaces a key's value.
    MapSet {
        /// The module.
        module: u32,
        /// The map's name.
        map: String,
        /// The key in hex.
        key: String,
        /// The value in hex.
        value: String,
    },
    /// Deletes a key.
    MapDelete {
        /// The module.
        module: u32,
        /// The map's name.
        map: String,
        /// The key in hex.
        key: String,
    },
    /// Every tracepoint, on or off, with its hits (docs/tracepoints.md).
    TraceList,
    /// Turns a tracepoint (or "all") on or off.
    TraceSet {
        /// A tracepoint's name, or "all".
        name: String,
        /// On or off.
        on: bool,
    },
    /// Takes up to `max` events, oldest first, off the engine's ring (a page).
    TraceRead {
        /// Most events wanted.
        max: u32,
    },
    /// Registers an offload handler for `opcode` on QP `qpn` (docs/offload.md "Through the
    /// engine's service"): an eBPF object (any client, on its own QPs) or a Rust handler
    /// library (uid 0 or the engine's uid only: it runs native code in the engine), with
    /// the memory regions (by key, of the QP's owner) it may access.
    OffloadLoad {
        /// The queue pair.
        qpn: u32,
        /// The offload opcode.
        opcode: u32,
        /// The handler.
        handler: OffloadSource,
        /// Keys of the QP owner's memory regions the handler may access.
        mrs: Vec<u32>,
    },
    /// Unregisters the handler of `opcode` on `qpn`.
    OffloadUnload {
        /// The queue pair.
        qpn: u32,
        /// The offload opcode.
        opcode: u32,
    },
    /// Every offload handler registered (a client other than uid 0 or the engine's: its own).
    OffloadList,
}

/// An offload handler, as registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OffloadSource {
    /// An eBPF object's section `offload`, verified by the engine.
    Ebpf {
        /// What to call it (the file's name).
        name: String,
        /// The object's bytes in hex (at most [`MAX_OBJECT`] bytes).
        object: String,
    },
    /// Handler `handler` of the Rust handler library at `path` (on the engine's host;
    /// loaded with its `sluice_offload_handler_v1`).
    Rust {
        /// The library's absolute path.
        path: String,
        /// The handler's name in it.
        handler: String,
    },
}

/// A registered offload handler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadRow {
    /// Its queue pair.
    pub qpn: u32,
    /// Its offload opcode.
    pub opcode: u32,
    /// The engine's id of the application owning the QP.
    pub app: u32,
    /// "ebpf" or "rust".
    pub kind: String,
    /// Its name (eBPF: the object's; Rust: `PATH:HANDLER`).
    pub name: String,
    /// The regions it may access: (application address, length).
    pub regions: Vec<(u64, u64)>,
    /// Requests handed to it.
    pub requests: u64,
    /// Of those, answered with an error status.
    pub errors: u64,
}

impl AdminRequest {
    /// Whether the request is about tracepoints.
    pub fn is_trace(&self) -> bool {
        matches!(
            self,
            AdminRequest::TraceList
                | AdminRequest::TraceSet { .. }
                | AdminRequest::TraceRead { .. }
        )
    }

    /// Whether the request is about offload handlers (answered by the engine's verbs).
    pub fn is_offload(&self) -> bool {
        matches!(
            self,
            AdminRequest::OffloadLoad { .. }
                | AdminRequest::OffloadUnload { .. }
                | AdminRequest::OffloadList
        )
    }

    /// Whether the request is about eBPF modules or their maps (answered in the engine's
    /// hook turn, between frames).
    pub fn is_module(&self) -> bool {
        matches!(
            self,
            AdminRequest::ModuleLoad { .. }
                | AdminRequest::ModuleUnload { .. }
                | AdminRequest::ModuleList
                | AdminRequest::MapDump { .. }
                | AdminRequest::MapGet { .. }
                | AdminRequest::MapSet { .. }
                | AdminRequest::MapDelete { .. }
        )
    }
}

/// A loaded module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRow {
    /// Its id.
    pub id: u32,
    /// "ingress", "established" or "egress".
    pub hook: String,
    /// Its name.
    pub name: String,
    /// Its section.
    pub section: String,
    /// Instructions (8-byte slots).
    pub insns: u32,
    /// Its maps' names.
    pub maps: Vec<String>,
    /// Runs.
    pub runs: u64,
    /// XDP_PASS.
    pub passed: u64,
    /// Dropped: XDP_DROP, XDP_ABORTED and unknown return codes.
    pub dropped: u64,
    /// XDP_TX.
    pub tx: u64,
    /// XDP_REDIRECT.
    pub redirected: u64,
    /// Runs stopped by an error (the frame passed: fail-open).
    pub run_errors: u64,
    /// "jit" (compiled to machine code) or "interp" (interpreted); empty from older engines.
    #[serde(default)]
    pub exec: String,
}

/// Lower-case hex of `bytes`, no separators.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of hex digits, pairs optionally separated by spaces (bpftool's `0a 00 01`).
pub fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("{s:?}: an odd number of hex digits"));
    }
    digits
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("{s:?}: not hex bytes"))
        })
        .collect()
}

/// The application that owns a connection or a listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRow {
    /// The application's name (as it said at Hello).
    pub name: String,
    /// Its process id.
    pub pid: u32,
    /// Its uid (from the socket's credentials).
    pub uid: u32,
    /// Its id in the engine.
    pub app: u32,
    /// The socket's slot in its region.
    pub slot: u32,
}

/// One connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnRow {
    /// How to name it in a set request.
    pub id: ConnRef,
    /// Local address.
    pub local: SocketAddrV4,
    /// Remote address.
    pub remote: SocketAddrV4,
    /// RFC 9293 state, as the RFC spells it.
    pub state: String,
    /// Its application; None while it waits to be accepted or after it was closed.
    pub owner: Option<OwnerRow>,
    /// Congestion window, bytes.
    pub cwnd: u32,
    /// Slow-start threshold, bytes (u32::MAX: none yet).
    pub ssthresh: u32,
    /// Smoothed RTT, microseconds.
    pub srtt_us: u64,
    /// Retransmission timeout, microseconds.
    pub rto_us: u64,
    /// The peer's window, bytes.
    pub snd_wnd: u32,
    /// Effective MSS.
    pub mss: u16,
    /// Bytes the peer acknowledged (modulo 2^32).
    pub bytes_acked: u32,
    /// Bytes received in order (modulo 2^32).
    pub bytes_received: u32,
    /// Bytes sent and not yet acknowledged.
    pub unacked: u64,
    /// Bytes waiting to be read.
    pub readable: u64,
    /// Fast retransmits.
    pub retrans: u32,
    /// The congestion-control algorithm.
    pub cc: String,
    /// The scheduler's rate, bits per second (0: unlimited).
    pub rate_bps: u64,
    /// ECN negotiated.
    pub ecn: bool,
}

/// One listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRow {
    /// The local address and port.
    pub local: SocketAddrV4,
    /// Its accept queue's bound.
    pub backlog: u64,
    /// Connections waiting to be accepted.
    pub accept_queue: u64,
    /// Handshakes under way.
    pub syn_pending: u64,
    /// The algorithm its connections start with.
    pub cc: String,
    /// The application listening.
    pub owner: Option<OwnerRow>,
}

/// The engine's answer to an admin request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminReply {
    /// A page of connections; ask again from `next` unless it is None.
    Conns {
        /// The rows.
        rows: Vec<ConnRow>,
        /// The cursor of the next page.
        next: Option<u32>,
    },
    /// A page of listeners.
    Listeners {
        /// The rows.
        rows: Vec<ListenerRow>,
        /// The cursor of the next page.
        next: Option<u32>,
    },
    /// A page of counters as (group.name, value).
    Counters {
        /// The rows.
        rows: Vec<(String, u64)>,
        /// The cursor of the next page.
        next: Option<u32>,
    },
    /// Done (a set request).
    Done,
    /// A module was loaded with this id.
    ModuleLoaded {
        /// Its id.
        id: u32,
    },
    /// The loaded modules.
    Modules {
        /// The rows.
        rows: Vec<ModuleRow>,
    },
    /// A page of a map's (key, value) entries in hex.
    MapEntries {
        /// The rows.
        rows: Vec<(String, String)>,
        /// The cursor of the next page.
        next: Option<u32>,
    },
    /// A key's value in hex.
    MapValue {
        /// The value.
        value: String,
    },
    /// Every tracepoint.
    Traces {
        /// The rows.
        rows: Vec<TraceRow>,
        /// Events lost from the full ring so far.
        lost: u64,
    },
    /// The offload handlers registered.
    Offloads {
        /// The rows.
        rows: Vec<OffloadRow>,
    },
    /// A page of events taken off the ring.
    TraceEvents {
        /// The events, oldest first.
        rows: Vec<TraceEventRow>,
        /// Events lost from the full ring so far (a reader that sees it grow missed some).
        lost: u64,
        /// Events still waiting.
        pending: u64,
    },
}

/// Rows of one page, bounded by count and by the encoded size of one control message.
#[derive(Debug)]
pub struct Page<T> {
    /// The rows taken so far.
    pub rows: Vec<T>,
    bytes: usize,
    max: usize,
}

impl<T: Serialize> Page<T> {
    /// A page of at most `max` rows (and never more than fit one message).
    pub fn new(max: u32) -> Page<T> {
        Page {
            rows: Vec::new(),
            bytes: 0,
            max: (max as usize).clamp(1, PAGE_BYTES),
        }
    }

    /// Takes `row` if it fits; false (row not taken) when the page is full.
    pub fn push(&mut self, row: T) -> bool {
        if self.rows.len() >= self.max {
            return false;
        }
        // The row's encoding and its comma.
        let len = serde_json::to_vec(&row).map_or(usize::MAX, |v| v.len() + 1);
        if self.bytes.saturating_add(len) > PAGE_BYTES {
            return false;
        }
        self.bytes += len;
        self.rows.push(row);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Reply;
    use std::net::Ipv4Addr;

    fn row(i: u32) -> ConnRow {
        ConnRow {
            id: ConnRef {
                slot: i,
                generation: u32::MAX,
            },
            local: SocketAddrV4::new(Ipv4Addr::new(255, 255, 255, 255), 65535),
            remote: SocketAddrV4::new(Ipv4Addr::new(255, 255, 255, 255), 65535),
            state: "SYN-RECEIVED".into(),
            owner: Some(OwnerRow {
                name: "x".repeat(64),
                pid: u32::MAX,
                uid: u32::MAX,
                app: u32::MAX,
                slot: u32::MAX,
            }),
            cwnd: u32::MAX,
            ssthresh: u32::MAX,
            srtt_us: u64::MAX,
            rto_us: u64::MAX,
            snd_wnd: u32::MAX,
            mss: u16::MAX,
            bytes_acked: u32::MAX,
            bytes_received: u32::MAX,
            unacked: u64::MAX,
            readable: u64::MAX,
            retrans: u32::MAX,
            cc: "timely".into(),
            rate_bps: u64::MAX,
            ecn: false,
        }
    }

    #[test]
    fn a_full_page_of_the_widest_rows_fits_one_message() {
        let mut page = Page::new(u32::MAX);
        let mut i = 0;
        while page.push(row(i)) {
            i += 1;
        }
        assert!(i >= 4, "only {i} rows per page");
        let reply = Reply::Admin(AdminReply::Conns {
            rows: page.rows,
            next: Some(u32::MAX),
        });
        let len = serde_json::to_vec(&reply).unwrap().len();
        assert!(len <= MAX_MESSAGE, "{len} bytes");
    }

    #[test]
    fn hex_round_trips_and_takes_spaces() {
        assert_eq!(to_hex(&[0x0a, 0, 0xff]), "0a00ff");
        assert_eq!(from_hex("0a 00 ff").unwrap(), [0x0a, 0, 0xff]);
        assert_eq!(from_hex("0A00").unwrap(), [0x0a, 0]);
        assert!(from_hex("0a0").is_err());
        assert!(from_hex("zz").is_err());
    }

    #[test]
    fn the_largest_object_fits_one_message() {
        let req = crate::control::Request::Admin(AdminRequest::ModuleLoad {
            hook: "ingress".into(),
            name: "x".repeat(255),
            section: "x".repeat(255),
            object: to_hex(&vec![0xff; MAX_OBJECT]),
        });
        let len = serde_json::to_vec(&req).unwrap().len();
        assert!(len <= MAX_MESSAGE, "{len} bytes");
    }

    #[test]
    fn a_page_stops_at_its_row_count() {
        let mut page = Page::new(2);
        assert!(page.push(("a".to_string(), 1)));
        assert!(page.push(("b".to_string(), 2)));
        assert!(!page.push(("c".to_string(), 3)));
        assert_eq!(page.rows.len(), 2);
    }
}
