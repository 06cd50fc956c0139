//! Control-path verbs on the control socket (docs/verbs.md "Control path").

use std::os::fd::{BorrowedFd, OwnedFd};

use sluice_shm::control::{Reply, Request};
use sluice_shm::verbs::{VerbsReply, VerbsRequest};

use crate::attach::Sluice;
use crate::verbs::error::VerbsError;

/// Asks `req` with descriptors `fds`; the engine's refusal is [`VerbsError::Refused`].
pub(crate) fn call(
    sluice: &Sluice,
    req: VerbsRequest,
    fds: &[BorrowedFd<'_>],
) -> Result<VerbsReply, VerbsError> {
    let (reply, _fds): (Reply, Vec<OwnedFd>) = sluice.control_call(&Request::Verbs(req), fds)?;
    match reply {
        Reply::Verbs(VerbsReply::Failed { errno }) => Err(VerbsError::Refused(errno)),
        Reply::Verbs(r) => Ok(r),
        Reply::Refused { reason } => Err(VerbsError::NoDevice(reason)),
        other => Err(VerbsError::Protocol(format!("{other:?} to {req:?}"))),
    }
}

/// Asks `req`, expecting `Done`.
pub(crate) fn call_done(sluice: &Sluice, req: VerbsRequest) -> Result<(), VerbsError> {
    match call(sluice, req, &[])? {
        VerbsReply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// An answer of the wrong kind.
pub(crate) fn unexpected(r: VerbsReply) -> VerbsError {
    VerbsError::Protocol(format!("{r:?}"))
}
