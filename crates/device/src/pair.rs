//! Two in-memory devices joined back to back, for tests and examples without root.
//!
//! Each direction is a bounded ring of preallocated frame slots behind a mutex; `flush` copies
//! a burst in under one lock, `receive` copies a burst out under one lock and then calls the
//! callback without holding it. A full ring drops frames like a wire would, counted in
//! `tx_dropped`. Nothing is allocated per packet.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sluice_wire::EthernetAddress;

use crate::error::DeviceError;
use crate::tx_batch::TxBatch;
use crate::{queued_plain, Device, DeviceStats, RxChecksum, RxMeta, TxFrame};

/// Configuration of an in-memory device pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairConfig {
    /// Frames received or queued for transmission per burst.
    pub batch: usize,
    /// Largest frame in bytes (`max_frame()` of both ends).
    pub max_frame: usize,
    /// Frames each direction holds before it drops.
    pub capacity: usize,
    /// MAC addresses of the two ends.
    pub macs: [EthernetAddress; 2],
    /// The checksum state reported with every received frame.
    pub rx_checksum: RxChecksum,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            batch: 64,
            max_frame: 1514,
            capacity: 1024,
            macs: [
                EthernetAddress([0x02, 0, 0, 0, 0, 0x01]),
                EthernetAddress([0x02, 0, 0, 0, 0, 0x02]),
            ],
            rx_checksum: RxChecksum::Unverified,
        }
    }
}

/// A bounded ring of frame slots.
struct Ring {
    buf: Box<[u8]>,
    lens: Box<[usize]>,
    slot: usize,
    head: usize,
    len: usize,
}

impl Ring {
    fn new(capacity: usize, slot: usize) -> Ring {
        Ring {
            buf: vec![0u8; capacity * slot].into_boxed_slice(),
            lens: vec![0usize; capacity].into_boxed_slice(),
            slot,
            head: 0,
            len: 0,
        }
    }

    fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Appends a frame; false (dropped) if the ring is full.
    fn push(&mut self, frame: &[u8]) -> bool {
        if self.len == self.capacity() {
            return false;
        }
        let i = (self.head + self.len) % self.capacity();
        self.buf[i * self.slot..i * self.slot + frame.len()].copy_from_slice(frame);
        self.lens[i] = frame.len();
        self.len += 1;
        true
    }

    /// Removes the oldest frame into `out`, returning its length.
    fn pop_into(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let i = self.head;
        let n = self.lens[i];
        out[..n].copy_from_slice(&self.buf[i * self.slot..i * self.slot + n]);
        self.head = (self.head + 1) % self.capacity();
        self.len -= 1;
        Some(n)
    }
}

/// One direction of the pair: a ring and a condition variable to wake the receiver.
struct Channel {
    ring: Mutex<Ring>,
    ready: Condvar,
}

