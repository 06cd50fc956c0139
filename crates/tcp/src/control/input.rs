//! Segments and ARP packets the data-path hands to the control plane.

use std::net::Ipv4Addr;

use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};
use sluice_wire::EthernetAddress;

use super::cookie;
use super::isn;
use super::state::{ConnError, Negotiated, TcpState};
use crate::cc::Algorithm;
use crate::datapath::classify::TcpInput;
use crate::datapath::state::{flags, sack_flags, PreState, ProtoState, SackSender};
use crate::datapath::summary::{Actions, HeaderSummary};
use crate::events::bits;
use crate::frame::{emit_segment, Route, TxChecksum};
use crate::stack::Stack;
use crate::table::FourTuple;
use crate::timer::Timer;

/// RFC 7323 2.3: window scale shifts above 14 are treated as 14 (MUST, with a counter-free log).
const MAX_WSCALE: u8 = 14;

impl Stack {
    // ---- ARP ---------------------------------------------------------------------------

    pub(crate) fn handle_arp(&mut self, arp: &ArpRepr) {
        if arp.target_ip != self.cfg.ip {
            self.counters.not_for_us += 1;
            return;
        }
        self.neighbors
            .learn(arp.source_ip, arp.source_mac, self.now);
        if arp.operation == ArpOperation::Request {
            let reply = ArpRepr {
                operation: ArpOperation::Reply,
                source_mac: self.cfg.mac,
                source_ip: self.cfg.ip,
                target_mac: arp.source_mac,
                target_ip: arp.source_ip,
            };
            if self.push_arp(arp.source_mac, &reply) {
                self.counters.arp_replies += 1;
            }
        }
        // Connections waiting for this neighbor send their SYN now.
        let mut i = 0;
        while i < self.awaiting_arp.len() {
            let slot = self.awaiting_arp[i];
            let c = &self.conns[slot as usize];
            if c.tuple.remote_ip == arp.source_ip {
                self.awaiting_arp.swap_remove(i);
                if c.state == TcpState::SynSent {
                    self.dp.pre[slot as usize].peer_mac = arp.source_mac;
                    self.send_syn(slot, false);
                }
            } else {
                i += 1;
            }
        }
    }

    fn push_arp(&mut self, dst: EthernetAddress, arp: &ArpRepr) -> bool {
        let eth = EthernetRepr {
            dst,
            src: self.cfg.mac,
            ethertype: EtherType::Arp,
            vlan: None,
        };
        let ok = self.out.push_with(|buf| {
            let h = eth.emit(buf).ok()?;
            let n = arp.emit(buf.get_mut(h..)?).ok()?;
            Some(h + n)
        });
        if !ok {
            self.counters.control_queue_full += 1;
        }
        ok
    }

    pub(crate) fn send_arp_request(&mut self, ip: Ipv4Addr) {
        let req = ArpRepr {
            operation: ArpOperation::Request,
            source_mac: self.cfg.mac,
            source_ip: self.cfg.ip,
            target_mac: EthernetAddress::default(),
            target_ip: ip,
        };
        if self.push_arp(EthernetAddress::BROADCAST, &req) {
            self.counters.arp_requests += 1;
        }
    }

    // ---- frames the control plane builds ------------------------------------------------

    /// Queues a control segment; counts it if the queue is full.
    fn push_segment(&mut self, route: &Route, header: &TcpHeader) -> bool {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let ident = self.ip_ident;
        let ok = self
            .out
            .push_with(|buf| emit_segment(buf, route, ident, header, 0, TxChecksum::Full, |_| {}));
        if !ok {
            self.counters.control_queue_full += 1;
        }
        ok
    }

    /// RFC 9293 3.10.7.1: the RST for a segment that belongs to no connection (reset
    /// generation): `<SEQ=SEG.ACK><CTL=RST>` if it had ACK, else `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`.
    fn reply_rst(&mut self, input: &TcpInput<'_>) {
        let t = &input.tcp;
        if t.flags.contains(TcpFlags::RST) {
            return; // never answer a RST with a RST
        }
        let (seq, ack, tcp_flags) = if t.flags.contains(TcpFlags::ACK) {
            (t.ack, SeqNumber(0), TcpFlags::RST)
        } else {
            let len = input.payload.len() as u32
                + t.flags.contains(TcpFlags::SYN) as u32
                + t.flags.contains(TcpFlags::FIN) as u32;
            (SeqNumber(0), t.seq + len, TcpFlags::RST | TcpFlags::ACK)
        };
        let route = Route {
            src_mac: self.cfg.mac,
            dst_mac: input.src_mac,
            src_ip: self.cfg.ip,
            dst_ip: input.ip.src,
        };
        let header = TcpHeader {
            src_port: t.dst_port,
            dst_port: t.src_port,
            seq,
            ack,
            flags: tcp_flags,
            window: 0,
            urgent: 0,
            options: TcpOptions::default(),
        };
        if self.push_segment(&route, &header) {
            self.counters.rst_sent += 1;
        }
    }

