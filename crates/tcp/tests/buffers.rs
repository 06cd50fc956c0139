//! Receive-buffer autotuning and the memory of payload rings: a ring starts small, doubles
//! while whole rings arrive as fast as the fastest one did (the sender is held back by the
//! window), stops at its share of `rx_memory`, and is released when its connection closes.

mod harness;

use harness::*;
use sluice_tcp::{Config, ConfigError, ListenerId, MemoryLimits, MemoryState, Stack};
use sluice_wire::tcp::{SeqNumber, TcpOptions};

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

// ---- the global limit on buffered bytes (Config::tcp_mem, control/memory.rs) ----------

const KIB: usize = 1024;
/// Under pressure a read reopens a window to four segments (Linux's 4 * advmss).
const CLAMP: usize = 4 * 1460;

fn limited(low: usize, pressure: usize, high: usize) -> Config {
    let mut cfg = autotuned();
    cfg.tcp_mem = Some(MemoryLimits {
        low,
        pressure,
        high,
    });
    cfg
}

/// Reads `n` bytes (all must be there) and returns the window field of the update the
/// read sent, if it sent one.
fn read_n(stack: &mut Stack, c: &Conn, n: usize, now: u64) -> (Vec<u8>, Option<u16>) {
    let mut buf = vec![0; n];
    let mut got = 0;
    while got < n {
        got += stack.recv(c.id, &mut buf[got..]).expect("readable");
    }
    let update = c
        .peer
        .recv_all(stack, ms(now))
        .last()
        .map(|(h, _)| h.window);
    (buf, update)
}

#[test]
fn applications_that_never_read_bring_pressure_windows_clamp_and_reading_ends_it() {
    let mut stack = stack_with(limited(64 * KIB, 128 * KIB, 256 * KIB));
    let l = stack.listen(LISTEN_PORT, 32).unwrap();
    let mut conns: Vec<Conn> = (0..12)
        .map(|i| scaled_conn(&mut stack, l, 41000 + i))
        .collect();
    // Every peer fills its 16 KiB window; nobody reads. The ninth passes 128 KiB.
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(fill(&mut stack, c, INITIAL, 1), 0, "window closed");
        let expected = if i < 8 {
            MemoryState::Normal
        } else {
            MemoryState::Pressure
        };
        assert_eq!(
            stack.memory_state(),
            expected,
            "after {} connections",
            i + 1
        );
    }
    assert_eq!(stack.buffered_bytes(), 12 * INITIAL as u64);
    assert_eq!(stack.counters().memory_pressure_entered, 1);
    // Each application reads half. Under pressure the window reopens to four segments,
    // not to the 8 KiB the read freed (our window shift is 3).
    for c in &conns {
        let (_, update) = read_n(&mut stack, c, INITIAL / 2, 2);
        assert_eq!(update, Some((CLAMP >> 3) as u16), "clamped window update");
    }
    assert_eq!(stack.counters().memory_window_clamped, 12);
    assert_eq!(
        stack.memory_state(),
        MemoryState::Pressure,
        "96 KiB: above low"
    );
    // The peers send all they can: only the clamped windows are taken, and the total
    // stays under the high threshold.
    for c in conns.iter_mut() {
        let before = c.peer_nxt;
        let window = fill(&mut stack, c, 4 * 1460, 3);
        assert_eq!(window, 0);
        assert_eq!(c.peer_nxt.diff(before), 4 * 1460);
        // What did not fit is dropped at the window's edge: the peer would resend it.
        c.peer.send(&mut stack, ms(3), c.data_seg(&[7; 1460]));
        let (ack, _) = c.peer.recv_one(&mut stack, ms(3));
        assert_eq!((ack.ack, ack.window), (c.peer_nxt, 0));
    }
    let held = 12 * (INITIAL / 2 + CLAMP) as u64;
    assert_eq!(stack.buffered_bytes(), held);
    assert!(held < 256 * KIB as u64);
    assert_eq!(stack.counters().memory_over_limit_entered, 0);
    // Reading drains it: pressure ends below 64 KiB, during the eighth connection's read.
    let mut windows = Vec::new();
    for c in &conns {
        let (_, update) = read_n(&mut stack, c, INITIAL / 2 + CLAMP, 4);
        windows.push(update.expect("a window update"));
    }
    assert_eq!(stack.buffered_bytes(), 0);
    assert_eq!(stack.memory_state(), MemoryState::Normal);
    assert_eq!(
        windows[..7],
        [(CLAMP >> 3) as u16; 7],
        "still under pressure"
    );
    assert_eq!(
        windows[8..],
        [(INITIAL >> 3) as u16; 4],
        "the whole ring again"
    );
    // A window held back under pressure gets its room back at the next read.
    let c = &mut conns[0];
    fill(&mut stack, c, 1460, 5);
    let (data, update) = read_n(&mut stack, c, 1460, 5);
    assert_eq!(data, pattern(1460, 1));
    assert_eq!(update, Some((INITIAL >> 3) as u16));
    stack.check_invariants().unwrap();
}

