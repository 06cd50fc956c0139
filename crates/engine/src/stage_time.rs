//! Per-stage time, the core's `stage_time` tracepoint: the engine times each of its stages
//! around the core (rx: frames through ingress hooks and the core's RX stages; timers; app:
//! the application's turn; hooks: module and admin requests; tx: the core's and the other
//! transports' frames out) on its own clock, only while the tracepoint is on.

use sluice_tcp::{Instant, Stack, TraceData, Tracepoint};

use crate::clock::Clock;

/// A stopwatch over one loop iteration: empty (one bit test per iteration) while the
/// tracepoint is off.
pub(crate) struct Lap(Option<Instant>);

impl Lap {
    /// Starts timing if the tracepoint is on.
    #[inline]
    pub(crate) fn start(stack: &Stack, clock: &Clock) -> Lap {
        Lap(stack
            .tracer()
            .is_on(Tracepoint::StageTime)
            .then(|| clock.now()))
    }

    /// Records the time since the previous mark as `stage`'s.
    #[inline]
    pub(crate) fn mark(&mut self, stack: &mut Stack, clock: &Clock, stage: &'static str) {
        if let Some(from) = self.0 {
            self.0 = Some(record(stack, clock, from, stage));
        }
    }
}

#[cold]
fn record(stack: &mut Stack, clock: &Clock, from: Instant, stage: &'static str) -> Instant {
    let now = clock.now();
    let ns = now.saturating_since(from).as_nanos() as u64;
    stack
        .tracer_mut()
        .record(now, None, TraceData::StageTime { stage, ns });
    now
}

#[cfg(test)]
mod tests {
    use sluice_device::{pair, PairConfig};
    use sluice_wire::EthernetAddress;

    use super::*;
    use crate::{App, AppStatus, Engine, EngineError};

    struct Idle;

    impl App for Idle {
        fn poll(&mut self, _stack: &mut Stack, _now: Instant) -> Result<AppStatus, EngineError> {
            Ok(AppStatus::Running)
        }
    }

    #[test]
    fn each_stage_of_an_iteration_is_timed_only_while_on() {
        let mac = |b| EthernetAddress([2, 0, 0, 0, 0, b]);
        let (a, _b) = pair(PairConfig {
            macs: [mac(1), mac(2)],
            ..PairConfig::default()
        })
        .unwrap();
        let cfg = sluice_tcp::Config::new(mac(1), std::net::Ipv4Addr::new(10, 0, 0, 1));
        let clock = Clock::virtual_time();
        let mut engine = Engine::with_clock(Stack::new(cfg).unwrap(), a, clock.clone());
        engine.poll_once(&mut Idle).unwrap();
        assert_eq!(engine.stack.tracer().hits(Tracepoint::StageTime), 0);
        engine.stack.tracer_mut().set(Tracepoint::StageTime, true);
        clock.advance_to(Instant::from_millis(3));
        engine.poll_once(&mut Idle).unwrap();
        let mut events = Vec::new();
        engine.stack.tracer_mut().drain(&mut events);
        let stages: Vec<&str> = events
            .iter()
            .map(|e| match e.data {
                TraceData::StageTime { stage, .. } => stage,
                _ => "other",
            })
            .collect();
        assert_eq!(stages, ["rx", "timers", "app", "hooks", "tx"]);
        // Virtual time stands still within an iteration.
        assert!(events.iter().all(|e| e.at == Instant::from_millis(3)));
    }
}
