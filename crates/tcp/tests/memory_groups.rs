//! Memory groups (control/memory_group.rs): each group's buffered bytes against limits of
//! its own, so that one tenant whose connections fill their buffers (a receiver that never
//! reads, a sender to a peer that never reads) goes over its own limit and is refused
//! alone, while another group's connections open and move data at full-size rings.

mod harness;

use harness::*;
use sluice_tcp::{
    Config, ConfigError, ConnId, Error, ListenerId, MemoryGroupError, MemoryLimits, MemoryState,
    Stack, UNGROUPED,
};
use sluice_wire::tcp::{SeqNumber, TcpOptions};

const KIB: usize = 1024;
/// Receive rings start here (and may grow to 256 KiB).
const INITIAL: usize = 16 * KIB;
/// Send rings start here.
const TX_INITIAL: usize = 4 * KIB;
/// Under pressure a read reopens a window to four segments (Linux's 4 * advmss).
const CLAMP: usize = 4 * 1460;
const TENANT: u16 = 1;
const OTHER: u16 = 2;
const TENANT_PORT: u16 = 80;
const OTHER_PORT: u16 = 81;

/// Global thresholds far above what these tests buffer: only the groups' own limits bite.
fn cfg() -> Config {
    let mut cfg = config();
    cfg.rx_buffer = 256 * KIB;
    cfg.rx_buffer_initial = INITIAL;
    cfg.tx_buffer = 64 * KIB;
    cfg.tx_buffer_initial = TX_INITIAL;
    cfg.tcp_mem = Some(MemoryLimits {
        low: 4 << 20,
        pressure: 8 << 20,
        high: 16 << 20,
    });
    cfg.max_memory_groups = 4;
    cfg
}

/// A group limit of 16 KiB low, 40 KiB pressure, 64 KiB high.
fn group_limits() -> MemoryLimits {
    MemoryLimits {
        low: 16 * KIB,
        pressure: 40 * KIB,
        high: 64 * KIB,
    }
}

fn scaled() -> TcpOptions {
    TcpOptions {
        mss: Some(1460),
        window_scale: Some(0),
        ..Default::default()
    }
}

