//! Commands from context queues: decoded, checked against the slot's state, executed, and
//! answered with one completion each when they carry a request id (docs/service.md).

use std::net::{Ipv4Addr, SocketAddrV4};

use nix::errno::Errno;
use sluice_shm::flags::{ALLOCATED, CONNECTED, CONNECTING, ERROR, LISTENING, TX_SHUT};
use sluice_shm::{Command, Completion, Payload, Reuse, Shut};
use sluice_tcp::{ConnectError, ListenError, Stack};

use crate::app::{AttachedApp, SlotHandle};
use crate::congestion::{algorithm_of, apply_congestion, congestion_of};
use crate::data;
use crate::links::{ListenOptions, PartMsg};
use crate::owners::PortRefused;
use crate::quota::Resource;
use crate::shared::Shared;
use crate::slots::SlotState;
use crate::{splice, teardown};

/// Largest backlog a Listen may ask for (docs/service.md: clamped to 1..=4096).
const MAX_BACKLOG: u32 = 4096;

/// How long a Bind or Listen may wait for a port its application holds on another
/// flow-group part: commands are in order per part, not across parts, so a Close posted on
/// one part just before a Bind of the same port on another may not have run yet. Generous:
/// the other part's thread may be asleep or off its core for a few scheduler slices on a
/// loaded machine (20 ms was seen to run out); a real conflict costs only its wait.
const DEFER_LIMIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs up to `batch` commands from each live context of `app`, and up to the
/// commands-per-application quota over all of them: round-robin from the context where the
/// last iteration stopped, so that an application with many contexts takes no more of an
/// iteration than another, and each of its contexts is served in turn.
pub(crate) fn run_contexts(app: &mut AttachedApp, batch: u64, stack: &mut Stack, sh: &mut Shared) {
    let n = app.contexts.len();
    if n == 0 {
        return;
    }
    let start = app.next_context % n;
    let mut budget = u64::from(sh.quotas.commands_per_app);
    for k in 0..n {
        let ci = (start + k) % n;
        if budget == 0 {
            // The quota is spent: the next iteration starts with the first context not
            // served, and what waits is counted.
            app.next_context = ci;
            let waiting = (k..n).any(|j| {
                let c = &app.contexts[(start + j) % n];
                !c.dead && c.commands.has_entry()
            });
            if waiting {
                sh.counters.quota_command_deferrals += 1;
            }
            return;
        }
        budget -= run_context(app, ci, batch.min(budget), stack, sh);
    }
    // Every context had its turn: the next iteration starts one further, so that the
    // order of contexts does not decide who goes first when the quota runs out.
    app.next_context = (start + 1) % n;
}

/// Runs up to `batch` commands from context `ci` (never more than its completion queue
/// can take, so every completion has room); returns how many ran.
fn run_context(
    app: &mut AttachedApp,
    ci: usize,
    batch: u64,
    stack: &mut Stack,
    sh: &mut Shared,
) -> u64 {
    if app.contexts[ci].dead {
        return 0;
    }
    let room = match app.contexts[ci].completions.free() {
        Ok(room) => room,
        Err(_) => {
            // The application wrote garbage into the completion queue's head.
            app.contexts[ci].dead = true;
            sh.counters.corrupt_queues += 1;
            return 0;
        }
    };
    let mut ran = 0;
    for _ in 0..batch.min(room) {
        let Some(entry) = app.contexts[ci].commands.peek() else {
            break;
        };
        // A command waiting for another part runs again, until DEFER_LIMIT.
        let since = app.contexts[ci].deferred_since;
        sh.may_defer = sh.links.count > 1 && since.is_none_or(|t| sh.now < t + DEFER_LIMIT);
        sh.deferred = false;
        let completion = execute_entry(app, ci as u32, &entry, stack, sh);
        sh.may_defer = false;
        if std::mem::take(&mut sh.deferred) {
            app.contexts[ci].deferred_since = Some(since.unwrap_or(sh.now));
            sh.busy = true;
            break;
        }
        app.contexts[ci].deferred_since = None;
        let _ = app.contexts[ci].commands.pop();
        ran += 1;
        if let Some(c) = completion {
            match app.contexts[ci].completions.push(&c.encode()) {
                Ok(true) => {
                    sh.counters.completions += 1;
                    app.dirty = true;
                }
                // Room was counted before the batch; a full queue here means the
                // application moved its head backwards: only it loses completions.
                Ok(false) | Err(_) => {
                    app.contexts[ci].dead = true;
                    sh.counters.corrupt_queues += 1;
                    break;
                }
            }
        }
    }
    if ran > 0 {
        app.contexts[ci].commands.publish();
        sh.busy = true;
    }
    ran
}

