//! Class queues: an egress with N FIFO queues, one per traffic class, classified by the
//! IPv4 DSCP and served by deficit round robin (Shreedhar and Varghese, "Efficient Fair
//! Queueing using Deficit Round Robin", SIGCOMM 1995). The "queue per tenant" switch that
//! mtp.txt 5.3 compares MTP's fair share on one shared queue against.
//!
//! Each class queue has the link's whole byte (and frame) capacity and its own ECN
//! threshold check, so a backlogged class neither fills nor marks another's queue.
//!
//! Or strict priority ([`ClassService::Strict`]): the highest non-empty class is served
//! first, as the priority queues of commodity switches that Homa and pFabric rely on so that
//! short messages pass long ones. Those classes share one buffer (the link's capacity), and
//! a frame's queue is what waits at or above its class (what it will wait behind).

use std::collections::VecDeque;

/// The DRR quantum: one full-size Ethernet frame, so a class sends at least one frame a turn.
pub const DRR_QUANTUM: usize = 1514;

/// How class queues are served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClassService {
    /// Deficit round robin: each class a fair share of bytes, its own buffer.
    #[default]
    Drr,
    /// Strict priority, the highest class (DSCP modulo N) first; one shared buffer.
    Strict,
}

/// N class queues and the DRR scheduler's state.
#[derive(Debug)]
pub(crate) struct ClassQueues {
    service: ClassService,
    queues: Vec<VecDeque<Vec<u8>>>,
    bytes: Vec<usize>,
    deficit: Vec<usize>,
    /// The class whose turn it is.
    current: usize,
    /// Whether `current` already got its quantum this turn.
    granted: bool,
    /// Frames over all classes.
    frames: usize,
}

/// The class of a frame among `n`: the IPv4 DSCP modulo `n`; class 0 for non-IPv4 frames.
pub fn class_of(frame: &[u8], n: usize) -> usize {
    if n <= 1 || frame.get(12..14) != Some(&[0x08, 0x00]) {
        return 0;
    }
    let dscp = usize::from(frame.get(15).copied().unwrap_or(0) >> 2);
    dscp % n
}

impl ClassQueues {
    /// `n` empty class queues served by `service` (at least 2 make sense; 1 is a FIFO).
    pub(crate) fn new(n: usize, service: ClassService) -> Self {
        let n = n.max(1);
        ClassQueues {
            service,
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            bytes: vec![0; n],
            deficit: vec![0; n],
            current: 0,
            granted: false,
            frames: 0,
        }
    }

    /// Number of classes.
    pub(crate) fn len(&self) -> usize {
        self.queues.len()
    }

    /// Bytes waiting in class `c`.
    pub(crate) fn class_bytes(&self, c: usize) -> usize {
        self.bytes.get(c).copied().unwrap_or(0)
    }

    /// Frames waiting in class `c`.
    pub(crate) fn class_frames(&self, c: usize) -> usize {
        self.queues.get(c).map_or(0, VecDeque::len)
    }

    /// How they are served.
    pub(crate) fn service(&self) -> ClassService {
        self.service
    }

    /// Bytes and frames waiting in class `c` and every class above it.
    pub(crate) fn at_or_above(&self, c: usize) -> (usize, usize) {
        let from = c.min(self.queues.len());
        (
            self.bytes[from..].iter().sum(),
            self.queues[from..].iter().map(VecDeque::len).sum(),
        )
    }

    /// Frames waiting over all classes.
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    /// Appends a frame to class `c` (taken modulo the number of classes).
    pub(crate) fn push(&mut self, c: usize, frame: Vec<u8>) {
        let c = c % self.queues.len();
        self.bytes[c] += frame.len();
        self.queues[c].push_back(frame);
        self.frames += 1;
    }

