//! The real-time runner: the forwarding core between AF_PACKET sockets, one per port, each
//! opened in its port's network namespace. One thread polls every port for a burst,
//! hands the frames to the core with the time since the start (std's monotonic clock as
//! the core's virtual time), sends what has fallen due in bursts, and sleeps in ppoll(2)
//! on all sockets until the next deadline when there is nothing to do.
//!
//! Frames come in through reused receive buffers and go out through the device's transmit
//! slots; the core keeps them in pooled buffers, so nothing is allocated per frame once warm.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use sluice_device::{netns, AfPacket, AfPacketConfig, Device, DeviceStats, TxFrame};

use crate::core::{PortStats, SwitchCore};
use crate::error::SwitchError;
use crate::PortSpec;

/// Most ports a switch takes.
pub const MAX_PORTS: usize = 256;
/// Frames received or sent per port per burst.
const BATCH: usize = 32;
/// Keep polling without sleeping this long after the last frame (sleeping costs latency).
const IDLE_BEFORE_SLEEP: Duration = Duration::from_micros(200);
/// A deadline closer than this is waited for by polling, not by sleeping.
const SPIN_BELOW: Duration = Duration::from_micros(30);
/// Longest sleep, so the stop flag is seen even without a signal.
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// What a port did, for the report at the end.
#[derive(Clone, Debug)]
pub struct PortReport {
    /// `NETNS:IFACE`.
    pub name: String,
    /// The core's counters.
    pub stats: PortStats,
    /// The device's counters (receive truncations, transmit drops).
    pub device: DeviceStats,
}

/// The switch on real interfaces.
#[derive(Debug)]
pub struct Runner {
    names: Vec<String>,
    devices: Vec<AfPacket>,
    core: SwitchCore,
    start: Instant,
}

impl Runner {
    /// Opens every port's interface (entering its namespace to do so) and builds the core.
    pub fn open(ports: &[PortSpec], seed: u64) -> Result<Runner, SwitchError> {
        if ports.len() < 2 || ports.len() > MAX_PORTS {
            return Err(SwitchError::PortCount(ports.len()));
        }
        let config = AfPacketConfig {
            batch: BATCH,
            ..AfPacketConfig::large_frames()
        };
        let mut devices = Vec::with_capacity(ports.len());
        for p in ports {
            let device = |e| SwitchError::Device {
                port: p.name(),
                source: e,
            };
            // Sockets stay in the namespace they were opened in; the guard moves this
            // thread back.
            let _inside = match &p.netns {
                Some(ns) => Some(netns::enter_scoped(ns).map_err(device)?),
                None => None,
            };
            devices.push(AfPacket::open(&p.iface, config).map_err(device)?);
        }
        let max_frame = devices.iter().map(|d| d.max_frame()).min().unwrap_or(1514);
        let egress: Vec<_> = ports.iter().map(|p| p.egress.clone()).collect();
        Ok(Runner {
            names: ports.iter().map(PortSpec::name).collect(),
            devices,
            core: SwitchCore::new(&egress, max_frame, seed),
            start: Instant::now(),
        })
    }

    /// Forwards until `stop` is set (a signal handler sets it).
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), SwitchError> {
        let mut last_busy = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let received = self.receive_all()?;
            self.transmit_all()?;
            if received > 0 {
                last_busy = Instant::now();
                continue;
            }
            if last_busy.elapsed() < IDLE_BEFORE_SLEEP {
                continue;
            }
            let now = self.start.elapsed();
            let wait = self
                .core
                .next_deadline()
                .map_or(MAX_SLEEP, |t| t.saturating_sub(now))
                .min(MAX_SLEEP);
            if wait >= SPIN_BELOW {
                self.sleep(wait)?;
            }
        }
        Ok(())
    }

    /// One burst from every port into the core.
    fn receive_all(&mut self) -> Result<usize, SwitchError> {
        let now = self.start.elapsed();
        let mut total = 0;
        for (i, dev) in self.devices.iter_mut().enumerate() {
            let core = &mut self.core;
            total += dev
                .receive(&mut |frame, _meta| core.receive(now, i, frame))
                .map_err(|e| SwitchError::Device {
                    port: self.names[i].clone(),
                    source: e,
                })?;
        }
        Ok(total)
    }

    /// Sends what is due on every port, a burst at a time.
    fn transmit_all(&mut self) -> Result<(), SwitchError> {
        let now = self.start.elapsed();
        for (j, dev) in self.devices.iter_mut().enumerate() {
            let mut failed = None;
            self.core.transmit(now, j, &mut |frame| {
                match queue_frame(dev, frame) {
                    Ok(true) => return true,
                    Ok(false) => {}
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                }
                // No free slot: send the burst and try once more.
                if let Err(e) = dev.flush() {
                    failed = Some(e);
                    return false;
                }
                queue_frame(dev, frame).unwrap_or(false)
            });
            let flushed = dev.flush();
            if let Some(e) = failed.map_or(flushed.err(), Some) {
                return Err(SwitchError::Device {
                    port: self.names[j].clone(),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// Sleeps until a port is readable (or writable while frames wait) or `wait` passes.
    fn sleep(&mut self, wait: Duration) -> Result<(), SwitchError> {
        let mut fds: Vec<PollFd<'_>> = self
            .devices
            .iter()
            .map(|d| {
                let mut flags = PollFlags::POLLIN;
                if d.pending() > 0 {
                    flags |= PollFlags::POLLOUT;
                }
                PollFd::new(d.as_fd(), flags)
            })
            .collect();
        match nix::poll::ppoll(&mut fds, Some(TimeSpec::from(wait)), None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(SwitchError::Poll(e)),
        }
    }

    /// Every port's counters.
    pub fn report(&self) -> Vec<PortReport> {
        self.names
            .iter()
            .zip(&self.devices)
            .enumerate()
            .map(|(i, (name, dev))| PortReport {
                name: name.clone(),
                stats: self.core.port_stats(i).unwrap_or_default(),
                device: dev.stats(),
            })
            .collect()
    }

    /// The forwarding decision's counters.
    pub fn core(&self) -> &SwitchCore {
        &self.core
    }
}

/// Copies `frame` into the device's next transmit slot; Ok(false) when none is free. A
/// frame longer than the slot is dropped (counted by the core as forwarded, by nothing else).
fn queue_frame(dev: &mut AfPacket, frame: &[u8]) -> Result<bool, sluice_device::DeviceError> {
    dev.transmit_with(&mut |slot| {
        let out = slot.get_mut(..frame.len())?;
        out.copy_from_slice(frame);
        Some(TxFrame::plain(frame.len()))
    })
}
