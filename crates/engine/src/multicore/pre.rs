//! The pre role (stateless, replicable): verifies received frames' IPv4 header and TCP
//! checksums in software, so that the protocol role hands them to the core with
//! `Stack::handle_frames_checksum_ok`. A bad frame keeps its place in the batch (its
//! group's sequence stays whole) marked [`Checksum::Bad`], and is counted here.

use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp;

use super::batch::{Batch, Checksum};
use super::link::{LinkRx, LinkTx};
use super::progress::{Progress, RoleCounters};
use crate::hook_point::HookPoint;
use crate::modules::{Chain, Verdict};

/// One pre replica: a link from the NIC role, one link to each protocol role.
pub struct Pre {
    from_nic: LinkRx,
    to_groups: Vec<LinkTx>,
    /// Counters.
    pub counters: RoleCounters,
    /// This replica's copy of the stateless modules at ingress (placement.rs).
    pub modules: Chain,
    /// The clock for the modules' bpf_ktime_get_ns, set by the runner before a step.
    pub now_ns: u64,
}

/// Runs `modules`' ingress chain on frame `i` of `batch`: a changed frame replaces it; one
/// dropped, reflected or redirected is marked [`Checksum::Dropped`] and keeps its place.
/// Returns whether the frame goes on.
pub(crate) fn run_modules(
    modules: &mut Chain,
    at: HookPoint,
    batch: &mut Batch,
    i: usize,
    now_ns: u64,
) -> bool {
    match modules.run(at, batch.frame(i), now_ns) {
        (Verdict::Pass, None) => true,
        (Verdict::Pass, Some((s, e))) => {
            if batch.replace(i, &modules.scratch()[s..e]) {
                return true;
            }
            // Grown past a batch's slot: it cannot go on (counted as at the device).
            modules.count_too_long();
            mark_dropped(batch, i);
            false
        }
        (verdict, _) => {
            // A replica has no path to the device or the control plane: what a module
            // reflects or redirects here is dropped, its queue emptied (docs/multicore.md).
            if verdict != Verdict::Drop {
                while let Some(b) = modules.pop_reflected().or_else(|| modules.pop_redirected()) {
                    modules.recycle(b);
                }
            }
            mark_dropped(batch, i);
            false
        }
    }
}

fn mark_dropped(batch: &mut Batch, i: usize) {
    if let Some((_, meta)) = batch.frame_mut(i) {
        meta.checksum = Checksum::Dropped;
    }
}

/// The verdict on one received frame.
fn verify(frame: &[u8]) -> Checksum {
    let Ok((eth, packet)) = EthernetRepr::parse(frame) else {
        // Not even Ethernet: the core counts and drops it.
        return Checksum::Unverified;
    };
    if eth.ethertype != EtherType::Ipv4 {
        return Checksum::Unverified;
    }
    match Ipv4Repr::parse(packet, true) {
        Err(sluice_wire::WireError::Checksum) => Checksum::Bad,
        Err(_) => Checksum::Unverified,
        Ok((ip, segment)) if ip.protocol == PROTOCOL_TCP && !ip.is_fragment() => {
            if tcp::verify_checksum(segment, ip.src, ip.dst) {
                Checksum::Verified
            } else {
                Checksum::Bad
            }
        }
        // UDP and the rest: the core checks what it takes.
        Ok(_) => Checksum::Unverified,
    }
}

impl Pre {
    /// A replica between `from_nic` and the groups' links.
    pub fn new(from_nic: LinkRx, to_groups: Vec<LinkTx>) -> Self {
        Pre {
            from_nic,
            to_groups,
            counters: RoleCounters::default(),
            modules: Chain::default(),
            now_ns: 0,
        }
    }

