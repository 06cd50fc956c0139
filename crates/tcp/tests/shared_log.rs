//! Laminar's shared-log extension (laminar.txt 5, "Shared log") through the core's API
//! with a scripted peer: appends at the tail linearized across connections by arrival,
//! gaps for out-of-order segments filled by the application from redirected bytes, the
//! log's free space as the connections' windows, and typed errors for bad calls.

mod harness;

use harness::*;
use sluice_tcp::{Error, LogError, Stack};

fn readable(stack: &Stack, log: sluice_tcp::LogId) -> Vec<u8> {
    let (a, b) = stack.log_peek(log).expect("peek");
    [a, b].concat()
}

/// Sends `data` from `c` at its next sequence number and advances it.
fn send(stack: &mut Stack, c: &mut Conn, data: &[u8]) {
    c.peer.send(stack, ms(1), c.data_seg(data));
    c.peer_nxt += data.len() as u32;
}

#[test]
fn in_order_records_from_two_connections_interleave_by_arrival() {
    let mut stack = stack();
    let (mut a, mut b) = two_accepted(&mut stack);
    let log = stack.log_register(1 << 20).unwrap();
    stack.log_attach(log, a.id).unwrap();
    stack.log_attach(log, b.id).unwrap();
    send(&mut stack, &mut a, b"A1:first|");
    send(&mut stack, &mut b, b"B1:first|");
    send(&mut stack, &mut a, b"A2:second|");
    // A batch: arrival order within it is the linear order too.
    let segs = [b.data_seg(b"B2|"), a.data_seg(b"A3|")];
    a.peer.send_batch(&mut stack, ms(2), &segs);
    assert_eq!(
        readable(&stack, log),
        b"A1:first|B1:first|A2:second|B2|A3|".to_vec()
    );
    let c = stack.counters();
    assert_eq!((c.log_appends, c.log_appended_bytes), (5, 34));
    assert_eq!(c.log_gaps_reserved, 0);
    // Nothing went to the receive rings, and each segment was acknowledged.
    let mut buf = [0u8; 64];
    assert_eq!(stack.recv(a.id, &mut buf), Err(Error::WouldBlock));
    assert_eq!(stack.recv(b.id, &mut buf), Err(Error::WouldBlock));
    let acks = drain(&mut stack, ms(3), None);
    let last_a = acks
        .iter()
        .rev()
        .find(|(h, _)| h.dst_port == 40000)
        .unwrap();
    assert_eq!(last_a.0.ack, a.peer_nxt + 3u32);
    stack.check_invariants().unwrap();
    // Trimming frees the head; what follows stays readable.
    stack.log_trim(log, 9).unwrap();
    assert_eq!(readable(&stack, log), b"B1:first|A2:second|B2|A3|".to_vec());
}

#[test]
fn an_out_of_order_segment_leaves_a_gap_the_application_fills_from_the_redirect() {
    let mut stack = stack();
    let (mut a, mut b) = two_accepted(&mut stack);
    let log = stack.log_register(1 << 20).unwrap();
    stack.log_attach(log, a.id).unwrap();
    stack.log_attach(log, b.id).unwrap();
    send(&mut stack, &mut a, b"a0|");
    // a's second record arrives before its first: the first's bytes become a gap.
    let first = b"a1:lost-then-found|";
    let second = b"a2|";
    a.peer.send(
        &mut stack,
        ms(2),
        a.data_seg(second).seq(a.peer_nxt + first.len() as u32),
    );
    send(&mut stack, &mut b, b"b0|");
    let info = stack.log_info(log).unwrap();
    assert_eq!(info.gaps, 1);
    assert_eq!(info.readable_end, 3, "the application reads up to the gap");
    assert_eq!(readable(&stack, log), b"a0|".to_vec());
    assert_eq!(stack.counters().log_gaps_reserved, 1);
    assert_eq!(stack.poll_log_redirect(log).unwrap(), None);
    // The missing segment arrives in order: it is acknowledged with everything after it,
    // and redirected to the application rather than written.
    drain(&mut stack, ms(2), None);
    send(&mut stack, &mut a, first);
    let acks = drain(&mut stack, ms(3), None);
    assert_eq!(
        acks.last().unwrap().0.ack,
        a.peer_nxt + second.len() as u32,
        "RFC 9293: the ACK covers the out-of-order data the gap held back"
    );
    assert_eq!(stack.log_info(log).unwrap().readable_end, 3);
    let r = stack.poll_log_redirect(log).unwrap().expect("redirected");
    assert_eq!((r.offset, r.conn, r.abandoned), (3, a.id, false));
    assert_eq!(r.data, first.to_vec());
    assert_eq!(stack.poll_log_redirect(log).unwrap(), None, "once");
    let c = stack.counters();
    assert_eq!((c.log_segments_redirected, c.log_redirected_bytes), (1, 19));
    // A fill that is not where the gap's bytes start is refused.
    assert_eq!(
        stack.log_fill(log, 4, &r.data),
        Err(LogError::NotRedirected { offset: 4 })
    );
    stack.log_fill(log, r.offset, &r.data).unwrap();
    assert_eq!(
        readable(&stack, log),
        b"a0|a1:lost-then-found|a2|b0|".to_vec()
    );
    stack.check_invariants().unwrap();
}

