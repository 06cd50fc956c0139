//! Congestion control as the application chose it (TCP_CONGESTION): the contract's codes
//! mapped to the core's algorithms, and a choice applied to a connection and published in
//! its socket block.

use sluice_shm::{Congestion, SocketBlock};
use sluice_tcp::{Algorithm, ConnId, Stack};

/// The core's algorithm for the contract's code (exhaustive both ways, so a new algorithm
/// on either side does not compile until it is mapped).
pub(crate) fn algorithm_of(c: Congestion) -> Algorithm {
    match c {
        Congestion::Dctcp => Algorithm::Dctcp,
        Congestion::Timely => Algorithm::Timely,
        Congestion::Reno => Algorithm::NewReno,
        Congestion::Cubic => Algorithm::Cubic,
        Congestion::Bbr => Algorithm::Bbr,
    }
}

/// The contract's code for the core's algorithm.
pub(crate) fn congestion_of(a: Algorithm) -> Congestion {
    match a {
        Algorithm::Dctcp => Congestion::Dctcp,
        Algorithm::Timely => Congestion::Timely,
        Algorithm::NewReno => Congestion::Reno,
        Algorithm::Cubic => Congestion::Cubic,
        Algorithm::Bbr => Congestion::Bbr,
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