/// A passive connection to listener `l` from `port` whose peer offers window scaling.
fn conn(stack: &mut Stack, l: ListenerId, port: u16) -> Conn {
    let c = passive_open(
        stack,
        l,
        Peer::new(port, l.port()),
        ms(0),
        5000,
        scaled(),
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

/// A SYN from `peer` to its port.
fn syn(peer: Peer, isn: u32) -> Seg {
    peer.seg(SYN).seq(SeqNumber(isn)).opts(scaled())
}

/// Records in `c.our_nxt` the end of what the stack sent to `c`'s peer; returns the bytes.
fn take(c: &mut Conn, segs: &[Segment]) -> usize {
    let mut got = 0;
    for (h, payload) in segs.iter().filter(|(h, _)| h.dst_port == c.peer.port) {
        got += payload.len();
        let end = h.seq + payload.len() as u32;
        if end.seq_gt(c.our_nxt) {
            c.our_nxt = end;
        }
    }
    got
}

/// The peer, which last acknowledged `acked`, reads at last: it acknowledges everything it
/// got and gets until the stack sends no more. Returns the bytes it got meanwhile.
fn ack_everything(stack: &mut Stack, c: &mut Conn, mut acked: SeqNumber, now: u64) -> usize {
    let mut got = 0;
    loop {
        let segs = c.peer.recv_all(stack, ms(now));
        got += take(c, &segs);
        if c.our_nxt == acked {
            return got;
        }
        c.peer.send(stack, ms(now), c.ack_seg());
        acked = c.our_nxt;
    }
}

fn group_state(stack: &Stack, group: u16) -> MemoryState {
    stack.memory_group(group).expect("group").state
}

fn unacked(stack: &Stack, id: ConnId) -> usize {
    stack.info(id).expect("live").unacked
}

#[test]
fn a_tenant_over_its_limit_is_refused_alone_and_recovers_when_it_reads() {
    let mut stack = stack_with(cfg());
    let l1 = stack.listen(TENANT_PORT, 32).unwrap();
    let l2 = stack.listen(OTHER_PORT, 32).unwrap();
    stack.set_listener_memory_group(l1, TENANT).unwrap();
    stack.set_listener_memory_group(l2, OTHER).unwrap();
    stack.set_group_limit(TENANT, Some(group_limits())).unwrap();
    stack.set_group_limit(OTHER, Some(group_limits())).unwrap();

    // The tenant: a sender to a peer that does not read (an active open put in the group
    // by the application), and receivers that never read (charged from their SYN on).
    let mut sender = active_open(&mut stack, ms(0), 5001, 9000, scaled(), 65535);
    stack.set_memory_group(sender.id, TENANT).unwrap();
    assert_eq!(stack.connection_memory_group(sender.id), Ok(TENANT));
    let mut a = conn(&mut stack, l1, 41000);
    let mut b = conn(&mut stack, l1, 41001);
    let mut o = conn(&mut stack, l1, 41002);
    assert_eq!(stack.connection_memory_group(a.id), Ok(TENANT));
    let queued = stack.send(sender.id, &pattern(32 * KIB, 9)).unwrap();
    assert_eq!(
        queued,
        32 * KIB,
        "the send ring grew to twice the window in flight"
    );
    let sender_una = sender.our_nxt;
    let flight = sender.peer.recv_all(&mut stack, ms(1));
    assert!(take(&mut sender, &flight) > 0);
    assert_eq!(stack.group_buffered_bytes(TENANT), Ok(32 * KIB as u64));
    assert_eq!(group_state(&stack, TENANT), MemoryState::Normal);
    // o: in-order data and out-of-order data beyond a hole, held before the limit.
    fill(&mut stack, &mut o, 1460, 1);
    let hole = o.peer_nxt;
    o.peer.send(
        &mut stack,
        ms(1),
        o.data_seg(&[3; 1460]).seq(hole + 1460u32),
    );
    o.peer.recv_all(&mut stack, ms(1));
    fill(&mut stack, &mut a, INITIAL, 1);
    assert_eq!(group_state(&stack, TENANT), MemoryState::Pressure);
    fill(&mut stack, &mut b, INITIAL, 1);
    let tenant = stack.group_buffered_bytes(TENANT).unwrap();
    assert_eq!(tenant, (32 * KIB + 2 * INITIAL + 2 * 1460) as u64);
    assert_eq!(group_state(&stack, TENANT), MemoryState::OverLimit);
    assert_eq!(stack.counters().memory_group_over_limit_entered, 1);
    // Globally nothing is wrong: the tenant's limit is its own.
    assert_eq!(stack.memory_state(), MemoryState::Normal);
    assert_eq!(stack.buffered_bytes(), tenant);
    assert_eq!(stack.group_buffered_bytes(OTHER), Ok(0));
    stack.check_invariants().unwrap();

    // The tenant's new SYN gets no SYN-ACK, counted in its group.
    let newcomer = Peer::new(42000, TENANT_PORT);
    newcomer.send(&mut stack, ms(2), syn(newcomer, 7000));
    newcomer.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.counters().memory_group_syn_refused, 1);
    assert_eq!(
        stack.counters().memory_syn_refused,
        0,
        "not the global limit"
    );
    assert_eq!(stack.memory_group(TENANT).unwrap().refused, 1);
    // Its new out-of-order data is dropped; its in-order data within the window is taken.
    o.peer
        .send(&mut stack, ms(2), o.data_seg(&[4; 500]).seq(hole + 5000u32));
    let (ack, _) = o.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, hole);
    assert_eq!(stack.counters().memory_ooo_dropped, 1);
    o.peer.send(&mut stack, ms(2), o.data_seg(&[2; 1460]));
    o.peer_nxt = hole + 2920u32;
    let (ack, _) = o.peer.recv_one(&mut stack, ms(2));
    assert_eq!(ack.ack, o.peer_nxt, "the hole filled up to the data held");
    // A tenant connection keeps only an initial ring's worth unacknowledged.
    assert_eq!(stack.send(a.id, &[1; 8 * KIB]), Ok(TX_INITIAL));
    assert_eq!(stack.send(sender.id, &[1; KIB]), Err(Error::WouldBlock));
    // a's peer does not read either: what it was sent stays unacknowledged.
    let a_una = a.our_nxt;
    let a_sent = a.peer.recv_all(&mut stack, ms(2));
    assert!(take(&mut a, &a_sent) > 0);
    assert_eq!(unacked(&stack, a.id), TX_INITIAL);

    // The other group: its SYN is answered, and its connection moves data at full-size
    // rings (the send ring grows, the receive window is the whole ring).
    let mut d = conn(&mut stack, l2, 43000);
    assert_eq!(stack.connection_memory_group(d.id), Ok(OTHER));
    assert_eq!(stack.send(d.id, &pattern(32 * KIB, 5)), Ok(32 * KIB));
    let d_una = d.our_nxt;
    assert_eq!(ack_everything(&mut stack, &mut d, d_una, 3), 32 * KIB);
    assert_eq!(
        fill(&mut stack, &mut d, INITIAL, 3),
        0,
        "the whole ring taken"
    );
    let mut buf = vec![0; INITIAL];
    let mut got = 0;
    while got < INITIAL / 2 {
        got += stack.recv(d.id, &mut buf[got..INITIAL / 2]).unwrap();
    }
    let update = d.peer.recv_all(&mut stack, ms(3));
    let window = update.last().expect("a window update").0.window;
    assert!(
        usize::from(window) << 3 > CLAMP,
        "not clamped: {}",
        usize::from(window) << 3
    );
    assert_eq!(group_state(&stack, OTHER), MemoryState::Normal);
    assert_eq!(stack.counters().memory_window_clamped, 0);
    stack.check_invariants().unwrap();

    // The tenant reads and its peer acknowledges: under the limit again, then normal.
    let a_id = a.id;
    read_all(&mut stack, a_id);
    read_all(&mut stack, b.id);
    read_all(&mut stack, o.id);
    assert_eq!(group_state(&stack, TENANT), MemoryState::Pressure);
    ack_everything(&mut stack, &mut sender, sender_una, 4);
    assert_eq!(unacked(&stack, sender.id), 0);
    ack_everything(&mut stack, &mut a, a_una, 4);
    assert_eq!(unacked(&stack, a.id), 0);
    assert_eq!(stack.group_buffered_bytes(TENANT), Ok(0));
    assert_eq!(group_state(&stack, TENANT), MemoryState::Normal);
    // The SYN, sent again, is answered.
    newcomer.send(&mut stack, ms(5), syn(newcomer, 7000));
    let (synack, _) = newcomer.recv_one(&mut stack, ms(5));
    assert_eq!(synack.flags, SYN | ACK);
    assert_eq!(stack.counters().memory_group_syn_refused, 1);
    stack.check_invariants().unwrap();
}