    /// The next frame by deficit round robin: each backlogged class in turn gets a quantum
    /// of bytes and sends head frames while its deficit covers them.
    pub(crate) fn pop(&mut self) -> Option<Vec<u8>> {
        if self.frames == 0 {
            return None;
        }
        if self.service == ClassService::Strict {
            let c = self.queues.iter().rposition(|q| !q.is_empty())?;
            let frame = self.queues[c].pop_front()?;
            self.bytes[c] -= frame.len();
            self.frames -= 1;
            return Some(frame);
        }
        let n = self.queues.len();
        loop {
            let c = self.current;
            let Some(head) = self.queues[c].front().map(Vec::len) else {
                self.deficit[c] = 0;
                self.next_class(n);
                continue;
            };
            if !self.granted {
                self.deficit[c] += DRR_QUANTUM;
                self.granted = true;
            }
            if head > self.deficit[c] {
                self.next_class(n);
                continue;
            }
            self.deficit[c] -= head;
            let frame = self.queues[c].pop_front()?;
            self.bytes[c] -= frame.len();
            self.frames -= 1;
            if self.queues[c].is_empty() {
                // An emptied class keeps no credit (DRR: deficit reset when idle).
                self.deficit[c] = 0;
                self.next_class(n);
            }
            return Some(frame);
        }
    }

    fn next_class(&mut self, n: usize) {
        self.current = (self.current + 1) % n;
        self.granted = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(dscp: u8, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12] = 0x08;
        f[14] = 0x45;
        f[15] = dscp << 2;
        f
    }

    #[test]
    fn classified_by_dscp() {
        assert_eq!(class_of(&ipv4(0, 60), 2), 0);
        assert_eq!(class_of(&ipv4(1, 60), 2), 1);
        assert_eq!(class_of(&ipv4(3, 60), 2), 1);
        assert_eq!(class_of(&[0u8; 60], 2), 0, "not IPv4");
        assert_eq!(class_of(&ipv4(5, 60), 1), 0);
    }

    #[test]
    fn drr_shares_bytes_equally_between_frame_sizes() {
        // Class 0 sends 1500-byte frames, class 1 300-byte ones: over many turns each class
        // gets the same bytes, not the same frames.
        let mut q = ClassQueues::new(2, ClassService::Drr);
        for _ in 0..100 {
            q.push(0, ipv4(0, 1500));
        }
        for _ in 0..500 {
            q.push(1, ipv4(1, 300));
        }
        let mut bytes = [0usize; 2];
        for _ in 0..300 {
            let f = q.pop().unwrap();
            bytes[class_of(&f, 2)] += f.len();
        }
        let (a, b) = (bytes[0] as f64, bytes[1] as f64);
        assert!((a / b - 1.0).abs() < 0.05, "bytes {bytes:?}");
        assert_eq!(q.frames(), 600 - 300);
    }

    #[test]
    fn a_lone_class_gets_everything() {
        let mut q = ClassQueues::new(4, ClassService::Drr);
        for _ in 0..3 {
            q.push(2, ipv4(2, 9000));
        }
        assert_eq!(q.class_bytes(2), 27_000);
        assert_eq!((0..3).filter_map(|_| q.pop()).count(), 3);
        assert!(q.pop().is_none());
        assert_eq!(q.class_frames(2), 0);
    }

    #[test]
    fn strict_priority_serves_the_highest_class_first_whatever_arrived_earlier() {
        let mut q = ClassQueues::new(8, ClassService::Strict);
        for _ in 0..3 {
            q.push(0, ipv4(0, 1500));
        }
        q.push(7, ipv4(7, 100));
        q.push(3, ipv4(3, 200));
        q.push(7, ipv4(7, 101));
        assert_eq!(q.at_or_above(3), (401, 3));
        assert_eq!(q.at_or_above(0), (4901, 6));
        let order: Vec<usize> = (0..6).filter_map(|_| q.pop()).map(|f| f.len()).collect();
        // DRR would have sent class 0's first frame first.
        assert_eq!(order, [100, 101, 200, 1500, 1500, 1500]);
        assert!(q.pop().is_none());
    }
}
