//! The splice stage (acceltcp.txt 4.3, Figures 7 and 8): two connections an L7 proxy joined,
//! taken over from the control plane, become two L4 rewrite rules. A frame from either peer
//! leaves towards the other with the other connection's addresses and ports, its sequence
//! and acknowledgment numbers moved by offsets fixed at the handover, its SACK blocks and
//! timestamps moved the same way, its window rescaled between the two connections' window
//! scales, and its IP and TCP checksums updated by the differential method (RFC 1624) over
//! the rewritten header bytes only, never the payload. Nothing is buffered or acknowledged
//! here: the two peers' TCPs see one connection and do their own recovery.
//!
//! The stage drops what the receiving peer would only be hurt by: a RST outside the
//! receiver's window (RFC 5961 3.2's check, made before forwarding) and data beyond it, and
//! any SYN. It watches FINs and RSTs, and forgets a splice 2 s (at most TIME-WAIT) after
//! both FINs were acknowledged, long enough to relay a retransmitted FIN or its ACK (the
//! peers keep their own TIME-WAIT), or at once after a RST.

use std::net::Ipv4Addr;
use std::time::Duration;

use ahash::RandomState;
use hashbrown::HashMap;
use sluice_wire::checksum::update_bytes;
use sluice_wire::tcp::{SeqNumber, TcpFlags};
use sluice_wire::EthernetAddress;

use super::bitmap_wheel::BitmapWheel;
use crate::handle::ConnId;
use crate::table::FourTuple;
use crate::time::Instant;

/// One side of a splice as the control plane hands it over: a drained, established
/// connection's addresses and sequence state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Side {
    /// The connection.
    pub tuple: FourTuple,
    /// Its peer's next hop.
    pub peer_mac: EthernetAddress,
    /// SND.NXT (= SND.UNA: everything sent was acknowledged).
    pub snd_nxt: SeqNumber,
    /// RCV.NXT (everything received was consumed).
    pub rcv_nxt: SeqNumber,
    /// The peer's window, bytes.
    pub snd_wnd: u32,
    /// The shift applied to the peer's window field.
    pub snd_wscale: u8,
    /// The shift the peer applies to ours.
    pub rcv_wscale: u8,
    /// TS.Recent, and the TSval we would send now (timestamps on), else None.
    pub ts: Option<(u32, u32)>,
    /// The peer's FIN was received (and our FIN on the other side acknowledged).
    pub peer_fin: bool,
}

/// The rewrite of one direction: frames from `in` leave on `out`.
#[derive(Clone, Copy, Debug)]
struct Rule {
    out: FourTuple,
    out_mac: EthernetAddress,
    /// Added to the sequence number (and to FIN positions).
    seq_delta: u32,
    /// Added to the acknowledgment number and SACK edges.
    ack_delta: u32,
    /// Added to TSval.
    ts_delta: u32,
    /// Shifts: the incoming window field is scaled up by `wscale_in` and down by
    /// `wscale_out`.
    wscale_in: u8,
    wscale_out: u8,
    /// The receiving peer's latest acknowledgment (in the outgoing sequence space) and
    /// window: the acceptable range for what this direction carries.
    rcv_ack: SeqNumber,
    rcv_wnd: u32,
    /// The end of this direction's FIN in the outgoing space, once seen.
    fin_end: Option<SeqNumber>,
    /// Stream bytes relayed (a retransmission counts once).
    bytes: u64,
    /// The highest payload end relayed (outgoing space): what lies below it is counted.
    seq_high: SeqNumber,
}