/// Runs what a departed application posted before it went (its last `Send`s and `Close`s:
/// a program that writes, closes and exits must lose nothing, as on Linux). Bounded by the
/// queues' sizes; completions are dropped, nobody is left to read them.
pub(crate) fn run_final_commands(app: &mut AttachedApp, stack: &mut Stack, sh: &mut Shared) {
    let entries = app.region.layout().queue_entries;
    for ci in 0..app.contexts.len() {
        if app.contexts[ci].dead {
            continue;
        }
        for _ in 0..entries {
            let Some(entry) = app.contexts[ci].commands.pop() else {
                break;
            };
            let _ = execute_entry(app, ci as u32, &entry, stack, sh);
        }
    }
}

/// Decodes and executes one entry.
fn execute_entry(
    app: &mut AttachedApp,
    ctx: u32,
    entry: &Payload,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Option<Completion> {
    sh.counters.commands += 1;
    match Command::decode(entry) {
        Ok(cmd) => execute(app, ctx, cmd, stack, sh),
        Err(_) => {
            sh.counters.bad_entries += 1;
            // Doorbells and Close are never answered, even when they do not decode.
            Command::req_of(entry).and_then(|req| failed(req, Errno::EINVAL))
        }
    }
}

fn failed(req: u32, errno: Errno) -> Option<Completion> {
    Some(Completion::Failed {
        req,
        errno: errno as i32,
    })
}

fn done(req: u32, slot: u32, value: u32) -> Option<Completion> {
    Some(Completion::Done { req, slot, value })
}

/// Executes one command posted on context `ctx`.
pub(crate) fn execute(
    app: &mut AttachedApp,
    ctx: u32,
    cmd: Command,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Option<Completion> {
    if let Command::QpDoorbell { qpn } = cmd {
        // Run after this iteration's commands, by the verbs (never answered).
        sh.doorbells.push((app.index, qpn));
        return None;
    }
    if let Command::MtpDoorbell { ep } = cmd {
        // Run after this iteration's commands, by the MTP endpoints (never answered).
        sh.mtp_doorbells.push((app.index, ep));
        return None;
    }
    // Every command but Open names a slot that must be in range and allocated (EBADF), and
    // not one the application already closed: checked here, once, into a handle.
    let Some(s) = cmd.slot() else {
        // Open alone names no slot: it is given one.
        let setup = sh.setup.clone();
        let _held = crate::shared::hold(&setup);
        return cmd.req().and_then(|req| open(app, req, stack, sh));
    };
    let req = cmd.req();
    // Quota checks and the charges they admit, one part at a time (shared.rs).
    let setup = sh.setup.clone();
    let _held = matches!(cmd, Command::Listen { .. } | Command::Connect { .. })
        .then(|| crate::shared::hold(&setup));
    // Read before the slot handle borrows the application.
    let may_bind_privileged = app.creds.may_bind_privileged();
    let uid = app.creds.uid;
    let app_id = app.id;
    let h = app
        .slot(s)
        .filter(|h| !matches!(h.slot.state, SlotState::Closing { .. }));
    let Some(h) = h else {
        sh.counters.bad_slots += 1;
        return req.and_then(|req| failed(req, Errno::EBADF));
    };
    let state = h.slot.state;
    let result = match cmd {
        // Neither names a slot: handled above.
        Command::Open { .. } | Command::QpDoorbell { .. } | Command::MtpDoorbell { .. } => None,
        Command::Bind {
            req,
            ip,
            port,
            reuse,
            ..
        } => bind(h, (ip, port), (uid, may_bind_privileged), reuse, sh)
            .map_or_else(|e| failed(req, e), |port| done(req, s, port as u32)),
        Command::Listen { req, backlog, .. } => listen(h, backlog, (uid, app_id), stack, sh)
            .map_or_else(|e| failed(req, e), |()| done(req, s, 0)),
        Command::Connect { req, ip, port, .. } => connect(h, ip, port, stack, sh)
            .map_or_else(|e| failed(req, e), |port| done(req, s, port as u32)),
        Command::Send { .. } => {
            match state {
                SlotState::Conn { .. } => data::tx_move(app, s, stack, sh),
                SlotState::Dead => {}
                _ => sh.counters.bad_state += 1,
            }
            None
        }
        Command::Consumed { .. } => {
            // The application reads on: a refused splice no longer holds the ring.
            h.slot.splice_hold = false;
            match state {
                SlotState::Conn { .. } => data::rx_move(app, s, stack, sh),
                SlotState::Listening { .. } => data::accept_into(app, s, stack, sh),
                SlotState::Dead => {}
                _ => sh.counters.bad_state += 1,
            }
            None
        }
        Command::Shutdown { req, how, .. } => {
            shutdown(app, s, how, stack, sh).map_or_else(|e| failed(req, e), |()| done(req, s, 0))
        }
        Command::Close { abort, .. } => {
            close(app, s, abort, stack, sh);
            None
        }
        Command::SetNoDelay { req, nodelay, .. } => {
            h.slot.nodelay = nodelay;
            if let SlotState::Conn { id } = state {
                let _ = stack.set_nagle(id, !nodelay);
            }
            done(req, s, 0)
        }
        Command::SetTeardownOffload { req, on, .. } => {
            h.slot.teardown_offload = on;
            if let SlotState::Conn { id } = state {
                let _ = stack.set_teardown_offload(id, on);
            }
            done(req, s, 0)
        }
        Command::Splice {
            req,
            slot_a,
            slot_b,
        } => splice::request(app, ctx, (slot_a, slot_b), stack, sh)
            .map_or_else(|e| failed(req, e), |handle| done(req, s, handle)),
        Command::SetCongestion { req, algorithm, .. } => {
            let algorithm = algorithm_of(algorithm);
            h.slot.congestion = Some(algorithm);
            match state {
                // A connection switches at once (at its current window, as Linux does).
                SlotState::Conn { id } => apply_congestion(stack, id, Some(algorithm), &h.block),
                // A listener's connections take it from their SYN on.
                SlotState::Listening { listener } => {
                    let _ = stack.set_listener_congestion_control(listener, algorithm);
                    h.block.set_congestion(congestion_of(algorithm));
                }
                // Otherwise it is remembered and reported until the connection exists.
                _ => h.block.set_congestion(congestion_of(algorithm)),
            }
            *h.dirty = true;
            done(req, s, 0)
        }
    };
    // A Listen is answered once every other part's replica listens (DEFER_LIMIT at most).
    let listening = matches!(cmd, Command::Listen { .. })
        && matches!(result, Some(Completion::Done { .. }))
        && app.slots.get(s).is_some_and(|slot| {
            matches!(slot.state, SlotState::Listening { .. })
                && slot.replicas_answered + 1 < sh.links.count
        });
    if listening && sh.may_defer {
        sh.deferred = true;
        return None;
    }
    let in_use = matches!(result, Some(Completion::Failed { errno, .. }) if errno == Errno::EADDRINUSE as i32);
    if in_use && sh.may_defer {
        // The port may be the application's own on another part, closing there: wait.
        let port = match cmd {
            Command::Bind { port, .. } => port,
            _ => match app.slots.get(s).map(|slot| slot.state) {
                Some(SlotState::Bound { port }) => port,
                _ => 0,
            },
        };
        let links = &sh.links;
        // Or this part's core still has a replica of that listener (its Unlisten on the way).
        let replica = matches!(cmd, Command::Listen { .. }) && sh.replicas.on_port(port);
        if port != 0
            && (replica
                || sh
                    .ports
                    .held_elsewhere(port, app.index, |o| links.mine(o.slot)))
        {
            sh.deferred = true;
            return None;
        }
    }
    // A wrong-state command is counted (a bad position already was, as EFAULT).
    if matches!(result, Some(Completion::Failed { errno, .. }) if errno != Errno::EFAULT as i32) {
        sh.counters.bad_state += 1;
    }
    result
}

/// Open: a free slot, its block reset to ALLOCATED (and showing the engine's default
/// congestion control, as a new Linux socket reports the system default). Over the
/// sockets-per-uid quota: EMFILE, as over RLIMIT_NOFILE.
fn open(app: &mut AttachedApp, req: u32, stack: &Stack, sh: &mut Shared) -> Option<Completion> {
    let uid = app.creds.uid;
    if sh
        .books
        .admits(&sh.quotas, uid, &app.usage, Resource::Socket)
        .is_err()
    {
        sh.counters.quota_sockets_refused += 1;
        return failed(req, Errno::EMFILE);
    }
    let refused = app.ring_maps_refused;
    let Some(h) = app.alloc_slot(SlotState::Opened, ALLOCATED) else {
        if app.ring_maps_refused != refused {
            sh.counters.ring_maps_refused += 1;
            return failed(req, Errno::ENOMEM);
        }
        sh.counters.bad_state += 1;
        return failed(req, Errno::EMFILE);
    };
    h.slot.settle(&mut sh.books, uid, h.usage);
    h.block.reset(ALLOCATED);
    h.block
        .set_congestion(congestion_of(stack.config().congestion_control));
    *h.dirty = true;
    done(req, h.s, h.s)
}

/// Bind: the engine's address or 0.0.0.0; a port below `unprivileged_port_start` needs uid 0
/// or CAP_NET_BIND_SERVICE (EACCES, checked first as Linux's inet_bind does), and a port in
/// a range reserved for another uid is EACCES too (`port_range_refused`); a port bound by
/// another socket is EADDRINUSE unless Linux's rules let them share it: both SO_REUSEPORT,
/// or both SO_REUSEADDR with no listener, and the same uid (owners.rs); port 0 is chosen
/// at Listen.
fn bind(
    h: SlotHandle<'_>,
    (ip, port): (Ipv4Addr, u16),
    (uid, may_bind_privileged): (u32, bool),
    reuse: Reuse,
    sh: &mut Shared,
) -> Result<u16, Errno> {
    if h.slot.state != SlotState::Opened {
        return Err(Errno::EINVAL);
    }
    if ip != sh.ip && !ip.is_unspecified() {
        return Err(Errno::EADDRNOTAVAIL);
    }
    if port != 0 && port < sh.unprivileged_port_start && !may_bind_privileged {
        sh.counters.privileged_ports_refused += 1;
        return Err(Errno::EACCES);
    }
    if port != 0 {
        match sh.ports.bind(port, h.owner, uid, reuse) {
            Ok(()) => {}
            Err(PortRefused::Reserved) => {
                sh.counters.port_range_refused += 1;
                return Err(Errno::EACCES);
            }
            Err(PortRefused::InUse) => return Err(Errno::EADDRINUSE),
        }
    }
    h.slot.state = SlotState::Bound { port };
    h.block.set_addresses(
        SocketAddrV4::new(sh.ip, port),
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
    );
    h.block
        .event_seq()
        .fetch_add(1, std::sync::atomic::Ordering::Release);
    *h.dirty = true;
    Ok(port)
}

/// Listen: the core listens on the bound port (an ephemeral one if none). Over the
/// listeners-per-application or per-uid quota: ENOBUFS (the core's own answer when its
/// listeners are all taken), and the socket stays as it was.
fn listen(
    h: SlotHandle<'_>,
    backlog: u32,
    (uid, app_id): (u32, u32),
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<(), Errno> {
    let (port, picked) = match h.slot.state {
        // Listening again only changes the backlog on Linux; the core's stays.
        SlotState::Listening { .. } => return Ok(()),
        SlotState::Opened | SlotState::Bound { .. }
            if sh
                .books
                .admits(&sh.quotas, h.uid, h.usage, Resource::Listener)
                .is_err() =>
        {
            sh.counters.quota_listeners_refused += 1;
            return Err(Errno::ENOBUFS);
        }
        SlotState::Opened | SlotState::Bound { port: 0 } => (
            sh.ports
                .bind_ephemeral(h.owner, uid)
                .ok_or(Errno::EADDRINUSE)?,
            true,
        ),
        SlotState::Bound { port } => (port, false),
        _ => return Err(Errno::EINVAL),
    };
    // Sockets sharing the port by SO_REUSEADDR alone: the first to listen has it (Linux's
    // inet_csk_get_port at listen); by SO_REUSEPORT, the core's group takes them all.
    let Some(reuseport) = sh.ports.may_listen(port, h.owner) else {
        if picked {
            sh.ports.release(port, h.owner);
        }
        return Err(Errno::EADDRINUSE);
    };
    // The choice goes in before any SYN is answered: it decides the SYN-ACK's ECN.
    let choice = h.slot.congestion;
    let backlog = backlog.clamp(1, MAX_BACKLOG) as usize;
    let listened = if reuseport {
        stack.listen_reuseport(port, backlog, choice)
    } else {
        stack.listen_with(port, backlog, choice)
    };
    let listener = match listened {
        Ok(l) => l,
        Err(e) => {
            if picked {
                sh.ports.release(port, h.owner);
            } else {
                // Stays bound, as on Linux after a failed listen.
                h.slot.state = SlotState::Bound { port };
            }
            return Err(match e {
                ListenError::AddrInUse => Errno::EADDRINUSE,
                ListenError::NoResources => Errno::ENOBUFS,
                ListenError::InvalidArgument => Errno::EINVAL,
            });
        }
    };
    sh.ports.set_listener(port, h.owner, listener);
    sh.memory_groups
        .listener_joins(stack, listener, h.uid, &mut sh.counters);
    // A SYN reaches the part its tuple hashes to: every other part listens for this one
    // (src/replicas.rs), with the options its connections inherit.
    let options = ListenOptions {
        port,
        backlog,
        reuseport,
        congestion: choice,
        nodelay: h.slot.nodelay,
        offload: h.slot.teardown_offload,
    };
    for part in sh.links.others().collect::<Vec<_>>() {
        sh.links.send(
            part,
            PartMsg::Listen {
                owner: h.owner,
                app_id,
                uid: h.uid,
                options,
            },
        );
    }
    h.slot.state = SlotState::Listening { listener };
    h.slot.settle(&mut sh.books, h.uid, h.usage);
    h.block.set_addresses(
        SocketAddrV4::new(sh.ip, port),
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
    );
    h.slot.set_flags(&h.block, LISTENING, 0);
    *h.dirty = true;
    Ok(())
}

/// Connect: the core opens from an ephemeral port (it picks the local port, so a port bound
/// before is released); the outcome shows in the block. Over the connections-per-application
/// or per-uid quota: ENOBUFS.
fn connect(
    h: SlotHandle<'_>,
    ip: Ipv4Addr,
    port: u16,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<u16, Errno> {
    let state = h.slot.state;
    match state {
        SlotState::Opened | SlotState::Bound { .. } => {}
        SlotState::Conn { .. } if h.slot.flags & CONNECTING != 0 => return Err(Errno::EALREADY),
        SlotState::Conn { .. } | SlotState::Listening { .. } => return Err(Errno::EISCONN),
        _ => return Err(Errno::EINVAL),
    }
    if sh
        .books
        .admits(&sh.quotas, h.uid, h.usage, Resource::Connection)
        .is_err()
    {
        sh.counters.quota_connections_refused += 1;
        return Err(Errno::ENOBUFS);
    }
    if ip == sh.ip {
        // The core has no loopback path to its own address.
        return Err(Errno::ECONNREFUSED);
    }
    // The choice goes in before the SYN is built: it decides whether the SYN asks for ECN.
    let id = stack
        .connect_with(sh.now, ip, port, h.slot.congestion)
        .map_err(|e| match e {
            ConnectError::NoResources => Errno::EADDRNOTAVAIL,
            ConnectError::InvalidArgument => Errno::EINVAL,
        })?;
    if let SlotState::Bound { port: bound } = state {
        if bound != 0 {
            sh.ports.release(bound, h.owner);
        }
    }
    sh.conns.insert(id, h.owner);
    sh.memory_groups
        .connection_joins(stack, id, h.uid, &mut sh.counters);
    let (local, peer) = stack
        .endpoints(id)
        .unwrap_or((SocketAddrV4::new(sh.ip, 0), SocketAddrV4::new(ip, port)));
    h.block.set_addresses(local, peer);
    h.slot.state = SlotState::Conn { id };
    h.slot.settle(&mut sh.books, h.uid, h.usage);
    if h.slot.nodelay {
        let _ = stack.set_nagle(id, false);
    }
    if h.slot.teardown_offload {
        let _ = stack.set_teardown_offload(id, true);
    }
    // The choice went in with the SYN; publish what the connection runs.
    apply_congestion(stack, id, None, &h.block);
    h.slot.set_flags(&h.block, CONNECTING, 0);
    *h.dirty = true;
    Ok(local.port())
}

/// Shutdown: Write/Both queue a FIN after every byte already in the TX ring.
fn shutdown(
    app: &mut AttachedApp,
    s: u32,
    how: Shut,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<(), Errno> {
    let Some(h) = app.slot(s) else {
        return Err(Errno::EBADF);
    };
    let SlotState::Conn { .. } = h.slot.state else {
        return Err(Errno::ENOTCONN);
    };
    if h.slot.flags & (CONNECTED | CONNECTING) == 0 || h.slot.flags & ERROR != 0 {
        return Err(Errno::ENOTCONN);
    }
    if how == Shut::Read || h.slot.tx_end.is_some() {
        // Reading past a shutdown is the library's to refuse; a second shutdown is a no-op.
        return Ok(());
    }
    let Some(tail) = data::read_tx_tail(h.slot, &h.block, h.ring_size) else {
        teardown::bad_position(app, s, stack, sh);
        return Err(Errno::EFAULT);
    };
    h.slot.tx_end = Some(tail);
    h.slot.set_flags(&h.block, TX_SHUT, 0);
    *h.dirty = true;
    data::tx_move(app, s, stack, sh);
    Ok(())
}

/// Close: the application never touches the slot again.
fn close(app: &mut AttachedApp, s: u32, abort: bool, stack: &mut Stack, sh: &mut Shared) {
    let Some(h) = app.slot(s) else {
        return;
    };
    let owner = h.owner;
    match h.slot.state {
        // A spliced connection is the core's: closing the slot does not touch it.
        SlotState::Opened | SlotState::Dead | SlotState::Spliced => teardown::free_slot(app, s, sh),
        SlotState::Bound { port } => {
            sh.ports.release(port, owner);
            teardown::free_slot(app, s, sh);
        }
        SlotState::Listening { listener } => {
            // What the application read of its accept records is taken; the rest is reset.
            if let Some(head) = data::read_rx_head(h.slot, &h.block) {
                h.slot.rx_head_seen = head;
            }
            teardown::stop_listening(app, s, listener, stack, sh);
            teardown::free_slot(app, s, sh);
        }
        SlotState::Conn { id } => {
            let slot = h.slot;
            let head = data::read_rx_head(slot, &h.block);
            let tail = data::read_tx_tail(slot, &h.block, h.ring_size);
            if head.is_none() || slot.tx_end.is_none() && tail.is_none() {
                sh.counters.bad_positions += 1;
            }
            // RFC 2525 2.17 (as the core's close): unread data makes a close an abort, and
            // so do positions that cannot be trusted.
            let unread = head.is_none_or(|h| h < slot.rx_tail);
            if abort || unread || slot.tx_end.is_none() && tail.is_none() {
                let _ = stack.abort(id);
                sh.conns.remove(id);
                sh.counters.resets_on_close += 1;
                teardown::free_slot(app, s, sh);
                return;
            }
            if slot.flags & ERROR != 0 {
                let _ = stack.close(id);
                sh.conns.remove(id);
                teardown::free_slot(app, s, sh);
                return;
            }
            if slot.tx_end.is_none() {
                slot.tx_end = tail;
            }
            slot.state = SlotState::Closing { id };
            data::tx_move(app, s, stack, sh);
        }
        SlotState::Free | SlotState::Closing { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::os::unix::net::UnixStream;

    use sluice_shm::{Consumer, EventFd, Layout, QueueKind, Region};

    use super::*;
    use crate::counters::Counters;
    use crate::owners::{ConnMap, Ports};
    use crate::quota::{Books, Quotas};

    /// An application with `n` contexts, and its side of each context's queues.
    fn app(name: &str, n: u32) -> (AttachedApp, Vec<(sluice_shm::Producer, Consumer)>) {
        let layout = Layout {
            max_sockets: 4,
            max_contexts: n,
            ..Layout::default()
        };
        let region = Region::create(name, layout).unwrap();
        let (sock, _peer) = UnixStream::pair().unwrap();
        let mut app = AttachedApp::new(
            0,
            1,
            ("t".into(), 1),
            sock.into(),
            region,
            EventFd::new().unwrap(),
        );
        let region = app.region.clone();
        let queues = (0..n)
            .map(|i| {
                assert_eq!(app.new_context().unwrap(), Some(i));
                (
                    sluice_shm::Producer::new(region.clone(), i, QueueKind::Command).unwrap(),
                    Consumer::new(region.clone(), i, QueueKind::Completion).unwrap(),
                )
            })
            .collect();
        (app, queues)
    }

    fn shared(quotas: Quotas) -> Shared {
        Shared {
            conns: ConnMap::new(0),
            splices: Default::default(),
            ports: Ports::new((49152, 65535)),
            counters: Counters::default(),
            rx_pending: Vec::new(),
            tx_pending: Vec::new(),
            ip: Ipv4Addr::new(10, 0, 0, 1),
            unprivileged_port_start: 1024,
            quotas,
            books: Books::default(),
            memory_groups: crate::memory_groups::UidGroups::new(None),
            now: sluice_tcp::Instant::ZERO,
            busy: false,
            doorbells: Vec::new(),
            mtp_doorbells: Vec::new(),
            engine_stats: None,
            classes: Default::default(),
            tx_path: Default::default(),
            links: crate::links::Links::single(),
            wake_set: None,
            replicas: Default::default(),
            setup: Default::default(),
            may_defer: false,
            deferred: false,
        }
    }

    /// Completions waiting on the application's side of each context.
    fn taken(queues: &mut [(sluice_shm::Producer, Consumer)]) -> Vec<u32> {
        queues
            .iter_mut()
            .map(|(_, comp)| {
                let mut n = 0;
                while comp.pop().is_some() {
                    n += 1;
                }
                comp.publish();
                n
            })
            .collect()
    }

    #[test]
    fn commands_are_taken_round_robin_up_to_the_applications_quota() {
        let quotas = Quotas {
            commands_per_app: 8,
            ..Quotas::default()
        };
        let mut sh = shared(quotas);
        let mac = sluice_wire::EthernetAddress([2, 0, 0, 0, 0, 1]);
        let mut stack = Stack::new(sluice_tcp::Config::new(mac, sh.ip)).unwrap();
        // A floods: 10 commands in each of 4 contexts (each answered: EBADF, no socket).
        let (mut a, mut qa) = app("sluice-test-commands-flood", 4);
        for (cmd, _) in qa.iter_mut() {
            for req in 1..=10 {
                let entry = Command::SetNoDelay {
                    req,
                    slot: 0,
                    nodelay: true,
                }
                .encode();
                assert!(cmd.push(&entry).unwrap());
            }
        }
        // B posts one.
        let (mut b, mut qb) = app("sluice-test-commands-other", 1);
        let open = Command::Open { req: 1 }.encode();
        assert!(qb[0].0.push(&open).unwrap());
        // Iteration by iteration, as the service runs them (A before B).
        let mut per_iteration = Vec::new();
        for _ in 0..5 {
            run_contexts(&mut a, 64, &mut stack, &mut sh);
            run_contexts(&mut b, 64, &mut stack, &mut sh);
            per_iteration.push((taken(&mut qa), taken(&mut qb)[0]));
        }
        // A never more than its quota an iteration, each context in turn from where the
        // last stopped; B served in the first.
        assert_eq!(
            per_iteration,
            vec![
                (vec![8, 0, 0, 0], 1),
                (vec![0, 8, 0, 0], 0),
                (vec![0, 0, 8, 0], 0),
                (vec![0, 0, 0, 8], 0),
                (vec![2, 2, 2, 2], 0),
            ]
        );
        assert_eq!(sh.counters.commands, 41);
        assert_eq!(sh.counters.quota_command_deferrals, 4);
    }
}
