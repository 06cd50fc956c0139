//! Receive-buffer autotuning and the memory of payload rings: a ring starts small, doubles
//! while whole rings arrive as fast as the fastest one did (the sender is held back by the
//! window), stops at its share of `rx_memory`, and is released when its connection closes.

mod harness;

use harness::*;
use sluice_tcp::{Config, ListenerId, Stack};
use sluice_wire::tcp::TcpOptions;

const INITIAL: usize = 16 * 1024;
const MOST: usize = 256 * 1024;

fn autotuned() -> Config {
    let mut cfg = config();
    cfg.rx_buffer = MOST;
    cfg.rx_buffer_initial = INITIAL;
    cfg
}

/// A passive connection whose peer offers window scaling (shift 0 on its side).
fn scaled_conn(stack: &mut Stack, l: ListenerId, port: u16) -> Conn {
    let opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(0),
        ..Default::default()
    };
    let c = passive_open(
        stack,
        l,
        Peer::new(port, LISTEN_PORT),
        ms(0),
        5000,
        opts,
        65535,
    );
    while stack.poll_event().is_some() {}
    c
}

/// The peer sends `n` bytes in MSS-sized segments from `c.peer_nxt`; returns the last
/// ACK's window field (our shift is 3 for 256 KiB).
fn fill(stack: &mut Stack, c: &mut Conn, n: usize, now: u64) -> u16 {
    let mut window = 0;
    for chunk in pattern(n, 1).chunks(1460) {
        c.peer.send(stack, ms(now), c.data_seg(chunk));
        c.peer_nxt += chunk.len() as u32;
        for (h, _) in c.peer.recv_all(stack, ms(now)) {
            window = h.window;
        }
    }
    window
}

#[test]
fn the_receive_ring_doubles_while_whole_rings_arrive_as_fast_as_ever() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut c = scaled_conn(&mut stack, l, 40000);
    assert_eq!(stack.buffer_memory().0, INITIAL);
    // A window-limited sender: a whole ring every millisecond, read as it comes.
    for round in 1..=6u64 {
        let cap = stack.buffer_memory().0;
        let window = fill(&mut stack, &mut c, cap, round);
        assert_eq!(window, 0, "round {round}: the sender filled the window");
        assert_eq!(read_all(&mut stack, c.id).len(), cap);
        let grown = (cap * 2).min(MOST);
        assert_eq!(stack.buffer_memory().0, grown, "round {round}");
        // The window update offers the whole ring (scaled by our shift of 3, the smallest
        // that can say 256 KiB).
        let (update, _) = c.peer.recv_one(&mut stack, ms(round));
        assert_eq!(update.ack, c.peer_nxt);
        assert_eq!(update.window as usize, grown >> 3);
    }
    assert_eq!(
        stack.counters().rx_buffer_grown,
        4,
        "16 KiB doubles to 256 KiB"
    );
    stack.check_invariants().unwrap();
}

#[test]
fn a_sender_that_does_not_fill_the_ring_in_a_round_trip_stops_the_growth() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut c = scaled_conn(&mut stack, l, 40000);
    fill(&mut stack, &mut c, INITIAL, 1);
    read_all(&mut stack, c.id);
    assert_eq!(stack.counters().rx_buffer_grown, 1);
    // Paced: a segment every millisecond, each read at once. A ring's worth takes 23 ms,
    // far slower than the 1 ms of the fastest ring.
    for t in 2..100u64 {
        fill(&mut stack, &mut c, 1460, t);
        assert_eq!(read_all(&mut stack, c.id).len(), 1460);
    }
    assert_eq!(stack.counters().rx_buffer_grown, 1);
    assert_eq!(stack.buffer_memory().0, 2 * INITIAL);
}

