//! The NIC role: the device's receive and transmit sides. On receive it copies each frame
//! into its flow group's open batch (steered by `FlowGroups::group_of_frame`; ARP requests
//! and frames of no flow to group 0, ARP replies to every group, as each group's core keeps
//! its own neighbor cache; RDMA and MTP frames to group 0, which runs those transports),
//! numbers it with the group's sequencer and hands full batches to
//! the pre replicas in turn. On transmit it restores each group's order over what the post
//! replicas return (their batches are numbered by the protocol role) and puts the frames on
//! the device (skipping frames marked bad or dropped).

use sluice_device::{Device, RxChecksum, TxFrame};
use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::flow_group::FlowGroups;

use super::batch::{Batch, Checksum, FrameMeta};
use super::link::{LinkRx, LinkTx};
use super::progress::{Progress, RoleCounters};
use super::sequence::{Reorder, Sequencer};
use crate::transport::{classify, Class};
use crate::EngineError;

/// Where a received frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Steer {
    /// To one group.
    Group(u16),
    /// To every group (ARP replies).
    All,
}

fn steer(groups: &FlowGroups, frame: &[u8]) -> Steer {
    // The transports beside TCP (RoCEv2, MTP) run in group 0's protocol role only
    // (docs/multicore.md, "Transports beside TCP"): their state is one instance per
    // application, not per 4-tuple.
    if classify(frame) != Class::Core {
        return Steer::Group(0);
    }
    if let Some(g) = groups.group_of_frame(frame) {
        return Steer::Group(g);
    }
    let reply = EthernetRepr::parse(frame)
        .ok()
        .is_some_and(|(eth, payload)| {
            eth.ethertype == EtherType::Arp
                && ArpRepr::parse(payload).is_ok_and(|a| a.operation == ArpOperation::Reply)
        });
    if reply {
        Steer::All
    } else {
        Steer::Group(0)
    }
}

/// A group's batch being transmitted, with the post replica it came from.
struct Sending {
    post: usize,
    batch: Box<Batch>,
    next: usize,
}

/// The receive side's state: the open batches, the sequencers and the links to pre.
struct Gather {
    groups: FlowGroups,
    to_pre: Vec<LinkTx>,
    frame_seq: Sequencer,
    batch_seq: Sequencer,
    /// Per group: the batch being filled and the pre replica it belongs to.
    open: Vec<Option<(usize, Box<Batch>)>>,
    next_pre: usize,
    counters: RoleCounters,
}

/// The NIC role (one per engine).
pub struct Nic<D> {
    /// The device.
    pub device: D,
    gather: Gather,
    from_post: Vec<LinkRx>,
    tx_order: Vec<Reorder<(usize, Box<Batch>)>>,
    sending: Vec<Option<Sending>>,
    /// Transmit counters.
    pub tx: RoleCounters,
}

impl Gather {
    /// Appends a frame to group `g`'s open batch, opening one (and passing on a full one)
    /// as needed; counts a drop when no empty batch is free or the frame is too long.
    fn put(&mut self, g: u16, frame: &[u8], checksum: Checksum) {
        let gi = usize::from(g);
        if self.open[gi].as_ref().is_some_and(|(_, b)| b.is_full()) {
            self.close(g);
        }
        if self.open[gi].is_none() {
            let replicas = self.to_pre.len();
            let found = (0..replicas)
                .map(|k| (self.next_pre + k) % replicas)
                .find_map(|r| self.to_pre[r].take_empty().map(|b| (r, b)));
            match found {
                Some((r, b)) => {
                    self.next_pre = (r + 1) % replicas;
                    self.open[gi] = Some((r, b));
                }
                None => {
                    self.counters.drops += 1;
                    return;
                }
            }
        }
        let Some((_, batch)) = self.open[gi].as_mut() else {
            return;
        };
        let meta = FrameMeta {
            len: 0,
            group: g,
            seq: self.frame_seq.next(g),
            checksum,
            gso_size: 0,
        };
        if batch.push_copy(frame, meta) {
            self.counters.frames += 1;
        } else {
            // Longer than a batch buffer (a jumbo or GSO frame): dropped, and its number
            // stays unused, which the protocol role's order check allows for.
            self.counters.drops += 1;
        }
    }

    /// Numbers group `g`'s open batch and sends it to its pre replica.
    fn close(&mut self, g: u16) {
        let Some((r, mut batch)) = self.open[usize::from(g)].take() else {
            return;
        };
        if batch.is_empty() {
            self.to_pre[r].keep(batch);
            return;
        }
        batch.group = g;
        batch.seq = self.batch_seq.next(g);
        self.counters.batches += 1;
        self.to_pre[r].send(batch);
    }
}

impl<D: Device> Nic<D> {
    /// The role over `device`, with a link to each pre replica and from each post replica;
    /// `window` bounds each group's transmit reorder buffer.
    pub fn new(
        device: D,
        groups: FlowGroups,
        to_pre: Vec<LinkTx>,
        from_post: Vec<LinkRx>,
        window: usize,
    ) -> Self {
        let n = usize::from(groups.count.max(1));
        Nic {
            device,
            gather: Gather {
                groups,
                to_pre,
                frame_seq: Sequencer::new(groups.count),
                batch_seq: Sequencer::new(groups.count),
                open: (0..n).map(|_| None).collect(),
                next_pre: 0,
                counters: RoleCounters::default(),
            },
            from_post,
            tx_order: (0..n).map(|_| Reorder::new(window)).collect(),
            sending: (0..n).map(|_| None).collect(),
            tx: RoleCounters::default(),
        }
    }