impl Channel {
    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A panic while holding the lock leaves the ring consistent (plain copies), so a
        // poisoned lock is still usable.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One end of an in-memory device pair (see [`pair()`]).
pub struct PairEnd {
    rx: Arc<Channel>,
    tx_channel: Arc<Channel>,
    mac: EthernetAddress,
    max_frame: usize,
    batch: usize,
    rx_checksum: RxChecksum,
    rx_buf: Box<[u8]>,
    rx_lens: Box<[usize]>,
    tx: TxBatch,
    stats: DeviceStats,
}

impl std::fmt::Debug for PairEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairEnd")
            .field("mac", &self.mac)
            .field("max_frame", &self.max_frame)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// Creates two devices joined back to back: what one end flushes, the other receives.
pub fn pair(config: PairConfig) -> Result<(PairEnd, PairEnd), DeviceError> {
    if config.batch == 0 || config.capacity == 0 {
        return Err(DeviceError::InvalidConfig(
            "batch and capacity must be at least one frame",
        ));
    }
    if config.max_frame < 60 || config.max_frame > (1 << 20) {
        return Err(DeviceError::InvalidConfig(
            "max_frame must be 60 bytes to 1 MiB",
        ));
    }
    let channel = || {
        Arc::new(Channel {
            ring: Mutex::new(Ring::new(config.capacity, config.max_frame)),
            ready: Condvar::new(),
        })
    };
    let (a_to_b, b_to_a) = (channel(), channel());
    let end = |rx: &Arc<Channel>, tx: &Arc<Channel>, mac| PairEnd {
        rx: Arc::clone(rx),
        tx_channel: Arc::clone(tx),
        mac,
        max_frame: config.max_frame,
        batch: config.batch,
        rx_checksum: config.rx_checksum,
        rx_buf: vec![0u8; config.batch * config.max_frame].into_boxed_slice(),
        rx_lens: vec![0usize; config.batch].into_boxed_slice(),
        tx: TxBatch::new(config.batch, config.max_frame),
        stats: DeviceStats::default(),
    };
    let a = end(&b_to_a, &a_to_b, config.macs[0]);
    let b = end(&a_to_b, &b_to_a, config.macs[1]);
    Ok((a, b))
}

impl PairEnd {
    /// Whether the other end still exists.
    pub fn peer_alive(&self) -> bool {
        // Each end holds one reference to each channel; the peer holds the other.
        Arc::strong_count(&self.tx_channel) > 1
    }
}

impl Drop for PairEnd {
    fn drop(&mut self) {
        // Wake a peer blocked in wait() so it sees the disconnect.
        self.tx_channel.ready.notify_all();
        self.rx.ready.notify_all();
    }
}

impl Device for PairEnd {
    fn receive(&mut self, f: &mut dyn FnMut(&[u8], RxMeta)) -> Result<usize, DeviceError> {
        let mut n = 0;
        {
            let mut ring = self.rx.lock();
            while n < self.batch {
                let slot = &mut self.rx_buf[n * self.max_frame..(n + 1) * self.max_frame];
                match ring.pop_into(slot) {
                    Some(len) => {
                        self.rx_lens[n] = len;
                        n += 1;
                    }
                    None => break,
                }
            }
        }
        if n == 0 && !self.peer_alive() {
            return Err(DeviceError::Disconnected);
        }
        let meta = RxMeta {
            checksum: self.rx_checksum,
        };
        for i in 0..n {
            let start = i * self.max_frame;
            f(&self.rx_buf[start..start + self.rx_lens[i]], meta);
        }
        self.stats.rx_frames += n as u64;
        Ok(n)
    }

    fn transmit_with(
        &mut self,
        f: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<bool, DeviceError> {
        let Some(slot) = self.tx.next_slot() else {
            return Ok(false);
        };
        if let Some(len) = queued_plain(f(slot), slot, &mut self.stats)? {
            self.tx.commit(len, 0);
        }
        Ok(true)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        if self.tx.count() == 0 {
            return Ok(());
        }
        if !self.peer_alive() {
            self.stats.tx_dropped += self.tx.clear() as u64;
            return Err(DeviceError::Disconnected);
        }
        {
            let mut ring = self.tx_channel.lock();
            for i in 0..self.tx.count() {
                if ring.push(self.tx.frame(i).0) {
                    self.stats.tx_frames += 1;
                } else {
                    self.stats.tx_dropped += 1;
                }
            }
        }
        self.tx.clear();
        self.tx_channel.ready.notify_all();
        Ok(())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        let ring = self.rx.lock();
        if ring.len > 0 || !self.peer_alive() {
            return Ok(());
        }
        // One wait: a spurious wake-up is allowed by the trait ("may be readable").
        match timeout {
            None => drop(self.rx.ready.wait(ring)),
            Some(t) => drop(self.rx.ready.wait_timeout(ring, t)),
        }
        Ok(())
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;
    use std::time::Instant;

    fn send(dev: &mut PairEnd, payload: &[u8]) -> bool {
        dev.transmit_with(&mut |buf| {
            buf[..payload.len()].copy_from_slice(payload);
            Some(payload.len().into())
        })
        .unwrap()
    }

    fn drain(dev: &mut PairEnd) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while dev.receive(&mut |f, _| out.push(f.to_vec())).unwrap() > 0 {}
        out
    }

    #[test]
    fn frames_cross_in_order_both_ways() {
        let (mut a, mut b) = pair(PairConfig::default()).unwrap();
        assert_eq!(a.mac(), PairConfig::default().macs[0]);
        assert_eq!(b.mac(), PairConfig::default().macs[1]);
        for i in 0..10u8 {
            assert!(send(&mut a, &[i; 60]));
        }
        // Nothing moves before flush.
        assert_eq!(drain(&mut b).len(), 0);
        a.flush().unwrap();
        let got = drain(&mut b);
        assert_eq!(got.len(), 10);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f, &vec![i as u8; 60]);
        }
        assert!(send(
            &mut b,
            b"reply-frame-reply-frame-reply-frame-reply-frame-reply-frame!"
        ));
        b.flush().unwrap();
        assert_eq!(drain(&mut a).len(), 1);
        assert_eq!(a.stats().tx_frames, 10);
        assert_eq!(b.stats().rx_frames, 10);
    }