    /// Verifies at most `budget` batches and passes each to its group; hands used batches
    /// back to the NIC role.
    pub fn step(&mut self, budget: usize) -> Progress {
        let mut work = 0;
        for g in self.to_groups.iter_mut() {
            g.flush();
            while let Some(b) = g.take_empty() {
                self.from_nic.give_back(b);
                work += 1;
            }
        }
        for _ in 0..budget {
            let Some(mut batch) = self.from_nic.recv() else {
                break;
            };
            self.counters.batches += 1;
            let modules = self.modules.has(HookPoint::Ingress);
            for i in 0..batch.len() {
                if modules
                    && !run_modules(
                        &mut self.modules,
                        HookPoint::Ingress,
                        &mut batch,
                        i,
                        self.now_ns,
                    )
                {
                    self.counters.frames += 1;
                    self.counters.drops += 1;
                    continue;
                }
                let Some((frame, meta)) = batch.frame_mut(i) else {
                    break;
                };
                self.counters.frames += 1;
                if meta.checksum == Checksum::Unverified {
                    meta.checksum = verify(frame);
                    if meta.checksum == Checksum::Bad {
                        self.counters.drops += 1;
                    }
                }
            }
            match self.to_groups.get_mut(usize::from(batch.group)) {
                Some(link) => link.send(batch),
                None => {
                    // The NIC role numbers only groups that exist; never reached.
                    self.counters.drops += batch.len() as u64;
                    self.from_nic.give_back(batch);
                }
            }
            work += 1;
        }
        Progress { work }
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::FrameMeta;
    use super::super::link::link;
    use super::*;

    /// A TCP frame 10.0.0.1:1 -> 10.0.0.2:2 with correct checksums.
    fn tcp_frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + 4];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(20u16 + 24).to_be_bytes());
        ip[8] = 64;
        ip[9] = PROTOCOL_TCP;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let sum = !sluice_wire::checksum::fold(sluice_wire::checksum::sum(ip));
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let seg = &mut f[34..];
        seg[0..2].copy_from_slice(&1u16.to_be_bytes());
        seg[2..4].copy_from_slice(&2u16.to_be_bytes());
        seg[12] = 5 << 4;
        seg[20..24].copy_from_slice(b"data");
        tcp::fill_checksum(
            seg,
            std::net::Ipv4Addr::new(10, 0, 0, 1),
            std::net::Ipv4Addr::new(10, 0, 0, 2),
        );
        f
    }

    #[test]
    fn good_frames_are_verified_bad_ones_marked_and_counted_in_place() {
        let good = tcp_frame();
        let mut bad_tcp = good.clone();
        *bad_tcp.last_mut().unwrap() ^= 1;
        let mut bad_ip = good.clone();
        bad_ip[14 + 8] ^= 1;
        let arp = {
            let mut f = vec![0u8; 42];
            f[12..14].copy_from_slice(&[0x08, 0x06]);
            f
        };
        let (mut nic, from_nic) = link(2, 1);
        let (to_group, mut group) = link(2, 0);
        let mut pre = Pre::new(from_nic, vec![to_group]);
        let mut b = nic.take_empty().unwrap();
        for f in [&good, &bad_tcp, &bad_ip, &arp] {
            assert!(b.push_copy(f, FrameMeta::default()));
        }
        nic.send(b);
        assert!(pre.step(4).busy());
        let b = group.recv().expect("passed on");
        let verdicts: Vec<_> = (0..b.len()).map(|i| b.meta(i).checksum).collect();
        assert_eq!(
            verdicts,
            [
                Checksum::Verified,
                Checksum::Bad,
                Checksum::Bad,
                Checksum::Unverified
            ]
        );
        assert_eq!(b.len(), 4, "a bad frame keeps its place");
        assert_eq!((pre.counters.drops, pre.counters.frames), (2, 4));
        // The used batch goes back to the NIC's pool through the replica.
        group.give_back(b);
        assert_eq!(nic.empties(), 0);
        pre.step(1);
        assert_eq!(nic.empties(), 1);
        // Truncated input never panics.
        for n in 0..good.len() {
            let _ = verify(&good[..n]);
        }
    }

    /// A program returning `action` for every frame (no maps).
    fn returning(action: i32) -> sluice_ebpf::Program {
        use sluice_ebpf::insn::{class, jmp, Insn};
        let insns = vec![
            Insn::new(class::ALU64 | 0xb0, 0, 0, 0, action),
            Insn::new(class::JMP | jmp::EXIT, 0, 0, 0, 0),
        ];
        sluice_ebpf::Program::verify(insns, &[]).unwrap()
    }

    #[test]
    fn frames_a_module_drops_or_redirects_keep_their_place_marked_dropped() {
        for (action, name) in [(1, "drop"), (3, "tx"), (4, "redirect")] {
            let (mut nic, from_nic) = link(2, 1);
            let (to_group, mut group) = link(2, 0);
            let mut pre = Pre::new(from_nic, vec![to_group]);
            let maps = sluice_ebpf::Maps::new(&[]).unwrap();
            pre.modules
                .attach(HookPoint::Ingress, name, "xdp", returning(action), maps)
                .unwrap();
            let mut b = nic.take_empty().unwrap();
            for _ in 0..3 {
                assert!(b.push_copy(&tcp_frame(), FrameMeta::default()));
            }
            nic.send(b);
            pre.step(1);
            let b = group.recv().expect("passed on");
            assert_eq!(b.len(), 3, "{name}: the slots stay");
            assert!(
                (0..3).all(|i| b.meta(i).checksum == Checksum::Dropped),
                "{name}"
            );
            assert_eq!((pre.counters.drops, pre.counters.frames), (3, 3), "{name}");
            // Nothing waits in the replica's queues: they have no consumer here.
            assert!(!pre.modules.has_reflected(), "{name}");
            assert!(pre.modules.pop_redirected().is_none(), "{name}");
        }
    }
}
