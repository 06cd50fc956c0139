//! `sluice switch` on a thread of this process: the experiments and the soak run the
//! switch in-process over the switched lab's ports, one fresh switch per run or phase, and
//! read its ports' counters when they stop it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_switch::{PortReport, PortSpec, Runner, SwitchError};

use crate::error::ExperimentError;

/// A running switch over `PortSpec`s, stopped (and its counters read) with [`SwitchThread::stop`].
pub struct SwitchThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<Vec<PortReport>, SwitchError>>>,
}

impl SwitchThread {
    /// Opens the ports and starts forwarding; returns once every port is open.
    pub fn start(specs: Vec<PortSpec>, seed: u64) -> Result<SwitchThread, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (ready_tx, ready_rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("switch".into())
            .spawn(move || {
                let runner = Runner::open(&specs, seed);
                // A failure to open comes back through the join in `stop`.
                let _ = ready_tx.send(runner.is_ok());
                let mut runner = runner?;
                runner.run(&flag)?;
                Ok(runner.report())
            })
            .map_err(|e| ExperimentError::Io("spawn the switch thread".into(), e))?;
        let switch = SwitchThread {
            stop,
            handle: Some(handle),
        };
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(true) => Ok(switch),
            Ok(false) => Err(switch
                .stop()
                .err()
                .unwrap_or_else(|| ExperimentError::Workload("the switch did not start".into()))),
            Err(_) => {
                let _ = switch.stop();
                Err(ExperimentError::Workload("the switch did not start".into()))
            }
        }
    }

    /// Stops the switch and returns its ports' counters.
    pub fn stop(mut self) -> Result<Vec<PortReport>, ExperimentError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r.map_err(|e| ExperimentError::Workload(format!("the switch: {e}"))),
            Some(Err(_)) => Err(ExperimentError::Workload(
                "the switch thread panicked".into(),
            )),
            None => Ok(Vec::new()),
        }
    }
}

impl Drop for SwitchThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
