//! Endpoint handles: the core's `EndpointId` (a counter, not reused for 2^32 binds, so its
//! own generation) under the stack's tag, so a handle of an unbound endpoint or of another
//! stack is refused.

use sluice_mtp::stack::EndpointId;

use crate::error::sluice_error;
use crate::mtp::host::sluice_mtp_stack;

/// An MTP endpoint (a bound port) handle: the stack's tag (1..=255) in the top 8 bits, the
/// core's endpoint id in the low 32. Never 0.
pub type sluice_mtp_endpoint = u64;

/// Where the tag sits in a handle.
const TAG_SHIFT: u32 = 56;

/// The handle of an endpoint id on a stack with `tag`.
pub(crate) fn handle(tag: u8, ep: EndpointId) -> sluice_mtp_endpoint {
    (u64::from(tag) << TAG_SHIFT) | u64::from(ep.0)
}

/// The bound endpoint a handle names: another stack's tag, stray bits, or an endpoint the
/// core no longer has (unbound) are `InvalidHandle`.
pub(crate) fn resolve(
    s: &sluice_mtp_stack,
    h: sluice_mtp_endpoint,
) -> Result<EndpointId, sluice_error> {
    if h >> TAG_SHIFT != u64::from(s.tag) || (h >> 32) & 0x00ff_ffff != 0 {
        return Err(sluice_error::InvalidHandle);
    }
    let ep = EndpointId(h as u32);
    s.core
        .local_port(ep)
        .map(|_| ep)
        .ok_or(sluice_error::InvalidHandle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_mtp::stack::{MtpStack, StackConfig};
    use sluice_wire::EthernetAddress;
    use std::net::Ipv4Addr;

    #[test]
    fn an_unbound_or_foreign_or_made_up_handle_is_refused() {
        let cfg = StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        );
        let mut s = sluice_mtp_stack::new(MtpStack::new(cfg).unwrap());
        let ep = s.core.bind(7000).unwrap();
        let h = handle(s.tag, ep);
        assert_ne!(h, 0);
        assert_eq!(resolve(&s, h), Ok(ep));
        let foreign = handle(s.tag % 255 + 1, ep);
        assert_eq!(resolve(&s, foreign), Err(sluice_error::InvalidHandle));
        assert_eq!(resolve(&s, h | 1 << 40), Err(sluice_error::InvalidHandle));
        assert_eq!(resolve(&s, 0), Err(sluice_error::InvalidHandle));
        s.core.unbind(ep);
        assert_eq!(resolve(&s, h), Err(sluice_error::InvalidHandle));
        // The same port bound again is a new endpoint: the old handle stays refused.
        let again = s.core.bind(7000).unwrap();
        assert_ne!(handle(s.tag, again), h);
        assert_eq!(resolve(&s, h), Err(sluice_error::InvalidHandle));
        assert_eq!(resolve(&s, handle(s.tag, again)), Ok(again));
    }
}
