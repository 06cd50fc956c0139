//! The engine-socket registrations of one epoll instance, and what they report.
//!
//! Pure bookkeeping over a [`ReadySource`] (an engine socket, or a fake in tests):
//! EPOLL_CTL_ADD/MOD/DEL by (fd, socket) as the kernel keys them; level-triggered reports
//! while ready; edge-triggered (EPOLLET) reports when ready and the socket's event sequence
//! changed since the last report; EPOLLONESHOT disarms after a report until MOD; EPOLLERR and
//! EPOLLHUP always, EPOLLRDHUP if asked. Registrations hold weak references, so closing the
//! last fd of a socket drops it from every set. A scan starts where the last one stopped,
//! so a small maxevents cannot starve later sockets.

use std::sync::{Arc, Weak};

use libc::{c_int, epoll_event};

/// epoll's flag bits, as u32.
pub mod bits {
    /// EPOLLIN.
    pub const IN: u32 = libc::EPOLLIN as u32;
    /// EPOLLPRI.
    pub const PRI: u32 = libc::EPOLLPRI as u32;
    /// EPOLLOUT.
    pub const OUT: u32 = libc::EPOLLOUT as u32;
    /// EPOLLRDNORM.
    pub const RDNORM: u32 = libc::EPOLLRDNORM as u32;
    /// EPOLLWRNORM.
    pub const WRNORM: u32 = libc::EPOLLWRNORM as u32;
    /// EPOLLERR.
    pub const ERR: u32 = libc::EPOLLERR as u32;
    /// EPOLLHUP.
    pub const HUP: u32 = libc::EPOLLHUP as u32;
    /// EPOLLRDHUP.
    pub const RDHUP: u32 = libc::EPOLLRDHUP as u32;
    /// EPOLLET.
    pub const ET: u32 = libc::EPOLLET as u32;
    /// EPOLLONESHOT.
    pub const ONESHOT: u32 = libc::EPOLLONESHOT as u32;
    /// EPOLLEXCLUSIVE.
    pub const EXCLUSIVE: u32 = libc::EPOLLEXCLUSIVE as u32;
    /// EPOLLWAKEUP.
    pub const WAKEUP: u32 = libc::EPOLLWAKEUP as u32;
}

/// A source's readiness as epoll bits, and its event sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// EPOLLIN/OUT/RDNORM/WRNORM/RDHUP/HUP/ERR.
    pub bits: u32,
    /// Changes whenever the engine changed the socket.
    pub seq: u32,
}

/// Something whose readiness can be asked (an engine socket; a fake in tests).
pub trait ReadySource {
    /// Its readiness now; None if it is no longer an engine socket (stale after fork).
    fn ready(&self) -> Option<Ready>;
    /// Just its event sequence (cheaper than [`ReadySource::ready`]); equals `ready().seq`.
    fn seq(&self) -> Option<u32>;
}

/// One engine socket in one epoll set.
struct Registration<S> {
    fd: c_int,
    source: Weak<S>,
    events: u32,
    data: u64,
    /// The sequence at the last edge-triggered report.
    last_seq: Option<u32>,
    /// False after a one-shot report, until EPOLL_CTL_MOD.
    armed: bool,
    /// The sequence at which it was last found to have nothing to report: until the
    /// sequence changes it still has nothing (readiness only rises when the engine changes
    /// the socket), so a check costs one load instead of reading the whole block.
    idle_seq: Option<u32>,
}

impl<S> Registration<S> {
    fn is(&self, fd: c_int, source: &Arc<S>) -> bool {
        self.fd == fd && std::ptr::eq(self.source.as_ptr(), Arc::as_ptr(source))
    }

    fn is_live(&self) -> bool {
        self.source.strong_count() > 0
    }

    /// What to report for readiness `r`, if anything (without changing state).
    fn due(&self, r: Ready) -> u32 {
        if !self.armed {
            return 0;
        }
        let got = r.bits & (self.events | bits::ERR | bits::HUP);
        if got == 0 {
            return 0;
        }
        if self.events & bits::ET != 0 && self.last_seq == Some(r.seq) {
            return 0;
        }
        got
    }
}

impl<S: ReadySource> Registration<S> {
    /// What it has to report now, and the readiness seen (None: gone); remembers "nothing
    /// at this sequence" to make the next check cheap.
    fn check(&mut self) -> Option<(u32, Ready)> {
        let src = self.source.upgrade()?;
        if let Some(idle) = self.idle_seq {
            let seq = src.seq()?;
            if seq == idle {
                return Some((0, Ready { bits: 0, seq }));
            }
        }
        let ready = src.ready()?;
        let due = self.due(ready);
        self.idle_seq = (due == 0).then_some(ready.seq);
        Some((due, ready))
    }
}

/// The engine-socket registrations of one epoll instance.
pub struct EpollSet<S> {
    regs: Vec<Registration<S>>,
    /// Where the next scan starts, so that a small maxevents cannot starve later sockets.
    cursor: usize,
}

