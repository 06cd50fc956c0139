//! The data-path's hook points (flextoe.txt 3.3, 5.1): named places in the engine's path of a
//! frame where the control plane attaches extensions at run time. A point runs taps first
//! (`sluice capture`: each tap sees a copy of every frame as it arrived at the point; it
//! cannot change or drop it), then its chain of eBPF modules, which decide the frame's fate
//! (crate::modules: pass, possibly modified; drop; reflect; redirect).
//!
//! The points:
//! - [`HookPoint::Ingress`]: every frame the device received, before classification
//!   (pump.rs, `receive_hooked`), whichever core it is for.
//! - [`HookPoint::Egress`]: every frame handed to the device (pump.rs, the transmit loop
//!   shared by the TCP core and the other transports), after the core wrote it; a large
//!   segment for a device with segmentation offload is seen whole, as tcpdump sees it.
//! - [`HookPoint::Established`]: segments the TCP core's classifier sends down its
//!   pipeline (an established connection's, ACK set, no SYN/RST/URG), after ingress and
//!   before the core takes them ([`Hooks::receive`], asking the core with
//!   `Stack::takes_fast_path`), so a Drop there is a loss the peer retransmits: the
//!   protocol stage never saw it. Tx and Redirect act as at ingress. Modules only (no taps).
//!   The engine owns the chain and calls the core's check statically: no virtual call,
//!   and sluice-tcp stays free of sluice-ebpf (docs/notes/issue-19/established-splice.md).
//!
//! With nothing attached a point costs one predictable branch per frame: a bool read from
//! [`Hooks`], no virtual call, no allocation. The work of taps and modules is out of line.

use std::fmt;

use sluice_tcp::Stack;

pub use crate::hook_point::HookPoint;
use crate::modules::{Chain, Verdict};

/// Most taps attached at once (capture sessions are bounded: each costs a copy per frame).
pub const MAX_TAPS: usize = 8;

/// Which points a tap is attached at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Points {
    /// At [`HookPoint::Ingress`].
    pub ingress: bool,
    /// At [`HookPoint::Egress`].
    pub egress: bool,
}

impl Points {
    /// Both points.
    pub const BOTH: Points = Points {
        ingress: true,
        egress: true,
    };

    /// Whether it includes `at`.
    pub fn has(self, at: HookPoint) -> bool {
        match at {
            HookPoint::Ingress => self.ingress,
            HookPoint::Egress => self.egress,
            HookPoint::Established => false,
        }
    }
}

/// An observer attached at hook points: it sees each frame that passes and must not block
/// (the engine never waits for it: a tap that cannot keep up drops and counts).
pub trait Tap {
    /// A frame passing `at`.
    fn frame(&mut self, at: HookPoint, frame: &[u8]);

    /// Whether whoever reads the tap went away; then the tap is detached
    /// ([`Hooks::reap_closed`]). It may say goodbye here (a last report), without blocking.
    fn poll_closed(&mut self) -> bool;
}

/// Names an attached tap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TapId(pub u32);

/// Why a tap was not attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookError {
    /// [`MAX_TAPS`] taps are attached already.
    Full,
    /// The tap names no point.
    NoPoint,
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookError::Full => write!(f, "the engine has {MAX_TAPS} taps attached already"),
            HookError::NoPoint => f.write_str("a tap must be attached at a hook point"),
        }
    }
}

impl std::error::Error for HookError {}

struct Attached {
    id: TapId,
    at: Points,
    tap: Box<dyn Tap>,
}

/// The engine's hook points and what is attached at them.
#[derive(Default)]
pub struct Hooks {
    /// Whether anything is attached at ingress: the one branch an idle point costs.
    ingress_on: bool,
    /// Likewise at egress.
    egress_on: bool,
    /// Whether a module runs at established.
    established_on: bool,
    /// An ingress module's output, copied out of the scratch buffer the established chain
    /// reuses (allocated once, at most [`crate::modules::MAX_FRAME`]).
    carry: Vec<u8>,
    taps: Vec<Attached>,
    next_id: u32,
    /// The eBPF modules of every point (crate::modules); change them through
    /// [`Hooks::modules_mut`] so the points' flags follow.
    modules: Chain,
    /// The engine's clock for bpf_ktime_get_ns, set by the pump before a burst.
    pub now_ns: u64,
}

impl Hooks {
    /// No hook attached (allocates nothing).
    pub fn new() -> Hooks {
        Hooks::default()
    }

    /// A received frame, before classification: taps see it as received, then the modules
    /// run; returns the frame to classify (as a module left it), or None if a module
    /// dropped, reflected or redirected it.
    #[inline]
    pub fn ingress<'a>(&'a mut self, frame: &'a [u8]) -> Option<&'a [u8]> {
        if self.ingress_on {
            return self.run(HookPoint::Ingress, frame);
        }
        Some(frame)
    }

