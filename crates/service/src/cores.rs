//! The transports the service runs beside the TCP core, each optional: the verbs' RDMA
//! transport and MTP. Held together so the control plane reaches both through one value.

use crate::mtp::Mtp;
use crate::verbs::Verbs;

/// The service's transports beside the TCP core.
#[derive(Default)]
pub(crate) struct Cores {
    /// The verbs (docs/verbs.md), once started, if configured.
    pub verbs: Option<Verbs>,
    /// MTP (docs/mtp.md), once started, if configured.
    pub mtp: Option<Mtp>,
}

impl Cores {
    /// The application at `app` went away: what it owned of each transport goes.
    pub fn detach(&mut self, app: u32) {
        if let Some(v) = self.verbs.as_mut() {
            v.detach(app);
        }
        if let Some(m) = self.mtp.as_mut() {
            m.detach(app);
        }
    }
}
