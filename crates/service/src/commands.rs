//! Commands from context queues: decoded, checked against the slot's state, executed, and
//! answered with one completion each when they carry a request id (docs/service.md).

use std::net::{Ipv4Addr, SocketAddrV4};

use nix::errno::Errno;
use sluice_shm::flags::{ALLOCATED, CONNECTED, CONNECTING, ERROR, LISTENING, TX_SHUT};
use sluice_shm::{Command, Completion, Congestion, Shut, SocketBlock, PAYLOAD_BYTES};
use sluice_tcp::{Algorithm, ConnId, ConnectError, ListenError, Stack};

use crate::app::AttachedApp;
use crate::data;
use crate::owners::Owner;
use crate::service::Shared;
use crate::slots::SlotState;
use crate::teardown;

/// Largest backlog a Listen may ask for (docs/service.md: clamped to 1..=4096).
const MAX_BACKLOG: u32 = 4096;

/// Opcodes of the commands that carry no request id (doorbells and Close), read from the
/// contract's own encoding: a bad entry with one of them gets no completion.
fn carries_no_req(opcode: u8) -> bool {
    [
        Command::Send { slot: 0 },
        Command::Consumed { slot: 0 },
        Command::Close {
            slot: 0,
            abort: false,
        },
    ]
    .iter()
    .any(|c| c.encode()[0] == opcode)
}

/// Runs up to `batch` commands from each live context of `app` (never more than its
/// completion queue can take, so every completion has room).
pub(crate) fn run_contexts(app: &mut AttachedApp, batch: u64, stack: &mut Stack, sh: &mut Shared) {
    for ci in 0..app.contexts.len() {
        if app.contexts[ci].dead {
            continue;
        }
        let room = match app.contexts[ci].completions.free() {
            Ok(room) => room,
            Err(_) => {
                // The application wrote garbage into the completion queue's head.
                app.contexts[ci].dead = true;
                sh.counters.corrupt_queues += 1;
                continue;
            }
        };
        let mut ran = 0;
        for _ in 0..batch.min(room) {
            let Some(entry) = app.contexts[ci].commands.pop() else {
                break;
            };
            ran += 1;
            let completion = execute_entry(app, &entry, stack, sh);
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
    }
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
            let _ = execute_entry(app, &entry, stack, sh);
        }
    }
}