#[test]
fn over_the_high_threshold_syns_and_new_out_of_order_data_are_refused_not_in_order_data() {
    let mut cfg = limited(16 * KIB, 32 * KIB, 40 * KIB);
    cfg.tx_buffer = 64 * KIB;
    cfg.tx_buffer_initial = 4 * KIB;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 32).unwrap();
    let mut a = scaled_conn(&mut stack, l, 41000);
    let mut b = scaled_conn(&mut stack, l, 41001);
    let mut c = scaled_conn(&mut stack, l, 41002);
    fill(&mut stack, &mut a, INITIAL, 1);
    fill(&mut stack, &mut b, INITIAL, 1);
    // c: 1460 bytes in order, a hole, and out-of-order data held before the limit.
    fill(&mut stack, &mut c, 1460, 1);
    let hole = c.peer_nxt;
    let held = pattern(1460, 3);
    c.peer
        .send(&mut stack, ms(1), c.data_seg(&held).seq(hole + 1460u32));
    c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(stack.memory_state(), MemoryState::Pressure);
    // Under pressure, out-of-order data is still taken; this passes 40 KiB.
    let more = pattern(6000, 4);
    c.peer
        .send(&mut stack, ms(1), c.data_seg(&more).seq(hole + 2920u32));
    c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(stack.memory_state(), MemoryState::OverLimit);
    assert_eq!(stack.counters().memory_over_limit_entered, 1);
    let total = stack.buffered_bytes();
    // A new SYN gets no SYN-ACK (the client will send it again).
    let newcomer = Peer::new(42000, LISTEN_PORT);
    let syn = newcomer.seg(SYN).seq(SeqNumber(7000)).opts(TcpOptions {
        mss: Some(1460),
        window_scale: Some(0),
        ..Default::default()
    });
    newcomer.send(&mut stack, ms(2), syn.clone());
    newcomer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.counters().memory_syn_refused, 1);
    // Out-of-order data that would add bytes is dropped; a duplicate of what is held is not
    // news either way; the ACKs still report the hole.
    c.peer
        .send(&mut stack, ms(2), c.data_seg(&[5; 500]).seq(hole + 9000u32));
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, hole);
    assert_eq!(stack.counters().memory_ooo_dropped, 1);
    c.peer.send(
        &mut stack,
        ms(2),
        c.data_seg(&held[..500]).seq(hole + 1460u32),
    );
    c.peer.recv_all(&mut stack, ms(2));
    assert_eq!(stack.counters().memory_ooo_dropped, 1, "already held");
    assert_eq!(stack.buffered_bytes(), total);
    // In-order data within the window offered is always taken, filling the hole.
    let gap = pattern(1460, 2);
    c.peer.send(&mut stack, ms(2), c.data_seg(&gap));
    c.peer_nxt = hole + 2920u32 + 6000u32;
    let (ack, _) = c.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, c.peer_nxt, "the hole filled up to the data held");
    assert_eq!(stack.buffered_bytes(), total + 1460);
    let got = read_all(&mut stack, c.id);
    assert_eq!(
        got,
        [&pattern(1460, 1)[..], &gap[..], &held[..], &more[..]].concat()
    );
    // A connection may keep only an initial send ring's worth unacknowledged.
    assert_eq!(stack.send(a.id, &[1; 8 * KIB]), Ok(4 * KIB));
    a.peer.recv_all(&mut stack, ms(2));
    // Reading brings the total down: the SYN, sent again, is answered.
    read_all(&mut stack, a.id);
    read_all(&mut stack, b.id);
    assert_eq!(stack.memory_state(), MemoryState::Normal);
    a.peer.recv_all(&mut stack, ms(3));
    newcomer.send(&mut stack, ms(3), syn);
    let (synack, _) = newcomer.recv_one(&mut stack, ms(3));
    assert_eq!(synack.flags, SYN | ACK);
    stack.check_invariants().unwrap();
}

