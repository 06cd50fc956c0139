//! A SYN flood for the lab: spoofed SYNs from random sources at a set rate, sent in bursts
//! through an AF_PACKET socket (one sendmmsg per burst), with the rate it really achieved.
//!
//! Sources are drawn from a prefix that no lab host owns (by default 198.18.0.0/15, the
//! benchmarking range of RFC 2544), with random ports and sequence numbers, so every SYN is
//! a new half-open connection and nobody answers the SYN-ACKs. A server answers them at the
//! frame's source MAC (the engine) or through its route to the source (Linux: give sluice-k
//! a default route through the clients' bridge, as `sluice experiment synflood` does), so
//! the answers end at the flooding namespace's bridge and are dropped there.
//!
//! [`flood`] runs on the calling thread; [`FloodThread`] runs it on its own thread in a
//! namespace, for tests and experiments that measure something else meanwhile.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sluice_device::{AfPacket, AfPacketConfig, Device, TxFrame};
use sluice_tcp::frame::{emit_segment, Route, TxChecksum};
use sluice_wire::tcp::{SeqNumber, TcpFlags, TcpHeader, TcpOptions};
use sluice_wire::EthernetAddress;

use crate::error::LabError;

/// The default spoofed sources: 198.18.0.0/15 (RFC 2544's benchmarking range).
pub const DEFAULT_SOURCES: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);

/// Frames per burst (one sendmmsg each).
const BURST: usize = 64;

/// What to flood, from where, how fast and for how long.
#[derive(Clone, Debug)]
pub struct FloodSpec {
    /// The interface to send on (br0 in sluice-b in the lab).
    pub iface: String,
    /// The namespace to send from; None: the caller's.
    pub netns: Option<String>,
    /// The next hop's MAC: the target's own on the lab's wire.
    pub dst_mac: EthernetAddress,
    /// The address and port flooded.
    pub target: SocketAddrV4,
    /// The spoofed sources: a prefix and its length.
    pub sources: (Ipv4Addr, u8),
    /// SYNs per second; 0: as fast as the socket takes them.
    pub rate: u64,
    /// How long to flood.
    pub duration: Duration,
    /// Seed of the sources, ports and sequence numbers.
    pub seed: u64,
}

/// What a flood achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FloodReport {
    /// SYNs the kernel accepted for transmission.
    pub sent: u64,
    /// SYNs it refused (send buffer full, queue full).
    pub dropped: u64,
    /// Seconds from the first burst to the last.
    pub seconds: f64,
}

impl FloodReport {
    /// The achieved rate in SYNs per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.seconds.max(1e-9)
    }
}

