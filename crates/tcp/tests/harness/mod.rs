//! Test harness in the smoltcp style: a [`Stack`] under test and a scripted raw peer that
//! builds complete Ethernet/IPv4/TCP frames (valid checksums) and parses what the stack emits.
//! Time is virtual and advanced explicitly; nothing here reads a clock.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_tcp::{Config, ConnId, Event, Instant, ListenerId, Readiness, Stack};
use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ecn, Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp::{fill_checksum, ChecksumCheck, SeqNumber, TcpFlags, TcpHeader, TcpOptions};
use sluice_wire::EthernetAddress;

/// The stack's addresses.
pub const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The scripted peer's addresses.
pub const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// The port the tests listen on.
pub const LISTEN_PORT: u16 = 80;

pub const SYN: TcpFlags = TcpFlags::SYN;
pub const ACK: TcpFlags = TcpFlags::ACK;
pub const RST: TcpFlags = TcpFlags::RST;
pub const FIN: TcpFlags = TcpFlags::FIN;
pub const ECE: TcpFlags = TcpFlags::ECE;
pub const CWR: TcpFlags = TcpFlags::CWR;
pub const PSH: TcpFlags = TcpFlags::PSH;

/// Test-friendly configuration values, used by [`config`].
pub const RTO_INITIAL: Duration = Duration::from_millis(100);
pub const RTO_MIN: Duration = Duration::from_millis(5);
pub const RTO_MAX: Duration = Duration::from_millis(1600);
pub const USER_TIMEOUT: Duration = Duration::from_secs(5);
pub const TIME_WAIT: Duration = Duration::from_secs(1);
pub const SYN_RETRIES: u8 = 3;
pub const RX_BUFFER: usize = 16384;
pub const TX_BUFFER: usize = 16384;
/// Our MSS (MTU 1500).
pub const OUR_MSS: u16 = 1460;

/// `n` milliseconds of virtual time.
pub fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// A configuration with small, test-friendly values and a fixed seed.
pub fn config() -> Config {
    let mut cfg = Config::new(OUR_MAC, OUR_IP);
    cfg.seed = 0x7e57_5eed;
    cfg.max_connections = 64;
    cfg.max_listeners = 4;
    cfg.syn_backlog = 8;
    cfg.max_accept_queue = 32;
    cfg.rx_buffer = RX_BUFFER;
    cfg.tx_buffer = TX_BUFFER;
    cfg.rto_initial = RTO_INITIAL;
    cfg.rto_min = RTO_MIN;
    cfg.rto_max = RTO_MAX;
    cfg.user_timeout = USER_TIMEOUT;
    cfg.syn_retries = SYN_RETRIES;
    cfg.time_wait = TIME_WAIT;
    cfg.challenge_ack_limit = 10;
    cfg.control_frame_queue = 256;
    // These tests pin the retransmission timer's behaviour frame by frame; RACK-TLP's
    // probes and time-based losses are tested on their own (crates/sim/tests/tcp_tlp.rs,
    // tcp_rack.rs, and src/datapath/rack.rs, tlp.rs, control/loss_probe.rs).
    cfg.rack_tlp = false;
    cfg
}

/// A stack with `cfg` and the peer as a static neighbor (no ARP needed).
pub fn stack_with(cfg: Config) -> Stack {
    let mut stack = Stack::new(cfg).expect("valid test config");
    stack.add_neighbor(PEER_IP, PEER_MAC);
    stack
}

/// A stack with [`config`].
pub fn stack() -> Stack {
    stack_with(config())
}

/// A segment the peer sends. Build with [`Peer::seg`] and the setters.
#[derive(Clone, Debug)]
pub struct Seg {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: SeqNumber,
    pub ack: SeqNumber,
    pub flags: TcpFlags,
    pub window: u16,
    pub options: TcpOptions,
    /// Raw option bytes (a multiple of 4 long) instead of `options`, for malformed options.
    pub raw_options: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

impl Seg {
    pub fn seq(mut self, seq: SeqNumber) -> Self {
        self.seq = seq;
        self
    }
    pub fn ack(mut self, ack: SeqNumber) -> Self {
        self.ack = ack;
        self
    }
    pub fn win(mut self, window: u16) -> Self {
        self.window = window;
        self
    }
    pub fn opts(mut self, options: TcpOptions) -> Self {
        self.options = options;
        self
    }
    pub fn raw_opts(mut self, raw: &[u8]) -> Self {
        assert_eq!(raw.len() % 4, 0, "raw options must fill whole words");
        self.raw_options = Some(raw.to_vec());
        self
    }
    pub fn data(mut self, payload: &[u8]) -> Self {
        self.payload = payload.to_vec();
        self
    }
    pub fn ts(mut self, tsval: u32, tsecr: u32) -> Self {
        self.options.timestamp = Some((tsval, tsecr));
        self
    }
    /// Replaces the control bits.
    pub fn flags(mut self, flags: TcpFlags) -> Self {
        self.flags = flags;
        self
    }
    /// Adds FIN to the control bits.
    pub fn flags_fin(mut self) -> Self {
        self.flags |= TcpFlags::FIN;
        self
    }
    pub fn src_port(mut self, port: u16) -> Self {
        self.src_port = port;
        self
    }
}

/// A received segment: header and payload.
pub type Segment = (TcpHeader, Vec<u8>);

/// The scripted remote end.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub mac: EthernetAddress,
    pub ip: Ipv4Addr,
    /// The peer's own port.
    pub port: u16,
    /// The stack's port this peer talks to.
    pub stack_port: u16,
}