#[test]
fn over_the_high_threshold_a_syn_cookies_ack_gets_a_rst_not_a_connection() {
    // One half-open connection fills the SYN backlog, so the next SYN gets a cookie.
    let mut cfg = limited(8 * KIB, 16 * KIB, 24 * KIB);
    cfg.syn_backlog = 1;
    let mut stack = stack_with(cfg);
    let l = stack.listen(LISTEN_PORT, 32).unwrap();
    let mut a = scaled_conn(&mut stack, l, 41000);
    let mut b = scaled_conn(&mut stack, l, 41001);
    fill(&mut stack, &mut a, INITIAL, 1);
    let half_open = Peer::new(41002, LISTEN_PORT);
    half_open.send(
        &mut stack,
        ms(1),
        half_open.seg(SYN).seq(SeqNumber(1)).opts(mss_only(1460)),
    );
    assert_eq!(half_open.recv_one(&mut stack, ms(1)).0.flags, SYN | ACK);
    // Below the high threshold the client gets its cookie SYN-ACK and is established on
    // it (Linux's connect() returns here).
    let client = Peer::new(42000, LISTEN_PORT);
    let syn = |isn: u32| client.seg(SYN).seq(SeqNumber(isn)).opts(mss_only(1460));
    client.send(&mut stack, ms(1), syn(7000));
    let (cookie, _) = client.recv_one(&mut stack, ms(1));
    assert_eq!(cookie.flags, SYN | ACK);
    assert_eq!(stack.counters().syn_cookies_sent, 1);
    // Then b's unread data takes the total over it, before the client's ACK arrives.
    fill(&mut stack, &mut b, INITIAL, 2);
    assert_eq!(stack.memory_state(), MemoryState::OverLimit);
    let connections = stack.connection_count();
    // The cookie is valid, but the connection would be one the engine takes no data for
    // beyond what it already offered: RST <SEQ=SEG.ACK> (RFC 9293 3.10.7.2), counted, no
    // connection, nothing to accept. Its data, had it sent any, was never acknowledged.
    let ack = client
        .seg(ACK)
        .seq(SeqNumber(7001))
        .ack(cookie.seq + 1u32)
        .data(b"hello");
    client.send(&mut stack, ms(3), ack);
    let (rst, _) = client.recv_one(&mut stack, ms(3));
    assert_eq!((rst.flags, rst.seq), (RST, cookie.seq + 1u32));
    let counters = stack.counters();
    assert_eq!(counters.memory_cookie_refused, 1);
    assert_eq!(counters.syn_cookies_accepted, 0);
    assert_eq!(
        counters.syn_cookies_rejected, 0,
        "the cookie itself was good"
    );
    assert_eq!(stack.connection_count(), connections);
    assert!(stack.accept(l).is_err());
    // Once reads bring the total down, the same client's next attempt gets in by the same
    // cookie path (the half-open connection still fills the backlog).
    read_all(&mut stack, a.id);
    read_all(&mut stack, b.id);
    assert_eq!(stack.memory_state(), MemoryState::Normal);
    drain(&mut stack, ms(4), Some(client));
    client.send(&mut stack, ms(4), syn(9000));
    let (cookie, _) = client.recv_one(&mut stack, ms(4));
    client.send(
        &mut stack,
        ms(4),
        client
            .seg(ACK)
            .seq(SeqNumber(9001))
            .ack(cookie.seq + 1u32)
            .data(b"hello"),
    );
    let (ack, _) = client.recv_one(&mut stack, ms(4));
    assert_eq!((ack.flags, ack.ack), (ACK, SeqNumber(9006)));
    assert_eq!(stack.counters().syn_cookies_accepted, 1);
    assert_eq!(stack.counters().memory_cookie_refused, 1);
    let id = stack.accept(l).expect("the cookie connection is accepted");
    assert_eq!(read_all(&mut stack, id), b"hello");
    stack.check_invariants().unwrap();
}

