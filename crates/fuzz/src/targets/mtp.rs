//! The MTP transport (sluice-mtp's `MtpStack`) under arbitrary traffic, for the `mtp_stack`
//! target (issue 17: "fuzzing of the MTP receive path as for TCP").
//!
//! Two stacks exchange messages. The input steers a run: sends of any length, priority and
//! class; frames delivered, dropped, duplicated, corrupted, trimmed, given path feedback of
//! any kind, or replaced by garbage; time jumps. Properties: no panic; the state stays within
//! the configured bounds; a delivered message is byte-exact one that was sent under its id.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;

use arbitrary::{Arbitrary, Unstructured};
use sluice_mtp::stack::{MtpStack, Nanos, SendOptions, StackConfig};
use sluice_mtp::wire::edit::Summary;
use sluice_mtp::wire::{Feedback, FeedbackKind, PathletTc};
use sluice_wire::{EthernetAddress, Ipv4Addr};

/// Steps per run at most.
const MAX_STEPS: usize = 256;
/// Frames a direction holds at most (the oldest go first beyond it).
const IN_FLIGHT: usize = 256;
const PORT: u16 = 7000;

/// One step of a run.
#[derive(Arbitrary, Clone, Debug)]
pub enum Step {
    /// A message from one host to the other.
    Send {
        /// From B (else from A).
        from_b: bool,
        /// Its length (taken modulo 20 000).
        len: u16,
        /// Its priority.
        priority: u8,
        /// Its class.
        tc: u8,
    },
    /// Delivers the `idx`-th frame in flight in a direction, after an edit.
    Deliver {
        /// B to A (else A to B).
        to_a: bool,
        /// Which frame (modulo those in flight).
        idx: u8,
        /// What to do to it.
        edit: Edit,
    },
    /// Arbitrary bytes to one host.
    Garbage {
        /// To A (else to B).
        to_a: bool,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Time passes (microseconds) and timers run.
    Advance(u16),
}

/// An edit to a frame on the wire.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Edit {
    /// None.
    Pass,
    /// Dropped.
    Drop,
    /// Delivered and kept for another delivery.
    Duplicate,
    /// One byte flipped.
    Corrupt(u16, u8),
    /// Payload trimmed (NDP-style).
    Trim,
    /// A feedback entry appended.
    Feedback(u16, u8, u8, u32),
}

fn config(last: u8) -> StackConfig {
    let mut c = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, last]),
        Ipv4Addr::new(10, 0, 0, last),
    );
    c.max_outstanding = 16;
    c.max_message_len = 32 << 10;
    c.reassembly_bytes = 64 << 10;
    c.reassembly_messages = 8;
    c.completed_ids = 32;
    c.endpoint_queue = 4;
    c.ack_queue = 32;
    c.event_queue = 64;
    c.max_pathlets = 16;
    c
}

fn check_bounds(s: &MtpStack) {
    let u = s.usage();
    let c = s.config();
    assert!(u.reassembly_messages <= c.reassembly_messages, "{u:?}");
    assert!(u.reassembly_bytes <= c.reassembly_bytes, "{u:?}");
    assert!(u.remembered_ids <= c.completed_ids, "{u:?}");
    assert!(u.outstanding <= c.max_outstanding, "{u:?}");
    assert!(
        u.acks_queued <= c.ack_queue && u.events_queued <= c.event_queue,
        "{u:?}"
    );
    assert!(u.queued_messages <= c.endpoint_queue, "{u:?}");
    assert!(u.pathlets <= c.max_pathlets, "{u:?}");
}