#[test]
fn a_tenants_cookie_ack_over_its_limit_gets_a_rst_and_another_tenants_gets_in() {
    // Every SYN is answered with a cookie (no state until the handshake completes).
    let mut c = cfg();
    c.syn_backlog = 0;
    let mut stack = stack_with(c);
    let l1 = stack.listen(TENANT_PORT, 32).unwrap();
    let l2 = stack.listen(OTHER_PORT, 32).unwrap();
    stack.set_listener_memory_group(l1, TENANT).unwrap();
    stack.set_listener_memory_group(l2, OTHER).unwrap();
    stack.set_group_limit(TENANT, Some(group_limits())).unwrap();
    let mut fillers: Vec<Conn> = (0..5).map(|i| conn(&mut stack, l1, 41000 + i)).collect();
    assert_eq!(stack.counters().syn_cookies_accepted, 5);
    // Cookies go out to both tenants' clients while the tenant is under its limit.
    let (late, other) = (Peer::new(42000, TENANT_PORT), Peer::new(43000, OTHER_PORT));
    late.send(&mut stack, ms(1), syn(late, 7000));
    let (cookie, _) = late.recv_one(&mut stack, ms(1));
    other.send(&mut stack, ms(1), syn(other, 8000));
    let (other_cookie, _) = other.recv_one(&mut stack, ms(1));
    assert_eq!((cookie.flags, other_cookie.flags), (SYN | ACK, SYN | ACK));
    for f in fillers.iter_mut() {
        fill(&mut stack, f, INITIAL, 2);
    }
    assert_eq!(group_state(&stack, TENANT), MemoryState::OverLimit);
    let ack = |p: Peer, isn: u32, c: &sluice_wire::tcp::TcpHeader| {
        p.seg(ACK)
            .seq(SeqNumber(isn + 1))
            .ack(c.seq + 1u32)
            .data(b"hi")
    };
    let connections = stack.connection_count();
    late.send(&mut stack, ms(3), ack(late, 7000, &cookie));
    let (rst, _) = late.recv_one(&mut stack, ms(3));
    assert_eq!((rst.flags, rst.seq), (RST, cookie.seq + 1u32));
    assert_eq!(stack.counters().memory_group_cookie_refused, 1);
    assert_eq!(stack.counters().memory_cookie_refused, 0);
    assert_eq!(stack.memory_group(TENANT).unwrap().refused, 1);
    assert_eq!(stack.connection_count(), connections);
    assert!(stack.accept(l1).is_err());
    other.send(&mut stack, ms(3), ack(other, 8000, &other_cookie));
    let (acked, _) = other.recv_one(&mut stack, ms(3));
    assert_eq!((acked.flags, acked.ack), (ACK, SeqNumber(8003)));
    let id = stack.accept(l2).expect("the other tenant's connection");
    assert_eq!(stack.connection_memory_group(id), Ok(OTHER));
    assert_eq!(stack.group_buffered_bytes(OTHER), Ok(2));
    stack.check_invariants().unwrap();
}

