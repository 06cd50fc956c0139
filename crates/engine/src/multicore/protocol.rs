//! The protocol role: one per flow group. It owns the group's core (a `Stack` configured as
//! that group with `Config::flow_group`), its application instance and so its timers; no
//! other role touches them (DESIGN.md rule 4: one owner per connection). A reorder buffer in
//! front of its input admits the pre replicas' batches in the order the NIC role numbered
//! them; its transmit batches are numbered for the NIC role's reorder buffer. It also serves
//! the control plane's messages to the group (control.rs), runs the group's own copies of
//! per-group eBPF modules (placement.rs) and, in group 0, the application's transports
//! beside TCP.

use sluice_tcp::{Instant, Stack};
use sluice_wire::flow_group::FlowGroups;

use super::batch::{Batch, Checksum, FrameMeta, BATCH_FRAMES};
use super::control::ControlRx;
use super::link::{LinkRx, LinkTx};
use super::progress::{Progress, RoleCounters};
use super::sequence::Reorder;
use crate::hook_point::HookPoint;
use crate::modules::{Chain, Verdict};
use crate::transport::{classify, Class};
use crate::{App, AppStatus, EngineError};

/// Runs a group's ingress modules on `frame`, then its established ones if the core would
/// take the frame down its pipeline (as the single engine's hooks do); the frame as the
/// modules left it, or None if one dropped, reflected or redirected it.
fn group_modules<'a>(
    modules: &'a mut Chain,
    carry: &'a mut Vec<u8>,
    stack: &Stack,
    frame: &'a [u8],
    now_ns: u64,
) -> Option<&'a [u8]> {
    let mut changed = false;
    if modules.has(HookPoint::Ingress) {
        match modules.run(HookPoint::Ingress, frame, now_ns) {
            (Verdict::Pass, None) => {}
            (Verdict::Pass, Some((s, e))) => {
                carry.clear();
                carry.extend_from_slice(&modules.scratch()[s..e]);
                changed = true;
            }
            _ => return None,
        }
    }
    if modules.has(HookPoint::Established) {
        let current: &[u8] = if changed { carry } else { frame };
        if stack.takes_fast_path(current) {
            match modules.run(HookPoint::Established, current, now_ns) {
                (Verdict::Pass, None) => {}
                (Verdict::Pass, Some((s, e))) => {
                    carry.clear();
                    carry.extend_from_slice(&modules.scratch()[s..e]);
                    changed = true;
                }
                _ => return None,
            }
        }
    }
    Some(if changed { carry } else { frame })
}

/// The protocol role of one flow group.
pub struct Protocol<A> {
    group: u16,
    // Read by the ownership checks of test builds only.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    groups: FlowGroups,
    /// The group's core.
    pub stack: Stack,
    /// The group's application.
    pub app: A,
    from_pre: Vec<LinkRx>,
    to_post: Vec<LinkTx>,
    rx_order: Reorder<(usize, Box<Batch>)>,
    /// The lowest frame number the next received frame may carry (numbers only grow; the
    /// NIC role leaves a number unused for a frame it dropped).
    next_frame_seq: u64,
    tx_batch_seq: u64,
    tx_frame_seq: u64,
    next_post: usize,
    app_done: bool,
    started: bool,
    /// Whether the application owns transports beside TCP (group 0 only; the runner
    /// refuses them elsewhere): then each received frame is classified.
    transports: bool,
    /// The thread that steps this role (checked in test builds).
    #[cfg(debug_assertions)]
    owner: Option<std::thread::ThreadId>,
    /// Receive counters.
    pub rx: RoleCounters,
    /// Transmit counters.
    pub tx: RoleCounters,
    /// The group's end of its control link (none for a role built alone).
    pub control: Option<ControlRx>,
    /// The group's own copies of the per-group modules (ingress, established), with the
    /// group's own maps (placement.rs).
    pub modules: Chain,
    /// A frame an ingress module changed, for the established chain (which reuses the
    /// scratch buffer); allocated once, at most a frame.
    carry: Vec<u8>,
}

