//! Tracepoints (trace/): each fires on a crafted segment sequence with the fields the
//! docs name, nothing is counted or kept while off, and the event ring stays bounded.

mod harness;

use std::net::SocketAddrV4;

use harness::*;
use sluice_tcp::{Stack, TraceData, TraceEvent, Tracepoint};
use sluice_wire::ipv4::{Ecn, Ipv4Repr};

fn drained(stack: &mut Stack) -> Vec<TraceEvent> {
    let mut out = Vec::new();
    stack.tracer_mut().drain(&mut out);
    out
}

fn of(events: &[TraceEvent], tp: Tracepoint) -> Vec<TraceData> {
    events
        .iter()
        .filter(|e| e.tracepoint() == tp)
        .map(|e| e.data)
        .collect()
}

/// The (local, remote) pair every event of the harness's connection carries.
fn tuple() -> (SocketAddrV4, SocketAddrV4) {
    (
        SocketAddrV4::new(OUR_IP, LISTEN_PORT),
        SocketAddrV4::new(PEER_IP, 40000),
    )
}

/// An out-of-order segment, then three duplicate ACKs for five segments sent: fires the
/// out-of-order, loss, retransmit and cwnd-reduction tracepoints when they are on.
fn ooo_and_fast_retransmit(stack: &mut Stack) -> Conn {
    let c = established(stack, ms(0));
    c.peer
        .send(stack, ms(1), c.data_seg(&[1; 100]).seq(c.peer_nxt + 100u32));
    c.peer.recv_all(stack, ms(1));
    stack.send(c.id, &pattern(5 * 1460, 4)).unwrap();
    assert_eq!(c.peer.recv_all(stack, ms(2)).len(), 5);
    let una = c.our_nxt + 1460u32;
    for n in 0..4 {
        c.peer.send(stack, ms(10 + n), c.ack_seg().ack(una));
    }
    c.peer.recv_all(stack, ms(14));
    assert_eq!(stack.counters().fast_retransmits, 1);
    c
}

#[test]
fn off_nothing_is_counted_kept_or_allocated() {
    let mut stack = stack();
    ooo_and_fast_retransmit(&mut stack);
    let t = stack.tracer();
    assert!(Tracepoint::ALL.iter().all(|&tp| t.hits(tp) == 0));
    assert_eq!((t.pending(), t.lost()), (0, 0));
    // Turned on and off again: a malformed frame is counted, not traced.
    stack.tracer_mut().set_by_name("all", true).unwrap();
    stack.tracer_mut().set_by_name("all", false).unwrap();
    stack.handle_frame(ms(20), &[0u8; 10]);
    assert_eq!(stack.counters().malformed, 1);
    assert_eq!(stack.tracer().hits(Tracepoint::Drop), 0);
    assert_eq!(stack.tracer().pending(), 0);
}

#[test]
fn ooo_reports_seq_len_and_gap_and_only_it_is_counted() {
    let mut stack = stack();
    stack.tracer_mut().set_by_name("ooo", true).unwrap();
    let c = ooo_and_fast_retransmit(&mut stack);
    let events = drained(&mut stack);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].conn, Some(tuple()));
    assert_eq!(
        events[0].data,
        TraceData::OutOfOrder {
            seq: (c.peer_nxt + 100u32).0,
            len: 100,
            gap: 100
        }
    );
    let t = stack.tracer();
    assert_eq!(t.hits(Tracepoint::OutOfOrder), 1);
    assert_eq!(t.hits(Tracepoint::Retransmit), 0, "off: not counted");
}

#[test]
fn fast_retransmit_reports_the_loss_the_resent_segments_and_the_window_cut() {
    let mut stack = stack();
    for name in ["loss", "retransmit", "cwnd_reduction"] {
        stack.tracer_mut().set_by_name(name, true).unwrap();
    }
    let c = ooo_and_fast_retransmit(&mut stack);
    let events = drained(&mut stack);
    let una = (c.our_nxt + 1460u32).0;
    assert_eq!(
        of(&events, Tracepoint::Loss),
        [TraceData::Loss {
            kind: "fast",
            seq: una,
            len: 4 * 1460
        }]
    );
    // Go-back-N (no SACK negotiated): cwnd of two segments from snd_una.
    assert_eq!(
        of(&events, Tracepoint::Retransmit),
        [
            TraceData::Retransmit {
                kind: "go_back_n",
                seq: una,
                len: 1460
            },
            TraceData::Retransmit {
                kind: "go_back_n",
                seq: una + 1460,
                len: 1460
            }
        ]
    );
    let cuts = of(&events, Tracepoint::CwndReduction);
    assert!(
        matches!(cuts[..], [TraceData::CwndReduction { cause: "fast_recovery", before, after }] if after < before),
        "{cuts:?}"
    );
}

#[test]
fn rto_reports_a_loss_and_the_resent_segment() {
    let mut stack = stack();
    stack.tracer_mut().set(Tracepoint::Loss, true);
    stack.tracer_mut().set(Tracepoint::Retransmit, true);
    let c = established(&mut stack, ms(0));
    stack.send(c.id, &pattern(1000, 8)).unwrap();
    c.peer.recv_one(&mut stack, ms(0));
    stack.handle_timeout(ms(RTO_MIN.as_millis() as u64));
    c.peer.recv_one(&mut stack, ms(5));
    let events = drained(&mut stack);
    let seq = c.our_nxt.0;
    assert_eq!(
        events.iter().map(|e| e.data).collect::<Vec<_>>(),
        [
            TraceData::Loss {
                kind: "rto",
                seq,
                len: 1000
            },
            TraceData::Retransmit {
                kind: "go_back_n",
                seq,
                len: 1000
            }
        ]
    );
    assert_eq!(events[1].at, ms(5));
}

