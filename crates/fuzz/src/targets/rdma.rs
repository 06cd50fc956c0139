//! The RDMA transport (sluice-rdma's `RdmaStack`) under arbitrary traffic and arbitrary work
//! requests, for the `rdma_stack` target (issue 16: "arbitrary RoCE frames into the
//! transport, and arbitrary work requests from an application, never panic, never read or
//! write outside registered memory").
//!
//! Two stacks with one connected RC QP each. The input steers a run: work requests with any
//! opcode, address, length and key (good, local-only, forged); receives; frames delivered,
//! dropped, reordered, corrupted or replaced by garbage; time jumps; QP state changes;
//! completion polls. The memory behind each stack panics on any access outside the regions
//! it registered, so "never outside registered memory" is checked on every byte moved.

use arbitrary::{Arbitrary, Unstructured};
use sluice_rdma::qp::{Memory, Nanos, RecvWr, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{PeerAddr, QpAttr, RdmaStack, StackConfig};
use sluice_rdma::verbs::{Access, AttrMask, Key, PdId, QpState, Region};
use sluice_wire::{EthernetAddress, Ipv4Addr};

/// Where the registered regions sit in a host's one backing: a remote-access region and a
/// local-only one, with unregistered bytes before, between and after.
const REMOTE_AT: u64 = 4096;
const REMOTE_LEN: u64 = 32 << 10;
const LOCAL_AT: u64 = 64 << 10;
const LOCAL_LEN: u64 = 16 << 10;
const MEM_LEN: usize = 96 << 10;
/// The application's address of a region's first byte is its offset plus this.
const VA: u64 = 0x7f00_0000_0000;
/// Frames a direction holds in flight at most (the oldest go first beyond it).
const IN_FLIGHT: usize = 256;
/// Steps per run at most.
const MAX_STEPS: usize = 256;

/// A host's memory: one backing whose accesses must lie in a registered region.
struct Guarded {
    bytes: Vec<u8>,
}

fn inside(offset: u64, len: usize) -> bool {
    let end = offset.saturating_add(len as u64);
    (offset >= REMOTE_AT && end <= REMOTE_AT + REMOTE_LEN)
        || (offset >= LOCAL_AT && end <= LOCAL_AT + LOCAL_LEN)
}

impl Memory for Guarded {
    fn read(&self, backing: u32, offset: u64, out: &mut [u8]) -> bool {
        assert!(
            backing == 0 && inside(offset, out.len()),
            "read outside registered memory: backing {backing}, {} bytes at {offset}",
            out.len()
        );
        out.copy_from_slice(&self.bytes[offset as usize..offset as usize + out.len()]);
        true
    }

    fn write(&mut self, backing: u32, offset: u64, data: &[u8]) -> bool {
        assert!(
            backing == 0 && inside(offset, data.len()),
            "write outside registered memory: backing {backing}, {} bytes at {offset}",
            data.len()
        );
        self.bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        true
    }
}

/// Which key a work request names.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum KeyChoice {
    /// The remote-access region's.
    Remote,
    /// The local-only region's.
    Local,
    /// Anything.
    Forged(u32),
}