/// Runs the steps the bytes decode to; panics when a property fails.
pub fn mtp_stack(data: &[u8]) {
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

/// Runs `steps` on two stacks; panics when a property fails. Returns messages delivered.
pub fn run(steps: &[Step]) -> u64 {
    let (ca, cb) = (config(1), config(2));
    let (ip_a, ip_b) = (ca.ip, cb.ip);
    let mut hosts = [
        MtpStack::new(ca).expect("valid config"),
        MtpStack::new(cb).expect("valid config"),
    ];
    hosts[0].set_neighbor(ip_b, cb.mac);
    hosts[1].set_neighbor(ip_a, ca.mac);
    let eps = [
        hosts[0].bind(PORT).expect("bind"),
        hosts[1].bind(PORT).expect("bind"),
    ];
    let ips = [ip_a, ip_b];
    // What each host sent under each id (ids are reused once a message is done).
    let mut sent: [HashMap<u32, Vec<Vec<u8>>>; 2] = [HashMap::new(), HashMap::new()];
    let mut wire: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut now: Nanos = 1_000;
    let mut buf = vec![0u8; 2048];
    let mut delivered = 0;
    for step in steps {
        match step {
            Step::Send {
                from_b,
                len,
                priority,
                tc,
            } => {
                let h = usize::from(*from_b);
                let data: Vec<u8> = (0..usize::from(*len) % 20_000)
                    .map(|i| (i * 7 + h) as u8)
                    .collect();
                let to = SocketAddrV4::new(ips[1 - h], PORT);
                let opts = SendOptions {
                    priority: *priority,
                    tc: *tc,
                };
                if let Ok(id) = hosts[h].send_message(now, eps[h], to, &data, opts) {
                    let list = sent[h].entry(id).or_default();
                    if list.len() < 8 {
                        list.push(data);
                    }
                }
            }
            Step::Deliver { to_a, idx, edit } => {
                let dir = usize::from(*to_a);
                if wire[dir].is_empty() {
                    continue;
                }
                let i = usize::from(*idx) % wire[dir].len();
                let Some(mut f) = wire[dir].remove(i) else {
                    continue;
                };
                match *edit {
                    Edit::Pass => {}
                    Edit::Drop => continue,
                    Edit::Duplicate => wire[dir].push_back(f.clone()),
                    Edit::Corrupt(at, x) => {
                        let n = f.len().max(1);
                        if let Some(b) = f.get_mut(usize::from(at) % n) {
                            *b ^= x.max(1);
                        }
                    }
                    Edit::Trim => {
                        if let Ok(s) = Summary::read(&f) {
                            if let Some(n) = s.trim(&mut f) {
                                f.truncate(n);
                            }
                        }
                    }
                    Edit::Feedback(pathlet, tc, kind, value) => {
                        if let Ok(s) = Summary::read(&f) {
                            let at = PathletTc {
                                pathlet: pathlet % 8,
                                tc: tc % 2,
                            };
                            s.push_feedback(
                                &mut f,
                                Feedback {
                                    at,
                                    kind: FeedbackKind::from(kind % 5),
                                    value,
                                },
                            );
                        }
                    }
                }
                // dir 0 carries A's frames to B; dir 1 B's to A.
                hosts[1 - dir].handle_frame(now, &f);
            }
            Step::Garbage { to_a, bytes } => {
                hosts[usize::from(!*to_a)].handle_frame(now, bytes);
            }
            Step::Advance(us) => {
                now += u64::from(*us) * 1_000;
                for h in hosts.iter_mut() {
                    h.handle_timeout(now);
                }
            }
        }
        for (h, host) in hosts.iter_mut().enumerate() {
            while let Some(n) = host.poll_transmit(now, &mut buf) {
                wire[h].push_back(buf[..n].to_vec());
                if wire[h].len() > IN_FLIGHT {
                    wire[h].pop_front();
                }
            }
            while host.poll_event().is_some() {}
            while let Some(m) = host.recv_message(eps[h]) {
                let from = 1 - h;
                let ok = sent[from]
                    .get(&m.msg_id)
                    .is_some_and(|v| v.contains(&m.data));
                assert!(
                    ok,
                    "message {} was not sent with these {} bytes",
                    m.msg_id,
                    m.data.len()
                );
                delivered += 1;
            }
            check_bounds(host);
        }
    }
    delivered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_junk_inputs_run() {
        mtp_stack(&[]);
        mtp_stack(&[0; 64]);
        mtp_stack(&[0xff; 300]);
    }

    #[test]
    fn plain_steps_deliver_messages() {
        let mut steps = vec![Step::Send {
            from_b: false,
            len: 3000,
            priority: 0,
            tc: 0,
        }];
        for _ in 0..4 {
            steps.push(Step::Deliver {
                to_a: false,
                idx: 0,
                edit: Edit::Pass,
            });
            steps.push(Step::Deliver {
                to_a: true,
                idx: 0,
                edit: Edit::Pass,
            });
        }
        assert_eq!(run(&steps), 1);
    }
}