    /// A RST on a known connection (abort, or refusing a half-open one).
    pub(crate) fn send_rst_for(&mut self, slot: u32, seq: SeqNumber) {
        let c = &self.conns[slot as usize];
        let route = Route {
            src_mac: self.cfg.mac,
            dst_mac: self.dp.pre[slot as usize].peer_mac,
            src_ip: self.cfg.ip,
            dst_ip: c.tuple.remote_ip,
        };
        let header = TcpHeader {
            src_port: c.tuple.local_port,
            dst_port: c.tuple.remote_port,
            seq,
            ack: self.dp.proto[slot as usize].rcv_nxt,
            flags: TcpFlags::RST | TcpFlags::ACK,
            window: 0,
            urgent: 0,
            options: TcpOptions::default(),
        };
        if self.push_segment(&route, &header) {
            self.counters.rst_sent += 1;
        }
    }

    /// Our window scale: the smallest shift that lets the receive buffer be advertised.
    fn our_wscale(&self) -> u8 {
        let mut shift = 0;
        while shift < MAX_WSCALE && (self.cfg.rx_buffer >> shift) > u16::MAX as usize {
            shift += 1;
        }
        shift
    }

    fn ts_clock(&self) -> u32 {
        self.now.as_millis() as u32
    }

    /// SYN or SYN-ACK options we offer, given what the peer offered (None for an active open).
    fn syn_options(&self, slot: u32, peer: Option<&Negotiated>) -> TcpOptions {
        let mut o = TcpOptions {
            mss: Some(self.cfg.local_mss()),
            ..Default::default()
        };
        let offer = |ours: bool, theirs: bool| ours && peer.is_none_or(|_| theirs);
        if offer(
            self.cfg.window_scaling,
            peer.is_some_and(|p| p.snd_wscale.is_some()),
        ) {
            o.window_scale = Some(self.our_wscale());
        }
        if offer(self.cfg.sack, peer.is_some_and(|p| p.sack)) {
            o.sack_permitted = true;
        }
        if offer(
            self.cfg.timestamps,
            peer.is_some_and(|p| p.ts_recent.is_some()),
        ) {
            let ps = &self.dp.proto[slot as usize];
            o.timestamp = Some((
                self.ts_clock().wrapping_add(ps.ts_offset),
                peer.and_then(|p| p.ts_recent).unwrap_or(0),
            ));
        }
        o
    }

    /// Sends (or resends) our SYN (active open) or SYN-ACK (passive open / simultaneous open).
    pub(crate) fn send_syn(&mut self, slot: u32, with_ack: bool) {
        let s = slot as usize;
        let c = self.conns[s];
        let peer = with_ack.then_some(&c.negotiated);
        let options = self.syn_options(slot, peer);
        let mut tcp_flags = TcpFlags::SYN;
        if with_ack {
            tcp_flags |= TcpFlags::ACK;
            if c.negotiated.ecn {
                // RFC 3168 6.1.1: an ECN-setup SYN-ACK has ECE set and CWR clear.
                tcp_flags |= TcpFlags::ECE;
            }
        } else {
            // RFC 3168 6.1.1: an ECN-setup SYN has ECE and CWR set. ECT is allowed only if
            // no non-ECN-setup SYN was sent, so a retransmission asks only if every SYN
            // before it did (an algorithm chosen meanwhile can withdraw ECN, not add it).
            let ask = self.ecn_wanted(slot) && self.conns[s].syn_ecn != Some(false);
            self.conns[s].syn_ecn = Some(ask);
            if ask {
                tcp_flags |= TcpFlags::ECE | TcpFlags::CWR;
            }
        }
        let header = TcpHeader {
            src_port: c.tuple.local_port,
            dst_port: c.tuple.remote_port,
            seq: c.iss,
            ack: if with_ack { c.irs + 1u32 } else { SeqNumber(0) },
            flags: tcp_flags,
            // RFC 7323 2.2: the window in a SYN is never scaled.
            window: self.cfg.rx_buffer.min(u16::MAX as usize) as u16,
            urgent: 0,
            options,
        };
        let route = self.route_of_tuple(slot);
        self.push_segment(&route, &header);
        let c = &self.conns[s];
        let rto = c.timers.get(Timer::Rto).unwrap_or(self.now + c.rto);
        self.arm_timer(slot, Timer::Rto, rto);
    }

    fn route_of_tuple(&self, slot: u32) -> Route {
        Route {
            src_mac: self.cfg.mac,
            dst_mac: self.dp.pre[slot as usize].peer_mac,
            src_ip: self.cfg.ip,
            dst_ip: self.conns[slot as usize].tuple.remote_ip,
        }
    }