    /// One receive burst and at most `budget` batches to transmit.
    pub fn step(&mut self, budget: usize) -> Result<Progress, EngineError> {
        let received = self.receive()?;
        let sent = self.transmit(budget)?;
        Ok(Progress {
            work: received + sent,
        })
    }

    /// Receive counters.
    pub fn rx(&self) -> RoleCounters {
        self.gather.counters
    }

    fn receive(&mut self) -> Result<usize, EngineError> {
        let gather = &mut self.gather;
        for l in gather.to_pre.iter_mut() {
            l.flush();
        }
        // Take a burst only with room for it: a full burst can open a batch per group and
        // fill two more; without room the frames wait in the device's ring.
        let empties: usize = gather.to_pre.iter().map(LinkTx::empties).sum();
        if empties < gather.open.len() + 2 {
            return Ok(0);
        }
        let groups = gather.groups;
        let n = self.device.receive(&mut |frame, meta| {
            let checksum = match meta.checksum {
                RxChecksum::Unverified => Checksum::Unverified,
                RxChecksum::Verified | RxChecksum::Partial => Checksum::Verified,
            };
            match steer(&groups, frame) {
                Steer::Group(g) => gather.put(g, frame, checksum),
                Steer::All => {
                    for g in 0..groups.count.max(1) {
                        gather.put(g, frame, checksum);
                    }
                }
            }
        })?;
        // End of the burst: pass on what was gathered, full or not.
        for g in 0..gather.open.len() {
            gather.close(g as u16);
        }
        Ok(n)
    }

    fn transmit(&mut self, budget: usize) -> Result<usize, EngineError> {
        let mut work = 0;
        let replicas = self.from_post.len();
        for r in 0..replicas {
            for _ in 0..budget {
                let Some(batch) = self.from_post[r].recv() else {
                    break;
                };
                work += 1;
                let g = usize::from(batch.group).min(self.tx_order.len() - 1);
                let order = &mut self.tx_order[g];
                let holds = order.holds;
                if let Err(refused) = order.insert(batch.seq, (r, batch)) {
                    self.tx.reorder_refused += 1;
                    let (r, b) = refused.item;
                    self.tx.drops += b.len() as u64;
                    self.from_post[r].give_back(b);
                }
                self.tx.reorder_holds += order.holds - holds;
            }
        }
        let mut sent = 0;
        let mut full = false;
        for g in 0..self.sending.len() {
            loop {
                if self.sending[g].is_none() {
                    match self.tx_order[g].pop() {
                        Some((post, batch)) => {
                            self.tx.batches += 1;
                            self.sending[g] = Some(Sending {
                                post,
                                batch,
                                next: 0,
                            });
                        }
                        None => break,
                    }
                }
                let Some(s) = self.sending[g].as_mut() else {
                    break;
                };
                while s.next < s.batch.len() {
                    let meta = s.batch.meta(s.next);
                    if !meta.checksum.live() {
                        s.next += 1;
                        continue;
                    }
                    let frame = s.batch.frame(s.next);
                    // Left partial by the post role only when the device completes it.
                    let csum_partial = meta.checksum == Checksum::Partial;
                    let queued = self.device.transmit_with(&mut |buf| {
                        let slot = buf.get_mut(..frame.len())?;
                        slot.copy_from_slice(frame);
                        Some(TxFrame {
                            len: frame.len(),
                            gso_size: meta.gso_size,
                            csum_partial,
                        })
                    })?;
                    if !queued {
                        if full {
                            break;
                        }
                        // Every slot is taken: send the burst and try once more.
                        self.device.flush()?;
                        full = true;
                        continue;
                    }
                    full = false;
                    s.next += 1;
                    sent += 1;
                }
                if s.next < s.batch.len() {
                    // The device is full: go on next step.
                    break;
                }
                if let Some(done) = self.sending[g].take() {
                    self.from_post[done.post].give_back(done.batch);
                }
            }
        }
        if sent > 0 {
            self.tx.frames += sent as u64;
            self.device.flush()?;
        }
        Ok(work + sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    proptest! {
        /// Any bytes at all are steered somewhere that exists, without a panic.
        #[test]
        fn any_frame_is_steered_to_an_existing_group(
            frame in proptest::collection::vec(any::<u8>(), 0..100),
            count in 1u16..8,
        ) {
            let g = FlowGroups { count, key: 3 };
            match steer(&g, &frame) {
                Steer::Group(i) => prop_assert!(i < count),
                Steer::All => {}
            }
        }
    }

    fn arp(op: u8) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, op]);
        f
    }

    #[test]
    fn arp_replies_go_to_every_group_requests_and_the_rest_to_group_0() {
        let g = FlowGroups { count: 4, key: 1 };
        assert_eq!(steer(&g, &arp(2)), Steer::All);
        assert_eq!(steer(&g, &arp(1)), Steer::Group(0));
        assert_eq!(steer(&g, &[0u8; 3]), Steer::Group(0));
        let mut tcp = vec![0u8; 14 + 40];
        tcp[12..14].copy_from_slice(&[0x08, 0x00]);
        tcp[14] = 0x45;
        tcp[14 + 9] = 6;
        tcp[26..30].copy_from_slice(&[10, 0, 0, 2]);
        tcp[30..34].copy_from_slice(&[10, 0, 0, 1]);
        tcp[34..36].copy_from_slice(&40000u16.to_be_bytes());
        tcp[36..38].copy_from_slice(&80u16.to_be_bytes());
        let want = g.group_of(
            (Ipv4Addr::new(10, 0, 0, 1), 80),
            (Ipv4Addr::new(10, 0, 0, 2), 40000),
        );
        assert_eq!(steer(&g, &tcp), Steer::Group(want));
    }
}