#[test]
fn out_of_order_bytes_inside_a_gap_are_refused_and_come_again() {
    let mut stack = stack();
    let (mut a, _b) = two_accepted(&mut stack);
    let log = stack.log_register(1 << 20).unwrap();
    stack.log_attach(log, a.id).unwrap();
    let base = a.peer_nxt;
    // Segments 3 and then 2 of 1..3 arrive, 1 is missing: 3 opens a gap over 1 and 2.
    a.peer
        .send(&mut stack, ms(1), a.data_seg(b"333").seq(base + 6u32));
    a.peer
        .send(&mut stack, ms(1), a.data_seg(b"222").seq(base + 3u32));
    assert_eq!(stack.counters().log_ooo_refused, 1);
    assert_eq!(stack.info(a.id).unwrap().ooo_intervals, 1);
    // 1, then 2 again: both redirected in order.
    send(&mut stack, &mut a, b"111");
    assert_eq!(stack.info(a.id).unwrap().rcv_nxt, base + 3u32);
    send(&mut stack, &mut a, b"222");
    assert_eq!(stack.info(a.id).unwrap().rcv_nxt, base + 9u32);
    let r1 = stack.poll_log_redirect(log).unwrap().unwrap();
    assert_eq!((r1.offset, r1.data.as_slice()), (0, &b"111222"[..]));
    stack.log_fill(log, 0, &r1.data[..2]).unwrap();
    stack.log_fill(log, 2, &r1.data[2..]).unwrap();
    assert_eq!(readable(&stack, log), b"111222333".to_vec());
    stack.check_invariants().unwrap();
}

#[test]
fn a_full_log_closes_the_window_and_a_trim_reopens_it() {
    let mut stack = stack();
    let (mut a, _b) = two_accepted(&mut stack);
    let cap = RX_BUFFER as u64; // at most a receive buffer's window per connection
    let log = stack.log_register(cap as usize).unwrap();
    stack.log_attach(log, a.id).unwrap();
    // The only connection's window, already offered, is the whole log.
    assert_eq!(stack.log_info(log).unwrap().promised, cap);
    let mut sent = 0u64;
    while sent < cap {
        let n = (cap - sent).min(1460) as usize;
        send(&mut stack, &mut a, &pattern(n, sent as u8));
        sent += n as u64;
    }
    let acks = drain(&mut stack, ms(2), None);
    let last = acks.last().unwrap().0;
    assert_eq!(
        (last.ack, last.window),
        (a.peer_nxt, 0),
        "window 0 when full"
    );
    assert_eq!(stack.counters().log_window_zero, 1);
    // More data is beyond the window: not accepted, nothing overwritten.
    a.peer.send(&mut stack, ms(3), a.data_seg(b"overflow"));
    let info = stack.log_info(log).unwrap();
    assert_eq!((info.tail, info.readable_end), (cap, cap));
    assert_eq!(stack.info(a.id).unwrap().rcv_nxt, a.peer_nxt);
    drain(&mut stack, ms(3), None);
    // A trim of 8 KiB reopens the window by as much, and the update goes out at once.
    stack.log_trim(log, 8192).unwrap();
    let upd = drain(&mut stack, ms(4), None);
    let w = upd.last().expect("a window update").0;
    assert_eq!((w.ack, w.window), (a.peer_nxt, 8192));
    send(&mut stack, &mut a, b"after the trim");
    assert_eq!(stack.log_info(log).unwrap().tail, cap + 14);
    stack.check_invariants().unwrap();
}