/// One step of a run.
#[derive(Arbitrary, Debug, Clone)]
pub enum Step {
    /// A send work request on A (or B).
    Send {
        /// On B instead of A.
        on_b: bool,
        /// 0 SEND, 1 SEND+imm, 2 WRITE, 3 WRITE+imm, 4+ READ.
        op: u8,
        /// Local address, relative to the application's base.
        local: u32,
        /// Length.
        len: u16,
        /// Its key.
        lkey: KeyChoice,
        /// Remote address, relative to the peer's base.
        remote: u32,
        /// The peer's key.
        rkey: KeyChoice,
        /// Ask for a completion.
        signaled: bool,
    },
    /// A receive work request.
    Recv {
        /// On B instead of A.
        on_b: bool,
        /// Local address, relative.
        local: u32,
        /// Length.
        len: u16,
        /// Its key.
        lkey: KeyChoice,
    },
    /// Hands up to `max` frames in flight to their receiver.
    Deliver {
        /// B's frames to A instead of A's to B.
        from_b: bool,
        /// How many.
        max: u8,
        /// Bit i drops the i-th.
        drop: u8,
        /// Deliver the last before the others.
        reorder: bool,
        /// Flip a byte of the first: (position, mask).
        corrupt: Option<(u16, u8)>,
    },
    /// Arbitrary bytes as a frame.
    Garbage {
        /// To B instead of A.
        to_b: bool,
        /// The frame.
        bytes: Vec<u8>,
    },
    /// Time passes (microseconds) and timers run.
    Advance(u16),
    /// A QP moves to a state (as ibv_modify_qp with only the state).
    Modify {
        /// On B instead of A.
        on_b: bool,
        /// IBV_QPS_* number.
        state: u8,
    },
    /// Completions are taken.
    Poll {
        /// On B instead of A.
        on_b: bool,
    },
}

struct Host {
    stack: RdmaStack,
    mem: Guarded,
    cq: u32,
    qpn: u32,
    remote_key: Key,
    local_key: Key,
}

fn host(n: u8) -> (Host, PeerAddr) {
    let addr = PeerAddr {
        ip: Ipv4Addr::new(10, 0, 0, n),
        mac: EthernetAddress([2, 0, 0, 0, 0, n]),
    };
    let mut stack = RdmaStack::new(StackConfig {
        max_qps: 2,
        max_cqs: 2,
        max_mrs: 4,
        max_cqe: 64,
        max_wr: 16,
        // A unpaced, B paced at the default line rate: both paths are driven.
        line_rate_bps: if n == 1 {
            0
        } else {
            StackConfig::new(addr.mac, addr.ip).line_rate_bps
        },
        ..StackConfig::new(addr.mac, addr.ip)
    });
    let cq = stack.create_cq(64).expect("a CQ fits");
    let region = |at: u64, len: u64, access: Access| Region {
        pd: PdId(1),
        addr: VA + at,
        len,
        access,
        backing: 0,
        offset: at,
    };
    let remote_key = stack
        .reg_mr(region(
            REMOTE_AT,
            REMOTE_LEN,
            Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ),
        ))
        .expect("a region fits");
    let local_key = stack
        .reg_mr(region(LOCAL_AT, LOCAL_LEN, Access::LOCAL_WRITE))
        .expect("a region fits");
    let qpn = stack.create_qp(PdId(1), cq, cq, 16, 16).expect("a QP fits");
    let mem = Guarded {
        bytes: vec![0x5a; MEM_LEN],
    };
    (
        Host {
            stack,
            mem,
            cq,
            qpn,
            remote_key,
            local_key,
        },
        addr,
    )
}

fn connect(h: &mut Host, peer_qpn: u32, peer: PeerAddr) {
    let attr = QpAttr {
        access: 0b111,
        path_mtu: 1, // 256: messages span packets
        dest_qpn: peer_qpn,
        rq_psn: 0xff_fff0, // near the wrap
        sq_psn: 0xff_fff0,
        timeout: 8,
        retry_cnt: 3,
        rnr_retry: 3,
        min_rnr_timer: 1,
        peer: Some(peer),
        ..QpAttr::default()
    };
    h.stack
        .connect_rc(&mut h.mem, h.qpn, &attr)
        .expect("the connect sequence is valid");
}

fn key(h: &Host, k: KeyChoice) -> Key {
    match k {
        KeyChoice::Remote => h.remote_key,
        KeyChoice::Local => h.local_key,
        KeyChoice::Forged(v) => Key(v),
    }
}

