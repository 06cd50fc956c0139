//! A device that loses the transmitted frames a predicate picks: deterministic fault
//! injection (the first FIN, a given segment) where [`crate::Impaired`]'s random loss
//! cannot aim.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp::{TcpFlags, TcpSegment};
use sluice_wire::EthernetAddress;

use crate::{Device, DeviceError, DeviceStats, RxMeta, TxFrame};

/// Whether an Ethernet frame is an IPv4 TCP segment with FIN set: the predicate of the
/// tests that lose a FIN.
pub fn is_tcp_fin(frame: &[u8]) -> bool {
    let Ok((eth, packet)) = EthernetRepr::parse(frame) else {
        return false;
    };
    let Ok((ip, segment)) = Ipv4Repr::parse(packet, false) else {
        return false;
    };
    eth.ethertype == EtherType::Ipv4
        && ip.protocol == PROTOCOL_TCP
        && TcpSegment::new_checked(segment).is_ok_and(|t| t.flags().contains(TcpFlags::FIN))
}

/// Wraps a device; every frame handed to it for transmission that `drop` returns true for is
/// lost (counted in `impaired_tx_dropped`). Large segments (a GSO size) are passed whole.
pub struct TxFilter<D, F> {
    inner: D,
    drop: F,
    dropped: u64,
}

impl<D: Device, F: FnMut(&[u8]) -> bool> TxFilter<D, F> {
    /// Wraps `inner`, losing the frames `drop` picks.
    pub fn new(inner: D, drop: F) -> Self {
        TxFilter {
            inner,
            drop,
            dropped: 0,
        }
    }

    /// Frames lost so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

impl<D: Device, F: FnMut(&[u8]) -> bool> Device for TxFilter<D, F> {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        self.inner.receive(f)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        let TxFilter {
            inner,
            drop,
            dropped,
        } = self;
        inner.transmit_with(&mut |buf| {
            let frame = f(buf)?;
            if frame.gso_size == 0 && frame.len <= buf.len() && drop(&buf[..frame.len]) {
                *dropped += 1;
                return None;
            }
            Some(frame)
        })
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.inner.flush()
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        self.inner.wait(timeout)
    }

    fn wait_also(
        &mut self,
        extra: BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> Result<(), DeviceError> {
        self.inner.wait_also(extra, timeout)
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame()
    }

    fn max_tso_frame(&self) -> usize {
        self.inner.max_tso_frame()
    }

    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }

    fn stats(&self) -> DeviceStats {
        let mut s = self.inner.stats();
        s.impaired_tx_dropped += self.dropped;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{pair, PairConfig};

    #[test]
    fn picked_frames_are_lost_and_counted_the_rest_pass() {
        let (a, mut b) = pair(PairConfig::default()).unwrap();
        let mut a = TxFilter::new(a, |frame: &[u8]| frame[14] == 1);
        for tag in [0u8, 1, 2, 1] {
            let mut frame = [0u8; 60];
            frame[14] = tag;
            assert!(a
                .transmit_with(&mut |buf| {
                    buf[..60].copy_from_slice(&frame);
                    Some(TxFrame::plain(60))
                })
                .unwrap());
        }
        a.flush().unwrap();
        let mut seen = Vec::new();
        b.receive(&mut |frame, _| seen.push(frame[14])).unwrap();
        assert_eq!(seen, [0, 2]);
        assert_eq!(a.dropped(), 2);
        assert_eq!(a.stats().impaired_tx_dropped, 2);
    }
}