    /// RFC 5961 challenge ACK (and the plain ACK RFC 9293 asks for on unacceptable segments),
    /// rate-limited per connection, never by a host-global counter.
    fn challenge_ack(&mut self, slot: u32) {
        let limit = self.cfg.challenge_ack_limit;
        if self.conns[slot as usize].allow_challenge_ack(self.now, limit) {
            self.counters.challenge_acks += 1;
            self.send_ack(slot);
        } else {
            self.counters.challenge_acks_suppressed += 1;
        }
    }

    /// Fills the pre-processor's identification of a new connection and its timestamp
    /// offset; the data-path does not own it until `install`.
    fn identify(&mut self, slot: u32, tuple: &FourTuple, peer_mac: EthernetAddress) {
        let s = slot as usize;
        self.dp.pre[s] = PreState {
            peer_mac,
            peer_ip: tuple.remote_ip,
            local_port: tuple.local_port,
            remote_port: tuple.remote_port,
            active: false,
        };
        self.dp.proto[s].ts_offset = isn::timestamp_offset(&self.ts_secret, self.cfg.ip, tuple);
    }

    // ---- active open ---------------------------------------------------------------------

    pub(crate) fn start_active_open(&mut self, slot: u32) {
        let s = slot as usize;
        let tuple = self.conns[s].tuple;
        let c = &mut self.conns[s];
        c.state = TcpState::SynSent;
        c.iss = isn::initial_sequence(&self.isn_secret, self.cfg.ip, &tuple, self.now);
        self.identify(slot, &tuple, EthernetAddress::default());
        match self.neighbors.lookup(tuple.remote_ip) {
            Some(mac) => {
                self.dp.pre[s].peer_mac = mac;
                self.send_syn(slot, false);
            }
            None => {
                self.awaiting_arp.push(slot);
                self.send_arp_request(tuple.remote_ip);
                self.arm_timer(slot, Timer::Rto, self.now + self.conns[s].rto);
            }
        }
    }

    // ---- exceptions ------------------------------------------------------------------------

    /// A TCP segment the pre-processor did not put on the fast path.
    pub(crate) fn handle_exception(&mut self, input: TcpInput<'_>) {
        let Some(slot) = input.slot else {
            self.no_connection(&input);
            return;
        };
        match self.conns[slot as usize].state {
            TcpState::SynSent => self.syn_sent(slot, &input),
            TcpState::SynReceived => self.syn_received(slot, &input),
            TcpState::TimeWait => self.time_wait(slot, &input),
            TcpState::Closed => self.reply_rst(&input),
            _ => self.synchronized(slot, &input),
        }
    }

    /// Options the peer offered in its SYN, sanitized.
    fn peer_options(&self, t: &TcpHeader) -> Negotiated {
        let o = &t.options;
        Negotiated {
            // RFC 9293 MUST-15: 536 when the option is absent. Values below 88 would make
            // segments mostly header; clamp (RFC 9293 3.7.1 leaves the floor to the host).
            peer_mss: o.mss.unwrap_or(536).max(88),
            // RFC 7323 2.3: a shift above 14 is used as 14.
            snd_wscale: if self.cfg.window_scaling {
                o.window_scale.map(|w| w.min(MAX_WSCALE))
            } else {
                None
            },
            sack: self.cfg.sack && o.sack_permitted,
            ts_recent: if self.cfg.timestamps {
                o.timestamp.map(|(v, _)| v)
            } else {
                None
            },
            // Decided by the caller: it depends on which SYN this is (RFC 3168 6.1.1).
            ecn: false,
        }
    }

    /// LISTEN, or no connection at all (RFC 9293 3.10.7.1-2).
    fn no_connection(&mut self, input: &TcpInput<'_>) {
        let t = &input.tcp;
        let listener = self.listener_by_port.get(&t.dst_port).copied();
        let Some(index) = listener else {
            // RFC 9293 3.10.7.1 (CLOSED): reset anything but a RST.
            self.reply_rst(input);
            return;
        };
        if t.flags.contains(TcpFlags::RST) {
            return;
        }
        if t.flags.contains(TcpFlags::ACK) {
            if !t.flags.contains(TcpFlags::SYN) && self.try_cookie(index, input) {
                return;
            }
            // RFC 9293 3.10.7.2: an ACK in LISTEN is answered with a RST.
            self.reply_rst(input);
            return;
        }
        if !t.flags.contains(TcpFlags::SYN) || t.flags.contains(TcpFlags::FIN) {
            return;
        }
        if input.ip.src.is_broadcast()
            || input.ip.src.is_multicast()
            || input.src_mac.is_multicast()
        {
            self.counters.syn_dropped += 1;
            return;
        }
        let tuple = FourTuple {
            remote_ip: input.ip.src,
            remote_port: t.src_port,
            local_port: t.dst_port,
        };
        let Some(Some(l)) = self.listeners.get(index as usize) else {
            return;
        };
        let backlog_full = l.syn_pending >= self.cfg.syn_backlog;
        let slot = if backlog_full {
            None
        } else {
            self.table.insert(&tuple)
        };
        let algorithm = l.cc_algorithm;
        let Some(slot) = slot else {
            self.send_cookie_syn_ack(input, &tuple, algorithm);
            return;
        };
        if let Some(Some(l)) = self.listeners.get_mut(index as usize) {
            l.syn_pending += 1;
        }
        self.open_slot(slot, tuple);
        let s = slot as usize;
        let negotiated = Negotiated {
            ecn: self.ecn_accepted(t, algorithm),
            ..self.peer_options(t)
        };
        let c = &mut self.conns[s];
        c.cc_algorithm = algorithm;
        c.state = TcpState::SynReceived;
        c.listener = Some(index);
        c.irs = t.seq;
        c.iss = isn::initial_sequence(&self.isn_secret, self.cfg.ip, &tuple, self.now);
        c.negotiated = negotiated;
        self.identify(slot, &tuple, input.src_mac);
        self.neighbors
            .learn(tuple.remote_ip, input.src_mac, self.now);
        self.send_syn(slot, true);
    }

