//! The control plane: the Unix listener, the attach handshake (Hello → Welcome with the
//! region and doorbell), NewContext, and hang-up detection, all behind one epoll descriptor
//! that the engine also sleeps on (with every application's doorbell).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use sluice_shm::admin::AdminRequest;
use sluice_shm::capture::CaptureRequest;
use sluice_shm::control::{
    accept_app, connect_to, listen_at, recv_message, send_message, Reply, Request, ACCESS_DENIED,
    PROTOCOL_VERSION,
};
use sluice_shm::{EventFd, Region, ShmError};
use sluice_tcp::Stack;

use crate::access::{AccessPolicy, Credentials};
use crate::app::{Apps, AttachedApp};
use crate::commands;
use crate::config::ServiceConfig;
use crate::cores::Cores;
use crate::error::{sys, ServiceError};
use crate::quota::{Resource, Usage};
use crate::shared::Shared;
use crate::teardown::{self, Release};
use crate::{admin, mtp, verbs};

/// Most connections that have not said Hello yet (the oldest is dropped past it).
const MAX_PENDING: usize = 16;
/// Most epoll events handled per look.
const EVENTS: usize = 64;
/// Most connections accepted per look (the rest wait in the listen backlog).
const ACCEPTS_PER_LOOK: usize = 16;
/// Most control messages read from one application per look.
const MESSAGES_PER_LOOK: usize = 8;
/// Longest application name kept for logs.
const MAX_NAME: usize = 64;

/// Epoll tokens: the kind in the high half, an index in the low half.
mod token {
    pub const LISTENER: u64 = 0;
    pub const PENDING: u64 = 1 << 32;
    pub const APP: u64 = 2 << 32;
    pub const DOORBELL: u64 = 3 << 32;
    pub const LINKS: u64 = 4 << 32;
    pub const KIND: u64 = !0xffff_ffff;
}

/// The listener, the epoll set and the connections waiting to say Hello.
pub(crate) struct Control {
    path: PathBuf,
    listener: Option<OwnedFd>,
    /// Readable when the engine has control-plane work or a doorbell rang.
    pub epoll: Epoll,
    pending: Vec<Option<(OwnedFd, Option<Credentials>)>>,
    /// The engine's own effective uid (always admitted).
    engine_uid: u32,
    /// Which pending entry to drop next when all are taken.
    evict: usize,
    events: Vec<EpollEvent>,
    /// Capture requests admitted and waiting for the engine's hooks (crate::capture);
    /// at most one per pending connection per look.
    pub captures: Vec<(OwnedFd, CaptureRequest)>,
    /// Capture requests refused by the access policy.
    pub captures_denied: u64,
    /// Admitted module and map requests waiting for the engine's hooks (crate::modules):
    /// (application index, application id, request); at most one per application per look.
    pub module_requests: Vec<(usize, u32, AdminRequest)>,
}

