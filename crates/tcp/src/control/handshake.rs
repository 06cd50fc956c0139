//! The three-way handshake (RFC 9293 3.5): active and passive opens, options negotiation,
//! SYN-SENT and SYN-RECEIVED, and installing the connection into the data-path.

use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};
use sluice_wire::EthernetAddress;

use super::input::{rest_of_segment, Handback};
use super::isn;
use super::state::{ConnError, Negotiated, TcpState};
use crate::datapath::classify::TcpInput;
use crate::datapath::pipeline::rto_of;
use crate::datapath::post;
use crate::datapath::state::{flags, sack_flags, PreState, ProtoState, SackSender};
use crate::events::bits;
use crate::frame::Route;
use crate::host::Stack;
use crate::table::FourTuple;
use crate::time::Instant;
use crate::timer::Timer;

/// RFC 7323 2.3: window scale shifts above 14 are treated as 14 (MUST, with a counter-free log).
const MAX_WSCALE: u8 = 14;

impl Stack {
    /// Our window scale: the smallest shift that lets the receive buffer be advertised.
    pub(super) fn our_wscale(&self) -> u8 {
        let mut shift = 0;
        while shift < MAX_WSCALE && (self.cfg.rx_buffer >> shift) > u16::MAX as usize {
            shift += 1;
        }
        shift
    }

    pub(super) fn ts_clock(&self) -> u32 {
        self.now.as_millis() as u32
    }