#[test]
fn growth_keeps_unread_and_out_of_order_bytes_at_their_sequence_numbers() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut c = scaled_conn(&mut stack, l, 40000);
    let half = INITIAL / 2;
    fill(&mut stack, &mut c, half, 1);
    read_all(&mut stack, c.id);
    // The second half in order, and an out-of-order segment 1000 bytes past it.
    let second = pattern(half, 2);
    for chunk in second.chunks(1460) {
        c.peer.send(&mut stack, ms(1), c.data_seg(chunk));
        c.peer_nxt += chunk.len() as u32;
    }
    let later = pattern(1000, 9);
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(&later).seq(c.peer_nxt + 1000u32),
    );
    c.peer.recv_all(&mut stack, ms(1));
    // Reading part of the second half completes a ring's worth: the ring grows, with
    // unread and out-of-order bytes in it.
    let mut buf = vec![0; 1000];
    assert_eq!(stack.recv(c.id, &mut buf), Ok(1000));
    assert_eq!(stack.counters().rx_buffer_grown, 1);
    assert_eq!(stack.buffer_memory().0, 2 * INITIAL);
    let gap = pattern(1000, 8);
    c.peer.send(&mut stack, ms(2), c.data_seg(&gap));
    c.peer.recv_all(&mut stack, ms(2));
    let got = read_all(&mut stack, c.id);
    assert_eq!(buf, second[..1000]);
    assert_eq!(got, [&second[1000..], &gap[..], &later[..]].concat());
    stack.check_invariants().unwrap();
}

#[test]
fn an_application_that_does_not_read_never_grows_its_ring() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut c = scaled_conn(&mut stack, l, 40000);
    fill(&mut stack, &mut c, INITIAL, 1);
    // More arrives against the closed window; nothing is read.
    c.peer.send(&mut stack, ms(2), c.data_seg(&[1; 100]));
    c.peer.recv_all(&mut stack, ms(2));
    assert_eq!(stack.counters().rx_buffer_grown, 0);
    assert_eq!(stack.buffer_memory().0, INITIAL);
}

#[test]
fn growth_stops_at_the_share_of_rx_memory() {
    let mut cfg = autotuned();
    cfg.rx_memory = 64 * 1024;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut a = scaled_conn(&mut stack, l, 40000);
    let l2 = Peer::new(40001, LISTEN_PORT);
    // A second connection halves the share: 32 KiB each.
    let opts = TcpOptions {
        mss: Some(1460),
        window_scale: Some(0),
        ..Default::default()
    };
    let listener = stack.listen(LISTEN_PORT + 1, 4).unwrap();
    let l2 = Peer::new(l2.port, LISTEN_PORT + 1);
    let _b = passive_open(&mut stack, listener, l2, ms(0), 9000, opts, 65535);
    for round in 1..=4u64 {
        let cap = stack.buffer_memory().0 - INITIAL;
        fill(&mut stack, &mut a, cap, round);
        read_all(&mut stack, a.id);
    }
    assert_eq!(
        stack.counters().rx_buffer_grown,
        1,
        "16 -> 32 KiB, then the share"
    );
    assert_eq!(stack.buffer_memory().0, 32 * 1024 + INITIAL);
}

#[test]
fn a_closed_connection_gives_its_grown_ring_back_and_keeps_a_small_one_for_the_next() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut c = scaled_conn(&mut stack, l, 40000);
    for round in 1..=3u64 {
        let cap = stack.buffer_memory().0;
        fill(&mut stack, &mut c, cap, round);
        read_all(&mut stack, c.id);
    }
    assert_eq!(stack.buffer_memory().0, 8 * INITIAL);
    // The application aborts; the slot is freed at once.
    stack.abort(c.id).unwrap();
    c.peer.recv_all(&mut stack, ms(10));
    assert_eq!(stack.connection_count(), 0);
    assert_eq!(
        stack.buffer_memory(),
        (0, 0),
        "grown rings are released with the slot"
    );
    // The next connection in the slot starts at the initial size; a short one keeps its
    // initial rings for the next.
    let c = scaled_conn(&mut stack, l, 40001);
    assert_eq!(stack.buffer_memory().0, INITIAL);
    c.peer.send(&mut stack, ms(20), c.data_seg(b"hi"));
    c.peer.recv_all(&mut stack, ms(20));
    assert_eq!(read_all(&mut stack, c.id), b"hi");
    stack.abort(c.id).unwrap();
    c.peer.recv_all(&mut stack, ms(21));
    assert_eq!(stack.buffer_memory().0, INITIAL);
}