impl Peer {
    /// A peer at [`PEER_IP`] using `port`, talking to the stack's `stack_port`.
    pub fn new(port: u16, stack_port: u16) -> Self {
        Peer {
            mac: PEER_MAC,
            ip: PEER_IP,
            port,
            stack_port,
        }
    }

    /// A segment with this peer's ports, `flags`, sequence numbers 0 and window 65535.
    pub fn seg(&self, flags: TcpFlags) -> Seg {
        Seg {
            src_port: self.port,
            dst_port: self.stack_port,
            seq: SeqNumber(0),
            ack: SeqNumber(0),
            flags,
            window: 65535,
            options: TcpOptions::default(),
            raw_options: None,
            payload: Vec::new(),
        }
    }

    /// The complete Ethernet/IPv4/TCP frame for `seg`, checksums filled.
    pub fn frame(&self, seg: &Seg) -> Vec<u8> {
        let header = TcpHeader {
            src_port: seg.src_port,
            dst_port: seg.dst_port,
            seq: seg.seq,
            ack: seg.ack,
            flags: seg.flags,
            window: seg.window,
            urgent: 0,
            options: seg.options,
        };
        let mut tcp = vec![0u8; header.header_len()];
        header.emit(&mut tcp).expect("emit tcp header");
        if let Some(raw) = &seg.raw_options {
            tcp.truncate(20);
            tcp.extend_from_slice(raw);
            tcp[12] = ((tcp.len() / 4) as u8) << 4;
        }
        tcp.extend_from_slice(&seg.payload);
        fill_checksum(&mut tcp, self.ip, OUR_IP);
        let ip = Ipv4Repr {
            src: self.ip,
            dst: OUR_IP,
            protocol: PROTOCOL_TCP,
            payload_len: tcp.len() as u16,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
        };
        let eth = EthernetRepr {
            dst: OUR_MAC,
            src: self.mac,
            ethertype: EtherType::Ipv4,
            vlan: None,
        };
        let mut frame = vec![0u8; 14 + 20 + tcp.len()];
        eth.emit(&mut frame).expect("emit ethernet");
        ip.emit(&mut frame[14..]).expect("emit ipv4");
        frame[34..].copy_from_slice(&tcp);
        frame
    }

    /// Hands `seg` to the stack at `now`.
    pub fn send(&self, stack: &mut Stack, now: Instant, seg: Seg) {
        let frame = self.frame(&seg);
        stack.handle_frame(now, &frame);
    }

    /// Hands several segments to the stack as one batch at `now`.
    pub fn send_batch(&self, stack: &mut Stack, now: Instant, segs: &[Seg]) {
        let frames: Vec<Vec<u8>> = segs.iter().map(|s| self.frame(s)).collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        stack.handle_frames(now, &refs);
    }

    /// Drains everything the stack wants to transmit at `now` and returns the TCP segments
    /// (for any port; tests check ports where several peers are involved). ARP requests for
    /// the peer's address are answered; other ARP frames are skipped.
    pub fn recv_all(&self, stack: &mut Stack, now: Instant) -> Vec<Segment> {
        drain(stack, now, Some(*self))
    }

    /// Drains the stack and asserts it sent exactly one segment, which is returned.
    pub fn recv_one(&self, stack: &mut Stack, now: Instant) -> Segment {
        let mut segs = self.recv_all(stack, now);
        assert_eq!(segs.len(), 1, "expected exactly one segment, got {segs:#?}");
        segs.pop().expect("one segment")
    }

    /// Drains the stack and asserts it sent nothing.
    pub fn recv_nothing(&self, stack: &mut Stack, now: Instant) {
        let segs = self.recv_all(stack, now);
        assert!(segs.is_empty(), "expected no segment, got {segs:#?}");
    }
}