    #[test]
    fn bursts_are_bounded_by_batch_and_capacity() {
        let config = PairConfig {
            batch: 4,
            capacity: 6,
            ..PairConfig::default()
        };
        let (mut a, mut b) = pair(config).unwrap();
        for _ in 0..4 {
            assert!(send(&mut a, &[1; 64]));
        }
        // The fifth has no slot until flush.
        assert!(!send(&mut a, &[1; 64]));
        a.flush().unwrap();
        for _ in 0..4 {
            assert!(send(&mut a, &[2; 64]));
        }
        a.flush().unwrap();
        // 6 fit in the ring, 2 dropped like a full wire.
        assert_eq!(a.stats().tx_frames, 6);
        assert_eq!(a.stats().tx_dropped, 2);
        let mut n = 0;
        assert_eq!(b.receive(&mut |_, _| n += 1).unwrap(), 4);
        assert_eq!(b.receive(&mut |_, _| n += 1).unwrap(), 2);
        assert_eq!(n, 6);
    }

    #[test]
    fn callback_may_decline_and_oversize_is_an_error() {
        let (mut a, mut b) = pair(PairConfig::default()).unwrap();
        assert!(a.transmit_with(&mut |_| None).unwrap());
        let max = a.max_frame();
        assert!(matches!(
            a.transmit_with(&mut |_| Some((max + 1).into())),
            Err(DeviceError::FrameTooLong { .. })
        ));
        a.flush().unwrap();
        assert_eq!(drain(&mut b).len(), 0);
    }

    #[test]
    fn reports_configured_checksum_state() {
        let config = PairConfig {
            rx_checksum: RxChecksum::Verified,
            ..PairConfig::default()
        };
        let (mut a, mut b) = pair(config).unwrap();
        send(&mut a, &[0; 60]);
        a.flush().unwrap();
        let mut seen = None;
        b.receive(&mut |_, meta| seen = Some(meta.checksum))
            .unwrap();
        assert_eq!(seen, Some(RxChecksum::Verified));
    }

    #[test]
    fn wait_wakes_on_flush_from_another_thread() {
        let (mut a, mut b) = pair(PairConfig::default()).unwrap();
        let sender = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            send(&mut a, &[7; 100]);
            a.flush().unwrap();
            a
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = 0;
        while got == 0 && Instant::now() < deadline {
            b.wait(Some(Duration::from_secs(1))).unwrap();
            got += b.receive(&mut |f, _| assert_eq!(f, &[7; 100][..])).unwrap();
        }
        assert_eq!(got, 1);
        drop(sender.join().unwrap());
    }

    #[test]
    fn dropping_one_end_disconnects_the_other() {
        let (mut a, b) = pair(PairConfig::default()).unwrap();
        drop(b);
        assert!(!a.peer_alive());
        a.wait(None).unwrap(); // returns at once: nothing will ever arrive
        assert!(matches!(
            a.receive(&mut |_, _| {}),
            Err(DeviceError::Disconnected)
        ));
        send(&mut a, &[0; 60]);
        assert!(matches!(a.flush(), Err(DeviceError::Disconnected)));
        assert!(matches!(
            pair(PairConfig {
                batch: 0,
                ..PairConfig::default()
            }),
            Err(DeviceError::InvalidConfig(_))
        ));
    }

    #[test]
    fn wait_also_returns_for_a_readable_extra_descriptor_and_rechecks_it_soon() {
        use std::io::Write;
        use std::os::fd::AsFd;
        use std::os::unix::net::UnixStream;
        let (mut a, _b) = pair(PairConfig::default()).unwrap();
        let (mut tx, rx) = UnixStream::pair().unwrap();
        // Nothing readable: the default waits on the device at most EXTRA_POLL_INTERVAL,
        // far less than the timeout, so the caller looks at the descriptor again soon.
        let start = Instant::now();
        a.wait_also(rx.as_fd(), Some(Duration::from_secs(10)))
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        // Readable: returns at once.
        tx.write_all(&[1]).unwrap();
        let start = Instant::now();
        a.wait_also(rx.as_fd(), None).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