    /// SYN or SYN-ACK options we offer, given what the peer offered (None for an active open).
    pub(super) fn syn_options(&self, slot: u32, peer: Option<&Negotiated>) -> TcpOptions {
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
            window: self.cfg.rx_initial().min(u16::MAX as usize) as u16,
            urgent: 0,
            options,
        };
        let route = self.route_of_tuple(slot);
        self.push_segment(&route, &header);
        if c.retries == 0 {
            self.conns[s].syn_sent_at = self.now;
        }
        let c = &self.conns[s];
        let rto = c.timers.get(Timer::Rto).unwrap_or(self.now + c.rto);
        self.arm_timer(slot, Timer::Rto, rto);
    }

    /// The ACK of a SYN-RECEIVED connection for an unacceptable segment (RFC 9293 3.10.7.4
    /// first check), `<SEQ=ISS+1><ACK=IRS+1><CTL=ACK>`, rate-limited per connection as
    /// challenge ACKs are (RFC 5961 7), to `dst_mac` (the sender of the segment it answers).
    /// The data-path does not own the connection yet, so the segment is built here from
    /// the handshake's state.
    fn syn_received_ack(&mut self, slot: u32, dst_mac: EthernetAddress) {
        let s = slot as usize;
        let limit = self.cfg.challenge_ack_limit;
        if !self.conns[s].allow_challenge_ack(self.now, limit) {
            self.counters.challenge_acks_suppressed += 1;
            return;
        }
        let c = self.conns[s];
        let mut options = TcpOptions::default();
        if let Some(ts_recent) = c.negotiated.ts_recent.filter(|_| self.cfg.timestamps) {
            let tsval = self.ts_clock().wrapping_add(self.dp.proto[s].ts_offset);
            options.timestamp = Some((tsval, ts_recent));
        }
        // RFC 7323 2.2: past the SYNs, the window is scaled if both offered scaling.
        let shift = if c.negotiated.snd_wscale.is_some() {
            self.our_wscale()
        } else {
            0
        };
        let header = TcpHeader {
            src_port: c.tuple.local_port,
            dst_port: c.tuple.remote_port,
            seq: c.iss + 1u32,
            ack: c.irs + 1u32,
            flags: TcpFlags::ACK,
            window: (self.cfg.rx_initial() >> shift).min(u16::MAX as usize) as u16,
            urgent: 0,
            options,
        };
        let route = Route {
            dst_mac,
            ..self.route_of_tuple(slot)
        };
        if self.push_segment(&route, &header) {
            self.counters.challenge_acks += 1;
        }
    }

    /// Takes the next hop's MAC of a half-open connection from a retransmission of its SYN
    /// (a multicast source is never a next hop, as for the first SYN).
    fn relearn_peer_mac(&mut self, slot: u32, input: &TcpInput<'_>) {
        let s = slot as usize;
        let mac = input.src_mac;
        if mac.is_multicast() || mac == self.dp.pre[s].peer_mac {
            return;
        }
        self.counters.handshake_mac_relearned += 1;
        self.dp.pre[s].peer_mac = mac;
        self.neighbors.learn(input.ip.src, mac, self.now);
    }

    /// Fills the pre-processor's identification of a new connection and its timestamp
    /// offset; the data-path does not own it until `install`.
    pub(super) fn identify(&mut self, slot: u32, tuple: &FourTuple, peer_mac: EthernetAddress) {
        let s = slot as usize;
        self.dp.pre[s] = PreState {
            peer_mac,
            peer_ip: tuple.remote_ip,
            local_port: tuple.local_port,
            remote_port: tuple.remote_port,
            active: false,
            log: false,
        };
        self.dp.proto[s].ts_offset =
            isn::timestamp_offset(&self.ts_secret, self.cfg.ip, tuple, self.cfg.clock_epoch);
    }

    pub(crate) fn start_active_open(&mut self, slot: u32) {
        let s = slot as usize;
        let tuple = self.conns[s].tuple;
        self.set_state(s, TcpState::SynSent);
        let c = &mut self.conns[s];
        c.iss = isn::initial_sequence(
            &self.isn_secret,
            self.cfg.ip,
            &tuple,
            self.now + self.cfg.clock_epoch,
        );
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

    /// Options the peer offered in its SYN, sanitized.
    pub(super) fn peer_options(&self, t: &TcpHeader) -> Negotiated {
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
    pub(super) fn no_connection(&mut self, input: &TcpInput<'_>) -> Handback {
        self.open_passive(input, None)
    }

    /// [`Stack::no_connection`], with the ISS a connection opened from a SYN must use (one
    /// reopening a TIME-WAIT 4-tuple, RFC 1122 4.2.2.13), or None for a fresh one.
    pub(super) fn open_passive(
        &mut self,
        input: &TcpInput<'_>,
        iss: Option<SeqNumber>,
    ) -> Handback {
        let t = &input.tcp;
        // One pick for the SYN and for the ACK that completes its cookie: the same tuple.
        let listener = self.listener_by_port.select(&FourTuple {
            remote_ip: input.ip.src,
            remote_port: t.src_port,
            local_port: t.dst_port,
        });
        let Some(index) = listener else {
            // RFC 9293 3.10.7.1 (CLOSED): reset anything but a RST.
            self.reply_rst(input);
            return Handback::Done;
        };
        if t.flags.contains(TcpFlags::RST) {
            return Handback::Done;
        }
        if t.flags.contains(TcpFlags::ACK) {
            if !t.flags.contains(TcpFlags::SYN) {
                if let Some(handback) = self.try_cookie(index, input) {
                    return handback;
                }
            }
            // RFC 9293 3.10.7.2: an ACK in LISTEN is answered with a RST.
            self.reply_rst(input);
            return Handback::Done;
        }
        if !t.flags.contains(TcpFlags::SYN) || t.flags.contains(TcpFlags::FIN) {
            return Handback::Done;
        }
        if input.ip.src.is_broadcast()
            || input.ip.src.is_multicast()
            || input.src_mac.is_multicast()
        {
            self.counters.syn_dropped += 1;
            return Handback::Done;
        }
        if !self.admit_syn(index) {
            return Handback::Done;
        }
        let tuple = FourTuple {
            remote_ip: input.ip.src,
            remote_port: t.src_port,
            local_port: t.dst_port,
        };
        let Some(Some(l)) = self.listeners.get(index as usize) else {
            return Handback::Done;
        };
        if self.table.free_slots() == 0 {
            // No slot for it now or when a cookie comes back: refuse at the SYN, not after
            // the client believes it is connected.
            self.counters.conn_table_full += 1;
            self.reply_rst(input);
            return Handback::Done;
        }
        if l.accept.len() >= l.backlog {
            // Linux's rule (tcp_conn_request, LISTENOVERFLOWS): while the accept queue is
            // full a SYN is dropped and the client's connect retries. Answered, the client
            // believes it is connected and its request is dropped with the final ACK until
            // the queue drains: a fast connect, then stalls of its RTO backoff (issue 23).
            self.counters.accept_queue_overflow += 1;
            return Handback::Done;
        }
        let backlog_full = l.syn_pending >= self.cfg.syn_backlog;
        let slot = if backlog_full {
            None
        } else {
            self.table.insert(&tuple)
        };
        let algorithm = l.cc_algorithm;
        let Some(slot) = slot else {
            self.send_cookie_syn_ack(input, &tuple, algorithm);
            return Handback::Done;
        };
        if let Some(Some(l)) = self.listeners.get_mut(index as usize) {
            l.syn_pending += 1;
        }
        self.open_slot(slot, tuple);
        self.join_listener_group(slot, index);
        let s = slot as usize;
        let negotiated = Negotiated {
            ecn: self.ecn_accepted(t, algorithm),
            ..self.peer_options(t)
        };
        self.set_state(s, TcpState::SynReceived);
        let c = &mut self.conns[s];
        c.cc_algorithm = algorithm;
        c.listener = Some(index);
        c.irs = t.seq;
        c.iss = iss.unwrap_or_else(|| {
            isn::initial_sequence(
                &self.isn_secret,
                self.cfg.ip,
                &tuple,
                self.now + self.cfg.clock_epoch,
            )
        });
        c.negotiated = negotiated;
        self.identify(slot, &tuple, input.src_mac);
        self.neighbors
            .learn(tuple.remote_ip, input.src_mac, self.now);
        self.send_syn(slot, true);
        Handback::Done
    }

    /// RFC 9293 3.10.7.3: SYN-SENT.
    pub(super) fn syn_sent(&mut self, slot: u32, input: &TcpInput<'_>) {
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
        // The next hop stays the one the neighbor table resolved before the SYN went: the
        // SYN-ACK's Ethernet source is covered by no checksum, and one damaged bit there
        // would send the whole connection astray (the soak's corrupted frames).
        if self.dp.pre[s].peer_mac == EthernetAddress::default() {
            self.dp.pre[s].peer_mac = input.src_mac;
        }
        if has_ack {
            self.install(slot, t.ack, t.window, false);
            self.set_state(s, TcpState::Established);
            self.conns[s].timers.stop(Timer::Rto);
            self.events.raise(slot, bits::CONNECTED | bits::WRITABLE);
            self.send_ack(slot);
        } else {
            // Simultaneous open (RFC 9293 3.5, figure 7; MUST-10).
            self.set_state(s, TcpState::SynReceived);
            self.conns[s].timers.stop(Timer::Rto);
            self.send_syn(slot, true);
        }
    }

    /// RFC 9293 3.10.7.4 in SYN-RECEIVED.
    pub(super) fn syn_received(&mut self, slot: u32, input: &TcpInput<'_>) -> Handback {
        let t = &input.tcp;
        let s = slot as usize;
        let c = self.conns[s];
        let rcv_nxt = c.irs + 1u32;
        if t.flags.contains(TcpFlags::SYN) && !t.flags.contains(TcpFlags::ACK) {
            if t.seq == c.irs {
                // The peer retransmitted its SYN: our SYN-ACK did not arrive, perhaps
                // because the next hop's MAC, taken from the first SYN's Ethernet header
                // (no checksum covers it), was damaged: every SYN-ACK then went astray
                // until the entry timed out (issue 14's soak). The retransmission is as
                // good a witness, and newer.
                self.relearn_peer_mac(slot, input);
                self.send_syn(slot, true);
            } else if c.listener.is_some() {
                // Another ISN: the peer is opening a new incarnation of the 4-tuple and
                // this entry is stale (an old SYN that came late, after its connection
                // had closed). RFC 9293 3.10.7.4 first check: an unacceptable segment is
                // answered <SEQ=ISS+1><ACK=IRS+1><CTL=ACK>, as Linux's tcp_check_req
                // does; the peer, in SYN-SENT, resets it (SEQ=IRS+1, accepted below)
                // and its next SYN finds LISTEN. Dropped silently, every SYN of the
                // new connection went unanswered until this entry timed out.
                self.counters.syn_in_syn_received += 1;
                self.syn_received_ack(slot, input.src_mac);
            }
            return Handback::Done;
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
            return Handback::Done;
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
            return Handback::Done; // RFC 5961 4: no challenge ACK before synchronization; just drop
        }
        if !t.flags.contains(TcpFlags::ACK) {
            return Handback::Done;
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
                        return Handback::Done;
                    }
                    self.counters.half_open_replaced_by_cookie += 1;
                    self.free_slot(slot);
                    if let Some(handback) = self.try_cookie(index, input) {
                        return handback;
                    }
                }
            }
            // RFC 9293 3.10.7.4: an unacceptable ACK in SYN-RECEIVED gets a RST.
            self.reply_rst(input);
            return Handback::Done;
        }
        if c.listener.is_some() {
            self.establish_passive(slot, input)
        } else {
            self.establish_simultaneous(slot, t.ack, t.window, true);
            rest_of_segment(slot, input)
        }
    }

    /// A simultaneous open completes (RFC 9293 3.5 figure 7): the data-path takes over, and
    /// a FIN the application asked for in SYN-RECEIVED is queued now (RFC 9293 3.10.4).
    pub(super) fn establish_simultaneous(
        &mut self,
        slot: u32,
        ack: SeqNumber,
        window: u16,
        window_scaled: bool,
    ) {
        let s = slot as usize;
        self.install(slot, ack, window, window_scaled);
        self.set_state(s, TcpState::Established);
        let c = &mut self.conns[s];
        c.timers.stop(Timer::Rto);
        self.events.raise(slot, bits::CONNECTED | bits::WRITABLE);
        if std::mem::take(&mut self.conns[s].fin_deferred) {
            // From ESTABLISHED this cannot fail.
            let _ = self.queue_fin(slot);
        }
    }

    /// The final ACK of a passive open: into the accept queue, and the segment's data and
    /// FIN through the data-path.
    pub(super) fn establish_passive(&mut self, slot: u32, input: &TcpInput<'_>) -> Handback {
        let s = slot as usize;
        let Some(index) = self.conns[s].listener else {
            return Handback::Done;
        };
        let Some(Some(l)) = self.listeners.get_mut(index as usize) else {
            self.abort_slot(slot, ConnError::Aborted);
            return Handback::Done;
        };
        if l.accept.len() >= l.backlog {
            // Drop the ACK and stay in SYN-RECEIVED; our SYN-ACK retransmission retries.
            self.counters.accept_queue_overflow += 1;
            return Handback::Done;
        }
        l.syn_pending = l.syn_pending.saturating_sub(1);
        l.accept.push_back(slot);
        let t = &input.tcp;
        self.install(slot, t.ack, t.window, true);
        self.set_state(s, TcpState::Established);
        self.conns[s].timers.stop(Timer::Rto);
        self.conns[s].retries = 0;
        self.events.raise_listener(index);
        rest_of_segment(slot, input)
    }

    /// Hands the connection to the data-path: the stage tables get their initial state.
    /// `window_scaled` says whether the peer's window field is already subject to scaling
    /// (it never is in a SYN, RFC 7323 2.2).
    pub(super) fn install(&mut self, slot: u32, ack: SeqNumber, window: u16, window_scaled: bool) {
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
        // No pooled row survives into a new connection (none is taken before install).
        self.dp.drop_cold_row(s);
        self.dp.proto[s] = ProtoState {
            rcv_nxt: rcv,
            rx_avail: rx_cap,
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
            sack: SackSender {
                // RFC 6675 needs the peer's SACK blocks: without SACK-permitted (RFC 2018 2)
                // the connection recovers by go-back-N.
                flags: if n.sack && self.dp.sacked_stride > 0 {
                    sack_flags::ENABLED
                } else {
                    0
                },
                high_rxt: snd,
                count: 0,
                cold_row: crate::datapath::state::NO_ROW,
            },
        };
        self.counters.ecn_connections += u64::from(n.ecn);
        // Out-of-order and recovery rows come from the pool when first needed.
        self.dp.reordering[s] = crate::datapath::scoreboard::DUP_THRESH as u8;
        self.dp.post[s] = Default::default();
        self.dp.post_cold[s] = Default::default();
        if let Some(rk) = self.dp.rack.get_mut(s) {
            // The slot's previous connection's RACK state and marks mean nothing here.
            *rk = crate::datapath::rack::RackState {
                marks_from: snd,
                dsack_round: snd,
                ..Default::default()
            };
        }
        self.conns[s].tlp = None;
        self.cc_start(slot);
        self.dp.pre[s].active = true;
        if let Some(b) = self.bufs[s].as_mut() {
            b.reset_at(rcv, snd);
        }
        let (rto_min, rto_max) = self.post_rules().rto_bounds;
        let c = &mut self.conns[s];
        // RFC 6298 2.2: the handshake's round trip is the first RTT measurement, unless
        // the SYN (SYN-ACK) was retransmitted (Karn's rule). Without it the RTO stays at
        // rto_initial (1 s) until the first data is acknowledged, and a loss in the first
        // flight waits that second out (5 % loss in the simulator: 226 Mbit/s, with the
        // sample 1.4 Gbit/s). Nor when the SYN's timer is overdue: the host was away, and
        // one on time would have retransmitted (see `Stack::protocol_stage`).
        if c.retries == 0
            && c.syn_sent_at != Instant::MAX
            && !c.timers.is_expired(Timer::Rto, self.now)
        {
            let sample = self.now.saturating_since(c.syn_sent_at).as_micros();
            let sample = u32::try_from(sample).unwrap_or(u32::MAX).max(1);
            post::rtt_update(&mut self.dp.post[s], sample);
            c.rto = rto_of(&self.dp.post[s], self.cfg.rto_initial, (rto_min, rto_max));
        } else {
            c.rto = self.cfg.rto_initial;
        }
        c.syn_sent_at = Instant::MAX;
        c.retries = 0;
        c.last_heard = self.now;
        c.rcv_space.restart(rcv, rx_cap, self.now);
    }
}
