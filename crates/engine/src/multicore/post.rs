//! The post role (stateless, replicable): completes the TCP checksums the protocol roles
//! left partial (`Config::tx_checksum_offload`), the work a NIC's checksum offload would do,
//! off the protocol role's core. When the device itself completes them
//! ([`Post::device_completes`]) it leaves them partial: no pass over the payload at all.

use sluice_device::complete_partial_checksum;

use super::batch::Checksum;
use super::link::{LinkRx, LinkTx};
use super::pre::run_modules;
use super::progress::{Progress, RoleCounters};
use crate::hook_point::HookPoint;
use crate::modules::Chain;

/// One post replica: a link from each protocol role, one link to the NIC role.
pub struct Post {
    from_groups: Vec<LinkRx>,
    to_nic: LinkTx,
    next: usize,
    /// Counters.
    pub counters: RoleCounters,
    /// This replica's copy of the stateless modules at egress (placement.rs).
    pub modules: Chain,
    /// The clock for the modules' bpf_ktime_get_ns, set by the runner before a step.
    pub now_ns: u64,
    /// The device completes partial checksums (virtio-net offload, or the kernel behind
    /// it): frames stay [`Checksum::Partial`] unless egress modules must see them whole.
    pub device_completes: bool,
}

impl Post {
    /// A replica between the groups' links and `to_nic`.
    pub fn new(from_groups: Vec<LinkRx>, to_nic: LinkTx) -> Self {
        Post {
            from_groups,
            to_nic,
            next: 0,
            counters: RoleCounters::default(),
            modules: Chain::default(),
            now_ns: 0,
            device_completes: false,
        }
    }

    /// Completes at most `budget` batches and passes them to the NIC role; hands the batches
    /// the NIC role used back to their groups.
    pub fn step(&mut self, budget: usize) -> Progress {
        let mut work = 0;
        self.to_nic.flush();
        while let Some(b) = self.to_nic.take_empty() {
            match self.from_groups.get_mut(usize::from(b.group)) {
                Some(link) => link.give_back(b),
                // A batch whose group field was lost cannot occur (nothing clears it).
                None => drop(b),
            }
            work += 1;
        }
        let groups = self.from_groups.len();
        let mut left = budget;
        // Round-robin over the groups, so one busy group does not starve the others.
        for k in 0..groups {
            let g = (self.next + k) % groups;
            while left > 0 {
                let Some(mut batch) = self.from_groups[g].recv() else {
                    break;
                };
                left -= 1;
                self.counters.batches += 1;
                let modules = self.modules.has(HookPoint::Egress);
                // Egress modules see the frame as the wire will, so they need it complete.
                let complete = modules || !self.device_completes;
                for i in 0..batch.len() {
                    let Some((frame, meta)) = batch.frame_mut(i) else {
                        break;
                    };
                    self.counters.frames += 1;
                    // A large segment's checksums are the device's to fill, segment by
                    // segment (it only exists when the device completes them).
                    if complete && meta.checksum == Checksum::Partial && meta.gso_size == 0 {
                        meta.checksum = if complete_partial_checksum(frame) {
                            Checksum::Unverified
                        } else {
                            self.counters.drops += 1;
                            Checksum::Bad
                        };
                    }
                    // Egress modules see the frame as the device will: checksums complete.
                    if modules
                        && batch.meta(i).checksum.live()
                        && !run_modules(
                            &mut self.modules,
                            HookPoint::Egress,
                            &mut batch,
                            i,
                            self.now_ns,
                        )
                    {
                        self.counters.drops += 1;
                    }
                }
                self.to_nic.send(batch);
                work += 1;
            }
        }
        self.next = (self.next + 1) % groups.max(1);
        Progress { work }
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::FrameMeta;
    use super::super::link::link;
    use super::*;
    use sluice_wire::tcp;
    use std::net::Ipv4Addr;

    #[test]
    fn partial_checksums_are_completed_and_batches_return_to_their_group() {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut f = vec![0u8; 14 + 20 + 20 + 3];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&43u16.to_be_bytes());
        f[14 + 9] = 6;
        f[26..30].copy_from_slice(&src.octets());
        f[30..34].copy_from_slice(&dst.octets());
        f[34 + 12] = 5 << 4;
        f[54..57].copy_from_slice(b"abc");
        let pseudo = tcp::pseudo_header_checksum(23, src, dst);
        f[34 + 16..34 + 18].copy_from_slice(&pseudo.to_be_bytes());
        assert!(!tcp::verify_checksum(&f[34..], src, dst));
        let (g0, from0) = link(2, 1);
        let (mut g1, from1) = link(2, 1);
        let (to_nic, mut nic) = link(4, 0);
        let mut post = Post::new(vec![from0, from1], to_nic);
        let mut b = g1.take_empty().unwrap();
        b.group = 1;
        let meta = FrameMeta {
            checksum: Checksum::Partial,
            ..FrameMeta::default()
        };
        assert!(b.push_copy(&f, meta));
        g1.send(b);
        post.step(8);
        let b = nic.recv().unwrap();
        assert!(tcp::verify_checksum(&b.frame(0)[34..], src, dst));
        assert_eq!(b.meta(0).checksum, Checksum::Unverified);
        nic.give_back(b);
        post.step(8);
        assert_eq!((g0.empties(), g1.empties()), (1, 1), "back to group 1");
    }

    #[test]
    fn partial_checksums_are_left_to_a_device_that_completes_them() {
        let f = vec![0xA5u8; 60];
        let (mut g0, from0) = link(2, 1);
        let (to_nic, mut nic) = link(4, 0);
        let mut post = Post::new(vec![from0], to_nic);
        post.device_completes = true;
        let mut b = g0.take_empty().unwrap();
        let meta = FrameMeta {
            checksum: Checksum::Partial,
            ..FrameMeta::default()
        };
        // Not even IPv4: completing it would have marked it bad.
        assert!(b.push_copy(&f, meta));
        g0.send(b);
        post.step(8);
        let b = nic.recv().unwrap();
        assert_eq!(b.meta(0).checksum, Checksum::Partial);
        assert_eq!(b.frame(0), &f[..], "bytes untouched");
        assert_eq!(post.counters.drops, 0);
    }
}