    /// A received frame through ingress and then, if the core would take it down its
    /// pipeline, established; returns the frame for classification (as modules left it),
    /// or None if a module dropped, reflected or redirected it. Idle: one branch.
    #[inline]
    pub fn receive<'a>(&'a mut self, frame: &'a [u8], stack: &Stack) -> Option<&'a [u8]> {
        if self.ingress_on || self.established_on {
            return self.run_receive(frame, stack);
        }
        Some(frame)
    }

    #[cold]
    #[inline(never)]
    fn run_receive<'a>(&'a mut self, frame: &'a [u8], stack: &Stack) -> Option<&'a [u8]> {
        // Where the frame is now: as received, in the chain's scratch, or in `carry`.
        let mut at = Held::Received;
        if self.ingress_on {
            for a in self.taps.iter_mut().filter(|a| a.at.ingress) {
                a.tap.frame(HookPoint::Ingress, frame);
            }
            match self.modules.run(HookPoint::Ingress, frame, self.now_ns) {
                (Verdict::Pass, None) => {}
                (Verdict::Pass, Some(r)) => at = Held::Scratch(r),
                _ => return None,
            }
        }
        if self.established_on {
            let current: &[u8] = match at {
                Held::Received => frame,
                Held::Scratch((s, e)) => {
                    // The established chain copies its input into the same scratch.
                    self.carry.clear();
                    self.carry.extend_from_slice(&self.modules.scratch()[s..e]);
                    at = Held::Carry;
                    &self.carry
                }
                Held::Carry => &self.carry,
            };
            if stack.takes_fast_path(current) {
                match self
                    .modules
                    .run(HookPoint::Established, current, self.now_ns)
                {
                    (Verdict::Pass, None) => {}
                    (Verdict::Pass, Some(r)) => at = Held::Scratch(r),
                    _ => return None,
                }
            }
        }
        Some(match at {
            Held::Received => frame,
            Held::Scratch((s, e)) => &self.modules.scratch()[s..e],
            Held::Carry => &self.carry,
        })
    }

    /// A frame about to be handed to the device, `buf[..len]` of the device's slot: taps see
    /// it, then the modules run; returns its length now (a module may change it in place),
    /// or None if a module dropped or redirected it.
    #[inline]
    pub fn egress(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        if self.egress_on {
            return self.run_egress(buf, len);
        }
        Some(len)
    }

    #[cold]
    #[inline(never)]
    fn run<'a>(&'a mut self, at: HookPoint, frame: &'a [u8]) -> Option<&'a [u8]> {
        for a in self.taps.iter_mut().filter(|a| a.at.has(at)) {
            a.tap.frame(at, frame);
        }
        match self.modules.run(at, frame, self.now_ns) {
            (Verdict::Pass, None) => Some(frame),
            (Verdict::Pass, Some((s, e))) => Some(&self.modules.scratch()[s..e]),
            _ => None,
        }
    }

    #[cold]
    #[inline(never)]
    fn run_egress(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        let frame = buf.get(..len)?;
        for a in self.taps.iter_mut().filter(|a| a.at.egress) {
            a.tap.frame(HookPoint::Egress, frame);
        }
        match self.modules.run(HookPoint::Egress, frame, self.now_ns) {
            (Verdict::Pass, None) => Some(len),
            (Verdict::Pass, Some((s, e))) => {
                let changed = &self.modules.scratch()[s..e];
                // A frame a module grew past the device's slot cannot go out: dropped.
                let Some(slot) = buf.get_mut(..changed.len()) else {
                    self.modules.count_too_long();
                    return None;
                };
                slot.copy_from_slice(changed);
                Some(changed.len())
            }
            _ => None,
        }
    }

    /// The eBPF modules (read: list, counters).
    pub fn modules(&self) -> &Chain {
        &self.modules
    }