    /// The backlog is full: answer with a SYN cookie and keep no state (AccelTCP 4.1).
    fn send_cookie_syn_ack(
        &mut self,
        input: &TcpInput<'_>,
        tuple: &FourTuple,
        algorithm: Algorithm,
    ) {
        let t = &input.tcp;
        let peer = self.peer_options(t);
        // ECN rides in the TSval with the other options; without timestamps it is not kept
        // and the cookie connection runs without ECN (as Linux does).
        let ecn = self.ecn_accepted(t, algorithm) && peer.ts_recent.is_some();
        let isn = cookie::encode_isn(
            &self.cookie_secret,
            self.cfg.ip,
            tuple,
            t.seq,
            self.now,
            peer.peer_mss,
        );
        let mut options = TcpOptions {
            mss: Some(self.cfg.local_mss()),
            ..Default::default()
        };
        if let Some(ts_val) = peer.ts_recent {
            // Options ride in the TSval's low bits; without timestamps they are not kept.
            let offset = isn::timestamp_offset(&self.ts_secret, self.cfg.ip, tuple);
            let tsval = cookie::encode_tsval(
                self.ts_clock().wrapping_add(offset),
                peer.snd_wscale,
                peer.sack,
                ecn,
            );
            options.timestamp = Some((tsval, ts_val));
            options.sack_permitted = peer.sack;
            if peer.snd_wscale.is_some() {
                options.window_scale = Some(self.our_wscale());
            }
        }
        let mut flags = TcpFlags::SYN | TcpFlags::ACK;
        if ecn {
            // RFC 3168 6.1.1: the ECN-setup SYN-ACK.
            flags |= TcpFlags::ECE;
        }
        let header = TcpHeader {
            src_port: t.dst_port,
            dst_port: t.src_port,
            seq: isn,
            ack: t.seq + 1u32,
            flags,
            window: self.cfg.rx_buffer.min(u16::MAX as usize) as u16,
            urgent: 0,
            options,
        };
        let route = Route {
            src_mac: self.cfg.mac,
            dst_mac: input.src_mac,
            src_ip: self.cfg.ip,
            dst_ip: input.ip.src,
        };
        if self.push_segment(&route, &header) {
            self.counters.syn_cookies_sent += 1;
        }
    }

    /// The options of the cookie `input` acknowledges, if it acknowledges a valid one.
    fn decode_cookie(&self, input: &TcpInput<'_>) -> Option<cookie::CookieOptions> {
        let t = &input.tcp;
        let tuple = FourTuple {
            remote_ip: input.ip.src,
            remote_port: t.src_port,
            local_port: t.dst_port,
        };
        let ts_ecr = t.options.timestamp.map(|(_, ecr)| ecr);
        cookie::decode(
            &self.cookie_secret,
            self.cfg.ip,
            &tuple,
            t.seq - 1u32,
            t.ack - 1u32,
            self.now,
            ts_ecr,
        )
    }