/// Floods `spec.target` until `spec.duration` passes or `stop` is set, on this thread
/// (entering `spec.netns` first: the thread stays there).
pub fn flood(spec: &FloodSpec, stop: &AtomicBool) -> Result<FloodReport, LabError> {
    if spec.sources.1 > 32 {
        return Err(LabError::InvalidArgument(format!(
            "the source prefix length {} is above 32",
            spec.sources.1
        )));
    }
    if let Some(ns) = &spec.netns {
        sluice_device::netns::enter(ns)?;
    }
    let config = AfPacketConfig {
        batch: BURST,
        // Every frame is sent again at once, and nothing received is read: keep buffers small.
        socket_buffer: Some(1 << 20),
        qdisc_bypass: true,
        ..AfPacketConfig::default()
    };
    let mut device = AfPacket::open(&spec.iface, config)?;
    let mut syns = SynSource::new(spec, device.mac());
    let start = Instant::now();
    let mut queued = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let elapsed = start.elapsed();
        if elapsed >= spec.duration {
            break;
        }
        if spec.rate > 0 {
            // Pace by bursts: when ahead of the rate, sleep until the next burst is due.
            let due = (spec.rate as f64 * elapsed.as_secs_f64()) as u64;
            if queued >= due + BURST as u64 {
                let ahead = (queued - due) as f64 / spec.rate as f64;
                std::thread::sleep(Duration::from_secs_f64(ahead.min(0.01)));
                continue;
            }
        }
        for _ in 0..BURST {
            if !device.transmit_with(&mut |buf| syns.next(buf).map(TxFrame::plain))? {
                break;
            }
            queued += 1;
        }
        device.flush()?;
        // The socket's buffer is small; a refused burst is counted, not retried.
    }
    device.flush()?;
    let stats = device.stats();
    Ok(FloodReport {
        sent: stats.tx_frames,
        dropped: stats.tx_dropped,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Spoofed SYNs, one per call.
struct SynSource {
    rng: SmallRng,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    target: SocketAddrV4,
    base: u32,
    host_mask: u32,
    ident: u16,
}

impl SynSource {
    fn new(spec: &FloodSpec, src_mac: EthernetAddress) -> Self {
        let (prefix, len) = spec.sources;
        let host_mask = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
        SynSource {
            rng: SmallRng::seed_from_u64(spec.seed),
            src_mac,
            dst_mac: spec.dst_mac,
            target: spec.target,
            base: u32::from(prefix) & !host_mask,
            host_mask,
            ident: 0,
        }
    }

    /// Writes the next SYN into `buf`; returns its length.
    fn next(&mut self, buf: &mut [u8]) -> Option<usize> {
        let src_ip = Ipv4Addr::from(self.base | (self.rng.gen::<u32>() & self.host_mask));
        let route = Route {
            src_mac: self.src_mac,
            dst_mac: self.dst_mac,
            src_ip,
            dst_ip: *self.target.ip(),
        };
        // A SYN as common flood tools send it: MSS only.
        let header = TcpHeader {
            src_port: self.rng.gen_range(1024..=u16::MAX),
            dst_port: self.target.port(),
            seq: SeqNumber(self.rng.gen()),
            ack: SeqNumber(0),
            flags: TcpFlags::SYN,
            window: 64240,
            urgent: 0,
            options: TcpOptions {
                mss: Some(1460),
                ..TcpOptions::default()
            },
        };
        self.ident = self.ident.wrapping_add(1);
        emit_segment(
            buf,
            &route,
            self.ident,
            &header,
            0,
            TxChecksum::Full,
            |_| {},
        )
    }
}

/// A flood on its own thread.
pub struct FloodThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<FloodReport, LabError>>>,
}

impl FloodThread {
    /// Starts flooding as `spec` says on a new thread.
    pub fn start(spec: FloodSpec) -> Result<FloodThread, LabError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("syn-flood".into())
            .spawn(move || flood(&spec, &flag))
            .map_err(|source| LabError::Spawn {
                command: "the SYN flood thread".into(),
                source,
            })?;
        Ok(FloodThread {
            stop,
            handle: Some(handle),
        })
    }

    /// Whether the flood has ended (its time is up, or it failed).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the flood (if still running) and returns what it achieved.
    pub fn stop(mut self) -> Result<FloodReport, LabError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(LabError::Panicked("the SYN flood thread")),
            None => Ok(FloodReport::default()),
        }
    }
}

impl Drop for FloodThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::ethernet::EthernetRepr;
    use sluice_wire::ipv4::Ipv4Repr;
    use sluice_wire::tcp::ChecksumCheck;

    fn spec() -> FloodSpec {
        FloodSpec {
            iface: "br0".into(),
            netns: None,
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            target: SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 7001),
            sources: DEFAULT_SOURCES,
            rate: 0,
            duration: Duration::from_secs(1),
            seed: 7,
        }
    }

    #[test]
    fn syns_come_from_the_prefix_with_valid_checksums() {
        let mut syns = SynSource::new(&spec(), EthernetAddress([2, 0, 0, 0, 0, 2]));
        let mut buf = [0u8; 128];
        let mut ports = std::collections::HashSet::new();
        for _ in 0..100 {
            let len = syns.next(&mut buf).expect("a SYN fits");
            let (eth, rest) = EthernetRepr::parse(&buf[..len]).expect("ethernet");
            assert_eq!(eth.dst, EthernetAddress([2, 0, 0, 0, 0, 1]));
            let (ip, segment) = Ipv4Repr::parse(rest, true).expect("ipv4 with a valid checksum");
            assert_eq!(u32::from(ip.src) >> 17, u32::from(DEFAULT_SOURCES.0) >> 17);
            assert_eq!(ip.dst, Ipv4Addr::new(10, 77, 0, 1));
            let (tcp, payload) = TcpHeader::parse(segment, ip.src, ip.dst, ChecksumCheck::Verify)
                .expect("tcp with a valid checksum");
            assert!(payload.is_empty());
            assert_eq!(tcp.flags, TcpFlags::SYN);
            assert_eq!(tcp.dst_port, 7001);
            ports.insert(tcp.src_port);
        }
        assert!(ports.len() > 90, "sources vary: {}", ports.len());
    }

    #[test]
    fn a_prefix_longer_than_32_is_refused() {
        let bad = FloodSpec {
            sources: (Ipv4Addr::UNSPECIFIED, 33),
            ..spec()
        };
        assert!(matches!(
            flood(&bad, &AtomicBool::new(false)),
            Err(LabError::InvalidArgument(_))
        ));
    }
}
