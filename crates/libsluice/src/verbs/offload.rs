//! Offload handlers on a QP (docs/offload.md "Through the engine's service"): the server
//! registers a handler for an offload opcode on its QP, with the memory regions it may
//! access, over its own control socket; the engine then runs it for every OFFLOAD request
//! (`SendOp::Offload`) the peer sends on that opcode. eBPF handlers are open to every
//! application; a Rust handler library only to uid 0 and the engine's uid.

use std::os::fd::OwnedFd;
use std::path::Path;

use sluice_shm::admin::{to_hex, AdminReply, AdminRequest, OffloadSource, MAX_OBJECT};
use sluice_shm::control::{Reply, Request};

pub use sluice_shm::admin::OffloadRow;

use crate::attach::Sluice;
use crate::verbs::error::VerbsError;
use crate::verbs::mr::MemoryRegion;
use crate::verbs::qp::QueuePair;

/// A handler to register.
#[derive(Clone, Copy, Debug)]
pub enum OffloadHandler<'a> {
    /// An eBPF object's section `offload` (clang-built; verified by the engine).
    Ebpf {
        /// What to call it.
        name: &'a str,
        /// The object's bytes.
        object: &'a [u8],
    },
    /// Handler `handler` of a Rust handler library (a cdylib built against
    /// sluice-offload-api) at `path` on the engine's host.
    Rust {
        /// The library (made absolute here).
        path: &'a Path,
        /// The handler's name in it.
        handler: &'a str,
    },
}

/// Asks an offload admin request on `sluice`'s control socket.
pub(crate) fn ask(sluice: &Sluice, req: AdminRequest) -> Result<AdminReply, VerbsError> {
    let (reply, _fds): (Reply, Vec<OwnedFd>) = sluice.control_call(&Request::Admin(req), &[])?;
    match reply {
        Reply::Admin(r) => Ok(r),
        Reply::Refused { reason } => Err(VerbsError::OffloadRefused(reason)),
        other => Err(VerbsError::Protocol(format!("{other:?}"))),
    }
}

/// The request that registers `handler` for `opcode` on QP `qpn` with regions `mrs`.
pub(crate) fn load_request(
    qpn: u32,
    opcode: u32,
    handler: OffloadHandler<'_>,
    mrs: Vec<u32>,
) -> Result<AdminRequest, VerbsError> {
    let handler = match handler {
        OffloadHandler::Ebpf { name, object } => {
            if object.len() > MAX_OBJECT {
                return Err(VerbsError::Invalid("eBPF object over MAX_OBJECT bytes"));
            }
            OffloadSource::Ebpf {
                name: name.to_string(),
                object: to_hex(object),
            }
        }
        OffloadHandler::Rust { path, handler } => {
            let path = std::path::absolute(path)
                .map_err(|e| VerbsError::Os(e.raw_os_error().unwrap_or(libc::EINVAL)))?;
            OffloadSource::Rust {
                path: path.to_string_lossy().into_owned(),
                handler: handler.to_string(),
            }
        }
    };
    Ok(AdminRequest::OffloadLoad {
        qpn,
        opcode,
        handler,
        mrs,
    })
}

impl QueuePair {
    /// Runs `handler` for the OFFLOAD requests of `opcode` that arrive on this QP, with
    /// access to `regions` only (Table 2's register_opcode and register_dma_region).
    pub fn register_offload(
        &self,
        opcode: u32,
        handler: OffloadHandler<'_>,
        regions: &[&MemoryRegion],
    ) -> Result<(), VerbsError> {
        let keys: Vec<u32> = regions.iter().map(|m| m.key()).collect();
        self.register_offload_keys(opcode, handler, &keys)
    }

    /// [`QueuePair::register_offload`] with the regions named by their keys (the C API's).
    pub fn register_offload_keys(
        &self,
        opcode: u32,
        handler: OffloadHandler<'_>,
        keys: &[u32],
    ) -> Result<(), VerbsError> {
        let req = load_request(self.qpn(), opcode, handler, keys.to_vec())?;
        match ask(self.sluice(), req)? {
            AdminReply::Done => Ok(()),
            other => Err(VerbsError::Protocol(format!("{other:?}"))),
        }
    }

    /// Unregisters the handler of `opcode` on this QP (later requests for it are refused).
    pub fn unregister_offload(&self, opcode: u32) -> Result<(), VerbsError> {
        let req = AdminRequest::OffloadUnload {
            qpn: self.qpn(),
            opcode,
        };
        match ask(self.sluice(), req)? {
            AdminReply::Done => Ok(()),
            other => Err(VerbsError::Protocol(format!("{other:?}"))),
        }
    }

    /// The offload handlers this application registered (with their request counts).
    pub fn offload_handlers(&self) -> Result<Vec<OffloadRow>, VerbsError> {
        match ask(self.sluice(), AdminRequest::OffloadList)? {
            AdminReply::Offloads { rows } => Ok(rows),
            other => Err(VerbsError::Protocol(format!("{other:?}"))),
        }
    }
}