/// One direction of a splice as a fast path outside the core applies it (the engine's eBPF
/// splice module, flextoe.txt listing 1): frames arriving from `in_ip:in_port` to our
/// `in_local_port` leave for `out_ip:out_remote_port` from our `out_local_port`, with these
/// deltas; addresses and ports as numbers, MACs as bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpliceRewrite {
    /// The peer the frames come from.
    pub in_ip: Ipv4Addr,
    /// Its port.
    pub in_port: u16,
    /// Our port on the incoming connection.
    pub in_local_port: u16,
    /// Our address (the frames' destination, and the source they leave with).
    pub local_ip: Ipv4Addr,
    /// Our MAC (the source they leave with).
    pub local_mac: [u8; 6],
    /// The other peer's next hop.
    pub out_mac: [u8; 6],
    /// The other peer.
    pub out_ip: Ipv4Addr,
    /// Our port on the other connection.
    pub out_local_port: u16,
    /// The other peer's port.
    pub out_remote_port: u16,
    /// Added to the sequence number.
    pub seq_delta: u32,
    /// Added to the acknowledgment number (and SACK edges, which the fast path leaves to
    /// the core).
    pub ack_delta: u32,
    /// Added to TSval.
    pub ts_delta: u32,
    /// Subtracted from TSecr (the other direction's `ts_delta`).
    pub tsecr_delta: u32,
    /// The window field is scaled up by this shift...
    pub wscale_in: u8,
    /// ...and down by this one.
    pub wscale_out: u8,
}

/// A splice's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpliceId(pub(crate) u64);

/// What happened to a splice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpliceEvent {
    /// Both connections were drained and handed to the splice stage: frames now go from
    /// peer to peer, and the connections' slots are free.
    Installed(SpliceId),
    /// A connection failed (reset, timeout) before the handover; the other was reset.
    Failed(SpliceId),
    /// The splice ended, with its traffic.
    Ended(SpliceId, SpliceEnd, SpliceStats),
}

/// A splice waiting for its connections to drain.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    /// The splice's id.
    pub id: u64,
    /// The two connections, in the order `splice` was given them.
    pub conns: [ConnId; 2],
    /// Our FIN was queued on the connection at this index because its partner's peer
    /// closed.
    pub fin_relayed: [bool; 2],
    /// Bytes the control plane relayed from each connection's buffer to the other's
    /// before the handover (counted in the splice's stats).
    pub relayed: [u64; 2],
}

/// How a splice ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpliceEnd {
    /// Both sides closed (FINs acknowledged both ways), and the TIME-WAIT passed.
    Closed,
    /// A RST from the first connection's peer (`true`) or the second's (`false`).
    Reset(bool),
}

/// A splice's traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpliceStats {
    /// Stream bytes relayed from the first connection's peer to the second's (each byte
    /// once, retransmissions not counted again).
    pub a_to_b: u64,
    /// Stream bytes relayed the other way.
    pub b_to_a: u64,
}

struct Splice {
    rules: [Rule; 2],
    keys: [u64; 2],
    /// The control plane's id for it.
    id: u64,
    /// Both FINs acknowledged: waiting out TIME-WAIT on the wheel.
    lingering: bool,
    /// A fast path outside the core relays its common case ([`SpliceStage::hand_to_fast_path`]):
    /// the receivers' windows seen here are stale, so nothing is dropped for them.
    external: bool,
}

/// How a relayed frame's TCP checksum is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelayChecksum {
    /// Updated from the frame's own by the rewrite's difference (RFC 1624).
    Differential,
    /// Computed over the whole segment (the frame's own may be partial: a device vouched
    /// for it).
    Full,
    /// Left partial (the pseudo-header sum), for a device that completes it while it
    /// segments a large frame.
    Partial,
}

/// What the stage did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relay {
    /// The frame was rewritten into the output buffer (this many bytes).
    Forward(usize),
    /// Forwarded (this many bytes), and the splice (its id) ended with it (a RST).
    ForwardAndEnd(usize, u64, SpliceEnd, SpliceStats),
    /// Dropped: a RST outside the receiver's window.
    DropRstOutOfWindow,
    /// Dropped: data beyond the receiver's window, or a SYN.
    DropOutOfWindow,
    /// Dropped: the frame's headers are not what the pre-processor parsed (cannot happen
    /// for a frame that parsed) or the output buffer is too small.
    DropMalformed,
}

/// The splice stage's rules, keyed by the tuple frames arrive on.
pub(crate) struct SpliceStage {
    splices: Vec<Option<Splice>>,
    free: Vec<u32>,
    index: HashMap<u64, (u32, u8), RandomState>,
    wheel: BitmapWheel,
    expired: Vec<u32>,
    limit: usize,
    time_wait: Duration,
}

fn delta(to: SeqNumber, from: SeqNumber) -> u32 {
    to.0.wrapping_sub(from.0)
}