#[test]
fn bytes_read_before_attach_move_to_the_log() {
    let mut stack = stack();
    let (mut a, _b) = two_accepted(&mut stack);
    send(&mut stack, &mut a, b"early|");
    let log = stack.log_register(1 << 20).unwrap();
    stack.log_attach(log, a.id).unwrap();
    send(&mut stack, &mut a, b"late|");
    assert_eq!(readable(&stack, log), b"early|late|".to_vec());
    assert_eq!(stack.buffered_bytes(), 0, "the ring holds nothing now");
    assert_eq!(
        stack.buffer_memory_allocated().0,
        0,
        "nor any storage: attached connections' payload never touches their rings"
    );
    stack.check_invariants().unwrap();
}

#[test]
fn a_connection_that_ends_with_a_gap_open_leaves_it_abandoned() {
    let mut stack = stack();
    let (a, mut b) = two_accepted(&mut stack);
    let log = stack.log_register(1 << 20).unwrap();
    stack.log_attach(log, a.id).unwrap();
    stack.log_attach(log, b.id).unwrap();
    a.peer.send(
        &mut stack,
        ms(1),
        a.data_seg(b"late").seq(a.peer_nxt + 5u32),
    );
    send(&mut stack, &mut b, b"b|");
    a.peer
        .send(&mut stack, ms(2), a.peer.seg(RST).seq(a.peer_nxt));
    assert_eq!(stack.counters().log_gaps_abandoned, 1);
    let r = stack.poll_log_redirect(log).unwrap().unwrap();
    assert!(r.abandoned);
    assert_eq!((r.offset, r.data.as_slice()), (0, &[0u8; 5][..]));
    stack.log_fill(log, 0, &r.data).unwrap();
    assert_eq!(readable(&stack, log), b"\0\0\0\0\0lateb|".to_vec());
    assert_eq!(stack.log_info(log).unwrap().connections, 1);
    stack.check_invariants().unwrap();
}

#[test]
fn bad_calls_get_typed_errors() {
    let mut stack = stack();
    let (mut a, b) = two_accepted(&mut stack);
    assert_eq!(stack.log_register(0), Err(LogError::CapacityZero));
    assert_eq!(
        stack.log_register(usize::MAX),
        Err(LogError::CapacityTooLarge { asked: usize::MAX })
    );
    let log = stack.log_register(1 << 20).unwrap();
    let other = stack.log_register(1 << 20).unwrap();
    stack.log_attach(log, a.id).unwrap();
    assert_eq!(stack.log_attach(log, a.id), Err(LogError::AlreadyAttached));
    assert_eq!(
        stack.log_attach(other, a.id),
        Err(LogError::AlreadyAttached)
    );
    assert_eq!(stack.log_detach(other, a.id), Err(LogError::NotAttached));
    assert_eq!(stack.log_detach(log, b.id), Err(LogError::NotAttached));
    assert_eq!(stack.log_unregister(log), Err(LogError::Attached));
    assert_eq!(stack.log_of(a.id), Some(log));
    // A log too small for the window b already offered (never taken back).
    let tiny = stack.log_register(100).unwrap();
    assert!(matches!(
        stack.log_attach(tiny, b.id),
        Err(LogError::NoRoom { free: 100, .. })
    ));
    assert_eq!(
        stack.log_trim(log, 1),
        Err(LogError::TrimPastReadable {
            asked: 1,
            readable: 0
        })
    );
    // A gap still to arrive holds the connection to its log.
    a.peer
        .send(&mut stack, ms(1), a.data_seg(b"x").seq(a.peer_nxt + 1u32));
    assert_eq!(stack.log_detach(log, a.id), Err(LogError::GapsPending));
    send(&mut stack, &mut a, b"y");
    a.peer_nxt += 1u32; // past "x"
    stack.log_detach(log, a.id).unwrap();
    // Detached: payload goes to the ring again.
    send(&mut stack, &mut a, b"ring");
    let mut buf = [0u8; 8];
    assert_eq!(stack.recv(a.id, &mut buf), Ok(4));
    stack.log_unregister(other).unwrap();
    assert_eq!(stack.log_info(other), Err(LogError::UnknownLog));
    assert_eq!(stack.log_attach(other, b.id), Err(LogError::UnknownLog));
    // A stale connection handle.
    stack.abort(b.id).unwrap();
    assert_eq!(
        stack.log_attach(log, b.id),
        Err(LogError::InvalidConnection)
    );
    let mut n = 2; // log and tiny (other's index is free again)
    loop {
        match stack.log_register(1) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e, LogError::TooManyLogs);
                break;
            }
        }
    }
    assert_eq!(n, sluice_tcp::shared_log::MAX_LOGS);
    stack.check_invariants().unwrap();
}

