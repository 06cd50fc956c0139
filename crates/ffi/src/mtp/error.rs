//! The MTP core's errors as `sluice_error` codes (the TCP part's codes, reused).

use sluice_mtp::stack::{BindError, SendError};

use crate::error::sluice_error;

impl From<BindError> for sluice_error {
    fn from(e: BindError) -> Self {
        match e {
            BindError::InUse(_) => sluice_error::AddrInUse,
            BindError::TooMany | BindError::NoEphemeral => sluice_error::NoResources,
        }
    }
}

impl From<SendError> for sluice_error {
    fn from(e: SendError) -> Self {
        match e {
            SendError::UnknownEndpoint => sluice_error::InvalidHandle,
            SendError::TooLong(_) | SendError::BadDestination => sluice_error::InvalidArgument,
            // Room comes back as messages are delivered or fail: retry after an event.
            SendError::TooManyOutstanding => sluice_error::WouldBlock,
            SendError::TooManyDestinations => sluice_error::NoResources,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_map_to_their_codes() {
        assert_eq!(
            sluice_error::from(BindError::InUse(9)),
            sluice_error::AddrInUse
        );
        assert_eq!(
            sluice_error::from(BindError::TooMany),
            sluice_error::NoResources
        );
        assert_eq!(
            sluice_error::from(SendError::UnknownEndpoint),
            sluice_error::InvalidHandle
        );
        assert_eq!(
            sluice_error::from(SendError::TooLong(5)),
            sluice_error::InvalidArgument
        );
        assert_eq!(
            sluice_error::from(SendError::TooManyOutstanding),
            sluice_error::WouldBlock
        );
        assert_eq!(
            sluice_error::from(SendError::TooManyDestinations),
            sluice_error::NoResources
        );
    }
}
