//! MTP devices (mtp.txt 3-5): what a switch does for MTP besides forwarding. Per egress
//! port a pathlet whose feedback it appends to MTP data packets at enqueue; a balancer for
//! route groups (ECMP, spraying, an optical switch's alternation, MTP's message-aware
//! balancer honouring path exclusion); per-tenant fair share at ingress on one shared
//! queue; and NDP-style trimming of MTP data on overflow into a header-only packet.
//!
//! The simulator and `sluice switch` both call [`MtpDevice::choose`] for a route group's
//! port and [`MtpDevice::admit`] before offering a frame to that port's [`Channel`], so
//! both act alike. Frames that are not MTP pass untouched (and hash as ECMP).

mod balancer;
mod fair_share;
mod island;
mod pathlet;
mod stats;
#[cfg(test)]
mod tests;

use std::time::Duration;

use sluice_mtp::wire::edit::Summary;
use sluice_mtp::wire::{Feedback, FeedbackKind, PathletTc};

use crate::link::Channel;
use balancer::{PinOutcome, PinTable};
use fair_share::PortShare;
use island::{Bridged, Islands};

pub use balancer::{Balancer, DEFAULT_MAX_PINS};
pub use fair_share::{FairShare, MAX_TRACKED_TCS};
pub use pathlet::{FeedbackPolicy, Pathlet, RcpParams, RcpRate};
pub use stats::{MtpStats, Verdict};

/// Per-port state: RCP's rate and the fair share's classes.
#[derive(Clone, Debug, Default)]
struct PortState {
    rcp: RcpRate,
    share: PortShare,
}

/// One switch's MTP behaviour; ports are the switch's port indices.
#[derive(Debug)]
pub struct MtpDevice {
    pathlets: Vec<Option<Pathlet>>,
    ports: Vec<PortState>,
    balancer: Balancer,
    pins: PinTable,
    spray_next: usize,
    fair_share: Option<FairShare>,
    trim_headroom: Option<usize>,
    rcp: RcpParams,
    islands: Islands,
    stats: MtpStats,
}

impl MtpDevice {
    /// A device for `ports` ports: no pathlets, ECMP, no fair share, no trimming.
    pub fn new(ports: usize) -> MtpDevice {
        MtpDevice {
            pathlets: vec![None; ports],
            ports: vec![PortState::default(); ports],
            balancer: Balancer::Hash,
            pins: PinTable::new(DEFAULT_MAX_PINS, ports),
            spray_next: 0,
            fair_share: None,
            trim_headroom: None,
            rcp: RcpParams::default(),
            islands: Islands::default(),
            stats: MtpStats::default(),
        }
    }

    /// Grows the per-port tables to `ports` (configuration time; the data path never grows
    /// them, and a port beyond them gets no pathlet and no per-port state).
    pub fn resize(&mut self, ports: usize) {
        if self.ports.len() < ports {
            self.pathlets.resize(ports, None);
            self.ports.resize(ports, PortState::default());
            self.pins.resize(ports);
        }
    }

    /// Gives egress port `port` a pathlet.
    pub fn with_pathlet(mut self, port: usize, pathlet: Pathlet) -> Self {
        self.resize(port + 1);
        self.pathlets[port] = Some(pathlet);
        self
    }

    /// Sets the balancer of route groups.
    pub fn with_balancer(mut self, balancer: Balancer) -> Self {
        self.balancer = balancer;
        self
    }

    /// Bounds the message balancer's pin table (default [`DEFAULT_MAX_PINS`]).
    pub fn with_max_pins(mut self, max: usize) -> Self {
        self.pins = PinTable::new(max, self.ports.len());
        self
    }

    /// Enables per-tenant fair share at ingress.
    pub fn with_fair_share(mut self, fs: FairShare) -> Self {
        self.fair_share = Some(fs);
        self
    }

    /// Trims MTP data to its header on overflow; trimmed headers may use `headroom_bytes`
    /// beyond the queue's capacity (so the queue stays bounded).
    pub fn with_trimming(mut self, headroom_bytes: usize) -> Self {
        self.trim_headroom = Some(headroom_bytes);
        self
    }

    /// Marks port `port` as facing a TCP-only island (mtp.txt 4): MTP leaves through it as
    /// TCP with the MTP header in a TCP option, and comes back from it as MTP.
    pub fn with_tcp_island(mut self, port: usize) -> Self {
        self.islands.add(port);
        self
    }

    /// A frame received on `in_port`, before it is routed: out of a TCP island back into
    /// MTP. False: drop it (a damaged bridged segment, counted).
    pub fn ingress(&mut self, in_port: usize, frame: &mut Vec<u8>) -> bool {
        match self.islands.enter(in_port, frame) {
            Bridged::Done => {
                self.stats.bridged_in += 1;
                true
            }
            Bridged::Untouched => true,
            Bridged::Refused => {
                self.stats.bridge_refused += 1;
                false
            }
        }
    }

    /// Sets RCP's parameters for `Rate` pathlets.
    pub fn with_rcp(mut self, rcp: RcpParams) -> Self {
        self.rcp = rcp;
        self
    }

