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
use sluice_device::{netns, AfPacket, AfPacketConfig, Device, DeviceError, TxFrame};

use crate::core::{SwitchCore, TxResult};
use crate::error::SwitchError;
use crate::report::PortReport;
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

/// The switch on real interfaces.
#[derive(Debug)]
pub struct Runner {
    names: Vec<String>,
    devices: Vec<AfPacket>,
    core: SwitchCore,
    start: Instant,
    /// Ports whose send error was already reported (once each, not once per burst).
    tx_error_reported: Vec<bool>,
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
        let mut core = SwitchCore::new(&egress, max_frame, seed);
        for (i, p) in ports.iter().enumerate() {
            core.set_flood(i, p.flood);
        }
        Ok(Runner {
            names: ports.iter().map(PortSpec::name).collect(),
            devices,
            core,
            start: Instant::now(),
            tx_error_reported: vec![false; ports.len()],
        })
    }

    /// Forwards until `stop` is set (a signal handler sets it).
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), SwitchError> {
        let mut last_busy = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let received = self.receive_all()?;
            self.transmit_all();
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

    /// Sends what is due on every port, a burst at a time. A port whose device fails
    /// loses its frames (counted) and the others keep forwarding; the first error of each
    /// port is reported on stderr.
    fn transmit_all(&mut self) {
        let now = self.start.elapsed();
        for (j, dev) in self.devices.iter_mut().enumerate() {
            if let Some(e) = transmit_port(&mut self.core, now, j, dev) {
                if !self.tx_error_reported[j] {
                    self.tx_error_reported[j] = true;
                    eprintln!(
                        "sluice switch: port {}: {e}; dropping its frames (tx_errors counts)",
                        self.names[j]
                    );
                }
            }
        }
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

    /// The forwarding core, to configure (route groups, the MTP device) before running.
    pub fn core_mut(&mut self) -> &mut SwitchCore {
        &mut self.core
    }
}

/// Hands port `port`'s due frames to `dev` and sends them. A hard error of the device
/// (ENETDOWN, ...) does not stop the switch: the frame it refused is dropped by the core,
/// those it had queued by the device (both counted), and the error is counted in the
/// port's `tx_errors` and returned.
fn transmit_port<D: Device>(
    core: &mut SwitchCore,
    now: Duration,
    port: usize,
    dev: &mut D,
) -> Option<DeviceError> {
    let mut failed = None;
    core.transmit(now, port, &mut |frame| {
        match queue_frame(dev, frame) {
            Ok(true) => return TxResult::Sent,
            Ok(false) => {}
            Err(e) => {
                failed = Some(e);
                return TxResult::Failed;
            }
        }
        // No free slot: send the burst and try once more.
        if let Err(e) = dev.flush() {
            failed = Some(e);
            return TxResult::Failed;
        }
        match queue_frame(dev, frame) {
            Ok(true) => TxResult::Sent,
            Ok(false) => TxResult::Full,
            Err(e) => {
                failed = Some(e);
                TxResult::Failed
            }
        }
    });
    if let Err(e) = dev.flush() {
        failed = Some(e);
    }
    if failed.is_some() {
        core.count_tx_error(port);
    }
    failed
}

/// Copies `frame` into the device's next transmit slot; Ok(false) when none is free. A
/// frame longer than the slot is dropped (counted by the core as forwarded, by nothing else).
fn queue_frame<D: Device>(dev: &mut D, frame: &[u8]) -> Result<bool, DeviceError> {
    dev.transmit_with(&mut |slot| {
        let out = slot.get_mut(..frame.len())?;
        out.copy_from_slice(frame);
        Some(TxFrame::plain(frame.len()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::default_egress;
    use sluice_device::{DeviceStats, EthernetAddress, RxMeta};

    /// A device with a two-frame transmit queue whose flush fails while it is `down`.
    #[derive(Default)]
    struct FakeDevice {
        down: bool,
        queued: Vec<Vec<u8>>,
        sent: Vec<Vec<u8>>,
        stats: DeviceStats,
    }

    impl Device for FakeDevice {
        fn receive(&mut self, _: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
            Ok(0)
        }
        fn transmit_with(
            &mut self,
            f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
        ) -> Result<bool, DeviceError> {
            if self.queued.len() == 2 {
                return Ok(false);
            }
            let mut slot = vec![0u8; 1514];
            if let Some(t) = f(&mut slot) {
                slot.truncate(t.len);
                self.queued.push(slot);
            }
            Ok(true)
        }
        fn flush(&mut self) -> Result<(), DeviceError> {
            if self.down && !self.queued.is_empty() {
                self.stats.tx_dropped += self.queued.len() as u64;
                self.queued.clear();
                return Err(DeviceError::InterfaceDown { name: "p0".into() });
            }
            self.sent.append(&mut self.queued);
            Ok(())
        }
        fn wait(&mut self, _: Option<Duration>) -> Result<(), DeviceError> {
            Ok(())
        }
        fn max_frame(&self) -> usize {
            1514
        }
        fn mac(&self) -> EthernetAddress {
            EthernetAddress::default()
        }
        fn stats(&self) -> DeviceStats {
            self.stats
        }
    }

    fn frame(dst: u8, src: u8) -> Vec<u8> {
        let mut f = vec![0u8; 100];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f
    }

    #[test]
    fn a_port_whose_device_is_down_drops_and_counts_and_the_switch_goes_on() {
        let mut core = SwitchCore::new(&vec![default_egress(); 2], 1514, 1);
        let mut devs = [FakeDevice::default(), FakeDevice::default()];
        let now = Duration::ZERO;
        // Learn host 0xa on port 0 and 0xb on port 1.
        core.receive(now, 0, &frame(0xb, 0xa));
        core.receive(now, 1, &frame(0xa, 0xb));
        for (j, d) in devs.iter_mut().enumerate() {
            assert!(transmit_port(&mut core, now, j, d).is_none());
        }
        devs[0].down = true;
        for _ in 0..5 {
            core.receive(now, 1, &frame(0xa, 0xb));
            core.receive(now, 0, &frame(0xb, 0xa));
        }
        let err = transmit_port(&mut core, now, 0, &mut devs[0]);
        assert!(
            matches!(err, Some(DeviceError::InterfaceDown { .. })),
            "{err:?}"
        );
        assert!(transmit_port(&mut core, now, 1, &mut devs[1]).is_none());
        // Port 0: two frames queued in the device lost with its flush, the third refused
        // by the failing flush and dropped by the core, the last two lost at the end.
        let s0 = core.port_stats(0).unwrap();
        assert!(s0.tx_errors >= 1);
        assert_eq!(s0.tx_error_drops + devs[0].stats.tx_dropped, 5);
        assert!(s0.tx_error_drops >= 1);
        // Port 1 forwarded everything.
        assert_eq!(devs[1].sent.len(), 1 + 5);
        // Back up: port 0 forwards again.
        devs[0].down = false;
        core.receive(now, 1, &frame(0xa, 0xb));
        assert!(transmit_port(&mut core, now, 0, &mut devs[0]).is_none());
        assert_eq!(devs[0].sent.len(), 2);
    }
}