    /// An ACK in LISTEN may complete a cookie handshake.
    fn try_cookie(&mut self, index: u16, input: &TcpInput<'_>) -> bool {
        let t = &input.tcp;
        let tuple = FourTuple {
            remote_ip: input.ip.src,
            remote_port: t.src_port,
            local_port: t.dst_port,
        };
        let Some(opts) = self.decode_cookie(input) else {
            self.counters.syn_cookies_rejected += 1;
            return false;
        };
        let Some(Some(l)) = self.listeners.get(index as usize) else {
            return false;
        };
        if l.accept.len() >= l.backlog {
            self.counters.accept_queue_overflow += 1;
            return true; // drop silently; the client retransmits
        }
        let algorithm = l.cc_algorithm;
        let Some(slot) = self.table.insert(&tuple) else {
            self.counters.syn_dropped += 1;
            return true;
        };
        self.counters.syn_cookies_accepted += 1;
        self.open_slot(slot, tuple);
        let s = slot as usize;
        let negotiated = Negotiated {
            peer_mss: opts.mss,
            snd_wscale: opts.wscale,
            sack: opts.sack,
            ts_recent: t.options.timestamp.map(|(v, _)| v),
            // What the cookie's SYN-ACK said (RFC 3168 6.1.1), whatever the listener
            // chose since.
            ecn: opts.ecn,
        };
        let c = &mut self.conns[s];
        c.cc_algorithm = algorithm;
        c.state = TcpState::SynReceived;
        c.listener = Some(index);
        c.irs = t.seq - 1u32;
        c.iss = t.ack - 1u32;
        c.negotiated = negotiated;
        if let Some(Some(l)) = self.listeners.get_mut(index as usize) {
            l.syn_pending += 1;
        }
        self.identify(slot, &tuple, input.src_mac);
        // The cookie ACK's own window is unscaled in the SYN sense; treat it as scaled.
        self.establish_passive(slot, input);
        true
    }

    /// RFC 9293 3.10.7.3: SYN-SENT.
    fn syn_sent(&mut self, slot: u32, input: &TcpInput<'_>) {
        let t = &input.tcp;
        let s = slot as usize;
        let iss = self.conns[s].iss;
        let has_ack = t.flags.contains(TcpFlags::ACK);
        if has_ack && (t.ack.seq_le(iss) || t.ack.seq_gt(iss + 1u32)) {
            // RFC 9293 3.10.7.3: an unacceptable ACK in SYN-SENT gets a RST (unless it is one).
            self.reply_rst(input);
            return;
        }
        if t.flags.contains(TcpFlags::RST) {
            if has_ack {
                // RFC 9293 3.10.7.3: "connection reset" (refused).
                self.counters.rst_received += 1;
                self.conns[s].error = Some(ConnError::Refused);
                self.events.raise(slot, bits::ERROR);
                self.enter_closed(slot);
            }
            return;
        }
        if !t.flags.contains(TcpFlags::SYN) {
            return;
        }
        // Options apply only if we offered them too (RFC 7323 1.3, RFC 2018): our SYN
        // offered exactly what the configuration enables, which peer_options checks.
        // RFC 3168 6.1.1: ECN is on if our SYNs asked for it (what they asked, not what
        // the algorithm now wants) and the SYN-ACK is ECN-setup (ECE without CWR); a
        // simultaneous open (a SYN without ACK) runs without ECN.
        let negotiated = Negotiated {
            ecn: has_ack
                && self.conns[s].syn_ecn == Some(true)
                && t.flags.contains(TcpFlags::ECE)
                && !t.flags.contains(TcpFlags::CWR),
            ..self.peer_options(t)
        };
        let c = &mut self.conns[s];
        c.irs = t.seq;
        c.negotiated = negotiated;
        self.dp.pre[s].peer_mac = input.src_mac;
        if has_ack {
            self.install(slot, t.ack, t.window, false);
            self.conns[s].state = TcpState::Established;
            self.conns[s].timers.stop(Timer::Rto);
            self.events.raise(slot, bits::CONNECTED | bits::WRITABLE);
            self.send_ack(slot);
        } else {
            // Simultaneous open (RFC 9293 3.5, figure 7; MUST-10).
            self.conns[s].state = TcpState::SynReceived;
            self.conns[s].timers.stop(Timer::Rto);
            self.send_syn(slot, true);
        }
    }