impl<S> Default for EpollSet<S> {
    fn default() -> Self {
        EpollSet {
            regs: Vec::new(),
            cursor: 0,
        }
    }
}

impl<S: ReadySource> EpollSet<S> {
    fn prune(&mut self) {
        self.regs.retain(|r| r.is_live());
    }

    fn find(&self, fd: c_int, source: &Arc<S>) -> Option<usize> {
        self.regs.iter().position(|r| r.is(fd, source))
    }

    /// EPOLL_CTL_ADD (EEXIST if `fd` is registered for this same socket).
    pub fn add(&mut self, fd: c_int, source: &Arc<S>, events: u32, data: u64) -> Result<(), c_int> {
        self.prune();
        if self.find(fd, source).is_some() {
            return Err(libc::EEXIST);
        }
        // The same fd number registered for a socket since closed: that one is gone.
        self.regs.retain(|r| r.fd != fd);
        self.regs.push(Registration {
            fd,
            source: Arc::downgrade(source),
            events,
            data,
            last_seq: None,
            armed: true,
            idle_seq: None,
        });
        Ok(())
    }

    /// EPOLL_CTL_MOD: new events and data, re-armed, readiness re-evaluated.
    pub fn modify(
        &mut self,
        fd: c_int,
        source: &Arc<S>,
        events: u32,
        data: u64,
    ) -> Result<(), c_int> {
        self.prune();
        let i = self.find(fd, source).ok_or(libc::ENOENT)?;
        let r = &mut self.regs[i];
        r.events = events;
        r.data = data;
        r.last_seq = None;
        r.armed = true;
        r.idle_seq = None;
        Ok(())
    }

    /// EPOLL_CTL_DEL.
    pub fn delete(&mut self, fd: c_int, source: &Arc<S>) -> Result<(), c_int> {
        self.prune();
        let i = self.find(fd, source).ok_or(libc::ENOENT)?;
        self.regs.remove(i);
        Ok(())
    }