impl Rule {
    /// The rule for frames from `from`'s peer leaving on `to`.
    fn between(from: &Side, to: &Side) -> Rule {
        let ts_delta = match (from.ts, to.ts) {
            // The first TSval relayed is at least the one we last sent on `to`: the
            // receiving peer's PAWS check (RFC 7323 5) takes it.
            (Some((recent, _)), Some((_, ours))) => ours.wrapping_sub(recent),
            _ => 0,
        };
        Rule {
            out: to.tuple,
            out_mac: to.peer_mac,
            seq_delta: delta(to.snd_nxt, from.rcv_nxt),
            ack_delta: delta(to.rcv_nxt, from.snd_nxt),
            ts_delta,
            wscale_in: from.snd_wscale,
            wscale_out: to.rcv_wscale,
            rcv_ack: to.snd_nxt,
            rcv_wnd: to.snd_wnd,
            // A FIN that came before the handover was relayed as our FIN on `to`, which
            // is acknowledged: SND.NXT is past it.
            fin_end: from.peer_fin.then_some(to.snd_nxt),
            bytes: 0,
            seq_high: to.snd_nxt,
        }
    }
}

/// Byte offsets of the fields a rewrite touches in a frame.
struct Layout {
    ip: usize,
    tcp: usize,
    tcp_len: usize,
}