    /// RFC 9293 3.10.7.4 in SYN-RECEIVED.
    fn syn_received(&mut self, slot: u32, input: &TcpInput<'_>) {
        let t = &input.tcp;
        let s = slot as usize;
        let c = self.conns[s];
        let rcv_nxt = c.irs + 1u32;
        if t.flags.contains(TcpFlags::SYN) && t.seq == c.irs && !t.flags.contains(TcpFlags::ACK) {
            // The peer retransmitted its SYN: our SYN-ACK was lost.
            self.send_syn(slot, true);
            return;
        }
        if t.flags.contains(TcpFlags::RST) {
            // RFC 5961 3.2 applies here as in every synchronized state: exact match only.
            if t.seq == rcv_nxt {
                self.counters.rst_received += 1;
                if c.listener.is_some() {
                    self.free_slot(slot); // passive open: back to LISTEN
                } else {
                    self.conns[s].error = Some(ConnError::Refused);
                    self.events.raise(slot, bits::ERROR);
                    self.enter_closed(slot);
                }
            }
            return;
        }
        if t.flags.contains(TcpFlags::SYN) {
            // RFC 9293 3.5 figure 7 (line 6): in a simultaneous open the peer's SYN-ACK,
            // its SYN again now acknowledging ours, completes the handshake. Its window is
            // a SYN's, never scaled (RFC 7323 2.2).
            if c.listener.is_none()
                && t.flags.contains(TcpFlags::ACK)
                && t.seq == c.irs
                && t.ack == c.iss + 1u32
            {
                self.establish_simultaneous(slot, t.ack, t.window, false);
            }
            return; // RFC 5961 4: no challenge ACK before synchronization; just drop
        }
        if !t.flags.contains(TcpFlags::ACK) {
            return;
        }
        if t.ack != c.iss + 1u32 {
            // A SYN first answered by a cookie (backlog full) and, retransmitted, by this
            // half-open entry has two ISNs in play. An ACK that carries a valid cookie proves
            // the peer took the cookie SYN-ACK and is established on it: the cookie wins,
            // where a RST would kill a connection the peer already uses (AccelTCP 4.1).
            if let Some(index) = c.listener {
                // The same SYN (its ISN) only: a stale cookie of an earlier incarnation of
                // the 4-tuple must not replace a newer half-open entry.
                if t.seq - 1u32 == c.irs && self.decode_cookie(input).is_some() {
                    let room = matches!(
                        self.listeners.get(index as usize),
                        Some(Some(l)) if l.accept.len() < l.backlog
                    );
                    if !room {
                        // Keep the half-open entry: its SYN-ACK retransmission makes the
                        // peer resend this ACK once the accept queue drains.
                        self.counters.accept_queue_overflow += 1;
                        return;
                    }
                    self.counters.half_open_replaced_by_cookie += 1;
                    self.free_slot(slot);
                    if self.try_cookie(index, input) {
                        return;
                    }
                }
            }
            // RFC 9293 3.10.7.4: an unacceptable ACK in SYN-RECEIVED gets a RST.
            self.reply_rst(input);
            return;
        }
        if c.listener.is_some() {
            self.establish_passive(slot, input);
        } else {
            self.establish_simultaneous(slot, t.ack, t.window, true);
            self.resume_segment(slot, input);
        }
    }

    /// A simultaneous open completes (RFC 9293 3.5 figure 7): the data-path takes over, and
    /// a FIN the application asked for in SYN-RECEIVED is queued now (RFC 9293 3.10.4).
    fn establish_simultaneous(
        &mut self,
        slot: u32,
        ack: SeqNumber,
        window: u16,
        window_scaled: bool,
    ) {
        let s = slot as usize;
        self.install(slot, ack, window, window_scaled);
        let c = &mut self.conns[s];
        c.state = TcpState::Established;
        c.timers.stop(Timer::Rto);
        self.events.raise(slot, bits::CONNECTED | bits::WRITABLE);
        if std::mem::take(&mut self.conns[s].fin_deferred) {
            // From ESTABLISHED this cannot fail.
            let _ = self.queue_fin(slot);
        }
    }

    /// The final ACK of a passive open: into the accept queue, and the segment's data and
    /// FIN through the data-path.
    fn establish_passive(&mut self, slot: u32, input: &TcpInput<'_>) {
        let s = slot as usize;
        let Some(index) = self.conns[s].listener else {
            return;
        };
        let Some(Some(l)) = self.listeners.get_mut(index as usize) else {
            self.abort_slot(slot, ConnError::Aborted);
            return;
        };
        if l.accept.len() >= l.backlog {
            // Drop the ACK and stay in SYN-RECEIVED; our SYN-ACK retransmission retries.
            self.counters.accept_queue_overflow += 1;
            return;
        }
        l.syn_pending = l.syn_pending.saturating_sub(1);
        l.accept.push_back(slot);
        let t = &input.tcp;
        self.install(slot, t.ack, t.window, true);
        self.conns[s].state = TcpState::Established;
        self.conns[s].timers.stop(Timer::Rto);
        self.conns[s].retries = 0;
        self.events.raise_listener(index);
        self.resume_segment(slot, input);
    }

    /// Runs the rest of a handshake-completing segment (data, FIN) through the data-path.
    fn resume_segment(&mut self, slot: u32, input: &TcpInput<'_>) {
        if input.payload.is_empty() && !input.tcp.flags.contains(TcpFlags::FIN) {
            return;
        }
        let summary = summary_of(slot, input);
        self.dp.batch[0] = summary;
        let frames: [&[u8]; 1] = [input.payload];
        self.run_single(&frames);
    }