/// Drains the stack's transmit side; `arp_peer` answers ARP requests for its address.
pub fn drain(stack: &mut Stack, now: Instant, arp_peer: Option<Peer>) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    let mut guard = 0;
    while let Some(n) = stack.poll_transmit(now, &mut buf) {
        guard += 1;
        assert!(guard < 100_000, "stack keeps transmitting");
        let frame = buf[..n].to_vec();
        let (eth, l3) = EthernetRepr::parse(&frame).expect("stack emits valid ethernet");
        assert_eq!(eth.src, OUR_MAC);
        match eth.ethertype {
            EtherType::Arp => {
                let arp = ArpRepr::parse(l3).expect("stack emits valid arp");
                if let Some(peer) = arp_peer {
                    if arp.operation == ArpOperation::Request && arp.target_ip == peer.ip {
                        let reply = ArpRepr {
                            operation: ArpOperation::Reply,
                            source_mac: peer.mac,
                            source_ip: peer.ip,
                            target_mac: OUR_MAC,
                            target_ip: OUR_IP,
                        };
                        let mut f = vec![0u8; 14 + 28];
                        EthernetRepr {
                            dst: OUR_MAC,
                            src: peer.mac,
                            ethertype: EtherType::Arp,
                            vlan: None,
                        }
                        .emit(&mut f)
                        .expect("emit ethernet");
                        reply.emit(&mut f[14..]).expect("emit arp");
                        stack.handle_frame(now, &f);
                    }
                }
            }
            EtherType::Ipv4 => {
                assert_eq!(eth.dst, PEER_MAC, "segments go to the peer's MAC");
                let (ip, l4) = Ipv4Repr::parse(l3, true).expect("stack emits valid ipv4");
                assert_eq!(ip.src, OUR_IP);
                assert_eq!(ip.protocol, PROTOCOL_TCP);
                let (tcp, payload) = TcpHeader::parse(l4, ip.src, ip.dst, ChecksumCheck::Verify)
                    .expect("stack emits valid tcp with a correct checksum");
                out.push((tcp, payload.to_vec()));
            }
            other => panic!("unexpected ethertype {other:?}"),
        }
    }
    out
}

/// Runs every timer deadline up to `end` in order (as a driver following
/// [`Stack::poll_timeout`] would), returning what the stack sent, with when.
pub fn run_until(stack: &mut Stack, end: Instant) -> Vec<(Instant, Segment)> {
    let mut out = Vec::new();
    while let Some(t) = stack.poll_timeout() {
        if t > end {
            break;
        }
        stack.handle_timeout(t);
        out.extend(drain(stack, t, None).into_iter().map(|s| (t, s)));
    }
    stack.handle_timeout(end);
    out.extend(drain(stack, end, None).into_iter().map(|s| (end, s)));
    out
}

/// Options a typical modern peer offers in its SYN.
pub fn full_syn_options(mss: u16, wscale: u8, tsval: u32) -> TcpOptions {
    TcpOptions {
        mss: Some(mss),
        window_scale: Some(wscale),
        sack_permitted: true,
        timestamp: Some((tsval, 0)),
        ..Default::default()
    }
}

/// Only an MSS option.
pub fn mss_only(mss: u16) -> TcpOptions {
    TcpOptions {
        mss: Some(mss),
        ..Default::default()
    }
}

/// An established connection as the peer sees it.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub id: ConnId,
    pub peer: Peer,
    /// The peer's ISN.
    pub peer_isn: SeqNumber,
    /// The stack's ISN.
    pub our_isn: SeqNumber,
    /// Next sequence number the peer sends (the stack's rcv_nxt).
    pub peer_nxt: SeqNumber,
    /// Next sequence number the stack sends (what the peer acknowledges).
    pub our_nxt: SeqNumber,
}

impl Conn {
    /// An ACK-flagged segment from the peer at its current sequence numbers.
    pub fn ack_seg(&self) -> Seg {
        self.peer
            .seg(ACK)
            .seq(self.peer_nxt)
            .ack(self.our_nxt)
            .win(65535)
    }

    /// A data segment at the peer's next sequence number (does not advance it).
    pub fn data_seg(&self, data: &[u8]) -> Seg {
        self.ack_seg().data(data)
    }
}
/// Two accepted connections on [`LISTEN_PORT`], from peer ports 40000 and 40001 (peer ISNs
/// 1000 and 5000, MSS 1460 only, no timestamps), events drained.
pub fn two_accepted(stack: &mut Stack) -> (Conn, Conn) {
    let l = stack.listen(LISTEN_PORT, 16).expect("listen");
    let mut open = |port, isn| {
        passive_open(
            stack,
            l,
            Peer::new(port, LISTEN_PORT),
            ms(0),
            isn,
            mss_only(1460),
            65535,
        )
    };
    let a = open(40000, 1000);
    let b = open(40001, 5000);
    while stack.poll_event().is_some() {}
    (a, b)
}