impl Control {
    /// Listens at `path` and sets up the epoll set. A socket file that still answers belongs
    /// to a running engine and is left alone; a stale one is replaced. The file is `0660` in
    /// the policy's group, or `0600` without one: never world-writable.
    pub fn new(path: &Path, access: &AccessPolicy) -> Result<Control, ServiceError> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            // Only a socket is ever replaced: a stray regular file there is a mistake.
            if !meta.file_type().is_socket() {
                return Err(ServiceError::Config(format!(
                    "{} exists and is not a socket",
                    path.display()
                )));
            }
        }
        if path.exists() && connect_to(path).is_ok() {
            return Err(ServiceError::Config(format!(
                "an engine already serves {}",
                path.display()
            )));
        }
        let listener = listen_at(path)?;
        set_socket_mode(path, access)?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll_create"))?;
        epoll
            .add(
                listener.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, token::LISTENER),
            )
            .map_err(sys("epoll_ctl on the engine socket"))?;
        Ok(Control {
            path: path.to_owned(),
            listener: Some(listener),
            epoll,
            pending: (0..MAX_PENDING).map(|_| None).collect(),
            engine_uid: nix::unistd::geteuid().as_raw(),
            evict: 0,
            events: vec![EpollEvent::empty(); EVENTS],
            captures: Vec::new(),
            captures_denied: 0,
            module_requests: Vec::new(),
        })
    }

    /// Stops listening and removes the socket file (once).
    pub fn close(&mut self) {
        if self.listener.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
        for p in self.pending.iter_mut() {
            *p = None;
        }
    }

    /// Watches `fd` for input under `token`.
    fn watch(&self, fd: &impl AsFd, token: u64) -> bool {
        self.epoll
            .add(fd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, token))
            .is_ok()
    }

    /// Watches part 0's link doorbell (the service in flow groups: src/links.rs),
    /// level-triggered: the part drains it before it announces a sleep.
    pub fn watch_links(&self, bell: BorrowedFd<'_>) -> Result<(), ServiceError> {
        self.epoll
            .add(bell, EpollEvent::new(EpollFlags::EPOLLIN, token::LINKS))
            .map_err(sys("epoll_ctl on part 0's link doorbell"))
    }

    /// Watches an application's doorbell: level-triggered and drained by the single
    /// service; edge-triggered and never drained in flow groups, where every part
    /// watches it and a drain would erase the ring for the others (src/wake_set.rs).
    fn watch_doorbell(&self, fd: &EventFd, token: u64, parts: u32) -> bool {
        let flags = if parts > 1 {
            EpollFlags::EPOLLIN | EpollFlags::EPOLLET
        } else {
            EpollFlags::EPOLLIN
        };
        self.epoll
            .add(fd.as_fd(), EpollEvent::new(flags, token))
            .is_ok()
    }

    /// Stops watching `fd`.
    fn unwatch(&self, fd: &impl AsFd) {
        let _ = self.epoll.delete(fd.as_fd());
    }
}

/// Gives the socket file at `path` its group and mode (before anyone else can connect,
/// the mode is the umask's; applications of other uids are refused at Hello anyway).
fn set_socket_mode(path: &Path, access: &AccessPolicy) -> Result<(), ServiceError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match access.group {
        Some(gid) => {
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
                ServiceError::Config(format!(
                    "cannot give {} to group {gid}: {e}",
                    path.display()
                ))
            })?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        ServiceError::Config(format!("cannot set the mode of {}: {e}", path.display()))
    })
}