fn layout(frame: &[u8]) -> Option<Layout> {
    // Ethernet without VLAN tag (the pre-processor's frames reach here only untagged or
    // with the tag stripped by the device).
    if frame.len() < 14 + 20 + 20 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = 14;
    let ihl = usize::from(frame[ip] & 0x0f) * 4;
    let tcp = ip + ihl;
    if ihl < 20 || frame.len() < tcp + 20 {
        return None;
    }
    let tcp_len = usize::from(frame[tcp + 12] >> 4) * 4;
    if tcp_len < 20 || frame.len() < tcp + tcp_len {
        return None;
    }
    Some(Layout { ip, tcp, tcp_len })
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

impl SpliceStage {
    /// An empty stage holding at most `limit` splices; a closed splice is remembered for
    /// `time_wait`.
    pub(crate) fn new(limit: usize, time_wait: Duration, seed: u64) -> Self {
        SpliceStage {
            splices: Vec::new(),
            free: Vec::new(),
            index: HashMap::with_hasher(RandomState::with_seeds(seed, 5, seed ^ 0x51ce, 9)),
            wheel: BitmapWheel::new(256, 1_000_000, 0),
            expired: Vec::new(),
            limit,
            time_wait,
        }
    }

    /// Splices held.
    pub(crate) fn len(&self) -> usize {
        self.splices.len() - self.free.len()
    }

    /// Whether another splice fits.
    pub(crate) fn has_room(&self) -> bool {
        self.len() < self.limit
    }

    /// Whether a tuple belongs to a splice.
    #[inline]
    pub(crate) fn holds(&self, tuple: &FourTuple) -> bool {
        !self.index.is_empty() && self.index.contains_key(&tuple.key())
    }

    /// Installs the two rules joining `a` and `b` as splice `id`, their byte counts starting
    /// at `relayed` (what the control plane moved before). False if full or a tuple is
    /// already spliced.
    pub(crate) fn install(
        &mut self,
        now: Instant,
        id: u64,
        (a, b): (&Side, &Side),
        relayed: [u64; 2],
    ) -> bool {
        let keys = [a.tuple.key(), b.tuple.key()];
        if !self.has_room() || keys[0] == keys[1] || keys.iter().any(|k| self.index.contains_key(k))
        {
            return false;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.splices.push(None);
                (self.splices.len() - 1) as u32
            }
        };
        let (mut ab, mut ba) = (Rule::between(a, b), Rule::between(b, a));
        ab.bytes = relayed[0];
        ba.bytes = relayed[1];
        self.splices[i as usize] = Some(Splice {
            rules: [ab, ba],
            keys,
            id,
            lingering: false,
            external: false,
        });
        self.index.insert(keys[0], (i, 0));
        self.index.insert(keys[1], (i, 1));
        if a.peer_fin && b.peer_fin {
            // Both peers closed before the handover (both FINs acknowledged): only their
            // retransmissions can still come, for a TIME-WAIT.
            if let Some(s) = self.splices[i as usize].as_mut() {
                s.lingering = true;
            }
            self.wheel.schedule(i, (now + self.time_wait).as_nanos());
        }
        true
    }

    /// Removes splice `i`; returns its id and traffic.
    fn remove(&mut self, i: u32) -> Option<(u64, SpliceStats)> {
        let s = self.splices.get_mut(i as usize)?.take()?;
        for k in s.keys {
            self.index.remove(&k);
        }
        self.wheel.cancel(i);
        self.free.push(i);
        Some((
            s.id,
            SpliceStats {
                a_to_b: s.rules[0].bytes,
                b_to_a: s.rules[1].bytes,
            },
        ))
    }

    /// A SYN from a lingering splice's peer that opens a new connection on its tuple:
    /// both FINs were acknowledged and the sequence number is past the old connection's
    /// FIN, so, as a TIME-WAIT that takes a new SYN (RFC 9293 3.10.7.4, RFC 6191), the
    /// splice is forgotten and the SYN goes on to the listener. Linux clients reuse a
    /// port within the linger; dropping their SYN cost them a 1 s retransmission.
    /// Returns the ended splice's id and traffic.
    pub(crate) fn reopen(&mut self, tuple: &FourTuple, frame: &[u8]) -> Option<(u64, SpliceStats)> {
        // Every spliced frame passes here: look at the flags byte before anything else.
        let ihl = usize::from(*frame.get(14)? & 0x0f) * 4;
        let flags = TcpFlags(*frame.get(14 + ihl + 13)?);
        if !flags.contains(TcpFlags::SYN) || flags.contains(TcpFlags::ACK) {
            return None;
        }
        let l = layout(frame)?;
        let &(i, dir) = self.index.get(&tuple.key())?;
        let s = self.splices.get(i as usize)?.as_ref()?;
        let r = &s.rules[usize::from(dir)];
        let seq = SeqNumber(get32(frame, l.tcp + 4).wrapping_add(r.seq_delta));
        if !s.lingering || !r.fin_end.is_some_and(|fin| seq.seq_gt(fin)) {
            return None;
        }
        self.remove(i)
    }

    /// Rewrites `frame` (arriving on `tuple`) into `out` for the other side. `src` is our
    /// MAC; `csum` says how the TCP checksum is made.
    pub(crate) fn relay(
        &mut self,
        now: Instant,
        tuple: &FourTuple,
        frame: &[u8],
        out: &mut [u8],
        src: EthernetAddress,
        csum: RelayChecksum,
    ) -> Option<Relay> {
        let &(i, dir) = self.index.get(&tuple.key())?;
        let Some(l) = layout(frame) else {
            return Some(Relay::DropMalformed);
        };
        let ip_total = usize::from(u16::from_be_bytes([frame[l.ip + 2], frame[l.ip + 3]]));
        let end = (l.ip + ip_total).min(frame.len());
        if out.len() < end || end < l.tcp + l.tcp_len {
            return Some(Relay::DropMalformed);
        }
        let flags = TcpFlags(frame[l.tcp + 13]);
        let payload = (end - l.tcp - l.tcp_len) as u32;
        let s = self.splices[i as usize].as_mut()?;
        let d = usize::from(dir);
        let r = s.rules[d];
        let seq = SeqNumber(get32(frame, l.tcp + 4).wrapping_add(r.seq_delta));
        if flags.contains(TcpFlags::SYN) {
            return Some(Relay::DropOutOfWindow);
        }
        // The receiving peer's window, as far as its ACKs told us.
        let right = r.rcv_ack + r.rcv_wnd.max(1);
        if s.external {
            // The ACKs went by on the fast path: the receiver checks for itself (its own
            // RFC 5961 3.2 check).
        } else if flags.contains(TcpFlags::RST) {
            // RFC 5961 3.2: only a RST in the receiver's window can matter to it.
            if !(seq.seq_ge(r.rcv_ack) && seq.seq_lt(right)) {
                return Some(Relay::DropRstOutOfWindow);
            }
        } else if payload > 0 && seq.seq_ge(right) {
            return Some(Relay::DropOutOfWindow);
        }
        out[..end].copy_from_slice(&frame[..end]);
        // Ethernet.
        out[0..6].copy_from_slice(&r.out_mac.0);
        out[6..12].copy_from_slice(&src.0);
        // IPv4 addresses: ours stays the source; the destination is the other peer.
        let old_addrs: [u8; 8] = frame[l.ip + 12..l.ip + 20].try_into().ok()?;
        out[l.ip + 12..l.ip + 16].copy_from_slice(&frame[l.ip + 16..l.ip + 20]);
        out[l.ip + 16..l.ip + 20].copy_from_slice(&r.out.remote_ip.octets());
        let ip_csum = u16::from_be_bytes([frame[l.ip + 10], frame[l.ip + 11]]);
        let ip_csum = update_bytes(ip_csum, &old_addrs, &out[l.ip + 12..l.ip + 20]);
        out[l.ip + 10..l.ip + 12].copy_from_slice(&ip_csum.to_be_bytes());
        // TCP header.
        let t = l.tcp;
        out[t..t + 2].copy_from_slice(&r.out.local_port.to_be_bytes());
        out[t + 2..t + 4].copy_from_slice(&r.out.remote_port.to_be_bytes());
        put32(out, t + 4, seq.0);
        let raw_ack = SeqNumber(get32(frame, t + 8));
        if flags.contains(TcpFlags::ACK) {
            put32(out, t + 8, raw_ack.0.wrapping_add(r.ack_delta));
        }
        let window = u16::from_be_bytes([frame[t + 14], frame[t + 15]]);
        let bytes = u64::from(window) << r.wscale_in;
        let scaled = (bytes >> r.wscale_out).min(u64::from(u16::MAX)) as u16;
        out[t + 14..t + 16].copy_from_slice(&scaled.to_be_bytes());
        let other_ts_delta = s.rules[1 - d].ts_delta;
        rewrite_options(&mut out[t + 20..t + l.tcp_len], &r, other_ts_delta);
        let our_ip = Ipv4Addr::from(get32(out, l.ip + 12));
        let csum = match csum {
            RelayChecksum::Full => {
                out[t + 16..t + 18].copy_from_slice(&[0, 0]);
                let pseudo = sluice_wire::checksum::pseudo_header_v4(
                    our_ip,
                    r.out.remote_ip,
                    6,
                    (end - t) as u16,
                );
                !sluice_wire::checksum::fold(pseudo + sluice_wire::checksum::sum(&out[t..end]))
            }
            RelayChecksum::Partial => {
                sluice_wire::tcp::pseudo_header_checksum((end - t) as u32, our_ip, r.out.remote_ip)
            }
            RelayChecksum::Differential => {
                let c = u16::from_be_bytes([frame[t + 16], frame[t + 17]]);
                let c = update_bytes(c, &old_addrs, &out[l.ip + 12..l.ip + 20]);
                update_bytes(c, &frame[t..t + l.tcp_len], &out[t..t + l.tcp_len])
            }
        };
        out[t + 16..t + 18].copy_from_slice(&csum.to_be_bytes());
        // Bookkeeping: bytes, FINs, the other direction's view of its receiver.
        let r = &mut s.rules[d];
        // Stream bytes, not frames: a retransmitted or overlapping segment counts only
        // what lies beyond the highest end relayed before.
        // (An ACK after a FIN carries the FIN's sequence number + 1: no payload, no count.)
        let seq_end = seq + payload;
        if payload > 0 && seq_end.seq_gt(r.seq_high) {
            r.bytes += u64::from(seq_end.0.wrapping_sub(r.seq_high.0));
            r.seq_high = seq_end;
        }
        if flags.contains(TcpFlags::FIN) {
            r.fin_end = Some(seq + payload + 1u32);
        }
        if flags.contains(TcpFlags::ACK) {
            // This frame's sender receives the other direction: its ACK (untranslated: it
            // is in the other direction's outgoing space) and window bound what the other
            // direction may carry.
            let wscale = r.wscale_in.min(14);
            let o = &mut s.rules[1 - d];
            if raw_ack.seq_ge(o.rcv_ack) {
                o.rcv_ack = raw_ack;
                o.rcv_wnd = (u32::from(window) << wscale).max(1);
            }
        }
        if flags.contains(TcpFlags::RST) {
            let (id, stats) = self.remove(i)?;
            return Some(Relay::ForwardAndEnd(
                end,
                id,
                SpliceEnd::Reset(dir == 0),
                stats,
            ));
        }
        // Closed once each direction's FIN is acknowledged by its receiver.
        let closed = s
            .rules
            .iter()
            .all(|r| r.fin_end.is_some_and(|f| r.rcv_ack.seq_ge(f)));
        if closed && !s.lingering {
            s.lingering = true;
            self.wheel.schedule(i, (now + self.time_wait).as_nanos());
        }
        Some(Relay::Forward(end))
    }

    /// Marks splice `id` as relayed by a fast path outside the core and returns its two
    /// rewrites (first connection's peer to the second's, then back); `local` is our address
    /// and MAC. None if the stage does not hold it.
    pub(crate) fn hand_to_fast_path(
        &mut self,
        id: u64,
        local: (Ipv4Addr, EthernetAddress),
    ) -> Option<[SpliceRewrite; 2]> {
        let s = self.splices.iter_mut().flatten().find(|s| s.id == id)?;
        s.external = true;
        let ins = [s.rules[1].out, s.rules[0].out];
        let rewrite = |d: usize| {
            let (r, o) = (&s.rules[d], &s.rules[1 - d]);
            SpliceRewrite {
                in_ip: ins[d].remote_ip,
                in_port: ins[d].remote_port,
                in_local_port: ins[d].local_port,
                local_ip: local.0,
                local_mac: local.1 .0,
                out_mac: r.out_mac.0,
                out_ip: r.out.remote_ip,
                out_local_port: r.out.local_port,
                out_remote_port: r.out.remote_port,
                seq_delta: r.seq_delta,
                ack_delta: r.ack_delta,
                ts_delta: r.ts_delta,
                tsecr_delta: o.ts_delta,
                wscale_in: r.wscale_in,
                wscale_out: r.wscale_out,
            }
        };
        Some([rewrite(0), rewrite(1)])
    }

    /// Splices whose TIME-WAIT ended: (id, stats) each.
    pub(crate) fn on_timeout(&mut self, now: Instant, out: &mut Vec<(u64, SpliceStats)>) {
        let mut expired = std::mem::take(&mut self.expired);
        expired.clear();
        self.wheel.expire(now.as_nanos(), &mut expired);
        for &i in &expired {
            if let Some(done) = self.remove(i) {
                out.push(done);
            }
        }
        self.expired = expired;
    }

    /// When [`SpliceStage::on_timeout`] next has work.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.wheel.next_due_ns().map(Instant::from_nanos)
    }

    /// Checks the lookup against the splices (fuzzing and tests).
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        self.wheel.check()?;
        if self.index.len() != 2 * self.len() {
            return Err("splice: lookup entries and splices disagree");
        }
        for (&k, &(i, d)) in &self.index {
            match self.splices.get(i as usize).and_then(|s| s.as_ref()) {
                Some(s) if s.keys[usize::from(d)] == k => {}
                _ => return Err("splice: a lookup entry names another splice"),
            }
        }
        if self.len() > self.limit {
            return Err("splice: more splices than the limit");
        }
        Ok(())
    }
}

/// Rewrites TSval/TSecr and SACK edges in a TCP options area (raw bytes; malformed options
/// are left as they are: the receiver judges them).
fn rewrite_options(opts: &mut [u8], r: &Rule, other_ts_delta: u32) {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return,
            1 => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { return };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    return;
                }
                match (kind, len) {
                    (8, 10) => {
                        let tsval = get32(opts, i + 2).wrapping_add(r.ts_delta);
                        // TSecr echoes what the other direction carried, moved by its delta.
                        let tsecr = get32(opts, i + 6).wrapping_sub(other_ts_delta);
                        put32(opts, i + 2, tsval);
                        put32(opts, i + 6, tsecr);
                    }
                    (5, n) if n >= 10 && (n - 2) % 8 == 0 => {
                        let mut e = i + 2;
                        while e + 8 <= i + len {
                            let left = get32(opts, e).wrapping_add(r.ack_delta);
                            let right = get32(opts, e + 4).wrapping_add(r.ack_delta);
                            put32(opts, e, left);
                            put32(opts, e + 4, right);
                            e += 8;
                        }
                    }
                    _ => {}
                }
                i += len;
            }
        }
    }
}