mod arbitrary_arrivals {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// One connection's stream arrives as arbitrary ranges of it (overlapping, out of
        /// order, repeated), then whole in order; the application fills every gap from the
        /// redirects as they come. With one connection, log offsets are stream offsets: the
        /// log ends up equal to the stream, each gap byte redirected once.
        #[test]
        fn the_log_equals_the_stream_whatever_the_arrival_order(
            len in 1usize..12_000,
            ranges in proptest::collection::vec((0usize..12_000, 1usize..3000), 0..40),
            trim_every in 0usize..4,
        ) {
            let mut stack = stack();
            let (a, _b) = two_accepted(&mut stack);
            let log = stack.log_register(1 << 20).unwrap();
            stack.log_attach(log, a.id).unwrap();
            let stream = pattern(len, 7);
            let base = a.peer_nxt;
            let mut taken = Vec::new();
            let mut redirected = 0u64;
            let mut deliver = |stack: &mut Stack, start: usize, end: usize, step: usize| {
                let seg = a
                    .data_seg(&stream[start..end])
                    .seq(base + start as u32);
                a.peer.send(stack, ms(1 + step as u64), seg);
                while let Some(r) = stack.poll_log_redirect(log).unwrap() {
                    redirected += r.data.len() as u64;
                    stack.log_fill(log, r.offset, &r.data).unwrap();
                }
                stack.check_invariants().unwrap();
                if trim_every > 0 && step.is_multiple_of(trim_every) {
                    let (x, y) = stack.log_peek(log).unwrap();
                    taken.extend_from_slice(&[x, y].concat());
                    let n = (x.len() + y.len()) as u64;
                    stack.log_trim(log, n).unwrap();
                }
                drain(stack, ms(1 + step as u64), None);
            };
            for (i, &(start, n)) in ranges.iter().enumerate() {
                let start = start % len;
                deliver(&mut stack, start, (start + n).min(len), i);
            }
            let mut at = 0;
            let mut step = ranges.len();
            while at < len {
                let end = (at + 1000).min(len);
                deliver(&mut stack, at, end, step);
                at = end;
                step += 1;
            }
            let (x, y) = stack.log_peek(log).unwrap();
            taken.extend_from_slice(&[x, y].concat());
            prop_assert_eq!(taken, stream);
            let info = stack.log_info(log).unwrap();
            prop_assert_eq!((info.gaps, info.tail), (0, len as u64));
            let c = stack.counters();
            prop_assert_eq!(c.log_redirected_bytes, redirected);
            prop_assert_eq!(c.log_appended_bytes + redirected, len as u64, "each byte once");
        }
    }
}

#[test]
fn an_empty_read_and_the_peers_fin_leave_the_window_to_the_log() {
    // Both found by the fuzz campaign: a zero-byte consume opened the window to the empty
    // ring's size, past the log; and a FIN (a sequence number, not a log byte) counted as a
    // byte of window, so every trim sent another window update.
    let mut stack = stack();
    let (mut a, _b) = two_accepted(&mut stack);
    // As large as the window the connection already offered (its empty ring's).
    let log = stack.log_register(RX_BUFFER).unwrap();
    stack.log_attach(log, a.id).unwrap();
    send(&mut stack, &mut a, &pattern(1000, 1));
    drain(&mut stack, ms(2), None);
    stack.consume(a.id, 0).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(stack.recv(a.id, &mut buf), Err(Error::WouldBlock));
    let info = stack.log_info(log).unwrap();
    assert!(
        info.tail - info.head + info.promised <= info.capacity,
        "{info:?}"
    );
    stack.check_invariants().unwrap();
    let fin = a
        .peer
        .seg(ACK | FIN)
        .seq(a.peer_nxt)
        .ack(a.our_nxt)
        .win(65535);
    a.peer.send(&mut stack, ms(3), fin);
    let acks = drain(&mut stack, ms(3), None);
    assert_eq!(
        acks.last().unwrap().0.ack,
        a.peer_nxt + 1u32,
        "the FIN acknowledged"
    );
    stack.check_invariants().unwrap();
    for t in 4..10 {
        stack.log_trim(log, 0).unwrap();
        let readable = {
            let i = stack.log_info(log).unwrap();
            i.readable_end - i.head
        };
        stack.log_trim(log, readable).unwrap();
        assert!(
            drain(&mut stack, ms(t), None).is_empty(),
            "no update after the FIN"
        );
        stack.check_invariants().unwrap();
    }
}