/// A name fit for one log line.
fn printable(name: &str) -> String {
    name.chars()
        .take(MAX_NAME)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Answers `sock` with Refused (best effort: the socket is dropped after).
/// Why a capture or a module request is refused by an engine on several data-path cores.
const NO_HOOK_POINTS: &str = "this engine runs on several data-path cores, which have no \
    capture taps and take no modules at run time (sluice engine --cores 1 has both)";

fn refuse(sock: &OwnedFd, reason: &str) {
    let _ = send_message(
        sock.as_fd(),
        &Reply::Refused {
            reason: reason.into(),
        },
        &[],
    );
}

impl Control {
    /// Handles what the epoll set reports, without blocking.
    pub fn poll(
        &mut self,
        apps: &mut Apps,
        config: &ServiceConfig,
        sh: &mut Shared,
        cores: &mut Cores,
        stack: &mut Stack,
    ) {
        let n = self
            .epoll
            .wait(&mut self.events, EpollTimeout::ZERO)
            .unwrap_or(0);
        let mut tokens = [0u64; EVENTS];
        for (t, e) in tokens.iter_mut().zip(&self.events[..n]) {
            *t = e.data();
        }
        for &t in &tokens[..n] {
            let index = (t & 0xffff_ffff) as usize;
            match t & token::KIND {
                token::LISTENER => self.accept_apps(sh),
                token::PENDING => self.hello(index, apps, config, sh),
                token::APP => self.app_messages(index, apps, config, sh, cores, stack),
                token::DOORBELL if sh.links.count == 1 => {
                    if let Some(Some(app)) = apps.table.get(index) {
                        app.doorbell.drain();
                    }
                }
                // In flow groups: the edge is taken by this epoll_wait; the link doorbell
                // is drained before a sleep (Service::prepare_sleep).
                token::DOORBELL | token::LINKS => {}
                _ => {}
            }
        }
    }

    /// Accepts new connections; each waits in `pending` for its Hello.
    fn accept_apps(&mut self, sh: &mut Shared) {
        let Some(listener) = self.listener.as_ref() else {
            return;
        };
        for _ in 0..ACCEPTS_PER_LOOK {
            let sock = match accept_app(listener.as_fd()) {
                Ok(Some(sock)) => sock,
                Ok(None) | Err(_) => return,
            };
            let i = match self.pending.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    // Full of connections that never said Hello: drop the one in turn.
                    let i = self.evict;
                    self.evict = (i + 1) % MAX_PENDING;
                    if let Some((old, _)) = self.pending[i].take() {
                        self.unwatch(&old);
                        sh.counters.apps_refused += 1;
                    }
                    i
                }
            };
            if self.watch(&sock, token::PENDING | i as u64) {
                // Taken now, from the kernel: what the connecting process was at connect().
                let creds = Credentials::of_peer(&sock);
                self.pending[i] = Some((sock, creds));
            }
        }
    }

    /// A pending connection spoke: Hello attaches it, anything else drops it.
    fn hello(&mut self, i: usize, apps: &mut Apps, config: &ServiceConfig, sh: &mut Shared) {
        let Some(entry) = self.pending.get_mut(i) else {
            return;
        };
        let Some((sock, _)) = entry.as_ref() else {
            return;
        };
        let msg = recv_message::<Request>(sock.as_fd());
        if matches!(msg, Ok(None)) {
            return;
        }
        let Some((sock, creds)) = entry.take() else {
            return;
        };
        self.unwatch(&sock);
        match msg {
            Ok(Some((Request::Hello { version, name, .. }, _))) => {
                let Some(creds) = creds else {
                    sh.counters.apps_denied += 1;
                    refuse(
                        &sock,
                        &format!("{ACCESS_DENIED}: the peer's credentials are unknown"),
                    );
                    return;
                };
                if let Err(denied) = config.access.admit(&creds, self.engine_uid) {
                    sh.counters.apps_denied += 1;
                    if config.log {
                        eprintln!(
                            "sluice engine: refused {} (pid {}, uid {}): {denied}",
                            printable(&name),
                            creds.pid,
                            creds.uid
                        );
                    }
                    refuse(&sock, &denied.to_string());
                    return;
                }
                self.attach(sock, (version, creds, printable(&name)), apps, config, sh)
            }
            Ok(Some((Request::Capture(_), _))) if !config.hook_points => {
                self.captures_denied += 1;
                refuse(&sock, NO_HOOK_POINTS);
            }
            Ok(Some((Request::Capture(req), _))) => {
                // A capture sees every application's traffic: root or the engine's own uid
                // only, not the group that may attach.
                match creds {
                    Some(c) if c.uid == 0 || c.uid == self.engine_uid => {
                        self.captures.push((sock, req))
                    }
                    _ => {
                        self.captures_denied += 1;
                        refuse(
                            &sock,
                            &format!("{ACCESS_DENIED}: capture needs root or the engine's uid"),
                        );
                    }
                }
            }
            Ok(Some(_)) => {
                sh.counters.bad_control += 1;
                refuse(&sock, "say Hello first");
            }
            Ok(None) | Err(ShmError::Disconnected) => {}
            Err(_) => sh.counters.bad_control += 1,
        }
    }

    /// Creates the application's region and doorbell and welcomes it.
    fn attach(
        &mut self,
        sock: OwnedFd,
        (version, creds, name): (u32, Credentials, String),
        apps: &mut Apps,
        config: &ServiceConfig,
        sh: &mut Shared,
    ) {
        if version != PROTOCOL_VERSION {
            sh.counters.apps_refused += 1;
            refuse(
                &sock,
                &format!("protocol version {version}, the engine speaks {PROTOCOL_VERSION}"),
            );
            return;
        }
        // One uid's applications leave room for everyone else's (EAGAIN in libsluice).
        let quota = sh
            .books
            .admits(&sh.quotas, creds.uid, &Usage::default(), Resource::App);
        if let Err(e) = quota {
            sh.counters.apps_refused += 1;
            sh.counters.quota_apps_refused += 1;
            if config.log {
                eprintln!(
                    "sluice engine: attach of {name} (pid {}) refused: {e}",
                    creds.pid
                );
            }
            refuse(&sock, &e.to_string());
            return;
        }
        // An index another part still holds (src/parts.rs) is not reused yet.
        let free = |(i, e): (usize, &Option<AttachedApp>)| {
            e.is_none() && apps.held.get(i).is_none_or(|&h| h == 0)
        };
        let index = match apps.table.iter().enumerate().position(free) {
            Some(i) => i,
            None if apps.table.len() < config.max_apps => {
                apps.table.push(None);
                apps.table.len() - 1
            }
            None => {
                sh.counters.apps_refused += 1;
                refuse(&sock, "the engine serves its maximum of applications");
                return;
            }
        };
        let id = apps.next_id;
        // Refuse this application alone before the kernel's limit refuses everyone's.
        let budget = sluice_shm::MapBudget {
            budget: config.map_budget.unwrap_or(usize::MAX),
        };
        if let Err(e) = budget.admits(sluice_shm::map_budget::ATTACH_MAPPINGS) {
            sh.counters.apps_refused += 1;
            sh.counters.apps_refused_maps += 1;
            if config.log {
                eprintln!(
                    "sluice engine: attach of {name} (pid {}) refused: {e}",
                    creds.pid
                );
            }
            refuse(&sock, &format!("ENOMEM: {e}"));
            return;
        }
        let made = Region::create(&format!("sluice-app-{id}"), config.layout)
            .and_then(|region| Ok((region, EventFd::new()?)));
        let (region, doorbell) = match made {
            Ok(made) => made,
            Err(e) => {
                sh.counters.apps_refused += 1;
                refuse(&sock, &format!("cannot create the shared region: {e}"));
                return;
            }
        };
        // The other parts' views share the region and the books; the descriptors are
        // duplicated before Welcome, so that a failure refuses the attach cleanly.
        let region = std::sync::Arc::new(region);
        let usage = crate::quota::AppUsage::default();
        let mut views = Vec::new();
        for _ in sh.links.others() {
            let view = sock.try_clone().ok().zip(dup(&doorbell));
            let Some((sock, doorbell)) = view else {
                sh.counters.apps_refused += 1;
                refuse(
                    &sock,
                    "cannot duplicate the control socket for the other cores",
                );
                return;
            };
            views.push(crate::links::AppView {
                index: index as u32,
                id,
                name: name.clone(),
                pid: creds.pid,
                creds: creds.clone(),
                sock,
                region: region.clone(),
                doorbell,
                usage: usage.clone(),
            });
        }
        let welcome = Reply::Welcome {
            app: id,
            layout: config.layout,
            engine: config.engine.clone(),
        };
        if send_message(sock.as_fd(), &welcome, &[region.fd(), doorbell.as_fd()]).is_err() {
            sh.counters.apps_refused += 1;
            return;
        }
        if !self.watch(&sock, token::APP | index as u64)
            || !self.watch_doorbell(&doorbell, token::DOORBELL | index as u64, sh.links.count)
        {
            self.unwatch(&sock);
            sh.counters.apps_refused += 1;
            return;
        }
        apps.next_id += 1;
        sh.counters.apps_attached += 1;
        sh.books.attach(creds.uid);
        if config.log {
            eprintln!(
                "sluice engine: app {id} ({name}, pid {}, uid {}, gid {}) attached",
                creds.pid, creds.uid, creds.gid
            );
        }
        let (part, parts) = (sh.links.index, sh.links.count);
        let app = AttachedApp::view(
            crate::links::AppView {
                index: index as u32,
                id,
                name,
                pid: creds.pid,
                creds,
                sock,
                region,
                doorbell,
                usage,
            },
            part,
            parts,
        );
        apps.table[index] = Some(app);
        for (to, view) in (1..parts).zip(views) {
            sh.links
                .send(to, crate::links::PartMsg::Attached(Box::new(view)));
        }
    }

    /// Reads an application's control messages; a hang-up releases it.
    fn app_messages(
        &mut self,
        i: usize,
        apps: &mut Apps,
        config: &ServiceConfig,
        sh: &mut Shared,
        cores: &mut Cores,
        stack: &mut Stack,
    ) {
        for _ in 0..MESSAGES_PER_LOOK {
            let Some(Some(app)) = apps.table.get_mut(i) else {
                return;
            };
            let reply = match recv_message::<Request>(app.sock.as_fd()) {
                Ok(None) => return,
                Ok(Some((Request::NewContext, _))) => match app.new_context() {
                    Ok(Some(index)) => {
                        // The other parts serve their queue pair of it (src/parts.rs).
                        for to in 1..sh.links.count {
                            let Some(eventfd) = dup(&app.contexts[index as usize].eventfd) else {
                                sh.counters.contexts_refused += 1;
                                continue;
                            };
                            let msg = crate::links::PartMsg::Context {
                                app: app.index,
                                index,
                                eventfd,
                            };
                            sh.links.send(to, msg);
                        }
                        let sent = send_message(
                            app.sock.as_fd(),
                            &Reply::Context { index },
                            &[app.contexts[index as usize].eventfd.as_fd()],
                        );
                        if sent.is_err() {
                            self.detach(i, apps, config, sh, cores, stack);
                            return;
                        }
                        sh.counters.contexts_created += 1;
                        continue;
                    }
                    Ok(None) => {
                        sh.counters.contexts_refused += 1;
                        "every context of this application is in use".to_string()
                    }
                    Err(e) => {
                        sh.counters.contexts_refused += 1;
                        format!("cannot create a context: {e}")
                    }
                },
                Ok(Some((Request::Verbs(req), fds))) => match cores.verbs.as_mut() {
                    Some(v) => {
                        let queues = app.verbs_queues.clone();
                        let reply = verbs::request(
                            v,
                            app.index,
                            &queues,
                            req,
                            fds,
                            stack,
                            sh.now,
                            &mut sh.counters,
                        );
                        if send_message(app.sock.as_fd(), &Reply::Verbs(reply), &[]).is_err() {
                            self.detach(i, apps, config, sh, cores, stack);
                            return;
                        }
                        continue;
                    }
                    None => {
                        sh.counters.bad_control += 1;
                        "this engine serves no verbs".to_string()
                    }
                },
                Ok(Some((Request::Mtp(req), fds))) => match cores.mtp.as_mut() {
                    Some(m) => {
                        let queues = app.verbs_queues.clone();
                        let reply = mtp::request(m, app.index, &queues, req, fds, &mut sh.counters);
                        if send_message(app.sock.as_fd(), &Reply::Mtp(reply), &[]).is_err() {
                            self.detach(i, apps, config, sh, cores, stack);
                            return;
                        }
                        continue;
                    }
                    None => {
                        sh.counters.bad_control += 1;
                        "this engine serves no MTP".to_string()
                    }
                },
                Ok(Some((Request::Admin(req), _))) if req.is_module() && !config.hook_points => {
                    sh.counters.bad_control += 1;
                    NO_HOOK_POINTS.to_string()
                }
                // Offload handlers: any client on its own QPs (eBPF), an operator on any
                // (docs/offload.md "Through the engine's service").
                Ok(Some((Request::Admin(req), _))) if req.is_offload() => {
                    match cores.verbs.as_mut() {
                        Some(v) => {
                            let admin = admin::allowed(app.creds.uid, self.engine_uid);
                            let reply = match verbs::offload_answer(
                                v,
                                app.index,
                                admin,
                                req,
                                &mut sh.counters,
                            ) {
                                Ok(r) => Reply::Admin(r),
                                Err(reason) => Reply::Refused { reason },
                            };
                            if send_message(app.sock.as_fd(), &reply, &[]).is_err() {
                                self.detach(i, apps, config, sh, cores, stack);
                                return;
                            }
                            continue;
                        }
                        None => {
                            sh.counters.bad_control += 1;
                            "this engine serves no verbs".to_string()
                        }
                    }
                }
                Ok(Some((Request::Admin(req), _)))
                    if req.is_module() && admin::allowed(app.creds.uid, self.engine_uid) =>
                {
                    sh.counters.admin_requests += 1;
                    // Answered in the engine's hook turn, between frames; the client waits
                    // for the reply, so its next message waits for the next look.
                    self.module_requests.push((i, app.id, req));
                    return;
                }
                Ok(Some((Request::Admin(req), _))) => {
                    let uid = app.creds.uid;
                    let reply = match admin::answer(req, (uid, self.engine_uid), apps, sh, stack) {
                        Ok(r) => Reply::Admin(r),
                        Err(reason) => Reply::Refused { reason },
                    };
                    let Some(Some(app)) = apps.table.get(i) else {
                        return;
                    };
                    if send_message(app.sock.as_fd(), &reply, &[]).is_err() {
                        self.detach(i, apps, config, sh, cores, stack);
                        return;
                    }
                    continue;
                }
                Ok(Some((Request::Hello { .. }, _))) => {
                    sh.counters.bad_control += 1;
                    "already attached".to_string()
                }
                Ok(Some((Request::Capture(_), _))) => {
                    sh.counters.bad_control += 1;
                    "a capture session is asked for on a connection of its own".to_string()
                }
                Err(ShmError::Protocol(m)) => {
                    sh.counters.bad_control += 1;
                    m
                }
                Err(_) => {
                    self.detach(i, apps, config, sh, cores, stack);
                    return;
                }
            };
            let refused = Reply::Refused { reason: reply };
            if send_message(app.sock.as_fd(), &refused, &[]).is_err() {
                self.detach(i, apps, config, sh, cores, stack);
                return;
            }
        }
    }

    /// The application went away: reset its connections, stop its listeners, free its
    /// region (docs/service.md, Failure). Connections it had closed gracefully are still
    /// drained from its region (a client that writes, closes and exits loses nothing); the
    /// region goes when they are done, or after the orphan linger (the service reaps it).
    fn detach(
        &mut self,
        i: usize,
        apps: &mut Apps,
        config: &ServiceConfig,
        sh: &mut Shared,
        cores: &mut Cores,
        stack: &mut Stack,
    ) {
        let Some(app) = apps.table.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if app.departed.is_some() {
            return;
        }
        // Its process is gone; what it still drains stays in its uid's books until done.
        sh.books.detach(app.creds.uid);
        self.unwatch(&app.sock);
        self.unwatch(&app.doorbell);
        // The hang-up can be seen before the commands the application posted last.
        commands::run_final_commands(app, stack, sh);
        // Its QPs, completion queues, regions (unmapped), domains and MTP endpoints go;
        // its doorbells are void.
        sh.doorbells.retain(|&(a, _)| a != app.index);
        sh.mtp_doorbells.retain(|&(a, _)| a != app.index);
        cores.detach(app.index);
        let kept = teardown::release_app(app, Release::Detach, stack, sh);
        // Its threads are gone: nothing more to run or to wake.
        app.contexts.clear();
        sh.counters.apps_detached += 1;
        if config.log {
            eprintln!(
                "sluice engine: app {} ({}, pid {}) detached{}",
                app.id,
                app.name,
                app.pid,
                if kept {
                    ", finishing the connections it closed"
                } else {
                    ""
                }
            );
        }
        if kept {
            app.departed = Some(sh.now);
            apps.orphans += 1;
        } else {
            apps.table[i] = None;
        }
        // Every other part releases what it holds of it, and says when it no longer
        // holds the index (src/parts.rs).
        if sh.links.count > 1 {
            if apps.held.len() <= i {
                apps.held.resize(i + 1, 0);
            }
            apps.held[i] = sh.links.count - 1;
            for to in 1..sh.links.count {
                sh.links
                    .send(to, crate::links::PartMsg::Gone { app: i as u32 });
            }
        }
    }
}

/// A duplicate of `fd`, for another part (None when the process is out of descriptors).
fn dup(fd: &EventFd) -> Option<EventFd> {
    fd.as_fd()
        .try_clone_to_owned()
        .ok()
        .map(EventFd::from_owned)
}