#[test]
fn under_pressure_rings_do_not_grow_and_an_emptied_grown_ring_goes_back_to_its_initial_size() {
    let mut stack = stack_with(limited(32 * KIB, 64 * KIB, 512 * KIB));
    let l = stack.listen(LISTEN_PORT, 32).unwrap();
    let mut g = scaled_conn(&mut stack, l, 41000);
    // Two fast rounds grow g's ring to 64 KiB.
    for round in 1..=2u64 {
        let cap = stack.buffer_memory().0;
        fill(&mut stack, &mut g, cap, round);
        read_all(&mut stack, g.id);
    }
    g.peer.recv_all(&mut stack, ms(2));
    assert_eq!(stack.buffer_memory().0, 4 * INITIAL);
    // Five other connections that do not read bring pressure.
    let mut others: Vec<Conn> = (1..=5)
        .map(|i| scaled_conn(&mut stack, l, 41000 + i))
        .collect();
    for c in others.iter_mut() {
        fill(&mut stack, c, INITIAL, 3);
    }
    assert_eq!(stack.memory_state(), MemoryState::Pressure);
    let rings = stack.buffer_memory().0;
    // g's sender fills its 64 KiB window as fast as before: the ring would double, but
    // not under pressure; read empty, it goes back to 16 KiB with a clamped window.
    fill(&mut stack, &mut g, 4 * INITIAL, 3);
    let (data, update) = read_n(&mut stack, &g, 4 * INITIAL, 3);
    assert_eq!(data, pattern(4 * INITIAL, 1));
    assert_eq!(update, Some((CLAMP >> 3) as u16));
    assert_eq!(stack.counters().memory_growth_refused, 1);
    assert_eq!(stack.counters().memory_rings_released, 1);
    assert_eq!(stack.buffer_memory().0, rings - 3 * INITIAL);
    // The smaller ring carries on: data at its sequence numbers, window within it.
    fill(&mut stack, &mut g, CLAMP, 5);
    let (data, _) = read_n(&mut stack, &g, CLAMP, 5);
    assert_eq!(data, pattern(CLAMP, 1));
    stack.check_invariants().unwrap();
    // Once pressure ends, reads give g its whole (initial) ring again.
    for c in &others {
        read_all(&mut stack, c.id);
    }
    assert_eq!(stack.memory_state(), MemoryState::Normal);
    fill(&mut stack, &mut g, 1460, 6);
    let (_, update) = read_n(&mut stack, &g, 1460, 6);
    assert_eq!(update, Some((INITIAL >> 3) as u16));
}

#[test]
fn memory_limits_are_derived_from_the_ring_memory_and_checked() {
    let mut cfg = config();
    cfg.rx_memory = 300 << 20;
    cfg.tx_memory = 300 << 20;
    assert_eq!(
        cfg.memory_limits(),
        MemoryLimits {
            low: 300 << 20,
            pressure: 400 << 20,
            high: 600 << 20
        }
    );
    for (low, pressure, high) in [(0, 1, 2), (3, 2, 4), (1, 5, 4)] {
        cfg.tcp_mem = Some(MemoryLimits {
            low,
            pressure,
            high,
        });
        assert!(matches!(
            Stack::new(cfg.clone()),
            Err(ConfigError::Range("tcp_mem", _))
        ));
    }
    cfg.tcp_mem = Some(MemoryLimits {
        low: 1,
        pressure: 1,
        high: 1,
    });
    assert!(Stack::new(cfg).is_ok());
}

#[test]
fn buffered_bytes_are_unread_unacknowledged_and_out_of_order_and_leave_with_the_connection() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 32).unwrap();
    let mut c = scaled_conn(&mut stack, l, 41000);
    let mut d = scaled_conn(&mut stack, l, 41001);
    fill(&mut stack, &mut c, 1000, 1);
    c.peer.send(
        &mut stack,
        ms(1),
        c.data_seg(&[2; 500]).seq(c.peer_nxt + 100u32),
    );
    c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(stack.buffered_bytes(), 1500);
    assert_eq!(stack.send(c.id, &[3; 3000]), Ok(3000));
    c.peer.recv_all(&mut stack, ms(1));
    assert_eq!(stack.buffered_bytes(), 4500);
    // The peer acknowledges 1000 of them; the application reads 600.
    c.peer
        .send(&mut stack, ms(2), c.ack_seg().ack(c.our_nxt + 1000u32));
    let mut buf = [0; 600];
    assert_eq!(stack.recv(c.id, &mut buf), Ok(600));
    assert_eq!(stack.buffered_bytes(), 2900);
    // d's unread bytes leave with d when the application aborts it.
    fill(&mut stack, &mut d, 2000, 3);
    assert_eq!(stack.buffered_bytes(), 4900);
    stack.abort(d.id).unwrap();
    assert_eq!(stack.buffered_bytes(), 2900);
    // c is reset by its peer: its out-of-order bytes go with its pooled row at once (500),
    // what the application may still read or was sending counts until it closes it.
    c.peer
        .send(&mut stack, ms(4), c.peer.seg(RST).seq(c.peer_nxt));
    assert_eq!(stack.buffered_bytes(), 2400);
    stack.close(c.id).unwrap();
    assert_eq!(stack.buffered_bytes(), 0);
    assert_eq!(stack.connection_count(), 0);
}