    /// Hands the connection to the data-path: the stage tables get their initial state.
    /// `window_scaled` says whether the peer's window field is already subject to scaling
    /// (it never is in a SYN, RFC 7323 2.2).
    fn install(&mut self, slot: u32, ack: SeqNumber, window: u16, window_scaled: bool) {
        let s = slot as usize;
        let c = self.conns[s];
        let n = c.negotiated;
        // RFC 7323 2.2: scaling applies in both directions only when both SYNs offered it.
        let (snd_wscale, rcv_wscale) = match n.snd_wscale {
            Some(snd) => (snd, self.our_wscale()),
            None => (0, 0),
        };
        let snd_wnd = if window_scaled {
            (window as u32) << snd_wscale
        } else {
            window as u32
        };
        let ts = n.ts_recent.is_some();
        // Effective send MSS: the peer's, bounded by our MTU, less the timestamp option.
        let mss = n.peer_mss.min(self.cfg.local_mss()) - if ts { 12 } else { 0 };
        let rx_cap = self.bufs[s].as_ref().map_or(0, |b| b.rx.capacity());
        let ts_offset = self.dp.proto[s].ts_offset;
        let mut fl = 0;
        if ts {
            fl |= flags::TIMESTAMPS;
        }
        if n.sack {
            fl |= flags::SACK;
        }
        if self.cfg.nagle {
            fl |= flags::NAGLE;
        }
        let snd = c.iss + 1u32;
        let rcv = c.irs + 1u32;
        self.dp.proto[s] = ProtoState {
            rcv_nxt: rcv,
            rx_avail: rx_cap,
            rx_fin_seq: rcv,
            ts_recent: n.ts_recent.unwrap_or(0),
            snd_una: ack.max(snd),
            snd_nxt: ack.max(snd),
            snd_max: ack.max(snd),
            tx_end: snd,
            snd_wnd,
            max_snd_wnd: snd_wnd,
            snd_wl1: c.irs,
            snd_wl2: ack,
            cwnd: 0,
            ts_offset,
            rtt_seq: snd,
            rtt_sent_us: 0,
            mss,
            snd_wscale,
            rcv_wscale,
            dupacks: 0,
            ooo_count: 0,
            flags: fl,
            ecn: if n.ecn {
                crate::datapath::ecn::bits::ON
            } else {
                0
            },
            ooo_seen: 0,
            rto_probe: None,
            sack: SackSender {
                // RFC 6675 needs the peer's SACK blocks: without SACK-permitted (RFC 2018 2)
                // the connection recovers by go-back-N.
                flags: if n.sack && self.dp.sacked_stride > 0 {
                    sack_flags::ENABLED
                } else {
                    0
                },
                recovery_point: snd,
                high_rxt: snd,
                lost_below: snd,
                rxt_snd_max: snd,
                count: 0,
            },
        };
        self.counters.ecn_connections += u64::from(n.ecn);
        self.dp.post[s] = Default::default();
        self.cc_start(slot);
        self.dp.pre[s].active = true;
        if let Some(b) = self.bufs[s].as_mut() {
            b.reset_at(rcv, snd);
        }
        let c = &mut self.conns[s];
        c.rto = self.cfg.rto_initial;
        c.retries = 0;
        c.last_heard = self.now;
    }

    /// TIME-WAIT (RFC 9293 3.10.7.4): a retransmitted FIN is acknowledged and restarts the
    /// 2 MSL timer; a new SYN with a higher sequence number may reopen (RFC 6191 spirit,
    /// RFC 9293 MAY-2); RSTs are ignored (RFC 1337).
    fn time_wait(&mut self, slot: u32, input: &TcpInput<'_>) {
        let t = &input.tcp;
        let s = slot as usize;
        let rcv_nxt = self.dp.proto[s].rcv_nxt;
        if t.flags.contains(TcpFlags::RST) {
            return;
        }
        if t.flags.contains(TcpFlags::SYN) && !t.flags.contains(TcpFlags::ACK) {
            // Reopening frees the slot, so only when the application no longer holds a
            // handle to it (the handle must stay valid until close; MAY-2 is optional).
            if t.seq.seq_gt(rcv_nxt)
                && !self.conns[s].app_owned
                && self.listener_by_port.contains_key(&t.dst_port)
            {
                self.free_slot(slot);
                let mut again = *input;
                again.slot = None;
                self.no_connection(&again);
            } else {
                self.challenge_ack(slot);
            }
            return;
        }
        if t.flags.contains(TcpFlags::FIN) {
            self.arm_timer(slot, Timer::TimeWait, self.now + self.cfg.time_wait);
            self.challenge_ack(slot);
        }
    }

