//! The control plane's side of AccelTCP's teardown offload (acceltcp.txt 4.2): at close it
//! decides whether a connection moves to the teardown stage, builds the handover value and
//! frees the slot; afterwards it hands the stage the flow's segments, timeouts and turns to
//! transmit, and acts on what the stage returns (counters, RSTs, reopening TIME-WAIT).

use sluice_wire::tcp::{SeqNumber, TcpFlags};

use super::input::Handback;
use super::isn;
use super::state::TcpState;
use crate::datapath::classify::TcpInput;
use crate::datapath::state::flags;
use crate::error::Error;
use crate::frame::Transmit;
use crate::handle::ConnId;
use crate::host::Stack;
use crate::offload::teardown::{Expiry, Handoff, Phase, Refusal, Reply, Segment};
use crate::table::FourTuple;

impl Stack {
    /// Asks for the connection's close to be offloaded to the teardown stage (advisory,
    /// like AccelTCP's per-socket request): on [`Stack::close`], if the unacknowledged
    /// data fits the send window and the stage has room, the stage sends the rest and the
    /// FIN, retransmits, and keeps TIME-WAIT, and the connection's slot is freed at once.
    pub fn set_teardown_offload(&mut self, id: ConnId, on: bool) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        self.conns[slot as usize].teardown_offload = on;
        Ok(())
    }

    /// Whether the connection asked for its close to go to the teardown stage (false for
    /// an unknown handle).
    pub fn teardown_offload(&self, id: ConnId) -> bool {
        self.slot_of(id)
            .is_ok_and(|slot| self.conns[slot as usize].teardown_offload)
    }

    /// Connections the teardown stage holds.
    pub fn teardown_flows(&self) -> usize {
        self.teardown.len()
    }

    /// Bytes the teardown stage holds: flow records, lookup, timer wheel and tails.
    pub fn teardown_memory_bytes(&self) -> usize {
        self.teardown.memory_bytes()
    }

    /// Whether the teardown stage holds `tuple` (a new connection must not take it).
    pub(crate) fn teardown_holds(&self, tuple: &FourTuple) -> bool {
        self.teardown.lookup(tuple).is_some()
    }

    /// Close, offloaded: hands the connection in `slot` to the teardown stage if it asked
    /// and qualifies (acceltcp.txt 4.2: open, the rest of its data within the send window,
    /// the stage below its limits), then frees the slot. False: the normal path closes it.
    pub(crate) fn offload_close(&mut self, slot: u32) -> bool {
        let s = slot as usize;
        let c = &self.conns[s];
        if !c.teardown_offload || self.cfg.teardown_flows == 0 {
            return false;
        }
        // Whatever the close has reached (a shutdown may have come first) moves over: the
        // stage takes each closing state as it is.
        let phase = match c.state {
            TcpState::Established | TcpState::FinWait1 => Phase::FinWait1,
            TcpState::CloseWait | TcpState::LastAck => Phase::LastAck,
            TcpState::Closing => Phase::Closing,
            TcpState::FinWait2 => Phase::FinWait2,
            TcpState::TimeWait => Phase::TimeWait,
            _ => {
                self.counters.teardown_refused_state += 1;
                return false;
            }
        };
        let ps = &self.dp.proto[s];
        // Our FIN goes at the end of the data, whether queued yet or not.
        let fin_seq = ps.tx_end;
        let fin_acked = ps.snd_una.seq_gt(fin_seq);
        let tail_len = if fin_acked {
            0
        } else {
            fin_seq.diff(ps.snd_una).max(0) as u32
        };
        let window = ps.snd_wnd.min(ps.cwnd.max(u32::from(ps.mss)));
        let in_datapath = self.dp.pre[s].active || phase == Phase::TimeWait;
        if c.error.is_some() || !in_datapath || tail_len > window {
            self.counters.teardown_refused_state += 1;
            return false;
        }
        if self.teardown.check_room(tail_len as usize).is_err() {
            self.counters.teardown_refused_full += 1;
            return false;
        }
        let Some(b) = self.bufs[s].as_ref() else {
            self.counters.teardown_refused_state += 1;
            return false;
        };
        // The tail is copied once, at handover (the paper moves it to NIC memory).
        let (a, z) = b.tx.slices(ps.snd_una, tail_len as usize);
        let mut tail = Vec::with_capacity(tail_len as usize);
        tail.extend_from_slice(a);
        tail.extend_from_slice(z);
        let handoff = Handoff {
            tuple: c.tuple,
            peer_mac: self.dp.pre[s].peer_mac,
            phase,
            snd_una: ps.snd_una,
            snd_nxt: ps.snd_nxt,
            fin_seq,
            rcv_nxt: ps.rcv_nxt,
            ts_recent: ps.has(flags::TIMESTAMPS).then_some(ps.ts_recent),
            window: ps.window_field(ps.rx_avail),
            rcv_wscale: ps.rcv_wscale,
            mss: ps.mss,
            rto: c.rto,
            tail: &tail,
        };
        match self.teardown.admit(self.now, handoff) {
            Ok(_) => {
                self.counters.teardown_offloaded += 1;
                self.free_slot(slot);
                true
            }
            Err(Refusal::Full | Refusal::TailBudget | Refusal::Duplicate) => {
                self.counters.teardown_refused_full += 1;
                false
            }
        }
    }

    /// TSval for a segment of `tuple`'s connection (the same per-connection offset the
    /// connection used, RFC 7323 5.4).
    fn teardown_tsval(&self, tuple: &FourTuple) -> u32 {
        let offset =
            isn::timestamp_offset(&self.ts_secret, self.cfg.ip, tuple, self.cfg.clock_epoch);
        self.ts_clock().wrapping_add(offset)
    }

    /// Queues a control segment (ACK or RST) of the stage's `flow`.
    fn teardown_control(&mut self, flow: u32, seq: SeqNumber, flags: TcpFlags) -> bool {
        let tuple = self.teardown.flow(flow).tuple();
        let tsval = self.teardown_tsval(&tuple);
        let src = (self.cfg.mac, self.cfg.ip);
        let (route, header) = self.teardown.header(flow, src, seq, flags, tsval);
        self.push_segment(&route, &header)
    }

    fn teardown_ack(&mut self, flow: u32) {
        // An ACK carries SND.NXT, which is past our FIN as soon as the stage sent it (the
        // next poll after handover); a peer that lost the FIN answers with its own ACK.
        let seq = self.teardown.flow(flow).snd_max();
        self.teardown_control(flow, seq, TcpFlags::ACK);
    }

    /// A segment for a flow the teardown stage holds (a connection-table miss found it).
    pub(super) fn teardown_segment(&mut self, flow: u32, input: &TcpInput<'_>) -> Handback {
        let t = &input.tcp;
        let seg = Segment {
            seq: t.seq,
            ack: t.ack,
            flags: t.flags,
            len: input.payload.len() as u32,
            tsval: t.options.timestamp.map(|(v, _)| v),
        };
        match self.teardown.on_segment(self.now, flow, &seg) {
            Reply::Nothing => {}
            Reply::Ack => self.teardown_ack(flow),
            Reply::Paws => {
                self.counters.paws_drops += 1;
                self.teardown_ack(flow);
            }
            Reply::Reset(seq) => {
                self.counters.teardown_data_after_close += 1;
                if self.teardown_control(flow, seq, TcpFlags::RST | TcpFlags::ACK) {
                    self.counters.rst_sent += 1;
                }
                self.teardown.remove(flow);
            }
            Reply::PeerReset => {
                self.counters.rst_received += 1;
                self.counters.teardown_reset += 1;
            }
            Reply::Closed => self.counters.teardown_completed += 1,
            Reply::MayReopen(iss) if self.listener_by_port.contains(t.dst_port) => {
                self.counters.time_wait_reopened += 1;
                self.counters.teardown_completed += 1;
                self.teardown.remove(flow);
                return self.open_passive(input, Some(iss));
            }
            Reply::MayReopen(_) | Reply::SynRefused => {
                self.counters.time_wait_syn_refused += 1;
                self.teardown_ack(flow);
            }
        }
        Handback::Done
    }

    /// Runs the teardown stage's timers due by now.
    pub(crate) fn teardown_timeout(&mut self) {
        let mut fired = std::mem::take(&mut self.teardown_fired);
        fired.clear();
        self.teardown.on_timeout(self.now, &mut fired);
        for &(flow, expiry) in &fired {
            match expiry {
                Expiry::Retransmit => self.counters.teardown_retransmits += 1,
                Expiry::GaveUp(seq) => {
                    self.counters.teardown_timed_out += 1;
                    if self.teardown_control(flow, seq, TcpFlags::RST | TcpFlags::ACK) {
                        self.counters.rst_sent += 1;
                    }
                    self.teardown.remove(flow);
                }
                Expiry::Done(_) => self.counters.teardown_completed += 1,
            }
        }
        self.teardown_fired = fired;
    }

    /// The teardown stage's next data or FIN segment, if one is waiting.
    pub(crate) fn teardown_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let (flow, _) = self.teardown.next_ready()?;
        let tuple = self.teardown.flow(flow).tuple();
        let tsval = self.teardown_tsval(&tuple);
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let src = (self.cfg.mac, self.cfg.ip);
        let len = self.teardown.transmit(buf, src, self.ip_ident, tsval)?;
        self.counters.teardown_segments_sent += 1;
        self.counters.frames_tx += 1;
        Some(Transmit {
            len,
            gso_size: 0,
            csum_partial: false,
        })
    }
}