    /// The eBPF modules, to attach, detach or reach their maps; the points' flags are
    /// refreshed when the borrow ends ([`ModulesMut`]).
    pub fn modules_mut(&mut self) -> ModulesMut<'_> {
        ModulesMut(self)
    }

    /// Attaches `tap` at `at`; at most [`MAX_TAPS`] at once.
    pub fn attach(&mut self, at: Points, tap: Box<dyn Tap>) -> Result<TapId, HookError> {
        if !at.ingress && !at.egress {
            return Err(HookError::NoPoint);
        }
        if self.taps.len() >= MAX_TAPS {
            return Err(HookError::Full);
        }
        let id = TapId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        self.taps.push(Attached { id, at, tap });
        self.refresh();
        Ok(id)
    }

    /// Detaches tap `id`, handing it back; None if it is not attached.
    pub fn detach(&mut self, id: TapId) -> Option<Box<dyn Tap>> {
        let i = self.taps.iter().position(|a| a.id == id)?;
        let a = self.taps.swap_remove(i);
        self.refresh();
        Some(a.tap)
    }

    /// Detaches every tap whose reader went away ([`Tap::poll_closed`]); returns how many.
    pub fn reap_closed(&mut self) -> usize {
        let before = self.taps.len();
        self.taps.retain_mut(|a| !a.tap.poll_closed());
        self.refresh();
        before - self.taps.len()
    }

    /// Taps attached now.
    pub fn taps(&self) -> usize {
        self.taps.len()
    }

    /// Whether anything is attached at `at`.
    pub fn is_active(&self, at: HookPoint) -> bool {
        match at {
            HookPoint::Ingress => self.ingress_on,
            HookPoint::Egress => self.egress_on,
            HookPoint::Established => self.established_on,
        }
    }

    fn refresh(&mut self) {
        self.ingress_on =
            self.taps.iter().any(|a| a.at.ingress) || self.modules.has(HookPoint::Ingress);
        self.egress_on =
            self.taps.iter().any(|a| a.at.egress) || self.modules.has(HookPoint::Egress);
        self.established_on = self.modules.has(HookPoint::Established);
    }
}

/// Where [`Hooks::receive`]'s frame is.
#[derive(Clone, Copy)]
enum Held {
    Received,
    Scratch((usize, usize)),
    Carry,
}

/// [`Hooks::modules_mut`]'s borrow: the chain, with the points' flags refreshed on drop.
pub struct ModulesMut<'a>(&'a mut Hooks);

impl std::ops::Deref for ModulesMut<'_> {
    type Target = Chain;
    fn deref(&self) -> &Chain {
        &self.0.modules
    }
}

impl std::ops::DerefMut for ModulesMut<'_> {
    fn deref_mut(&mut self) -> &mut Chain {
        &mut self.0.modules
    }
}

impl Drop for ModulesMut<'_> {
    fn drop(&mut self) {
        self.0.refresh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    type Seen = Rc<RefCell<Vec<(HookPoint, Vec<u8>)>>>;

    /// Records what it sees; closes when told.
    struct Recorder {
        seen: Seen,
        closed: Rc<RefCell<bool>>,
    }

    impl Tap for Recorder {
        fn frame(&mut self, at: HookPoint, frame: &[u8]) {
            self.seen.borrow_mut().push((at, frame.to_vec()));
        }
        fn poll_closed(&mut self) -> bool {
            *self.closed.borrow()
        }
    }

    fn recorder() -> (Recorder, Seen, Rc<RefCell<bool>>) {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let closed = Rc::new(RefCell::new(false));
        let r = Recorder {
            seen: seen.clone(),
            closed: closed.clone(),
        };
        (r, seen, closed)
    }

    #[test]
    fn taps_see_the_points_they_are_attached_at() {
        let mut hooks = Hooks::new();
        assert!(!hooks.is_active(HookPoint::Ingress));
        hooks.ingress(b"nobody");
        let (r, seen, _) = recorder();
        let id = hooks
            .attach(
                Points {
                    ingress: true,
                    egress: false,
                },
                Box::new(r),
            )
            .unwrap();
        hooks.ingress(b"in");
        hooks.egress(&mut b"out".to_vec(), 3);
        assert_eq!(*seen.borrow(), [(HookPoint::Ingress, b"in".to_vec())]);
        assert!(!hooks.is_active(HookPoint::Egress));
        assert!(hooks.detach(id).is_some());
        assert!(!hooks.is_active(HookPoint::Ingress));
        hooks.ingress(b"after");
        assert_eq!(seen.borrow().len(), 1);
    }

    #[test]
    fn attaching_is_bounded_and_closed_taps_are_reaped() {
        let mut hooks = Hooks::new();
        let mut closers = Vec::new();
        for _ in 0..MAX_TAPS {
            let (r, _, closed) = recorder();
            hooks.attach(Points::BOTH, Box::new(r)).unwrap();
            closers.push(closed);
        }
        let (r, _, _) = recorder();
        assert_eq!(
            hooks.attach(Points::BOTH, Box::new(r)).unwrap_err(),
            HookError::Full
        );
        let (r, _, _) = recorder();
        assert_eq!(
            hooks.attach(Points::default(), Box::new(r)).unwrap_err(),
            HookError::NoPoint
        );
        *closers[3].borrow_mut() = true;
        *closers[5].borrow_mut() = true;
        assert_eq!(hooks.reap_closed(), 2);
        assert_eq!(hooks.taps(), MAX_TAPS - 2);
        for c in &closers {
            *c.borrow_mut() = true;
        }
        assert_eq!(hooks.reap_closed(), MAX_TAPS - 2);
        assert!(!hooks.is_active(HookPoint::Egress));
    }
}
