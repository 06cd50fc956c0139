//! Pathlet congestion control (mtp.txt 3.1.3): a window per (pathlet, TC), the paths each
//! destination's feedback revealed, admission of a packet on a path, and path exclusion.

mod params;
mod path;
mod window;

pub use params::CcParams;
pub use path::{DestPaths, PathId, PathTable};
pub use window::{Law, Window};

use std::collections::HashMap;

use crate::time::Nanos;
use crate::wire::{Feedback, FeedbackKind, PathletTc};

/// The windows and paths of one stack.
#[derive(Debug)]
pub struct Cc {
    /// The windows by (pathlet, TC).
    pub windows: HashMap<PathletTc, Window>,
    /// The interned paths.
    pub paths: PathTable,
    params: CcParams,
    mss: u64,
    initial: u64,
    max_pathlets: usize,
    max_paths: usize,
    max_exclude: usize,
    scratch: Vec<PathletTc>,
}

/// Where a message's packets are charged, and what it asks the network to avoid.
#[derive(Debug, Default)]
pub struct Route {
    /// A fixed path (when the message excludes pathlets), else the destination's expected.
    pub pinned: Option<PathId>,
    /// The message's path-exclude list.
    pub exclude: Vec<PathletTc>,
}

impl Cc {
    /// Empty state.
    pub fn new(
        params: CcParams,
        mss: u64,
        initial: u64,
        max_pathlets: usize,
        max_paths: usize,
        max_exclude: usize,
    ) -> Cc {
        Cc {
            windows: HashMap::new(),
            paths: PathTable::default(),
            params,
            mss,
            initial,
            max_pathlets,
            max_paths,
            max_exclude,
            scratch: Vec::new(),
        }
    }

    /// Whether `bytes` may leave on `path` (None: the destination's initial window).
    pub fn has_room(&self, path: Option<PathId>, dest: &DestPaths, bytes: u64) -> bool {
        match path {
            None => dest.inflight == 0 || dest.inflight + bytes <= self.initial,
            Some(id) => self
                .paths
                .hops(id)
                .iter()
                .all(|h| self.windows.get(h).is_none_or(|w| w.has_room(bytes))),
        }
    }

    /// Charges `bytes` to `path`'s pathlets and the destination.
    pub fn charge(&mut self, path: Option<PathId>, dest: &mut DestPaths, bytes: u64) {
        dest.inflight += bytes;
        self.charge_windows(path, bytes);
    }

    /// Releases what `charge` charged (acknowledged, NACKed or lost).
    pub fn release(&mut self, path: Option<PathId>, dest: &mut DestPaths, bytes: u64) {
        dest.inflight = dest.inflight.saturating_sub(bytes);
        self.release_windows(path, bytes);
    }

    /// Moves `bytes` in flight from one path's pathlets to another's.
    pub fn move_charge(&mut self, from: Option<PathId>, to: Option<PathId>, bytes: u64) {
        if from != to && bytes > 0 {
            self.release_windows(from, bytes);
            self.charge_windows(to, bytes);
        }
    }

    fn charge_windows(&mut self, path: Option<PathId>, bytes: u64) {
        let Some(id) = path else { return };
        for h in self.paths.hops(id) {
            if let Some(w) = self.windows.get_mut(h) {
                w.charge(bytes);
            }
        }
    }

    fn release_windows(&mut self, path: Option<PathId>, bytes: u64) {
        let Some(id) = path else { return };
        for h in self.paths.hops(id) {
            if let Some(w) = self.windows.get_mut(h) {
                w.release(bytes);
            }
        }
    }

    /// Learns from the ACK path feedback of a packet of `bytes`: each pathlet's window by
    /// its feedback kind, and the destination's expected path. Returns whether every
    /// pathlet found room in the table, and the path (held by the destination) if any.
    pub fn on_feedback<I: Iterator<Item = Feedback>>(
        &mut self,
        now: Nanos,
        dest: &mut DestPaths,
        feedback: I,
        bytes: u64,
        srtt: Nanos,
    ) -> (bool, Option<PathId>) {
        let mut fits = true;
        self.scratch.clear();
        for fb in feedback {
            if !self.windows.contains_key(&fb.at) {
                if self.windows.len() >= self.max_pathlets {
                    fits = false;
                    continue;
                }
                self.windows.insert(fb.at, Window::new(self.initial));
            }
            if let Some(w) = self.windows.get_mut(&fb.at) {
                match fb.kind {
                    FeedbackKind::Ecn => {
                        w.on_ecn(now, bytes, fb.value != 0, srtt, self.mss, &self.params)
                    }
                    FeedbackKind::Rate => w.on_rate(fb.value, srtt, self.mss, &self.params),
                    FeedbackKind::QueueBytes | FeedbackKind::Unknown(_) => {}
                }
            }
            // A device may report one pathlet twice (feedback of two kinds): once per path.
            if !self.scratch.contains(&fb.at) {
                self.scratch.push(fb.at);
            }
        }
        if self.scratch.is_empty() {
            return (fits, None);
        }
        let id = self.paths.intern(&self.scratch);
        dest.observe(id, self.max_paths, &mut self.paths);
        (fits, Some(id))
    }

    /// Picks a new message's route (mtp.txt 3.1.3 path exclusion): when a pathlet on the
    /// expected path is congested and a known alternative avoids it and has room, the
    /// message lists the congested pathlets and is pinned to that alternative.
    pub fn route(&mut self, dest: &DestPaths, bytes: u64) -> Route {
        let Some(expected) = dest.expected else {
            return Route::default();
        };
        let congested: Vec<PathletTc> = self
            .paths
            .hops(expected)
            .iter()
            .filter(|h| {
                self.windows
                    .get(h)
                    .is_some_and(|w| w.congested(bytes, &self.params))
            })
            .take(self.max_exclude)
            .copied()
            .collect();
        if congested.is_empty() {
            return Route::default();
        }
        let alt = dest.alternatives.iter().rev().copied().find(|&a| {
            let hops = self.paths.hops(a);
            !hops.iter().any(|h| congested.contains(h)) && self.has_room(Some(a), dest, bytes)
        });
        match alt {
            Some(a) => {
                self.paths.retain(a);
                Route {
                    pinned: Some(a),
                    exclude: congested,
                }
            }
            None => Route::default(),
        }
    }

    /// Drops a route's reference.
    pub fn drop_route(&mut self, route: &mut Route) {
        if let Some(p) = route.pinned.take() {
            self.paths.release(p);
        }
    }
}
