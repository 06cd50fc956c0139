//! The end of a workload run, one way for every driver: after the last arrival, run until
//! every message is received (or a bound of virtual time passes), then fail with the
//! driver's first error or with what is still outstanding.

use std::time::Duration;

use sluice_sim::{Host, HostsView, Instant, Sim};

use crate::error::ExperimentError;
use crate::flows::{Flows, TcpHost};
use crate::mtp::host::{MtpHost, MtpMessages};

/// What a message driver has to show: its messages outstanding and its first failure.
pub trait Progress {
    /// Messages queued and not yet received.
    fn outstanding(&self) -> usize;
    /// The first failure, if any.
    fn error(&self) -> Option<&str>;
}

/// A message driver the simulator steps ([`Flows`] over TCP, [`MtpMessages`] over MTP).
pub trait Driver<H: Host>: Progress {
    /// Handles the events of the hosts a frame or timer reached.
    fn step(&mut self, now: Instant, hosts: &mut HostsView<'_, H>);
}

impl Progress for Flows {
    fn outstanding(&self) -> usize {
        Flows::outstanding(self)
    }
    fn error(&self) -> Option<&str> {
        Flows::error(self)
    }
}

impl<H: TcpHost> Driver<H> for Flows {
    fn step(&mut self, now: Instant, hosts: &mut HostsView<'_, H>) {
        Flows::step(self, now, hosts)
    }
}

impl Progress for MtpMessages {
    fn outstanding(&self) -> usize {
        MtpMessages::outstanding(self)
    }
    fn error(&self) -> Option<&str> {
        MtpMessages::error(self)
    }
}

impl Driver<MtpHost> for MtpMessages {
    fn step(&mut self, now: Instant, hosts: &mut HostsView<'_, MtpHost>) {
        MtpMessages::step(self, now, hosts)
    }
}

/// The driver's first error as the run's.
pub fn check(d: &impl Progress) -> Result<(), ExperimentError> {
    match d.error() {
        Some(e) => Err(ExperimentError::Workload(e.to_string())),
        None => Ok(()),
    }
}

/// Runs `sim` until `d` has nothing outstanding, for at most `within`; an error if it
/// failed or messages remain (named `what` in the message).
pub fn drain<H: Host>(
    sim: &mut Sim<H>,
    d: &mut impl Driver<H>,
    within: Duration,
    what: &str,
) -> Result<(), ExperimentError> {
    let deadline = sim.now() + within;
    let _ = sim.run_until(deadline, |now, hosts| {
        d.step(now, hosts);
        d.outstanding() == 0
    });
    check(d)?;
    match d.outstanding() {
        0 => Ok(()),
        n => Err(ExperimentError::Workload(format!(
            "{n} {what} not received {} s after the last arrival",
            within.as_secs_f64()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtp::paths::{self, Hop, PathsSpec};

    fn pair(seed: u64) -> (Sim<MtpHost>, MtpMessages) {
        let hop = Hop {
            bps: 10_000_000_000,
            delay: Duration::from_micros(1),
        };
        let spec = PathsSpec {
            host: hop,
            paths: [hop, hop],
            queue_packets: 128,
            ecn_k_bytes: None,
        };
        let mut sim: Sim<MtpHost> = Sim::new(seed);
        let topo = paths::build(&mut sim, &spec, |i| MtpHost::new(i, 2, |_| {})).unwrap();
        let msgs = MtpMessages::new(&[topo.sender, topo.receiver], 1 << 20);
        (sim, msgs)
    }

    #[test]
    fn drains_until_every_message_is_received() {
        let (mut sim, mut msgs) = pair(3);
        msgs.send(&mut sim, 0, 1, 300_000, 0, 0).unwrap();
        drain(&mut sim, &mut msgs, Duration::from_millis(10), "messages").unwrap();
        assert_eq!(msgs.done.len(), 1);
    }

    #[test]
    fn says_how_many_remain_when_time_runs_out() {
        let (mut sim, mut msgs) = pair(3);
        // 1 MB at 10 Gbit/s takes 800 us: 100 us is too short.
        msgs.send(&mut sim, 0, 1, 1 << 20, 0, 0).unwrap();
        let e = drain(&mut sim, &mut msgs, Duration::from_micros(100), "messages")
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 messages not received 0.0001 s"), "{e}");
    }
}