/// Listens on [`LISTEN_PORT`] and completes a passive open from `peer` at `now`, with the
/// peer offering `syn_opts`; the final ACK carries `ack_window` and `ack_opts`. Drains the
/// stack and returns the accepted connection.
pub fn passive_open(
    stack: &mut Stack,
    listener: ListenerId,
    peer: Peer,
    now: Instant,
    peer_isn: u32,
    syn_opts: TcpOptions,
    ack_window: u16,
) -> Conn {
    let peer_isn = SeqNumber(peer_isn);
    peer.send(stack, now, peer.seg(SYN).seq(peer_isn).opts(syn_opts));
    let (synack, _) = peer.recv_one(stack, now);
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!(synack.ack, peer_isn + 1u32);
    let our_isn = synack.seq;
    let mut ack = peer
        .seg(ACK)
        .seq(peer_isn + 1u32)
        .ack(our_isn + 1u32)
        .win(ack_window);
    if let (Some((tsval, _)), Some((their, _))) = (syn_opts.timestamp, synack.options.timestamp) {
        ack = ack.ts(tsval, their);
    }
    peer.send(stack, now, ack);
    peer.recv_nothing(stack, now);
    let id = stack.accept(listener).expect("handshake completed");
    Conn {
        id,
        peer,
        peer_isn,
        our_isn,
        peer_nxt: peer_isn + 1u32,
        our_nxt: our_isn + 1u32,
    }
}

/// A listener on [`LISTEN_PORT`] and one established passive connection from port 40000,
/// peer offering only MSS 1460 (no timestamps, SACK or scaling), window 65535.
pub fn established(stack: &mut Stack, now: Instant) -> Conn {
    let l = stack.listen(LISTEN_PORT, 16).expect("listen");
    let conn = passive_open(
        stack,
        l,
        Peer::new(40000, LISTEN_PORT),
        now,
        1000,
        mss_only(1460),
        65535,
    );
    while stack.poll_event().is_some() {}
    conn
}

/// Completes an active open to `peer` (who listens on `peer.port`): returns the connection
/// after the peer answered the SYN with a SYN-ACK carrying `synack_opts`.
pub fn active_open(
    stack: &mut Stack,
    now: Instant,
    remote_port: u16,
    peer_isn: u32,
    synack_opts: TcpOptions,
    window: u16,
) -> Conn {
    let id = stack.connect(now, PEER_IP, remote_port).expect("connect");
    let probe = Peer::new(remote_port, 0);
    let (syn, _) = probe.recv_one(stack, now);
    // RFC 3168 6.1.1: the default policy (DCTCP) may ask for ECN; this peer does not answer it.
    assert_eq!(TcpFlags(syn.flags.0 & !(ECE | CWR).0), SYN);
    let peer = Peer::new(remote_port, syn.src_port);
    let peer_isn = SeqNumber(peer_isn);
    let mut synack = peer
        .seg(SYN | ACK)
        .seq(peer_isn)
        .ack(syn.seq + 1u32)
        .win(window)
        .opts(synack_opts);
    if let (Some((tsval, _)), Some((their, _))) = (synack_opts.timestamp, syn.options.timestamp) {
        synack = synack.ts(tsval, their);
    }
    peer.send(stack, now, synack);
    let (ack, _) = peer.recv_one(stack, now);
    assert_eq!(ack.flags, ACK);
    Conn {
        id,
        peer,
        peer_isn,
        our_isn: syn.seq,
        peer_nxt: peer_isn + 1u32,
        our_nxt: syn.seq + 1u32,
    }
}

/// All pending events.
pub fn events(stack: &mut Stack) -> Vec<Event> {
    std::iter::from_fn(|| stack.poll_event()).collect()
}

/// The readiness reported for `id` among `events`, if any.
pub fn readiness_of(events: &[Event], id: ConnId) -> Option<Readiness> {
    events.iter().find_map(|e| match e {
        Event::Conn(c, r) if *c == id => Some(*r),
        _ => None,
    })
}

/// Reads everything readable on `id`.
pub fn read_all(stack: &mut Stack, id: ConnId) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stack.recv(id, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// `n` bytes of a recognisable pattern.
pub fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}
