//! The fake engine's splices: the Splice command checked as docs/service.md says, and a
//! granted splice joining the two peers directly.

use std::sync::atomic::Ordering;

use sluice_shm::{flags, Completion, SpliceOutcome, SpliceReport};

use super::{set_flags, Endpoint, Engine, Kind, Lane};

/// A splice the fake made: it joins the two peers directly (a loopback splice) and counts
/// what they send each other; it ends when either peer goes.
#[derive(Clone, Copy, Debug)]
pub(super) struct FakeSplice {
    /// The asking application, context and core.
    pub(super) owner: (usize, Lane),
    /// The two peers: bytes from `ends[0]` count as a_to_b.
    pub(super) ends: [Endpoint; 2],
    pub(super) bytes: [u64; 2],
}

impl Engine {
    /// Splice as docs/service.md says it is checked; granted, the two peers are joined.
    pub(super) fn splice(&mut self, a: usize, ctx: Lane, sa: u32, sb: u32) -> Result<u32, i32> {
        if sa == sb {
            return Err(libc::EINVAL);
        }
        let cores = self.opts.layout.queue_cores.max(1);
        if sa % cores != sb % cores {
            // Two flow groups' connections: the core cannot join them.
            return Err(libc::EOPNOTSUPP);
        }
        let mut peers = [(a, 0); 2];
        let mut unread = false;
        for (i, s) in [sa, sb].into_iter().enumerate() {
            let b = self.block((a, s));
            match self.kind((a, s)) {
                Some(Kind::Free) | None => return Err(libc::EBADF),
                Some(Kind::Listening { .. }) => return Err(libc::EINVAL),
                Some(Kind::Spliced) => return Err(libc::EALREADY),
                Some(Kind::Connected { peer: Some(p) }) => peers[i] = p,
                _ => return Err(libc::ENOTCONN),
            }
            let b = b.unwrap();
            if b.flags().load(Ordering::Acquire) & flags::TX_SHUT != 0 {
                return Err(libc::ENOTCONN);
            }
            unread |= b.rx_tail().load(Ordering::Acquire) > b.rx_head().load(Ordering::Acquire)
                || b.tx_tail().load(Ordering::Acquire) > b.tx_head().load(Ordering::Acquire);
        }
        if unread {
            // Held: nothing more is placed until Consumed (or the next Splice).
            for s in [sa, sb] {
                self.slot_mut((a, s)).unwrap().stalled = true;
            }
            return Err(libc::EAGAIN);
        }
        for s in [sa, sb] {
            self.slot_mut((a, s)).unwrap().kind = Kind::Spliced;
            set_flags(&self.block((a, s)).unwrap(), flags::SPLICED, 0);
        }
        let [pa, pb] = peers;
        self.slot_mut(pa).unwrap().kind = Kind::Connected { peer: Some(pb) };
        self.slot_mut(pb).unwrap().kind = Kind::Connected { peer: Some(pa) };
        self.next_splice += 1;
        let handle = self.next_splice;
        self.splices.insert(
            handle,
            FakeSplice {
                owner: (a, ctx),
                ends: peers,
                bytes: [0, 0],
            },
        );
        self.mark_changed(a);
        self.report(handle, SpliceOutcome::Installed);
        Ok(handle)
    }

    /// Posts a report of splice `handle` to its owner (on the next core's queue after the
    /// one it asked on: reports may come on any), if it is still there.
    pub(super) fn report(&mut self, handle: u32, outcome: SpliceOutcome) {
        let Some(sp) = self.splices.get(&handle).copied() else {
            return;
        };
        if outcome.is_final() {
            self.splices.remove(&handle);
        }
        if self.apps.get(sp.owner.0).is_some_and(|a| a.is_some()) {
            let r = SpliceReport {
                handle,
                outcome,
                a_to_b: sp.bytes[0],
                b_to_a: sp.bytes[1],
            };
            let (ctx, core) = sp.owner.1;
            let next = (core + 1) % self.opts.layout.queue_cores.max(1);
            self.complete(sp.owner.0, (ctx, next), Completion::Splice(r));
        }
    }

    /// The splice (handle, direction) whose peer `e` is.
    pub(super) fn splice_of(&self, e: Endpoint) -> Option<(u32, usize)> {
        self.splices
            .iter()
            .find_map(|(&h, sp)| sp.ends.iter().position(|&x| x == e).map(|i| (h, i)))
    }
}