    /// SYN, RST, URG or missing ACK on a synchronized connection.
    fn synchronized(&mut self, slot: u32, input: &TcpInput<'_>) {
        let t = &input.tcp;
        let s = slot as usize;
        let ps = self.dp.proto[s];
        if t.flags.contains(TcpFlags::RST) {
            // RFC 5961 3.2 (which RFC 9293 3.10.7.4 adopts): reset only on an exact match of
            // rcv_nxt; anywhere else in the window earns a challenge ACK.
            if t.seq == ps.rcv_nxt {
                self.counters.rst_received += 1;
                self.conns[s].error = Some(ConnError::Reset);
                self.events.raise(slot, bits::ERROR | bits::READABLE);
                self.enter_closed(slot);
            } else if t.seq.seq_gt(ps.rcv_nxt) && t.seq.seq_lt(ps.rcv_nxt + ps.rx_avail.max(1)) {
                self.challenge_ack(slot);
            } else {
                self.counters.out_of_window += 1;
            }
            return;
        }
        if t.flags.contains(TcpFlags::SYN) {
            // RFC 5961 4.2: any SYN in a synchronized state gets a challenge ACK, never a reset.
            self.challenge_ack(slot);
            return;
        }
        if !t.flags.contains(TcpFlags::ACK) {
            // RFC 9293 3.10.7.4 fifth: "if the ACK bit is off, drop the segment".
            return;
        }
        // URG: urgent data is delivered inline (RFC 6093); process as a normal segment.
        if self.dp.pre[s].active {
            self.dp.batch[0] = summary_of(slot, input);
            let frames: [&[u8]; 1] = [input.payload];
            self.run_single(&frames);
        }
    }

    /// Answers a segment the protocol stage refused (out of window, PAWS, bad ACK).
    pub(crate) fn datapath_exception(&mut self, s: &HeaderSummary) {
        if s.actions.contains(Actions::PAWS) {
            self.counters.paws_drops += 1;
            let ps = &self.dp.proto[s.slot as usize];
            if s.payload_len == 0
                && !s.flags.contains(TcpFlags::FIN)
                && s.ack.seq_le(ps.snd_una)
                && s.seq.seq_le(ps.rcv_nxt)
            {
                // A pure ACK overtaken by a newer one (reordering): it carries nothing we
                // lack, so it is dropped quietly rather than answered (Linux's "disordered
                // ACK"); answering every one would double the ACK traffic under reordering.
                return;
            }
        } else if s.actions.contains(Actions::ACK_UNSENT)
            || s.actions.contains(Actions::ACK_TOO_OLD)
        {
            self.counters.bad_acks += 1;
        } else {
            self.counters.out_of_window += 1;
        }
        // RFC 9293 3.10.7.4 first check: an unacceptable segment is answered with an ACK;
        // RFC 5961 5.2: so is a bad ACK. Both are rate-limited per connection.
        self.challenge_ack(s.slot);
    }

    // ---- state changes reported by the data-path ------------------------------------------

    pub(crate) fn on_fin_received(&mut self, slot: u32) {
        let s = slot as usize;
        let c = &mut self.conns[s];
        c.state = match c.state {
            TcpState::Established => TcpState::CloseWait,
            TcpState::FinWait1 => TcpState::Closing,
            TcpState::FinWait2 => {
                self.enter_time_wait(slot);
                return;
            }
            other => other,
        };
    }

    pub(crate) fn on_fin_acked(&mut self, slot: u32) {
        let s = slot as usize;
        match self.conns[s].state {
            TcpState::FinWait1 => {
                self.conns[s].state = TcpState::FinWait2;
                if self.conns[s].app_closed {
                    self.arm_orphan_timer(slot);
                }
            }
            TcpState::Closing => self.enter_time_wait(slot),
            TcpState::LastAck => self.enter_closed(slot),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, slot: u32) {
        let s = slot as usize;
        if self.cfg.time_wait.is_zero() {
            self.enter_closed(slot);
            return;
        }
        // RFC 9293 MUST-13: TIME-WAIT lasts 2 MSL (configurable). The data-path hands the
        // connection back: TIME-WAIT is the control plane's.
        self.dp.pre[s].active = false;
        let c = &mut self.conns[s];
        c.state = TcpState::TimeWait;
        c.timers.stop_all();
        self.arm_timer(slot, Timer::TimeWait, self.now + self.cfg.time_wait);
        if self.conns[s].app_owned {
            self.events.raise(slot, bits::CLOSED);
        }
    }

    /// Runs `dp.batch[0]` through the protocol and post stages.
    fn run_single(&mut self, frames: &[&[u8]]) {
        self.run_stages(1, frames);
    }
}

/// A header summary for a segment the control plane passes back to the data-path.
fn summary_of(slot: u32, input: &TcpInput<'_>) -> HeaderSummary {
    let t = &input.tcp;
    let (has_timestamp, ts_val, ts_ecr) = match t.options.timestamp {
        Some((v, e)) => (true, v, e),
        None => (false, 0, 0),
    };
    HeaderSummary {
        slot,
        frame: 0,
        payload_offset: 0,
        payload_len: input.payload.len() as u16,
        flags: t.flags,
        ecn_ce: input.ip.ecn == sluice_wire::ipv4::Ecn::Ce,
        seq: t.seq,
        ack: t.ack,
        window: t.window,
        has_timestamp,
        ts_val,
        ts_ecr,
        ..HeaderSummary::default()
    }
}