impl<A: App> Protocol<A> {
    /// The role of group `group` of `groups`, with its core and application, links from
    /// every pre replica and to every post replica; `window` bounds its reorder buffer.
    pub fn new(
        group: u16,
        groups: FlowGroups,
        stack: Stack,
        app: A,
        from_pre: Vec<LinkRx>,
        to_post: Vec<LinkTx>,
        window: usize,
    ) -> Self {
        Protocol {
            group,
            groups,
            stack,
            app,
            from_pre,
            to_post,
            rx_order: Reorder::new(window),
            next_frame_seq: 0,
            tx_batch_seq: 0,
            tx_frame_seq: 0,
            next_post: 0,
            app_done: false,
            started: false,
            transports: false,
            #[cfg(debug_assertions)]
            owner: None,
            rx: RoleCounters::default(),
            tx: RoleCounters::default(),
            control: None,
            modules: Chain::default(),
            carry: Vec::new(),
        }
    }

    /// Lets the role run the application's transports beside TCP (the runner allows it in
    /// group 0 only, where the NIC role steers their frames).
    pub fn serve_transports(&mut self) {
        self.transports = true;
    }

    /// The earliest deadline of the core and, if it serves them, the transports.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let core = self.stack.poll_timeout();
        if !self.transports {
            return core;
        }
        let other = self.app.transports().poll_timeout();
        match (core, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The group this role is.
    pub fn group(&self) -> u16 {
        self.group
    }

    /// Whether the application reported [`AppStatus::Done`].
    pub fn app_done(&self) -> bool {
        self.app_done
    }

    /// Whether the application is done and no connection is still closing.
    pub fn finished(&self) -> bool {
        self.app_done && self.stack.closing().is_empty()
    }

    /// In test builds: asserts the role is stepped from one thread only.
    fn check_owner(&mut self) {
        #[cfg(debug_assertions)]
        {
            let me = std::thread::current().id();
            let owner = *self.owner.get_or_insert(me);
            assert_eq!(
                owner, me,
                "flow group {}'s protocol role stepped from two threads",
                self.group
            );
        }
    }

    /// Lets another thread step the role (the runner calls it once its threads are joined).
    pub(crate) fn release_owner(&mut self) {
        #[cfg(debug_assertions)]
        {
            self.owner = None;
        }
    }

    /// Admits at most `budget` batches per pre replica, delivers what is in order, runs due
    /// timers and the application, and fills at most `budget` transmit batches.
    pub fn step(&mut self, now: Instant, budget: usize) -> Result<Progress, EngineError> {
        self.check_owner();
        let mut work = 0;
        if !self.started {
            // The application starts (listens) before the first frames are delivered, so
            // a SYN waiting since before the engine ran finds its listener.
            self.started = true;
            self.poll_app(now, &mut work)?;
            if self.group == 0 && !self.transports {
                // An application may start its transports at its first poll, from the
                // core it is given (the service does): group 0 serves them from then on.
                self.transports = self.app.transports().each().next().is_some();
            }
        }
        for r in 0..self.from_pre.len() {
            for _ in 0..budget {
                let Some(batch) = self.from_pre[r].recv() else {
                    break;
                };
                let holds = self.rx_order.holds;
                if let Err(refused) = self.rx_order.insert(batch.seq, (r, batch)) {
                    self.rx.reorder_refused += 1;
                    let (r, b) = refused.item;
                    self.rx.drops += b.len() as u64;
                    self.from_pre[r].give_back(b);
                }
                self.rx.reorder_holds += self.rx_order.holds - holds;
            }
        }
        while let Some((r, batch)) = self.rx_order.pop() {
            self.deliver(now, &batch);
            self.from_pre[r].give_back(batch);
            work += 1;
        }
        if let Some(c) = self.control.as_mut() {
            // The control plane's messages between input and timers: a connection it opens
            // or closes is the core's like any other from here on.
            work += c.serve(self.group, &mut self.stack, now, budget);
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
            work += 1;
        }
        if self.transports {
            crate::pump::run_due_transport_timers(&mut self.app.transports(), now);
        }
        self.poll_app(now, &mut work)?;
        work += self.transmit(now, budget);
        Ok(Progress { work })
    }

    /// Lets the application act, until it is done.
    fn poll_app(&mut self, now: Instant, work: &mut usize) -> Result<(), EngineError> {
        if !self.app_done {
            match self.app.poll(&mut self.stack, now)? {
                AppStatus::Done => self.app_done = true,
                AppStatus::Busy => *work += 1,
                AppStatus::Running => {}
            }
        }
        Ok(())
    }

    /// Hands a batch's frames to the core in order: runs of verified frames at once; with
    /// the group's own modules attached (ingress, established) or transports beside TCP,
    /// frame by frame.
    fn deliver(&mut self, now: Instant, batch: &Batch) {
        self.rx.batches += 1;
        let hooked =
            self.modules.has(HookPoint::Ingress) || self.modules.has(HookPoint::Established);
        let mut run: [&[u8]; BATCH_FRAMES] = [&[]; BATCH_FRAMES];
        let mut n = 0;
        for i in 0..batch.len() {
            let (frame, meta) = (batch.frame(i), batch.meta(i));
            self.check_frame(frame, &meta);
            self.rx.frames += 1;
            if !meta.checksum.live() {
                // Its place in the sequence was kept; it goes no further.
                continue;
            }
            let verified = meta.checksum == Checksum::Verified;
            if verified && !hooked && !(self.transports && classify(frame) != Class::Core) {
                run[n] = frame;
                n += 1;
                continue;
            }
            if n > 0 {
                self.stack.handle_frames_checksum_ok(now, &run[..n]);
                n = 0;
            }
            let (frame, verified) = if hooked {
                let Some(f) = group_modules(
                    &mut self.modules,
                    &mut self.carry,
                    &self.stack,
                    frame,
                    now.as_nanos(),
                ) else {
                    self.rx.drops += 1;
                    continue;
                };
                // A module that changed the frame voids the pre role's verdict.
                (f, verified && std::ptr::eq(f, frame))
            } else {
                (frame, verified)
            };
            if self.transports {
                let class = classify(frame);
                if class != Class::Core {
                    if let Some(t) = self.app.transports().for_class(class) {
                        // The transport checks its own integrity (ICRC, MTP's checksum).
                        t.handle_frame(now, frame);
                        continue;
                    }
                }
            }
            if verified {
                self.stack.handle_frames_checksum_ok(now, &[frame]);
            } else {
                self.stack.handle_frame(now, frame);
            }
        }
        if n > 0 {
            self.stack.handle_frames_checksum_ok(now, &run[..n]);
        }
    }

    /// In test builds: asserts frames come in their group's order and that every TCP/UDP
    /// frame hashes to this group.
    fn check_frame(&mut self, _frame: &[u8], meta: &FrameMeta) {
        #[cfg(debug_assertions)]
        {
            assert!(
                meta.seq >= self.next_frame_seq,
                "flow group {}: frame {} after {}",
                self.group,
                meta.seq,
                self.next_frame_seq
            );
            // The other transports' frames are group 0's whatever their tuple hashes to.
            let hashed = (classify(_frame) == Class::Core)
                .then(|| self.groups.group_of_frame(_frame))
                .flatten();
            if let Some(g) = hashed {
                assert_eq!(
                    g, self.group,
                    "a frame of group {g} reached group {}",
                    self.group
                );
            }
        }
        self.next_frame_seq = meta.seq + 1;
    }

    /// Fills at most `budget` batches with the core's frames and sends them to the post
    /// replicas in turn; returns how many frames.
    fn transmit(&mut self, now: Instant, budget: usize) -> usize {
        let replicas = self.to_post.len();
        let mut frames = 0;
        for l in self.to_post.iter_mut() {
            l.flush();
        }
        for _ in 0..budget.max(1) {
            let r = self.next_post;
            let Some(mut batch) = self.to_post[r].take_empty() else {
                // Back-pressure: the frames wait in the core.
                break;
            };
            while !batch.is_full() && self.modules.has_reflected() {
                // Frames the group's ingress modules sent back out (XDP_TX) go first.
                let meta = FrameMeta {
                    group: self.group,
                    seq: self.tx_frame_seq,
                    ..FrameMeta::default()
                };
                let Some(f) = self.modules.pop_reflected() else {
                    break;
                };
                if batch.push_copy(&f, meta) {
                    self.tx_frame_seq += 1;
                }
                self.modules.recycle(f);
            }
            while !batch.is_full() {
                let meta = FrameMeta {
                    group: self.group,
                    seq: self.tx_frame_seq,
                    ..FrameMeta::default()
                };
                let stack = &mut self.stack;
                let mut partial = false;
                let mut gso_size = 0;
                // The core sizes a large segment to the room left (Config::tso_max_payload
                // is 0 unless the device segments).
                let mut pushed = batch.push_large_with(meta, |buf| {
                    let t = stack.poll_transmit_offload(now, buf)?;
                    partial = t.csum_partial;
                    gso_size = t.gso_size;
                    Some(t.len)
                });
                if !pushed && self.transports && !batch.is_full() {
                    // The core has nothing more: the transports' frames (complete, so the
                    // post role leaves them alone) follow in the same order of batches.
                    let mut ts = self.app.transports();
                    for t in ts.each() {
                        pushed = batch.push_with(meta, |buf| t.poll_transmit(now, buf));
                        if pushed {
                            break;
                        }
                    }
                }
                if !pushed {
                    break;
                }
                self.tx_frame_seq += 1;
                if partial || gso_size != 0 {
                    if let Some((_, m)) = batch.frame_mut(batch.len() - 1) {
                        if partial {
                            m.checksum = Checksum::Partial;
                        }
                        m.gso_size = gso_size;
                    }
                }
            }
            if batch.is_empty() {
                self.to_post[r].keep(batch);
                break;
            }
            frames += batch.len();
            self.tx.frames += batch.len() as u64;
            self.tx.batches += 1;
            batch.group = self.group;
            batch.seq = self.tx_batch_seq;
            self.tx_batch_seq += 1;
            self.to_post[r].send(batch);
            self.next_post = (r + 1) % replicas;
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::super::link::link;
    use super::*;
    use sluice_tcp::Config;
    use sluice_wire::EthernetAddress;
    use std::net::Ipv4Addr;

    struct Quiet;

    impl App for Quiet {
        fn poll(&mut self, _: &mut Stack, _: Instant) -> Result<AppStatus, EngineError> {
            Ok(AppStatus::Running)
        }
    }

    const GROUPS: FlowGroups = FlowGroups { count: 2, key: 5 };

    /// Group `group`'s role with a link in from one pre replica (its sending end returned).
    fn role(group: u16) -> (Protocol<Quiet>, LinkTx) {
        let mut cfg = Config::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        );
        cfg.flow_group = Some(sluice_tcp::FlowGroupMember {
            groups: GROUPS,
            index: group,
        });
        let (to_group, from_pre) = link(2, 2);
        let (to_post, _from_group) = link(2, 2);
        let stack = Stack::new(cfg).unwrap();
        let p = Protocol::new(
            group,
            GROUPS,
            stack,
            Quiet,
            vec![from_pre],
            vec![to_post],
            4,
        );
        (p, to_group)
    }

    /// A TCP frame to 10.0.0.1:80 from 10.0.0.2:`port`.
    fn tcp(port: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[14 + 9] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 0, 0, 1]);
        f[34..36].copy_from_slice(&port.to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f
    }

    /// A port whose flow hashes to `group`.
    fn port_of(group: u16) -> u16 {
        (40000..)
            .find(|&p| GROUPS.group_of_frame(&tcp(p)) == Some(group))
            .unwrap()
    }

    fn send(link: &mut LinkTx, frame: &[u8], seq: u64) {
        let mut b = link.take_empty().unwrap();
        b.group = 1;
        b.seq = seq;
        let meta = FrameMeta {
            group: 1,
            seq,
            ..FrameMeta::default()
        };
        assert!(b.push_copy(frame, meta));
        link.send(b);
    }

    #[test]
    fn frames_of_its_group_are_delivered_in_order() {
        let (mut p, mut pre) = role(1);
        send(&mut pre, &tcp(port_of(1)), 1);
        p.step(Instant::ZERO, 4).unwrap();
        assert_eq!(p.rx.frames, 0, "batch 1 waits for batch 0");
        assert_eq!(p.rx.reorder_holds, 1);
        send(&mut pre, &tcp(port_of(1)), 0);
        p.step(Instant::ZERO, 4).unwrap();
        assert_eq!((p.rx.frames, p.rx.batches), (2, 2));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a frame of group 0 reached group 1")]
    fn a_frame_of_another_group_trips_the_ownership_check() {
        let (mut p, mut pre) = role(1);
        send(&mut pre, &tcp(port_of(0)), 0);
        let _ = p.step(Instant::ZERO, 4);
    }

    #[test]
    #[cfg(debug_assertions)]
    fn a_second_thread_stepping_the_role_trips_the_ownership_check() {
        let (mut p, _pre) = role(1);
        p.step(Instant::ZERO, 1).unwrap();
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                let _ = p.step(Instant::ZERO, 1);
            })
            .join()
        });
        let e = other.expect_err("stepped from a second thread");
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("stepped from two threads"), "{msg}");
        // Once released (threads joined), another thread may take it over.
        p.release_owner();
        std::thread::scope(|s| {
            s.spawn(|| p.step(Instant::ZERO, 1).unwrap());
        });
    }
}