/// Issue 18 item 3: an idle connection holds no payload storage. The receive ring gets its
/// storage with the first data and gives it back when read to the end; the send ring when
/// all it held is acknowledged. The capacity stays, so the window offered before the ring
/// was drained is offered again after (RFC 9293 3.8.6, RFC 7323 2.4: never taken back).
#[test]
fn an_idle_connection_holds_no_ring_storage_and_its_window_stays() {
    let mut stack = stack_with(autotuned());
    let l = stack.listen(LISTEN_PORT, 16).unwrap();
    let mut c = scaled_conn(&mut stack, l, 40000);
    assert_eq!(
        stack.buffer_memory_allocated(),
        (0, 0, 0),
        "established, idle"
    );
    assert_eq!(stack.buffer_memory().0, INITIAL, "the capacity is there");
    // Data arrives: storage is taken; the ACK offers what is left of the ring.
    c.peer.send(&mut stack, ms(1), c.data_seg(b"hello"));
    c.peer_nxt += 5u32;
    let ack = ack_of(&mut stack, &c, 1);
    assert_eq!(ack.ack, c.peer_nxt);
    assert_eq!(stack.buffer_memory_allocated().0, INITIAL);
    assert_eq!(read_all(&mut stack, c.id), b"hello");
    // Read to the end: the storage goes to the pool, the ring keeps its capacity.
    assert_eq!(stack.buffer_memory_allocated(), (0, 0, INITIAL));
    assert_eq!(stack.buffer_memory().0, INITIAL);
    // The next segment is placed in storage from the pool, at its sequence number, and
    // the window it is acknowledged with is the whole ring beyond it again.
    c.peer.send(&mut stack, ms(300), c.data_seg(b"again"));
    c.peer_nxt += 5u32;
    let ack2 = ack_of(&mut stack, &c, 300);
    assert_eq!(ack2.ack, c.peer_nxt);
    // Right edges, with our window shift of 3 (256 KiB).
    let edge = |h: &sluice_wire::tcp::TcpHeader| h.ack + (u32::from(h.window) << 3);
    assert!(
        edge(&ack2).seq_ge(edge(&ack)),
        "the right edge never moves left: {:?} then {:?}",
        edge(&ack),
        edge(&ack2)
    );
    assert_eq!(stack.buffer_memory_allocated(), (INITIAL, 0, 0));
    assert_eq!(read_all(&mut stack, c.id), b"again");
    // Sending takes send storage, which the peer's ACK of every byte gives back.
    assert_eq!(stack.send(c.id, b"reply").unwrap(), 5);
    let tx_initial = stack.config().tx_initial().next_power_of_two();
    assert_eq!(stack.buffer_memory_allocated().1, tx_initial);
    let (data, payload) = c.peer.recv_one(&mut stack, ms(600));
    assert_eq!(payload, b"reply");
    c.our_nxt = data.seq + 5u32;
    c.peer.send(&mut stack, ms(600), c.ack_seg());
    let (rx, tx, pooled) = stack.buffer_memory_allocated();
    assert_eq!((rx, tx), (0, 0), "drained both ways: nothing held");
    assert_eq!(pooled, INITIAL + tx_initial);
    stack.check_invariants().unwrap();
}

/// The stack's latest ACK to `c`'s peer at `now` ms, waiting out a delayed ACK if needed.
fn ack_of(stack: &mut Stack, c: &Conn, now: u64) -> sluice_wire::tcp::TcpHeader {
    if let Some((h, _)) = c.peer.recv_all(stack, ms(now)).pop() {
        return h;
    }
    let (_, (h, _)) = run_until(stack, ms(now + 200)).pop().expect("an ACK");
    h
}
