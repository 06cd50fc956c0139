//! Offload handlers through the engine's service (docs/offload.md "Through the engine's
//! service"): handlers registered for an offload opcode on an application's QP, with the
//! application's memory regions they may access (its mapped MR files), run on the offload
//! engine's threads; the transport's OFFLOAD requests go to them and their responses back,
//! every iteration, apart from the data path.
//!
//! Who may: any client registers eBPF handlers (verified, bounded) on QPs its application
//! owns; a Rust handler library runs native code in the engine, so only uid 0 or the
//! engine's uid registers one, on any QP.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use sluice_offload::{
    DylibHandler, EbpfHandler, Handler, HandlerError, Limits, OffloadEngine, OffloadEngineBuilder,
    RegionMemory, RegionTable, Registration,
};
use sluice_rdma::qp::OffloadRequest;
use sluice_rdma::verbs::Key;
use sluice_rdma::wire::Psn;
use sluice_shm::admin::{
    from_hex, AdminReply, AdminRequest, OffloadRow, OffloadSource, MAX_OBJECT,
};
use sluice_shm::MappedFile;

use super::Verbs;
use crate::counters::Counters;

/// Offload threads the engine starts, at the first registration.
const THREADS: usize = 1;
/// Registrations over every application at most.
pub(crate) const MAX_REGISTRATIONS: usize = 256;

/// An application's mapped memory-region file as a handler's region.
struct FileRegion(Arc<MappedFile>);

impl fmt::Debug for FileRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileRegion({} bytes)", self.0.len())
    }
}