    /// The pathlet of port `port`.
    pub fn pathlet(&self, port: usize) -> Option<Pathlet> {
        self.pathlets.get(port).copied().flatten()
    }

    /// The balancer.
    pub fn balancer(&self) -> Balancer {
        self.balancer
    }

    /// The counters so far.
    pub fn stats(&self) -> &MtpStats {
        &self.stats
    }

    /// Packets of class `tc` dropped or trimmed as over its share at port `port`.
    pub fn tc_drops(&self, port: usize, tc: u8) -> u64 {
        self.ports.get(port).map_or(0, |p| p.share.drops(tc))
    }

    /// Bytes of pinned messages still expected on `port` (the message balancer's load).
    pub fn expected_bytes(&self, port: usize) -> u64 {
        self.pins.expected(port)
    }

    /// The (pathlet, TC) that port `port` is for a packet of class `tc`.
    fn pathlet_tc(&self, port: usize, tc: u8) -> Option<PathletTc> {
        self.pathlet(port).map(|p| PathletTc {
            pathlet: p.id,
            tc: p.tc.unwrap_or(tc),
        })
    }

    /// Whether the MTP packet `s` excludes port `port`'s pathlet.
    fn excluded(&self, s: &Summary, frame: &[u8], port: usize) -> bool {
        self.pathlet_tc(port, s.tc)
            .is_some_and(|at| s.excludes(frame, at))
    }

    /// The first member from `start` (round) that `s` does not exclude; every member
    /// excluded: the one at `start`, counted.
    fn first_allowed(
        &mut self,
        group: &[usize],
        start: usize,
        s: Option<&Summary>,
        frame: &[u8],
    ) -> usize {
        let n = group.len();
        let at = |i: usize| group[(start + i) % n];
        let Some(s) = s else {
            return at(0);
        };
        match (0..n).find(|&i| !self.excluded(s, frame, at(i))) {
            Some(i) => {
                if i > 0 {
                    self.stats.exclusions_honoured += 1;
                }
                at(i)
            }
            None => {
                self.stats.exclusions_unsatisfiable += 1;
                at(0)
            }
        }
    }

    /// Picks the port of a route group (several members) for `frame`: `hash` is its flow
    /// hash, `load(port)` the bytes queued at a port.
    pub fn choose(
        &mut self,
        now: Duration,
        group: &[usize],
        hash: u64,
        frame: &[u8],
        load: impl Fn(usize) -> usize,
    ) -> usize {
        let n = group.len();
        if n == 0 {
            return 0;
        }
        let hashed = (hash % n as u64) as usize;
        if let Balancer::Alternate { period } = self.balancer {
            let slot = now.as_nanos() / period.as_nanos().max(1);
            return group[(slot % n as u128) as usize];
        }
        let s = Summary::read(frame).ok();
        match self.balancer {
            Balancer::Spray => {
                let start = self.spray_next % n;
                self.spray_next = self.spray_next.wrapping_add(1);
                self.first_allowed(group, start, s.as_ref(), frame)
            }
            Balancer::Message if s.as_ref().is_some_and(|s| s.data) => {
                let Some(s) = s else {
                    return group[hashed];
                };
                self.pin(now, group, &s, frame, load)
            }
            _ => self.first_allowed(group, hashed, s.as_ref(), frame),
        }
    }

    /// The message balancer: the port `s`'s message is pinned to, or the least loaded
    /// allowed member (queued bytes plus pinned messages' expected bytes), pinned now.
    fn pin(
        &mut self,
        now: Duration,
        group: &[usize],
        s: &Summary,
        frame: &[u8],
        load: impl Fn(usize) -> usize,
    ) -> usize {
        let per_packet = u64::from(s.msg_len).div_ceil(u64::from(s.msg_pkts.max(1)));
        let mut any_excluded = false;
        let mut best: Option<(u64, usize)> = None;
        let mut fallback: Option<(u64, usize)> = None;
        // Ties (idle members, the usual case for messages sent one after another) go to the
        // first member counted from the message id, so they spread rather than all taking
        // the group's first port.
        let start = s.msg_id as usize % group.len().max(1);
        let members = group.iter().cycle().skip(start).take(group.len());
        for &p in members {
            let l = load(p) as u64 + self.pins.expected(p);
            if fallback.is_none_or(|(b, _)| l < b) {
                fallback = Some((l, p));
            }
            if self.excluded(s, frame, p) {
                any_excluded = true;
                continue;
            }
            if best.is_none_or(|(b, _)| l < b) {
                best = Some((l, p));
            }
        }
        let choice = match (best, fallback) {
            (Some((_, p)), _) => p,
            (None, Some((_, p))) => {
                self.stats.exclusions_unsatisfiable += 1;
                p
            }
            (None, None) => group[0],
        };
        let key = (s.src, s.src_port, s.msg_id);
        match self
            .pins
            .lookup(now, key, s.msg_len, per_packet, |_| choice)
        {
            PinOutcome::Hit(p) => {
                self.stats.pin_hits += 1;
                p
            }
            PinOutcome::New { port, evicted } => {
                self.stats.pins += 1;
                self.stats.pin_evictions += u64::from(evicted);
                if any_excluded && best.is_some() {
                    self.stats.exclusions_honoured += 1;
                }
                port
            }
        }
    }