/// Moves every frame `h` has ready into `queue` (bounded).
fn transmit(h: &mut Host, now: Nanos, queue: &mut Vec<Vec<u8>>, buf: &mut [u8]) {
    for _ in 0..4 * IN_FLIGHT {
        let Some(n) = h.stack.poll_transmit(now, &mut h.mem, buf) else {
            return;
        };
        if queue.len() >= IN_FLIGHT {
            queue.remove(0);
        }
        queue.push(buf[..n].to_vec());
    }
}

/// What a run did (so that tests can show the steps reach the deep paths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Frames handed to a stack.
    pub frames: u64,
    /// Successful completions polled.
    pub successes: u64,
    /// Completions with an error status polled.
    pub errors: u64,
}

/// Runs the steps the bytes decode to; panics when a property fails.
pub fn rdma_stack(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut steps = Vec::new();
    while steps.len() < MAX_STEPS {
        match Step::arbitrary(&mut u) {
            Ok(s) => steps.push(s),
            Err(_) => break,
        }
    }
    run(&steps);
}

/// Runs `steps` on two connected stacks; panics when a property fails.
pub fn run(steps: &[Step]) -> RunStats {
    let mut stats = RunStats::default();
    let (mut a, addr_a) = host(1);
    let (mut b, addr_b) = host(2);
    let (qa, qb) = (a.qpn, b.qpn);
    connect(&mut a, qb, addr_b);
    connect(&mut b, qa, addr_a);
    let mut now: Nanos = 1_000;
    let mut to_b: Vec<Vec<u8>> = Vec::new();
    let mut to_a: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut wcs = Vec::new();
    for step in steps.iter().cloned() {
        match step {
            Step::Send {
                on_b,
                op,
                local,
                len,
                lkey,
                remote,
                rkey,
                signaled,
            } => {
                let (h, peer) = if on_b { (&mut b, &a) } else { (&mut a, &b) };
                let remote = Remote {
                    addr: VA + u64::from(remote),
                    rkey: key(peer, rkey),
                };
                let op = match op {
                    0 => SendOp::Send { imm: None },
                    1 => SendOp::Send { imm: Some(7) },
                    2 => SendOp::Write { remote, imm: None },
                    3 => SendOp::Write {
                        remote,
                        imm: Some(9),
                    },
                    _ => SendOp::Read { remote },
                };
                let wr = SendWr {
                    wr_id: u64::from(local),
                    op,
                    sge: Sge {
                        addr: VA + u64::from(local),
                        len: u32::from(len),
                        lkey: key(h, lkey),
                    },
                    signaled,
                    solicited: false,
                };
                // A refused post (full queue, wrong state) changes nothing.
                let _ = h.stack.post_send(h.qpn, wr);
            }
            Step::Recv {
                on_b,
                local,
                len,
                lkey,
            } => {
                let h = if on_b { &mut b } else { &mut a };
                let wr = RecvWr {
                    wr_id: u64::from(local),
                    sge: Sge {
                        addr: VA + u64::from(local),
                        len: u32::from(len),
                        lkey: key(h, lkey),
                    },
                };
                let _ = h.stack.post_recv(h.qpn, wr);
            }
            Step::Deliver {
                from_b,
                max,
                drop,
                reorder,
                corrupt,
            } => {
                let (queue, rx) = if from_b {
                    (&mut to_a, &mut a)
                } else {
                    (&mut to_b, &mut b)
                };
                let n = usize::from(max % 16).min(queue.len());
                let mut batch: Vec<Vec<u8>> = queue.drain(..n).collect();
                if reorder && batch.len() > 1 {
                    let last = batch.pop().expect("two or more");
                    batch.insert(0, last);
                }
                if let (Some((at, mask)), Some(f)) = (corrupt, batch.first_mut()) {
                    if !f.is_empty() {
                        let i = usize::from(at) % f.len();
                        f[i] ^= mask;
                    }
                }
                for (i, f) in batch.iter().enumerate() {
                    if i < 8 && drop & (1 << i) != 0 {
                        continue;
                    }
                    rx.stack.handle_frame(now, &mut rx.mem, f);
                    stats.frames += 1;
                }
            }
            Step::Garbage { to_b, bytes } => {
                let h = if to_b { &mut b } else { &mut a };
                h.stack.handle_frame(now, &mut h.mem, &bytes);
                stats.frames += 1;
            }
            Step::Advance(us) => {
                now += u64::from(us) * 1_000;
                for h in [&mut a, &mut b] {
                    if h.stack.poll_timeout().is_some_and(|t| t <= now) {
                        h.stack.handle_timeout(now, &mut h.mem);
                    }
                }
            }
            Step::Modify { on_b, state } => {
                let h = if on_b { &mut b } else { &mut a };
                if let Some(s) = QpState::from_u32(u32::from(state % 8)) {
                    // Refused transitions change nothing (the state machine's business).
                    let _ = h.stack.modify_qp(
                        &mut h.mem,
                        h.qpn,
                        s,
                        AttrMask::STATE,
                        &QpAttr::default(),
                    );
                }
            }
            Step::Poll { on_b } => {
                let h = if on_b { &mut b } else { &mut a };
                wcs.clear();
                let _ = h.stack.poll_cq(h.cq, 64, &mut wcs);
                for wc in &wcs {
                    if wc.status == sluice_rdma::verbs::WcStatus::Success {
                        stats.successes += 1;
                    } else {
                        stats.errors += 1;
                    }
                }
            }
        }
        transmit(&mut a, now, &mut to_b, &mut buf);
        transmit(&mut b, now, &mut to_a, &mut buf);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_knows_the_regions() {
        assert!(inside(REMOTE_AT, 1));
        assert!(inside(REMOTE_AT + REMOTE_LEN - 8, 8));
        assert!(!inside(REMOTE_AT + REMOTE_LEN - 8, 9));
        assert!(!inside(REMOTE_AT - 1, 1));
        assert!(inside(LOCAL_AT, LOCAL_LEN as usize));
        assert!(!inside(0, 1));
        assert!(!inside(u64::MAX, 2));
    }

    /// A receive, a SEND, a WRITE and a READ that all succeed, then a forged rkey that
    /// fails: the steps reach data movement and error completions.
    #[test]
    fn hand_written_steps_move_data_and_fail_forged_keys() {
        let send = |op, rkey| Step::Send {
            on_b: false,
            op,
            local: REMOTE_AT as u32,
            len: 1000,
            lkey: KeyChoice::Remote,
            remote: REMOTE_AT as u32 + 2048,
            rkey,
            signaled: true,
        };
        let deliver = |from_b| Step::Deliver {
            from_b,
            max: 15,
            drop: 0,
            reorder: false,
            corrupt: None,
        };
        let mut steps = vec![Step::Recv {
            on_b: true,
            local: REMOTE_AT as u32,
            len: 4096,
            lkey: KeyChoice::Remote,
        }];
        for op in [0, 2, 4] {
            steps.push(send(op, KeyChoice::Remote));
            for _ in 0..4 {
                steps.push(deliver(false));
                steps.push(deliver(true));
            }
        }
        steps.push(Step::Poll { on_b: false });
        steps.push(Step::Poll { on_b: true });
        let ok = run(&steps);
        assert_eq!(ok.successes, 4, "{ok:?}"); // three sends on A, one receive on B
        assert_eq!(ok.errors, 0, "{ok:?}");
        steps.pop();
        steps.pop();
        steps.push(send(2, KeyChoice::Forged(0xdead)));
        for _ in 0..4 {
            steps.push(deliver(false));
            steps.push(deliver(true));
        }
        steps.push(Step::Poll { on_b: false });
        let failed = run(&steps);
        assert!(failed.errors >= 1, "{failed:?}");
    }

    #[test]
    fn empty_and_short_inputs_run() {
        rdma_stack(&[]);
        rdma_stack(&[0; 64]);
        rdma_stack(&[0xff; 300]);
    }
}