#[test]
fn the_global_limit_stays_the_last_line_for_every_group() {
    let mut c = cfg();
    c.tcp_mem = Some(MemoryLimits {
        low: 16 * KIB,
        pressure: 24 * KIB,
        high: 40 * KIB,
    });
    let mut stack = stack_with(c);
    let l1 = stack.listen(TENANT_PORT, 32).unwrap();
    let l2 = stack.listen(OTHER_PORT, 32).unwrap();
    stack.set_listener_memory_group(l1, TENANT).unwrap();
    stack.set_listener_memory_group(l2, OTHER).unwrap();
    // The tenant's own limit is far above the global one: the global one bites first.
    stack
        .set_group_limit(
            TENANT,
            Some(MemoryLimits {
                low: 1 << 20,
                pressure: 2 << 20,
                high: 4 << 20,
            }),
        )
        .unwrap();
    let mut fillers: Vec<Conn> = (0..3).map(|i| conn(&mut stack, l1, 41000 + i)).collect();
    for f in fillers.iter_mut() {
        fill(&mut stack, f, INITIAL, 1);
    }
    assert_eq!(stack.memory_state(), MemoryState::OverLimit);
    assert_eq!(group_state(&stack, TENANT), MemoryState::Normal);
    let other = Peer::new(43000, OTHER_PORT);
    other.send(&mut stack, ms(2), syn(other, 8000));
    other.recv_nothing(&mut stack, ms(2));
    assert_eq!(stack.counters().memory_syn_refused, 1);
    assert_eq!(stack.counters().memory_group_syn_refused, 0);
    stack.check_invariants().unwrap();
}

