//! The engine's RDMA device (`ibv_open_device`, `ibv_query_device`) and protection domains
//! (`ibv_alloc_pd`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_shm::verbs::{DeviceInfo, VerbsReply, VerbsRequest};

use crate::attach::Sluice;
use crate::verbs::control::{self, unexpected};
use crate::verbs::error::VerbsError;

/// The engine's RDMA device, opened: its attributes, and the attachment its objects use.
#[derive(Clone, Debug)]
pub struct Device {
    sluice: Arc<Sluice>,
    attrs: DeviceInfo,
}

impl Device {
    /// Opens the device of the engine `sluice` is attached to (QueryDevice).
    pub fn open(sluice: &Arc<Sluice>) -> Result<Device, VerbsError> {
        match control::call(sluice, VerbsRequest::QueryDevice, &[])? {
            VerbsReply::Device(attrs) => Ok(Device {
                sluice: sluice.clone(),
                attrs,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// What the device offers (as queried when it was opened).
    pub fn attrs(&self) -> &DeviceInfo {
        &self.attrs
    }

    /// The attachment.
    pub fn sluice(&self) -> &Arc<Sluice> {
        &self.sluice
    }

    /// A new protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, VerbsError> {
        match control::call(&self.sluice, VerbsRequest::AllocPd, &[])? {
            VerbsReply::Pd { pd } => Ok(ProtectionDomain(Arc::new(PdInner {
                sluice: self.sluice.clone(),
                pd,
                freed: AtomicBool::new(false),
            }))),
            other => Err(unexpected(other)),
        }
    }
}

/// A protection domain. Its regions and QPs keep it alive; it is deallocated when the last
/// of them and this handle are gone, or by [`ProtectionDomain::dealloc`].
#[derive(Debug)]
pub struct ProtectionDomain(pub(crate) Arc<PdInner>);

/// What a PD's handle, regions and QPs share.
#[derive(Debug)]
pub(crate) struct PdInner {
    pub(crate) sluice: Arc<Sluice>,
    pub(crate) pd: u32,
    freed: AtomicBool,
}

impl ProtectionDomain {
    /// The domain's handle in the engine.
    pub fn handle(&self) -> u32 {
        self.0.pd
    }

    /// Deallocates it now; [`VerbsError::Busy`] (and nothing changed) while a region or QP
    /// of it exists.
    pub fn dealloc(self) -> Result<(), VerbsError> {
        if Arc::strong_count(&self.0) > 1 {
            return Err(VerbsError::Busy);
        }
        control::call_done(&self.0.sluice, VerbsRequest::DeallocPd { pd: self.0.pd })?;
        self.0.freed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Whether regions or QPs use it.
    pub(crate) fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if !self.freed.load(Ordering::Relaxed) && self.sluice.is_alive() {
            // Nothing to report to: the engine frees it at detach if this fails.
            let _ = control::call_done(&self.sluice, VerbsRequest::DeallocPd { pd: self.pd });
        }
    }
}