    /// Registrations whose socket is still open.
    pub fn len(&mut self) -> usize {
        self.prune();
        self.regs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Whether any registration has something to report (reports nothing: only the
    /// idle-sequence cache changes).
    pub fn any_ready(&mut self) -> bool {
        self.regs
            .iter_mut()
            .any(|r| r.check().is_some_and(|(due, _)| due != 0))
    }

    /// Reports up to `out.len()` events into `out`; returns how many.
    pub fn collect(&mut self, out: &mut [epoll_event]) -> usize {
        self.prune();
        let len = self.regs.len();
        if len == 0 || out.is_empty() {
            return 0;
        }
        let start = self.cursor % len;
        let mut n = 0;
        for k in 0..len {
            if n == out.len() {
                break;
            }
            let i = (start + k) % len;
            let r = &mut self.regs[i];
            let Some((due, ready)) = r.check() else {
                continue;
            };
            if due == 0 {
                continue;
            }
            // Reported: the next check must read the block again (level-triggered).
            r.idle_seq = None;
            if r.events & bits::ET != 0 {
                r.last_seq = Some(ready.seq);
            }
            if r.events & bits::ONESHOT != 0 {
                r.armed = false;
            }
            out[n] = epoll_event {
                events: due,
                u64: r.data,
            };
            n += 1;
            self.cursor = i + 1;
        }
        n
    }

    /// The first live source (to find the attachment to wait on).
    pub fn any_source(&self) -> Option<Arc<S>> {
        self.regs.iter().find_map(|r| r.source.upgrade())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A socket whose readiness the test sets.
    #[derive(Default)]
    struct Fake {
        bits: AtomicU32,
        seq: AtomicU32,
    }

    impl Fake {
        /// The engine changed it: new bits, new sequence.
        fn engine_sets(&self, b: u32) {
            self.bits.store(b, Ordering::Relaxed);
            self.seq.fetch_add(1, Ordering::Relaxed);
        }
        /// The application consumed (readiness drops, no sequence change).
        fn app_drains(&self, b: u32) {
            self.bits.store(b, Ordering::Relaxed);
        }
    }

    impl ReadySource for Fake {
        fn ready(&self) -> Option<Ready> {
            Some(Ready {
                bits: self.bits.load(Ordering::Relaxed),
                seq: self.seq.load(Ordering::Relaxed),
            })
        }

        fn seq(&self) -> Option<u32> {
            Some(self.seq.load(Ordering::Relaxed))
        }
    }

    fn evs() -> [epoll_event; 8] {
        [epoll_event { events: 0, u64: 0 }; 8]
    }

    fn reported(set: &mut EpollSet<Fake>) -> Vec<(u32, u64)> {
        let mut out = evs();
        let n = set.collect(&mut out);
        out[..n].iter().map(|e| ({ e.events }, { e.u64 })).collect()
    }

    #[test]
    fn level_triggered_reports_while_ready() {
        let s = Arc::new(Fake::default());
        let mut set = EpollSet::default();
        set.add(5, &s, bits::IN, 55).unwrap();
        assert!(reported(&mut set).is_empty());
        s.engine_sets(bits::IN | bits::OUT);
        assert_eq!(
            reported(&mut set),
            vec![(bits::IN, 55)],
            "OUT was not asked for"
        );
        assert_eq!(
            reported(&mut set),
            vec![(bits::IN, 55)],
            "still ready: reported again"
        );
        s.app_drains(bits::OUT);
        assert!(reported(&mut set).is_empty());
    }

    #[test]
    fn edge_triggered_reports_once_per_engine_change() {
        let s = Arc::new(Fake::default());
        let mut set = EpollSet::default();
        s.engine_sets(bits::IN);
        set.add(5, &s, bits::IN | bits::ET, 1).unwrap();
        assert_eq!(
            reported(&mut set),
            vec![(bits::IN, 1)],
            "ready at ADD: one report"
        );
        assert!(reported(&mut set).is_empty(), "no change, no report");
        assert!(!set.any_ready());
        s.engine_sets(bits::IN); // more data arrived
        assert!(set.any_ready());
        assert_eq!(reported(&mut set), vec![(bits::IN, 1)]);
        s.app_drains(0);
        s.engine_sets(0); // a change that leaves it unready
        assert!(reported(&mut set).is_empty());
        s.engine_sets(bits::IN);
        assert_eq!(reported(&mut set).len(), 1);
    }

    #[test]
    fn oneshot_disarms_until_modified() {
        let s = Arc::new(Fake::default());
        let mut set = EpollSet::default();
        s.engine_sets(bits::IN);
        set.add(5, &s, bits::IN | bits::ONESHOT, 9).unwrap();
        assert_eq!(reported(&mut set).len(), 1);
        assert!(reported(&mut set).is_empty());
        s.engine_sets(bits::IN);
        assert!(reported(&mut set).is_empty(), "disarmed");
        set.modify(5, &s, bits::IN | bits::ONESHOT, 10).unwrap();
        assert_eq!(reported(&mut set), vec![(bits::IN, 10)]);
    }

    #[test]
    fn errors_and_hangups_are_always_reported_rdhup_only_if_asked() {
        let s = Arc::new(Fake::default());
        let mut set = EpollSet::default();
        set.add(5, &s, bits::OUT, 0).unwrap();
        s.engine_sets(bits::IN | bits::RDHUP | bits::HUP | bits::ERR);
        assert_eq!(reported(&mut set), vec![(bits::HUP | bits::ERR, 0)]);
        set.modify(5, &s, bits::IN | bits::RDHUP, 0).unwrap();
        assert_eq!(
            reported(&mut set),
            vec![(bits::IN | bits::RDHUP | bits::HUP | bits::ERR, 0)]
        );
    }

    #[test]
    fn ctl_bookkeeping_follows_epoll_rules() {
        let a = Arc::new(Fake::default());
        let b = Arc::new(Fake::default());
        let mut set = EpollSet::default();
        set.add(5, &a, bits::IN, 0).unwrap();
        assert_eq!(set.add(5, &a, bits::IN, 0), Err(libc::EEXIST));
        assert_eq!(set.modify(6, &a, bits::IN, 0), Err(libc::ENOENT));
        assert_eq!(set.delete(5, &b), Err(libc::ENOENT), "fd 5 is a's");
        set.add(6, &a, bits::OUT, 0).unwrap(); // a dup of the same socket
        assert_eq!(set.len(), 2);
        set.delete(5, &a).unwrap();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn closing_the_socket_removes_its_registrations() {
        let a = Arc::new(Fake::default());
        let mut set = EpollSet::default();
        set.add(5, &a, bits::IN, 0).unwrap();
        a.engine_sets(bits::IN);
        drop(a);
        assert!(reported(&mut set).is_empty());
        assert!(set.is_empty());
        // fd 5 is reused for a new socket: ADD is not EEXIST.
        let b = Arc::new(Fake::default());
        set.add(5, &b, bits::IN, 0).unwrap();
    }

    #[test]
    fn a_small_maxevents_does_not_starve_later_sockets() {
        let socks: Vec<_> = (0..3).map(|_| Arc::new(Fake::default())).collect();
        let mut set = EpollSet::default();
        for (i, s) in socks.iter().enumerate() {
            s.engine_sets(bits::IN);
            set.add(i as c_int, s, bits::IN, i as u64).unwrap();
        }
        let mut seen = Vec::new();
        for _ in 0..3 {
            let mut one = [epoll_event { events: 0, u64: 0 }];
            assert_eq!(set.collect(&mut one), 1);
            let data = one[0].u64;
            seen.push(data);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2]);
    }
}