    /// Readies `frame` for egress port `port` (whose channel is `ch`) at `now`: fair share
    /// at ingress, feedback appended at enqueue, trimming on overflow. Non-MTP frames and
    /// MTP ACKs pass untouched.
    pub fn admit(
        &mut self,
        now: Duration,
        port: usize,
        frame: &mut Vec<u8>,
        ch: &Channel,
    ) -> Verdict {
        let verdict = self.admit_mtp(now, port, frame, ch);
        if verdict == Verdict::Drop {
            return verdict;
        }
        match self.islands.leave(port, frame) {
            Bridged::Done => {
                self.stats.bridged_out += 1;
                verdict
            }
            Bridged::Untouched => verdict,
            Bridged::Refused => {
                self.stats.bridge_refused += 1;
                Verdict::Drop
            }
        }
    }

    /// [`MtpDevice::admit`] before bridging.
    fn admit_mtp(
        &mut self,
        now: Duration,
        port: usize,
        frame: &mut Vec<u8>,
        ch: &Channel,
    ) -> Verdict {
        let capacity = ch.config.bandwidth_bps;
        let queued = ch.queued_bytes_for(frame);
        if let Some(st) = self.ports.get_mut(port) {
            st.rcp.arrive(now, frame.len(), queued, capacity, &self.rcp);
        }
        let Ok(s) = Summary::read(frame) else {
            self.stats.other_frames += 1;
            return Verdict::Forward { headroom: 0 };
        };
        self.stats.mtp_frames += 1;
        if !s.data {
            return Verdict::Forward { headroom: 0 };
        }
        let mut share_mbps = None;
        let mut trim = false;
        if let (Some(fs), Some(st)) = (self.fair_share, self.ports.get_mut(port)) {
            match st.share.arrive(now, s.tc, frame.len(), capacity, &fs) {
                None => self.stats.tc_table_full += 1,
                Some(share) => {
                    share_mbps = Some(u32::try_from(share.bps / 1_000_000).unwrap_or(u32::MAX));
                    if share.over && queued > fs.threshold_bytes {
                        st.share.count_drop(s.tc);
                        if self.trim_headroom.is_none() {
                            self.stats.fair_share_drops += 1;
                            return Verdict::Drop;
                        }
                        self.stats.fair_share_trims += 1;
                        trim = true;
                    }
                }
            }
        }
        self.append_feedback(port, &s, frame, queued, share_mbps);
        let Some(headroom) = self.trim_headroom else {
            return Verdict::Forward { headroom: 0 };
        };
        if !trim && !ch.would_drop(frame, frame.len(), 0) {
            return Verdict::Forward { headroom: 0 };
        }
        match s.trim(frame) {
            Some(len) => {
                frame.truncate(len);
                self.stats.trimmed += u64::from(!trim);
                Verdict::Forward { headroom }
            }
            None => Verdict::Forward { headroom: 0 },
        }
    }

    /// Appends port `port`'s pathlet feedback (and the fair share's rate) to data packet `s`.
    fn append_feedback(
        &mut self,
        port: usize,
        s: &Summary,
        frame: &mut [u8],
        queued: usize,
        share_mbps: Option<u32>,
    ) {
        let Some(p) = self.pathlet(port) else {
            return;
        };
        let at = PathletTc {
            pathlet: p.id,
            tc: p.tc.unwrap_or(s.tc),
        };
        let rcp = self.ports.get(port).map_or(u32::MAX, |st| st.rcp.mbps());
        let (kind, value) = match p.feedback {
            FeedbackPolicy::Ecn { k_bytes } => (FeedbackKind::Ecn, u32::from(queued > k_bytes)),
            // With fair share on, a class's rate is the smaller of RCP's and its share.
            FeedbackPolicy::Rate => (FeedbackKind::Rate, rcp.min(share_mbps.unwrap_or(u32::MAX))),
            FeedbackPolicy::QueueBytes => (
                FeedbackKind::QueueBytes,
                u32::try_from(queued).unwrap_or(u32::MAX),
            ),
        };
        if kind == FeedbackKind::Ecn && value == 1 {
            self.stats.ecn_congested += 1;
        }
        self.push(s, frame, Feedback { at, kind, value });
        if let (Some(mbps), false) = (share_mbps, p.feedback == FeedbackPolicy::Rate) {
            let fb = Feedback {
                at,
                kind: FeedbackKind::Rate,
                value: mbps,
            };
            self.push(s, frame, fb);
        }
    }

    fn push(&mut self, s: &Summary, frame: &mut [u8], fb: Feedback) {
        if s.push_feedback(frame, fb) {
            self.stats.feedback_appended += 1;
        } else {
            self.stats.feedback_full += 1;
        }
    }
}