impl RegionMemory for FileRegion {
    fn len(&self) -> usize {
        usize::try_from(self.0.len()).unwrap_or(usize::MAX)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> bool {
        self.0.read_at(offset, out)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> bool {
        self.0.write_at(offset, data)
    }
}

/// One registration.
struct Reg {
    /// The application owning the QP.
    app: u32,
    kind: &'static str,
    name: String,
    regions: Vec<(u64, u64)>,
    run: Arc<Registration>,
    requests: u64,
    errors: u64,
}

/// The service's offload handlers and the engine that runs them.
#[derive(Default)]
pub(crate) struct Offload {
    /// Started at the first registration.
    engine: Option<OffloadEngine>,
    /// By (qpn, offload opcode).
    regs: HashMap<(u32, u32), Reg>,
    /// Requests the engine's rings had no room for, oldest first (bounded by the
    /// transport: `sluice_rdma::qp::MAX_OFFLOADS` held per QP).
    waiting: VecDeque<OffloadRequest>,
    /// Requests with the engine: (qpn, psn) to their opcode.
    in_flight: HashMap<(u32, Psn), u32>,
}

impl Offload {
    /// Whether requests wait for, or are with, the engine: the engine loop must not sleep
    /// (an offload thread's answer rings no doorbell).
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty() || !self.waiting.is_empty()
    }

    /// QP `qpn` is gone: its registrations go (answers still with the engine are refused
    /// by the transport and counted).
    pub fn forget_qp(&mut self, qpn: u32) {
        self.regs.retain(|&(q, _), _| q != qpn);
    }
}

/// Answers an offload admin request from the application at `app`; `admin`: its uid is 0
/// or the engine's. Err: the refusal's reason (counted).
pub(crate) fn answer(
    v: &mut Verbs,
    app: u32,
    admin: bool,
    req: AdminRequest,
    counters: &mut Counters,
) -> Result<AdminReply, String> {
    let r = match req {
        AdminRequest::OffloadLoad {
            qpn,
            opcode,
            handler,
            mrs,
        } => load(v, app, admin, qpn, opcode, handler, &mrs),
        AdminRequest::OffloadUnload { qpn, opcode } => match v.offload.regs.get(&(qpn, opcode)) {
            Some(r) if admin || r.app == app => {
                v.offload.regs.remove(&(qpn, opcode));
                v.rdma.stack.unregister_offload(qpn, opcode);
                Ok(AdminReply::Done)
            }
            _ => Err(format!(
                "ENOENT: no offload handler for opcode {opcode:#x} on queue pair {qpn:#x}"
            )),
        },
        AdminRequest::OffloadList => {
            let mut rows: Vec<OffloadRow> = v
                .offload
                .regs
                .iter()
                .filter(|(_, r)| admin || r.app == app)
                .map(|(&(qpn, opcode), r)| OffloadRow {
                    qpn,
                    opcode,
                    app: r.app,
                    kind: r.kind.to_string(),
                    name: r.name.clone(),
                    regions: r.regions.clone(),
                    requests: r.requests,
                    errors: r.errors,
                })
                .collect();
            rows.sort_by_key(|r| (r.qpn, r.opcode));
            Ok(AdminReply::Offloads { rows })
        }
        _ => Err("EINVAL: not an offload request".to_string()),
    };
    if r.is_err() {
        counters.verbs_offload_loads_refused += 1;
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn load(
    v: &mut Verbs,
    app: u32,
    admin: bool,
    qpn: u32,
    opcode: u32,
    source: OffloadSource,
    mrs: &[u32],
) -> Result<AdminReply, String> {
    let no_qp = || format!("ENOENT: no queue pair {qpn:#x}");
    let owner = v
        .apps
        .iter()
        .find(|(_, a)| a.qps.contains_key(&qpn))
        .map(|(&i, _)| i)
        .ok_or_else(no_qp)?;
    if !admin && owner != app {
        return Err(no_qp());
    }
    if v.offload.regs.len() >= MAX_REGISTRATIONS {
        return Err(format!(
            "ENOMEM: {MAX_REGISTRATIONS} offload handlers are registered"
        ));
    }
    if v.offload.regs.contains_key(&(qpn, opcode)) {
        return Err(format!(
            "EEXIST: opcode {opcode:#x} has a handler on queue pair {qpn:#x}"
        ));
    }
    // The regions: the QP owner's MRs, as it addresses them, over its mapped files.
    let a = v.apps.get(&owner).ok_or_else(no_qp)?;
    let mut table = RegionTable::default();
    let mut regions = Vec::new();
    for &key in mrs {
        let not_owned = || format!("ENOENT: no memory region {key:#x} of the QP's owner");
        let &(_, backing) = a.mrs.get(&key).ok_or_else(not_owned)?;
        let mr = v
            .rdma
            .stack
            .offload_region(Key(key))
            .ok_or_else(not_owned)?;
        let file = v.rdma.mem.file(backing).ok_or_else(not_owned)?;
        if !table.register_memory(mr.addr, mr.len, Arc::new(FileRegion(file))) {
            return Err(format!(
                "EINVAL: memory region {key:#x} overlaps another, or too many regions"
            ));
        }
        regions.push((mr.addr, mr.len));
    }
    let (kind, name, handler): (&'static str, String, Arc<dyn Handler>) = match source {
        OffloadSource::Ebpf { name, object } => {
            let bytes = from_hex(&object).map_err(|e| format!("EINVAL: {e}"))?;
            if bytes.len() > MAX_OBJECT {
                return Err(format!("EINVAL: an object over {MAX_OBJECT} bytes"));
            }
            let h = EbpfHandler::load(&bytes).map_err(|e| format!("EINVAL: {e}"))?;
            ("ebpf", name, Arc::new(h))
        }
        OffloadSource::Rust { path, handler } => {
            if !admin {
                return Err(
                    "permission denied: a Rust handler library runs native code in the \
                            engine: uid 0 or the engine's uid only (eBPF handlers are open to \
                            every application)"
                        .to_string(),
                );
            }
            let p = Path::new(&path);
            if !p.is_absolute() {
                return Err(format!(
                    "EINVAL: {path:?}: the library's path must be absolute"
                ));
            }
            let h = DylibHandler::load(p, &handler).map_err(|e| format!("EINVAL: {e}"))?;
            ("rust", format!("{path}:{handler}"), Arc::new(h))
        }
    };
    v.rdma
        .stack
        .register_offload(qpn, opcode)
        .map_err(|e| format!("EINVAL: {e}"))?;
    v.offload
        .engine
        .get_or_insert_with(|| OffloadEngineBuilder::new().start(THREADS));
    let run = Arc::new(Registration {
        handler,
        regions: table,
        limits: Limits::default(),
    });
    v.offload.regs.insert(
        (qpn, opcode),
        Reg {
            app: owner,
            kind,
            name,
            regions,
            run,
            requests: 0,
            errors: 0,
        },
    );
    Ok(AdminReply::Done)
}

/// Hands the transport's OFFLOAD requests to their handlers and the engine's answers back;
/// whether any is still on its way (the loop stays awake).
pub(crate) fn run(v: &mut Verbs, counters: &mut Counters) -> bool {
    let o = &mut v.offload;
    if o.engine.is_none() {
        // No handler was ever registered: no QP has an opcode, nothing can arrive. (After
        // the last unload, requests the transport took before it still come out here.)
        return false;
    }
    let stack = &mut v.rdma.stack;
    while let Some(req) = stack.poll_offload() {
        o.waiting.push_back(req);
    }
    while let Some(req) = o.waiting.pop_front() {
        let Some(r) = o.regs.get_mut(&(req.qpn, req.opcode)) else {
            // Unloaded since the transport took it: the requester learns so.
            counters.verbs_offload_refused += 1;
            stack.complete_offload(req.qpn, req.psn, HandlerError::NoHandler.code(), &[]);
            continue;
        };
        let Some(engine) = o.engine.as_mut() else {
            o.waiting.push_front(req);
            break;
        };
        let (key, opcode) = ((req.qpn, req.psn), req.opcode);
        match engine.submit_to(req, r.run.clone()) {
            Ok(()) => {
                r.requests += 1;
                counters.verbs_offload_requests += 1;
                o.in_flight.insert(key, opcode);
            }
            Err(req) => {
                // Every ring is full: the rest waits for the next iteration.
                o.waiting.push_front(req);
                break;
            }
        }
    }
    if let Some(engine) = o.engine.as_mut() {
        while let Some(resp) = engine.poll() {
            let opcode = o.in_flight.remove(&(resp.qpn, resp.psn));
            if resp.status != 0 {
                counters.verbs_offload_errors += 1;
                if let Some(r) = opcode.and_then(|op| o.regs.get_mut(&(resp.qpn, op))) {
                    r.errors += 1;
                }
            }
            if !stack.complete_offload(resp.qpn, resp.psn, resp.status, &resp.body) {
                counters.verbs_offload_refused += 1;
            }
        }
    }
    o.busy()
}
