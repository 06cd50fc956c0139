//! The service in flow groups (docs/service.md, "Flow groups"): N parts, part k the
//! application of flow group k's protocol role in the multi-core engine, serving queue
//! pair k of every context, the slots `s % N == k` and its own core's connections. This
//! module serves what the other parts tell one part over the links (src/links.rs).

use sluice_tcp::Stack;

use crate::app::{Apps, AttachedApp};
use crate::commands;
use crate::handover::{self, Placed};
use crate::links::PartMsg;
use crate::replicas::Replica;
use crate::shared::Shared;
use crate::teardown::{self, Release};

/// Most messages taken from one link per poll (the rest wait for the next).
const MESSAGES_PER_POLL: usize = 64;

/// Serves the messages waiting on this part's links, from every other part.
pub(crate) fn serve(apps: &mut Apps, stack: &mut Stack, sh: &mut Shared) {
    for from in sh.links.others().collect::<Vec<_>>() {
        for _ in 0..MESSAGES_PER_POLL {
            // A handed-over connection whose listener's ring is full stays first in its
            // link (what follows waits behind it, in order).
            let accepted = match sh.links.peek(from) {
                None => break,
                Some(&PartMsg::Accepted {
                    listener,
                    app_id,
                    slot,
                    id,
                    local_port,
                    peer,
                }) => Some((listener, app_id, slot, id, local_port, peer)),
                Some(_) => None,
            };
            if let Some((listener, app_id, slot, id, local_port, peer)) = accepted {
                let app = apps
                    .table
                    .get_mut(listener.app as usize)
                    .and_then(Option::as_mut);
                let placed = handover::place(
                    app,
                    (listener, app_id),
                    (slot, id, local_port, peer),
                    stack,
                    sh,
                );
                match placed {
                    Placed::Wait => break,
                    Placed::Done => {}
                    Placed::Refuse => {
                        sh.counters.accepts_refused_closed += 1;
                        let msg = PartMsg::Refused {
                            app: listener.app,
                            app_id,
                            slot,
                            id,
                        };
                        sh.links.send(from, msg);
                    }
                }
                let _ = sh.links.pop(from);
                continue;
            }
            let Some(msg) = sh.links.pop(from) else {
                break;
            };
            message(from, msg, apps, stack, sh);
        }
    }
}

/// Serves one message from part `from` (every kind but Accepted).
fn message(from: u32, msg: PartMsg, apps: &mut Apps, stack: &mut Stack, sh: &mut Shared) {
    let (part, parts) = (sh.links.index, sh.links.count);
    match msg {
        PartMsg::Attached(view) => {
            let i = view.index as usize;
            if apps.table.len() <= i {
                apps.table.resize_with(i + 1, || None);
            }
            let mut app = AttachedApp::view(*view, part, parts);
            // This part wakes on the application's doorbell too (src/wake_set.rs).
            if let Some(w) = sh.wake_set.as_ref() {
                if !w.watch(&app.doorbell) {
                    app.unwatched = true;
                    sh.counters.doorbells_unwatched += 1;
                }
            }
            apps.table[i] = Some(app);
        }
        PartMsg::Context {
            app,
            index,
            eventfd,
        } => {
            if let Some(Some(a)) = apps.table.get_mut(app as usize) {
                if !a.add_context_on(index, part, eventfd) {
                    sh.counters.contexts_refused += 1;
                }
            }
        }
        PartMsg::Gone { app } => gone(app, apps, stack, sh),
        PartMsg::Freed { app } => {
            if let Some(held) = apps.held.get_mut(app as usize) {
                *held = held.saturating_sub(1);
            }
        }
        PartMsg::Listen {
            owner,
            app_id,
            uid,
            options: o,
        } => {
            let listened = if o.reuseport {
                stack.listen_reuseport(o.port, o.backlog, o.congestion)
            } else {
                stack.listen_with(o.port, o.backlog, o.congestion)
            };
            sh.links.send(from, PartMsg::Listening { owner, app_id });
            match listened {
                Ok(l) => {
                    let r = Replica {
                        owner,
                        app_id,
                        part: from,
                        options: o,
                        ready: false,
                        listed: false,
                    };
                    sh.replicas.insert(l, r);
                    sh.memory_groups
                        .listener_joins(stack, l, uid, &mut sh.counters);
                }
                Err(_) => sh.counters.listen_replicas_failed += 1,
            }
        }
        PartMsg::Unlisten { owner, app_id } => {
            if let Some(l) = sh.replicas.remove_for(owner, app_id) {
                // The core resets what it had not handed out yet.
                let _ = stack.unlisten(l);
            }
        }
        PartMsg::Refused {
            app,
            app_id,
            slot,
            id,
        } => {
            let a = apps.table.get_mut(app as usize).and_then(Option::as_mut);
            if let Some(a) = a.filter(|a| a.id == app_id) {
                handover::refused(a, slot, id, stack, sh);
            }
        }
        PartMsg::Listening { owner, app_id } => {
            let a = apps
                .table
                .get_mut(owner.app as usize)
                .and_then(Option::as_mut);
            let slot = a
                .filter(|a| a.id == app_id)
                .and_then(|a| a.slots.get_mut(owner.slot));
            if let Some(slot) = slot {
                slot.replicas_answered += 1;
            }
        }
        // Handled by serve.
        PartMsg::Accepted { .. } => {}
    }
}

/// Part 0 saw application `app` go: this part runs what it posted last on this part's
/// queues, resets what it holds here (what it closed gracefully drains, as on part 0) and
/// stops the replicas of its listeners; part 0 hears when the index is free.
fn gone(app: u32, apps: &mut Apps, stack: &mut Stack, sh: &mut Shared) {
    for l in sh.replicas.remove_app(app) {
        let _ = stack.unlisten(l);
    }
    let Some(a) = apps.table.get_mut(app as usize).and_then(Option::as_mut) else {
        sh.links.send(0, PartMsg::Freed { app });
        return;
    };
    if a.departed.is_some() {
        return;
    }
    // Its process is gone: nothing more rings; out of the set before the duplicate closes.
    if let Some(w) = sh.wake_set.as_ref() {
        w.unwatch(&a.doorbell);
    }
    commands::run_final_commands(a, stack, sh);
    let kept = teardown::release_app(a, Release::Detach, stack, sh);
    a.contexts.clear();
    if kept {
        a.departed = Some(sh.now);
        apps.orphans += 1;
    } else {
        apps.table[app as usize] = None;
        sh.links.send(0, PartMsg::Freed { app });
    }
}