/// Decodes and executes one entry.
fn execute_entry(
    app: &mut AttachedApp,
    entry: &[u8; PAYLOAD_BYTES],
    stack: &mut Stack,
    sh: &mut Shared,
) -> Option<Completion> {
    sh.counters.commands += 1;
    match Command::decode(entry) {
        Ok(cmd) => execute(app, cmd, stack, sh),
        Err(_) => {
            sh.counters.bad_entries += 1;
            if carries_no_req(entry[0]) {
                return None;
            }
            let req = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]);
            Some(Completion::Failed {
                req,
                errno: Errno::EINVAL as i32,
            })
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

/// Executes one command.
pub(crate) fn execute(
    app: &mut AttachedApp,
    cmd: Command,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Option<Completion> {
    // Every command but Open names a slot that must be in range and allocated (EBADF), and
    // not one the application already closed.
    let (req, s) = match cmd {
        Command::Open { req } => return open(app, req, stack, sh),
        Command::Bind { req, slot, .. }
        | Command::Listen { req, slot, .. }
        | Command::Connect { req, slot, .. }
        | Command::Shutdown { req, slot, .. }
        | Command::SetNoDelay { req, slot, .. }
        | Command::SetCongestion { req, slot, .. } => (Some(req), slot),
        Command::Send { slot } | Command::Consumed { slot } | Command::Close { slot, .. } => {
            (None, slot)
        }
    };
    let state = app
        .slots
        .get(s)
        .map(|slot| slot.state)
        .filter(|st| !matches!(st, SlotState::Closing { .. }));
    let Some(state) = state else {
        sh.counters.bad_slots += 1;
        return req.and_then(|req| failed(req, Errno::EBADF));
    };
    let result = match cmd {
        Command::Open { .. } => unreachable!("handled above"),
        Command::Bind { req, ip, port, .. } => bind(app, s, state, ip, port, sh)
            .map_or_else(|e| failed(req, e), |port| done(req, s, port as u32)),
        Command::Listen { req, backlog, .. } => listen(app, s, state, backlog, stack, sh)
            .map_or_else(|e| failed(req, e), |()| done(req, s, 0)),
        Command::Connect { req, ip, port, .. } => connect(app, s, state, ip, port, stack, sh)
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
            match state {
                SlotState::Conn { .. } => data::rx_move(app, s, stack, sh),
                SlotState::Listening { .. } => data::accept_into(app, s, stack, sh),
                SlotState::Dead => {}
                _ => sh.counters.bad_state += 1,
            }
            None
        }
        Command::Shutdown { req, how, .. } => shutdown(app, s, state, how, stack, sh)
            .map_or_else(|e| failed(req, e), |()| done(req, s, 0)),
        Command::Close { abort, .. } => {
            close(app, s, state, abort, stack, sh);
            None
        }
        Command::SetNoDelay { req, nodelay, .. } => {
            let slot = app.slots.get_mut(s).expect("allocated");
            slot.nodelay = nodelay;
            if let SlotState::Conn { id } = state {
                let _ = stack.set_nagle(id, !nodelay);
            }
            done(req, s, 0)
        }
        Command::SetCongestion { req, algorithm, .. } => {
            let algorithm = algorithm_of(algorithm);
            let slot = app.slots.get_mut(s).expect("allocated");
            slot.congestion = Some(algorithm);
            let block = AttachedApp::block(&app.region, s).expect("allocated");
            match state {
                // A connection switches at once (at its current window, as Linux does).
                SlotState::Conn { id } => apply_congestion(stack, id, Some(algorithm), &block),
                // A listener's connections take it from their SYN on.
                SlotState::Listening { listener } => {
                    let _ = stack.set_listener_congestion_control(listener, algorithm);
                    block.set_congestion(congestion_of(algorithm));
                }
                // Otherwise it is remembered and reported until the connection exists.
                _ => block.set_congestion(congestion_of(algorithm)),
            }
            app.dirty = true;
            done(req, s, 0)
        }
    };
    // A wrong-state command is counted (a bad position already was, as EFAULT).
    if matches!(result, Some(Completion::Failed { errno, .. }) if errno != Errno::EFAULT as i32) {
        sh.counters.bad_state += 1;
    }
    result
}

/// The core's algorithm for the contract's code (exhaustive both ways, so a new algorithm
/// on either side does not compile until it is mapped).
pub(crate) fn algorithm_of(c: Congestion) -> Algorithm {
    match c {
        Congestion::Dctcp => Algorithm::Dctcp,
        Congestion::Timely => Algorithm::Timely,
        Congestion::Reno => Algorithm::NewReno,
        Congestion::Cubic => Algorithm::Cubic,
    }
}

/// The contract's code for the core's algorithm.
pub(crate) fn congestion_of(a: Algorithm) -> Congestion {
    match a {
        Algorithm::Dctcp => Congestion::Dctcp,
        Algorithm::Timely => Congestion::Timely,
        Algorithm::NewReno => Congestion::Reno,
        Algorithm::Cubic => Congestion::Cubic,
    }
}

/// Gives connection `id` the application's choice (if any) and publishes the algorithm it
/// runs in its block.
pub(crate) fn apply_congestion(
    stack: &mut Stack,
    id: ConnId,
    choice: Option<Algorithm>,
    block: &SocketBlock<'_>,
) {
    if let Some(algorithm) = choice {
        // A connection the core already dropped keeps the choice in the block only.
        let _ = stack.set_congestion_control(id, algorithm);
    }
    let running = stack
        .congestion_control(id)
        .ok()
        .or(choice)
        .unwrap_or(stack.config().congestion_control);
    block.set_congestion(congestion_of(running));
}

/// Open: a free slot, its block reset to ALLOCATED (and showing the engine's default
/// congestion control, as a new Linux socket reports the system default).
fn open(app: &mut AttachedApp, req: u32, stack: &Stack, sh: &mut Shared) -> Option<Completion> {
    let Some(s) = app.slots.alloc(SlotState::Opened, ALLOCATED) else {
        sh.counters.bad_state += 1;
        return failed(req, Errno::EMFILE);
    };
    let block = AttachedApp::block(&app.region, s).expect("allocated slots are in range");
    block.reset(ALLOCATED);
    block.set_congestion(congestion_of(stack.config().congestion_control));
    app.dirty = true;
    done(req, s, s)
}

/// Bind: the engine's address or 0.0.0.0; a port bound by any socket of any application is
/// EADDRINUSE; port 0 is chosen at Listen.
fn bind(
    app: &mut AttachedApp,
    s: u32,
    state: SlotState,
    ip: Ipv4Addr,
    port: u16,
    sh: &mut Shared,
) -> Result<u16, Errno> {
    if state != SlotState::Opened {
        return Err(Errno::EINVAL);
    }
    if ip != sh.ip && !ip.is_unspecified() {
        return Err(Errno::EADDRNOTAVAIL);
    }
    let owner = Owner {
        app: app.index,
        slot: s,
    };
    if port != 0 && !sh.ports.bind(port, owner) {
        return Err(Errno::EADDRINUSE);
    }
    let slot = app.slots.get_mut(s).expect("allocated");
    slot.state = SlotState::Bound { port };
    let block = AttachedApp::block(&app.region, s).expect("allocated");
    block.set_addresses(
        SocketAddrV4::new(sh.ip, port),
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
    );
    block
        .event_seq()
        .fetch_add(1, std::sync::atomic::Ordering::Release);
    app.dirty = true;
    Ok(port)
}

/// Listen: the core listens on the bound port (an ephemeral one if none).
fn listen(
    app: &mut AttachedApp,
    s: u32,
    state: SlotState,
    backlog: u32,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<(), Errno> {
    let owner = Owner {
        app: app.index,
        slot: s,
    };
    let (port, picked) = match state {
        // Listening again only changes the backlog on Linux; the core's stays.
        SlotState::Listening { .. } => return Ok(()),
        SlotState::Opened | SlotState::Bound { port: 0 } => (
            sh.ports.bind_ephemeral(owner).ok_or(Errno::EADDRINUSE)?,
            true,
        ),
        SlotState::Bound { port } => (port, false),
        _ => return Err(Errno::EINVAL),
    };
    // The choice goes in before any SYN is answered: it decides the SYN-ACK's ECN.
    let choice = app.slots.get(s).and_then(|slot| slot.congestion);
    let listener = match stack.listen_with(port, backlog.clamp(1, MAX_BACKLOG) as usize, choice) {
        Ok(l) => l,
        Err(e) => {
            if picked {
                sh.ports.release(port, owner);
            } else {
                // Stays bound, as on Linux after a failed listen.
                app.slots.get_mut(s).expect("allocated").state = SlotState::Bound { port };
            }
            return Err(match e {
                ListenError::AddrInUse => Errno::EADDRINUSE,
                ListenError::NoResources => Errno::ENOBUFS,
                ListenError::InvalidArgument => Errno::EINVAL,
            });
        }
    };
    let slot = app.slots.get_mut(s).expect("allocated");
    slot.state = SlotState::Listening { listener };
    let block = AttachedApp::block(&app.region, s).expect("allocated");
    block.set_addresses(
        SocketAddrV4::new(sh.ip, port),
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
    );
    slot.set_flags(&block, LISTENING, 0);
    app.dirty = true;
    Ok(())
}

/// Connect: the core opens from an ephemeral port (it picks the local port, so a port bound
/// before is released); the outcome shows in the block.
fn connect(
    app: &mut AttachedApp,
    s: u32,
    state: SlotState,
    ip: Ipv4Addr,
    port: u16,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<u16, Errno> {
    let owner = Owner {
        app: app.index,
        slot: s,
    };
    let flags = app.slots.get(s).map_or(0, |slot| slot.flags);
    match state {
        SlotState::Opened | SlotState::Bound { .. } => {}
        SlotState::Conn { .. } if flags & CONNECTING != 0 => return Err(Errno::EALREADY),
        SlotState::Conn { .. } | SlotState::Listening { .. } => return Err(Errno::EISCONN),
        _ => return Err(Errno::EINVAL),
    }
    if ip == sh.ip {
        // The core has no loopback path to its own address.
        return Err(Errno::ECONNREFUSED);
    }
    let choice = app.slots.get(s).and_then(|slot| slot.congestion);
    // The choice goes in before the SYN is built: it decides whether the SYN asks for ECN.
    let id = stack
        .connect_with(sh.now, ip, port, choice)
        .map_err(|e| match e {
            ConnectError::NoResources => Errno::EADDRNOTAVAIL,
            ConnectError::InvalidArgument => Errno::EINVAL,
        })?;
    if let SlotState::Bound { port: bound } = state {
        if bound != 0 {
            sh.ports.release(bound, owner);
        }
    }
    sh.conns.insert(id, owner);
    let block = AttachedApp::block(&app.region, s).expect("allocated");
    let (local, peer) = stack
        .endpoints(id)
        .unwrap_or((SocketAddrV4::new(sh.ip, 0), SocketAddrV4::new(ip, port)));
    block.set_addresses(local, peer);
    let slot = app.slots.get_mut(s).expect("allocated");
    slot.state = SlotState::Conn { id };
    if slot.nodelay {
        let _ = stack.set_nagle(id, false);
    }
    block.set_congestion(congestion_of(
        stack
            .congestion_control(id)
            .unwrap_or(stack.config().congestion_control),
    ));
    slot.set_flags(&block, CONNECTING, 0);
    app.dirty = true;
    Ok(local.port())
}

/// Shutdown: Write/Both queue a FIN after every byte already in the TX ring.
fn shutdown(
    app: &mut AttachedApp,
    s: u32,
    state: SlotState,
    how: Shut,
    stack: &mut Stack,
    sh: &mut Shared,
) -> Result<(), Errno> {
    let SlotState::Conn { .. } = state else {
        return Err(Errno::ENOTCONN);
    };
    let ring_size = app.ring_size;
    let slot = app.slots.get_mut(s).expect("allocated");
    if slot.flags & (CONNECTED | CONNECTING) == 0 || slot.flags & ERROR != 0 {
        return Err(Errno::ENOTCONN);
    }
    if how == Shut::Read || slot.tx_end.is_some() {
        // Reading past a shutdown is the library's to refuse; a second shutdown is a no-op.
        return Ok(());
    }
    let block = AttachedApp::block(&app.region, s).expect("allocated");
    let Some(tail) = data::read_tx_tail(slot, &block, ring_size) else {
        teardown::bad_position(app, s, stack, sh);
        return Err(Errno::EFAULT);
    };
    slot.tx_end = Some(tail);
    slot.set_flags(&block, TX_SHUT, 0);
    app.dirty = true;
    data::tx_move(app, s, stack, sh);
    Ok(())
}

/// Close: the application never touches the slot again.
fn close(
    app: &mut AttachedApp,
    s: u32,
    state: SlotState,
    abort: bool,
    stack: &mut Stack,
    sh: &mut Shared,
) {
    let owner = Owner {
        app: app.index,
        slot: s,
    };
    match state {
        SlotState::Opened | SlotState::Dead => teardown::free_slot(app, s),
        SlotState::Bound { port } => {
            sh.ports.release(port, owner);
            teardown::free_slot(app, s);
        }
        SlotState::Listening { listener } => {
            // What the application read of its accept records is taken; the rest is reset.
            if let Some(slot) = app.slots.get_mut(s) {
                let block = AttachedApp::block(&app.region, s).expect("allocated");
                if let Some(head) = data::read_rx_head(slot, &block) {
                    slot.rx_head_seen = head;
                }
            }
            teardown::stop_listening(app, s, listener, stack, sh);
            teardown::free_slot(app, s);
        }
        SlotState::Conn { id } => {
            let ring_size = app.ring_size;
            let slot = app.slots.get_mut(s).expect("allocated");
            let block = AttachedApp::block(&app.region, s).expect("allocated");
            let head = data::read_rx_head(slot, &block);
            let tail = data::read_tx_tail(slot, &block, ring_size);
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
                teardown::free_slot(app, s);
                return;
            }
            if slot.flags & ERROR != 0 {
                let _ = stack.close(id);
                sh.conns.remove(id);
                teardown::free_slot(app, s);
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