#[test]
fn drops_name_the_counter_that_counted_them() {
    let mut stack = stack();
    stack.tracer_mut().set(Tracepoint::Drop, true);
    let c = established(&mut stack, ms(0));
    // A bad checksum, then a duplicate segment.
    let mut frame = c.peer.frame(&c.data_seg(&[7; 10]));
    *frame.last_mut().unwrap() ^= 0xff;
    stack.handle_frame(ms(1), &frame);
    c.peer.send(&mut stack, ms(1), c.data_seg(&[7; 10]));
    c.peer.send(&mut stack, ms(1), c.data_seg(&[7; 10]));
    let events = drained(&mut stack);
    assert_eq!(
        events.iter().map(|e| e.data).collect::<Vec<_>>(),
        [
            TraceData::Drop {
                reason: "bad_checksum"
            },
            TraceData::Drop {
                reason: "duplicate_segments"
            }
        ]
    );
    assert_eq!(events[0].conn, None, "dropped before classification");
    assert_eq!(events[1].conn, Some(tuple()));
    let n = stack.counters();
    assert_eq!((n.bad_checksum, n.duplicate_segments), (1, 1));
}

#[test]
fn state_changes_follow_the_handshake_and_the_close() {
    let mut stack = stack();
    stack.tracer_mut().set(Tracepoint::State, true);
    let c = established(&mut stack, ms(0));
    stack.close(c.id).unwrap();
    let states: Vec<TraceData> = drained(&mut stack).iter().map(|e| e.data).collect();
    let pair = |from, to| TraceData::State { from, to };
    assert_eq!(
        states,
        [
            pair("CLOSED", "SYN-RECEIVED"),
            pair("SYN-RECEIVED", "ESTABLISHED"),
            pair("ESTABLISHED", "FIN-WAIT-1"),
        ]
    );
}

#[test]
fn a_zero_window_stalls_and_the_persist_probe_is_reported() {
    let mut stack = stack();
    stack.tracer_mut().set(Tracepoint::WindowStall, true);
    let c = established(&mut stack, ms(0));
    c.peer.send(&mut stack, ms(1), c.ack_seg().win(0));
    stack.send(c.id, &pattern(100, 1)).unwrap();
    c.peer.recv_all(&mut stack, ms(1));
    let stalls = of(&drained(&mut stack), Tracepoint::WindowStall);
    assert!(
        matches!(
            stalls[..],
            [TraceData::WindowStall {
                kind: "zero_window",
                snd_wnd: 0,
                ..
            }]
        ),
        "{stalls:?}"
    );
    run_until(&mut stack, ms(2_000));
    let stalls = of(&drained(&mut stack), Tracepoint::WindowStall);
    assert!(
        stalls.iter().any(|d| matches!(
            d,
            TraceData::WindowStall {
                kind: "persist",
                ..
            }
        )),
        "{stalls:?}"
    );
    assert!(stack.counters().window_probes > 0);
}

#[test]
fn ecn_ce_and_queue_occupancy() {
    let mut stack = stack();
    stack.tracer_mut().set(Tracepoint::EcnCe, true);
    stack.tracer_mut().set(Tracepoint::Queue, true);
    let c = established(&mut stack, ms(0));
    drained(&mut stack);
    let mut ce = c.peer.frame(&c.data_seg(&[5; 100]));
    let (mut ip, _) = Ipv4Repr::parse(&ce[14..], true).unwrap();
    ip.ecn = Ecn::Ce;
    ip.emit(&mut ce[14..]).unwrap();
    let next = c
        .peer
        .frame(&c.data_seg(&[6; 100]).seq(c.peer_nxt + 100u32));
    stack.handle_frames(ms(1), &[&ce, &next]);
    let events = drained(&mut stack);
    assert_eq!(
        of(&events, Tracepoint::EcnCe),
        [TraceData::EcnCe {
            seq: c.peer_nxt.0,
            len: 100
        }]
    );
    let queues = of(&events, Tracepoint::Queue);
    assert!(
        matches!(
            queues[..],
            [
                TraceData::Queue {
                    queue: "batch",
                    len: 2,
                    ..
                },
                TraceData::Queue { queue: "ready", .. },
                TraceData::Queue {
                    queue: "control",
                    ..
                }
            ]
        ),
        "{queues:?}"
    );
}

#[test]
fn the_ring_keeps_the_newest_events_and_counts_the_lost() {
    let mut stack = stack();
    stack.tracer_mut().set_capacity(3);
    stack.tracer_mut().enable_all();
    ooo_and_fast_retransmit(&mut stack);
    let t = stack.tracer();
    let hits: u64 = Tracepoint::ALL.iter().map(|&tp| t.hits(tp)).sum();
    assert!(hits > 3, "{hits}");
    assert_eq!(t.pending(), 3);
    assert_eq!(t.lost(), hits - 3);
    let events = drained(&mut stack);
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    assert_eq!(events.last().unwrap().at, ms(14));
}