#[test]
fn bad_group_ids_and_limits_are_errors_never_panics() {
    for bad in [0, 65537] {
        let mut c = cfg();
        c.max_memory_groups = bad;
        assert!(matches!(
            Stack::new(c),
            Err(ConfigError::Range("max_memory_groups", _))
        ));
    }
    let mut stack = stack_with(cfg());
    let c = established(&mut stack, ms(0));
    let l = stack.listen(OTHER_PORT, 4).unwrap();
    let no_such = MemoryGroupError::NoSuchGroup {
        group: 4,
        groups: 4,
    };
    assert_eq!(stack.set_memory_group(c.id, 4), Err(no_such));
    assert_eq!(stack.set_listener_memory_group(l, 4), Err(no_such));
    assert_eq!(stack.set_group_limit(4, Some(group_limits())), Err(no_such));
    assert_eq!(stack.group_buffered_bytes(4), Err(no_such));
    assert_eq!(
        stack.memory_group(u16::MAX).unwrap_err().to_string(),
        "no memory group 65535 (groups are 0..4)"
    );
    assert_eq!(
        stack.set_group_limit(UNGROUPED, Some(group_limits())),
        Err(MemoryGroupError::Ungrouped)
    );
    for (low, pressure, high) in [(0, 1, 2), (3, 2, 4), (1, 5, 4)] {
        let limits = MemoryLimits {
            low,
            pressure,
            high,
        };
        assert_eq!(
            stack.set_group_limit(TENANT, Some(limits)),
            Err(MemoryGroupError::BadLimits)
        );
    }
    stack.unlisten(l).unwrap();
    assert_eq!(
        stack.set_listener_memory_group(l, TENANT),
        Err(MemoryGroupError::InvalidHandle)
    );
    stack.close(c.id).unwrap();
    let stale = ConnId::clone(&c.id);
    drain(&mut stack, ms(1), None);
    run_until(&mut stack, ms(10_000));
    assert_eq!(
        stack.set_memory_group(stale, TENANT),
        Err(MemoryGroupError::InvalidHandle)
    );
    stack.check_invariants().unwrap();
}

#[test]
fn ungrouped_connections_count_in_group_zero_and_a_connection_moves_with_its_bytes() {
    let mut stack = stack_with(cfg());
    let l = stack.listen(TENANT_PORT, 32).unwrap();
    let mut a = conn(&mut stack, l, 41000);
    fill(&mut stack, &mut a, 8 * KIB, 1);
    assert_eq!(stack.connection_memory_group(a.id), Ok(UNGROUPED));
    assert_eq!(stack.group_buffered_bytes(UNGROUPED), Ok(8 * KIB as u64));
    assert_eq!(stack.buffered_bytes(), 8 * KIB as u64);
    stack.set_memory_group(a.id, TENANT).unwrap();
    assert_eq!(stack.group_buffered_bytes(UNGROUPED), Ok(0));
    assert_eq!(stack.group_buffered_bytes(TENANT), Ok(8 * KIB as u64));
    // A limit below what the group holds applies at once, and goes with its removal.
    let tight = MemoryLimits {
        low: KIB,
        pressure: 2 * KIB,
        high: 4 * KIB,
    };
    stack.set_group_limit(TENANT, Some(tight)).unwrap();
    assert_eq!(group_state(&stack, TENANT), MemoryState::OverLimit);
    assert_eq!(stack.memory_group(TENANT).unwrap().limits, Some(tight));
    stack.check_invariants().unwrap();
    stack.set_group_limit(TENANT, None).unwrap();
    assert_eq!(group_state(&stack, TENANT), MemoryState::Normal);
    // Reading takes the bytes out of the group; a reset takes the connection out of it,
    // and the slot's next connection starts ungrouped.
    read_all(&mut stack, a.id);
    fill(&mut stack, &mut a, 2 * KIB, 2);
    assert_eq!(stack.group_buffered_bytes(TENANT), Ok(2 * KIB as u64));
    a.peer
        .send(&mut stack, ms(3), a.peer.seg(RST).seq(a.peer_nxt));
    stack.close(a.id).unwrap();
    assert_eq!(stack.group_buffered_bytes(TENANT), Ok(0));
    let b = conn(&mut stack, l, 41001);
    assert_eq!(b.id.slot(), a.id.slot(), "the slot reused");
    assert_eq!(stack.connection_memory_group(b.id), Ok(UNGROUPED));
    // A listener's group is not inherited by a later listener on the same index.
    stack.set_listener_memory_group(l, TENANT).unwrap();
    stack.unlisten(l).unwrap();
    let l = stack.listen(TENANT_PORT, 32).unwrap();
    let c = conn(&mut stack, l, 41002);
    assert_eq!(stack.connection_memory_group(c.id), Ok(UNGROUPED));
    stack.check_invariants().unwrap();
}
