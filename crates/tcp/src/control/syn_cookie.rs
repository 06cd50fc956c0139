//! SYN cookies (AccelTCP 4.1): the stateless SYN-ACK when the backlog is full, and the ACK
//! that completes a cookie handshake.

use sluice_wire::tcp::{TcpFlags, TcpHeader, TcpOptions};

use super::cookie;
use super::input::Handback;
use super::isn;
use super::state::{Negotiated, TcpState};
use crate::cc::Algorithm;
use crate::datapath::classify::TcpInput;
use crate::frame::Route;
use crate::host::Stack;
use crate::table::FourTuple;

impl Stack {
    /// The backlog is full: answer with a SYN cookie and keep no state (AccelTCP 4.1).
    pub(super) fn send_cookie_syn_ack(
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
            let offset =
                isn::timestamp_offset(&self.ts_secret, self.cfg.ip, tuple, self.cfg.clock_epoch);
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
            window: self.cfg.rx_initial().min(u16::MAX as usize) as u16,
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
            self.cookie_sent_at = Some(self.now);
        }
    }

    /// The options of the cookie `input` acknowledges, if it acknowledges a valid one.
    pub(super) fn decode_cookie(&self, input: &TcpInput<'_>) -> Option<cookie::CookieOptions> {
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

    /// An ACK in LISTEN may complete a cookie handshake, if a cookie went out recently
    /// enough to be valid still (`cookie::VALID_FOR`). Otherwise it cannot be one, and is
    /// not checked: as Linux's tcp_synq_no_recent_overflow, so stray ACKs (of connections
    /// already closed) neither cost a hash nor let a flood of them guess at cookies.
    pub(super) fn try_cookie(&mut self, index: u16, input: &TcpInput<'_>) -> Option<Handback> {
        let recent = self
            .cookie_sent_at
            .is_some_and(|t| self.now.saturating_since(t) <= cookie::VALID_FOR);
        if !recent {
            self.counters.listen_stray_acks += 1;
            return None;
        }
        let t = &input.tcp;
        let tuple = FourTuple {
            remote_ip: input.ip.src,
            remote_port: t.src_port,
            local_port: t.dst_port,
        };
        let Some(opts) = self.decode_cookie(input) else {
            self.counters.syn_cookies_rejected += 1;
            return None;
        };
        let Some(Some(l)) = self.listeners.get(index as usize) else {
            return None;
        };
        if l.accept.len() >= l.backlog {
            self.counters.accept_queue_overflow += 1;
            return Some(Handback::Done); // drop silently; the client retransmits
        }
        let algorithm = l.cc_algorithm;
        if !self.admit_cookie(index) {
            // Over tcp_mem's high threshold: the same admission as a SYN's, told to a
            // peer that believes it is connected (RFC 9293 3.10.7.2: <SEQ=SEG.ACK><RST>).
            self.reply_rst(input);
            return Some(Handback::Done);
        }
        let Some(slot) = self.table.insert(&tuple) else {
            // The table filled after the cookie went out. The client thinks it is
            // connected: tell it it is not, or its data goes into a black hole.
            self.counters.conn_table_full += 1;
            self.reply_rst(input);
            return Some(Handback::Done);
        };
        self.counters.syn_cookies_accepted += 1;
        self.open_slot(slot, tuple);
        self.join_listener_group(slot, index);
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
        self.set_state(s, TcpState::SynReceived);
        let c = &mut self.conns[s];
        c.cc_algorithm = algorithm;
        c.listener = Some(index);
        c.irs = t.seq - 1u32;
        c.iss = t.ack - 1u32;
        c.negotiated = negotiated;
        if let Some(Some(l)) = self.listeners.get_mut(index as usize) {
            l.syn_pending += 1;
        }
        self.identify(slot, &tuple, input.src_mac);
        // The cookie ACK's own window is unscaled in the SYN sense; treat it as scaled.
        Some(self.establish_passive(slot, input))
    }
}
