//! Splicing for applications (acceltcp.txt 4.3; docs/service.md, Splice): the Splice
//! command checked against both slots, handed to the core, and the core's splice events
//! routed back, by splice id, to the context that asked, as [`Completion::Splice`] reports.
//!
//! The service is the one reader of the core's splice-event queue while it runs (the
//! engine drives one application at a time; in `sluice proxy` the proxy app reads it).

use std::collections::VecDeque;

use nix::errno::Errno;
use sluice_engine::hooks::Hooks;
use sluice_engine::splice_fast_path;
use sluice_shm::flags::{CONNECTED, ERROR, SPLICED, TX_SHUT};
use sluice_shm::{Completion, SpliceOutcome, SpliceReport};
use sluice_tcp::{ConnId, SpliceEnd, SpliceError, SpliceEvent, SpliceId, SpliceRewrite, Stack};

use crate::app::AttachedApp;
use crate::counters::Counters;
use crate::data;
use crate::owners::Route;
use crate::shared::Shared;
use crate::slots::SlotState;

/// Reports held for one application whose completion queue was full; over it the oldest
/// is dropped and counted.
pub(crate) const MAX_HELD_REPORTS: usize = 1024;

/// Checks one side of a splice: an established connection of this application, not shut
/// for writing, with nothing left in its rings for the application or the engine to move.
fn check_side(
    app: &mut AttachedApp,
    s: u32,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<ConnId, Errno> {
    let h = app
        .slot(s)
        .filter(|h| !matches!(h.slot.state, SlotState::Closing { .. }))
        .ok_or(Errno::EBADF)?;
    let id = match h.slot.state {
        SlotState::Conn { id } => id,
        SlotState::Spliced => return Err(Errno::EALREADY),
        SlotState::Listening { .. } => return Err(Errno::EINVAL),
        _ => return Err(Errno::ENOTCONN),
    };
    if h.slot.flags & CONNECTED == 0 || h.slot.flags & (ERROR | TX_SHUT) != 0 {
        return Err(Errno::ENOTCONN);
    }
    // Bytes the application has not read yet would be lost to the splice: it reads (and
    // forwards) them first.
    let head = data::read_rx_head(h.slot, &h.block).ok_or(Errno::EFAULT)?;
    if head < h.slot.rx_tail {
        return Err(Errno::EAGAIN);
    }
    // Bytes it wrote go into the core first (the core relays them before splicing).
    data::tx_move(app, s, stack, sh);
    let h = app.slot(s).ok_or(Errno::EBADF)?;
    let tail = data::read_tx_tail(h.slot, &h.block, h.ring_size).ok_or(Errno::EFAULT)?;
    if tail != data::tx_taken(h.slot, stack) || h.slot.state != (SlotState::Conn { id }) {
        return Err(Errno::EAGAIN);
    }
    Ok(id)
}

/// The Linux errno for a refusal of the core's.
fn errno_of(e: SpliceError) -> Errno {
    match e {
        SpliceError::InvalidHandle => Errno::EBADF,
        SpliceError::SameConnection => Errno::EINVAL,
        SpliceError::NotEstablished => Errno::ENOTCONN,
        SpliceError::AlreadySpliced => Errno::EALREADY,
        SpliceError::MssMismatch | SpliceError::TimestampsMismatch => Errno::EOPNOTSUPP,
        SpliceError::Full => Errno::ENOBUFS,
    }
}

/// Splice: both slots checked (nothing changes on a refusal), the core asked, both slots
/// marked SPLICED and their connections forgotten by the service; returns the handle.
pub(crate) fn request(
    app: &mut AttachedApp,
    context: u32,
    (a, b): (u32, u32),
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<u32, Errno> {
    if a == b {
        return Err(Errno::EINVAL);
    }
    if sh.links.part_of(a) != sh.links.part_of(b) {
        // Two flow-group parts' cores: a splice joins two connections of one core.
        sh.counters.splices_across_parts += 1;
        return Err(Errno::EOPNOTSUPP);
    }
    let (ida, idb) = match (check_side(app, a, stack, sh), check_side(app, b, stack, sh)) {
        (Ok(ida), Ok(idb)) => (ida, idb),
        (Err(Errno::EAGAIN), Ok(_) | Err(Errno::EAGAIN)) | (Ok(_), Err(Errno::EAGAIN)) => {
            // Bytes are still in the rings: no more are placed in either RX ring until the
            // application either asks again (having read and forwarded them) or reads on
            // (its `Consumed` lifts the hold), so that asking again succeeds.
            for s in [a, b] {
                if let Some(h) = app.slot(s) {
                    h.slot.splice_hold = true;
                }
            }
            return Err(Errno::EAGAIN);
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let sid = stack.splice(ida, idb).map_err(errno_of)?;
    for (s, id) in [(a, ida), (b, idb)] {
        sh.conns.remove(id);
        if let Some(h) = app.slot(s) {
            h.slot.state = SlotState::Spliced;
            // The core owns the connection now: no longer one of the application's.
            h.slot.settle(&mut sh.books, h.uid, h.usage);
            h.slot.set_flags(&h.block, SPLICED, 0);
            *h.dirty = true;
        }
    }
    let handle = sh.splices.next_handle();
    sh.splices.insert(
        sid,
        Route {
            app: app.index,
            app_id: app.id,
            context,
            handle,
        },
    );
    sh.counters.splices += 1;
    Ok(handle)
}

/// What a core event says, for the application.
fn report_of(e: SpliceEvent) -> (SpliceId, SpliceOutcome, u64, u64) {
    match e {
        SpliceEvent::Installed(s) => (s, SpliceOutcome::Installed, 0, 0),
        SpliceEvent::Failed(s) => (s, SpliceOutcome::Failed, 0, 0),
        SpliceEvent::Ended(s, end, st) => {
            let o = match end {
                SpliceEnd::Closed => SpliceOutcome::Closed,
                SpliceEnd::Reset(true) => SpliceOutcome::ResetByA,
                SpliceEnd::Reset(false) => SpliceOutcome::ResetByB,
            };
            (s, o, st.a_to_b, st.b_to_a)
        }
    }
}

/// One core splice event to its owner's context; dropped and counted when the owner is
/// gone (the splice itself goes on: the core owns it).
pub(crate) fn dispatch(apps: &mut [Option<AttachedApp>], e: SpliceEvent, sh: &mut Shared) {
    let (sid, outcome, a_to_b, b_to_a) = report_of(e);
    let route = if outcome.is_final() {
        sh.splices.remove(sid)
    } else {
        sh.splices.get(sid)
    };
    let Some(route) = route else {
        // The in-engine proxy's or a splice asked before a restart: nobody to tell.
        sh.counters.splice_reports_dropped += 1;
        return;
    };
    let app = match apps.get_mut(route.app as usize) {
        Some(Some(app)) if app.id == route.app_id && app.departed.is_none() => app,
        _ => {
            sh.counters.splice_reports_dropped += 1;
            return;
        }
    };
    let report = SpliceReport {
        handle: route.handle,
        outcome,
        a_to_b,
        b_to_a,
    };
    if app.held_reports.len() >= MAX_HELD_REPORTS {
        app.held_reports.pop_front();
        sh.counters.splice_reports_dropped += 1;
    }
    app.held_reports.push_back((route.context, report));
    flush(app, sh);
}

/// Posts the application's held reports while their contexts' completion queues have room.
pub(crate) fn flush(app: &mut AttachedApp, sh: &mut Shared) {
    let mut kept: VecDeque<(u32, SpliceReport)> = VecDeque::new();
    while let Some((ci, report)) = app.held_reports.pop_front() {
        let Some(ctx) = app.contexts.get_mut(ci as usize).filter(|c| !c.dead) else {
            sh.counters.splice_reports_dropped += 1;
            continue;
        };
        // Room is kept for one completion: a command the engine is about to answer.
        if ctx.completions.free().is_ok_and(|room| room > 1) {
            if let Ok(true) = ctx.completions.push(&Completion::Splice(report).encode()) {
                sh.counters.splice_reports += 1;
                app.dirty = true;
                sh.busy = true;
                continue;
            }
        }
        kept.push_back((ci, report));
    }
    app.held_reports = kept;
}

/// Splices handed to the eBPF splice module (`--splice ebpf`): the core's events are seen
/// in the application turn (which has the core), the module's map is written in the hook
/// turn (which has the hooks), so the work waits here in between. Bounded by the core's
/// `splice_max`: an entry per splice it holds, and what one turn's events add.
#[derive(Default)]
pub(crate) struct FastPath {
    /// Splices whose entries are to be written.
    install: Vec<(SpliceId, [SpliceRewrite; 2])>,
    /// Splices whose entries are written.
    active: Vec<(SpliceId, [SpliceRewrite; 2])>,
    /// Entries to delete (their splice ended).
    remove: Vec<[SpliceRewrite; 2]>,
}

impl FastPath {
    /// Takes a core event: an installed splice's rewrites from the core, an ended one's to
    /// delete. True if the hook turn has work.
    pub(crate) fn on_event(&mut self, e: SpliceEvent, stack: &mut Stack) -> bool {
        match e {
            SpliceEvent::Installed(id) => match stack.splice_fast_path(id) {
                Some(rw) => {
                    self.install.push((id, rw));
                    true
                }
                None => false,
            },
            SpliceEvent::Ended(id, ..) => {
                let before = self.remove.len();
                for list in [&mut self.install, &mut self.active] {
                    if let Some(i) = list.iter().position(|(s, _)| *s == id) {
                        self.remove.push(list.swap_remove(i).1);
                    }
                }
                self.remove.len() > before
            }
            SpliceEvent::Failed(_) => false,
        }
    }

    /// Writes and deletes the module's entries (the hook turn).
    pub(crate) fn apply(&mut self, hooks: &mut Hooks, counters: &mut Counters) {
        for rw in self.remove.drain(..) {
            counters.splice_fast_path_frames += splice_fast_path::remove(hooks, &rw);
        }
        for (id, rw) in self.install.drain(..) {
            match splice_fast_path::install(hooks, &rw) {
                Ok(()) => {
                    counters.splice_fast_path_installed += 1;
                    self.active.push((id, rw));
                }
                // The core's stage still relays it all (its window checks are off: the
                // receivers check their own).
                Err(_) => counters.splice_fast_path_failed += 1,
            }
        }
    }
}
