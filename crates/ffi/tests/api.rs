//! Each exported function from Rust, through the C ABI: what it does, and its error paths
//! (NULL pointers, stale and closed handles, short buffers, invalid arguments).

use std::ptr::{null, null_mut};

use sluice_ffi::*;

const A_IP: u32 = 0x0a00_0001;
const B_IP: u32 = 0x0a00_0002;
const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn config(ip: u32, mac: [u8; 6]) -> sluice_config {
    let mut c = std::mem::MaybeUninit::uninit();
    // SAFETY: valid for a write of a sluice_config.
    let r = unsafe { sluice_config_default(c.as_mut_ptr()) };
    assert_eq!(r, sluice_error::Ok);
    // SAFETY: written whole by sluice_config_default.
    let mut c: sluice_config = unsafe { c.assume_init() };
    c.ip = ip;
    c.mac = mac;
    c.max_connections = 16;
    c
}

/// A stack, freed on drop.
struct Host(*mut sluice_stack);

impl Host {
    fn new(ip: u32, mac: [u8; 6]) -> Host {
        let mut s = null_mut();
        // SAFETY: a valid config and out-pointer.
        let r = unsafe { sluice_stack_new(&config(ip, mac), &mut s) };
        assert_eq!(r, sluice_error::Ok);
        assert!(!s.is_null());
        Host(s)
    }
    fn frame(&self, now: u64, f: &[u8]) -> sluice_error {
        // SAFETY: a live stack; `f` valid for its length.
        unsafe { sluice_stack_handle_frame(self.0, now, f.as_ptr(), f.len()) }
    }
    fn transmit(&self, now: u64, buf: &mut [u8]) -> i64 {
        // SAFETY: a live stack; `buf` valid for its length.
        unsafe { sluice_stack_poll_transmit(self.0, now, buf.as_mut_ptr(), buf.len()) }
    }
    fn timeout(&self) -> Option<u64> {
        let mut t = 0;
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_stack_poll_timeout(self.0, &mut t) } {
            1 => Some(t),
            0 => {
                assert_eq!(t, u64::MAX);
                None
            }
            e => panic!("poll_timeout: {e}"),
        }
    }
    fn listen(&self, port: u16) -> Result<sluice_listener, sluice_error> {
        let mut l = 0;
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_listen(self.0, port, 8, &mut l) } {
            sluice_error::Ok => Ok(l),
            e => Err(e),
        }
    }
    fn accept(&self, l: sluice_listener) -> Result<sluice_conn, sluice_error> {
        let mut c = 0;
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_accept(self.0, l, &mut c) } {
            sluice_error::Ok => Ok(c),
            e => Err(e),
        }
    }
    fn connect(&self, now: u64, ip: u32, port: u16) -> Result<sluice_conn, sluice_error> {
        let mut c = 0;
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_connect(self.0, now, ip, port, &mut c) } {
            sluice_error::Ok => Ok(c),
            e => Err(e),
        }
    }
    fn send(&self, c: sluice_conn, data: &[u8]) -> i64 {
        // SAFETY: a live stack; `data` valid for its length.
        unsafe { sluice_send(self.0, c, data.as_ptr(), data.len()) }
    }
    fn recv(&self, c: sluice_conn, buf: &mut [u8]) -> i64 {
        // SAFETY: a live stack; `buf` valid for its length.
        unsafe { sluice_recv(self.0, c, buf.as_mut_ptr(), buf.len()) }
    }
    fn event(&self) -> Option<sluice_event> {
        let mut e = std::mem::MaybeUninit::uninit();
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_poll_event(self.0, e.as_mut_ptr()) } {
            // SAFETY: written by sluice_poll_event when it returns 1.
            1 => Some(unsafe { e.assume_init() }),
            0 => None,
            r => panic!("poll_event: {r}"),
        }
    }
    fn info(&self, c: sluice_conn) -> Result<sluice_conn_info, sluice_error> {
        let mut i = std::mem::MaybeUninit::uninit();
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_conn_get_info(self.0, c, i.as_mut_ptr()) } {
            // SAFETY: written whole on success.
            sluice_error::Ok => Ok(unsafe { i.assume_init() }),
            e => Err(e),
        }
    }
    fn counters(&self) -> sluice_counters {
        let mut k = sluice_counters::default();
        // SAFETY: a live stack; valid out-pointer.
        let r = unsafe { sluice_stack_counters(self.0, &mut k) };
        assert_eq!(r, sluice_error::Ok);
        k
    }
    fn close(&self, c: sluice_conn) -> sluice_error {
        // SAFETY: a live stack.
        unsafe { sluice_close(self.0, c) }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: from sluice_stack_new, not used after this.
        unsafe { sluice_stack_free(self.0) }
    }
}

/// Moves frames both ways and runs timers until nothing is in flight and `until` holds or
/// the clock passes `limit_ns`. Returns the time reached.
fn run(a: &Host, b: &Host, mut now: u64, limit_ns: u64, mut until: impl FnMut() -> bool) -> u64 {
    let mut buf = [0u8; 1514];
    loop {
        let mut moved = true;
        while moved {
            moved = false;
            for (from, to) in [(a, b), (b, a)] {
                loop {
                    let n = from.transmit(now, &mut buf);
                    assert!(n >= 0, "poll_transmit: {n}");
                    if n == 0 {
                        break;
                    }
                    assert_eq!(to.frame(now, &buf[..n as usize]), sluice_error::Ok);
                    moved = true;
                }
            }
        }
        if until() {
            return now;
        }
        let next = [a.timeout(), b.timeout()].into_iter().flatten().min();
        match next {
            Some(t) if t <= limit_ns => now = now.max(t),
            _ => return now,
        }
        for h in [a, b] {
            // SAFETY: a live stack.
            let r = unsafe { sluice_stack_handle_timeout(h.0, now) };
            assert_eq!(r, sluice_error::Ok);
        }
    }
}

#[test]
fn a_connection_opens_moves_data_and_closes_through_the_abi() {
    let (a, b) = (Host::new(A_IP, A_MAC), Host::new(B_IP, B_MAC));
    // Static neighbors: no ARP on the wire.
    // SAFETY: live stacks; 6-byte MACs.
    unsafe {
        assert_eq!(
            sluice_stack_add_neighbor(a.0, B_IP, B_MAC.as_ptr()),
            sluice_error::Ok
        );
        assert_eq!(
            sluice_stack_add_neighbor(b.0, A_IP, A_MAC.as_ptr()),
            sluice_error::Ok
        );
    }
    let l = b.listen(80).unwrap();
    assert_eq!(b.listen(80), Err(sluice_error::AddrInUse));
    assert_eq!(b.accept(l), Err(sluice_error::WouldBlock));
    let c = a.connect(0, B_IP, 80).unwrap();
    assert_eq!(a.send(c, b"early"), sluice_error::WouldBlock as i64);
    let now = run(&a, &b, 0, 1_000_000_000, || false);
    assert_eq!(a.counters().frames_tx, 2, "SYN and ACK, no ARP");
    let e = b.event().expect("acceptable");
    assert_eq!((e.kind, e.listener), (sluice_event_kind::Acceptable, l));
    let s = b.accept(l).unwrap();
    let e = a.event().expect("connected");
    assert_eq!(e.kind, sluice_event_kind::Conn);
    assert_eq!(e.conn, c);
    assert_ne!(e.readiness & SLUICE_READY_CONNECTED, 0);

    assert_eq!(a.send(c, b"hello, ns-3"), 11);
    let now = run(&a, &b, now, 1_000_000_000, || false);
    let mut buf = [0u8; 64];
    assert_eq!(b.recv(s, &mut buf), 11);
    assert_eq!(&buf[..11], b"hello, ns-3");
    assert_eq!(b.recv(s, &mut buf), sluice_error::WouldBlock as i64);
    assert_eq!(b.recv(s, &mut []), sluice_error::BufferTooSmall as i64);
    let (ia, ib) = (a.info(c).unwrap(), b.info(s).unwrap());
    assert_eq!(ia.state, sluice_tcp_state::Established);
    assert_eq!((ia.bytes_sent, ib.bytes_received), (11, 11));
    assert_eq!((ia.local_port, ia.remote_port), (ib.remote_port, 80));
    assert_eq!(ia.unacked, 0);

    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_shutdown(a.0, c) }, sluice_error::Ok);
    assert_eq!(a.send(c, b"x"), sluice_error::NotConnected as i64);
    let now = run(&a, &b, now, 1_000_000_000, || false);
    assert_eq!(b.recv(s, &mut buf), 0, "end of stream");
    assert_eq!(b.close(s), sluice_error::Ok);
    let now = run(&a, &b, now, now + 1_000_000, || false);
    assert_eq!(a.recv(c, &mut buf), 0);
    assert_eq!(a.close(c), sluice_error::Ok);
    for (h, id) in [(&a, c), (&b, s)] {
        assert_eq!(h.info(id), Err(sluice_error::InvalidHandle));
        assert_eq!(h.close(id), sluice_error::InvalidHandle);
        assert_eq!(h.send(id, b"x"), sluice_error::InvalidHandle as i64);
        assert_eq!(h.recv(id, &mut buf), sluice_error::InvalidHandle as i64);
    }
    // TIME-WAIT runs out; both tables empty, no RST.
    run(&a, &b, now, u64::MAX, || false);
    for h in [&a, &b] {
        let k = h.counters();
        assert_eq!((k.connections, k.rst_sent, k.rst_received), (0, 0, 0));
        assert_eq!(h.timeout(), None);
    }
    let mut v = 0;
    // SAFETY: a live stack; NUL-terminated name; valid out-pointer.
    let r = unsafe { sluice_stack_counter(a.0, c"frames_rx".as_ptr(), &mut v) };
    assert_eq!(r, sluice_error::Ok);
    assert_eq!(v, a.counters().frames_rx);
    // SAFETY: as above.
    let r = unsafe { sluice_stack_counter(a.0, c"nope".as_ptr(), &mut v) };
    assert_eq!(r, sluice_error::InvalidArgument);
}

#[test]
fn abort_resets_and_the_peer_sees_the_error() {
    let (a, b) = (Host::new(A_IP, A_MAC), Host::new(B_IP, B_MAC));
    let l = b.listen(80).unwrap();
    let c = a.connect(0, B_IP, 80).unwrap();
    let now = run(&a, &b, 0, 1_000_000_000, || false);
    let s = b.accept(l).unwrap();
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_abort(a.0, c) }, sluice_error::Ok);
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_abort(a.0, c) }, sluice_error::InvalidHandle);
    run(&a, &b, now, 1_000_000_000, || false);
    let mut buf = [0u8; 8];
    assert_eq!(b.recv(s, &mut buf), sluice_error::ConnReset as i64);
    assert_eq!(b.info(s).unwrap().error, sluice_error::ConnReset as i32);
    assert_eq!(b.counters().rst_received, 1);
    // Unlisten: the handle dies, the port is free again with a new handle.
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_unlisten(b.0, l) }, sluice_error::Ok);
    // SAFETY: a live stack.
    let r = unsafe { sluice_unlisten(b.0, l) };
    assert_eq!(r, sluice_error::InvalidHandle);
    assert_eq!(b.accept(l), Err(sluice_error::InvalidHandle));
    assert_ne!(b.listen(80).unwrap(), l);
}

#[test]
fn every_function_refuses_a_null_stack() {
    let s = null_mut();
    let (mut l, mut c, mut t, mut v) = (0, 0, 0, 0);
    let mut buf = [0u8; 1514];
    let mut e = std::mem::MaybeUninit::uninit();
    let mut i = std::mem::MaybeUninit::uninit();
    let mut k = sluice_counters::default();
    let n = sluice_error::NullPointer;
    // SAFETY: NULL stacks are allowed and refused; every other pointer is valid.
    unsafe {
        assert_eq!(sluice_stack_max_frame_len(s), n as i64);
        assert_eq!(sluice_stack_handle_frame(s, 0, buf.as_ptr(), 60), n);
        assert_eq!(
            sluice_stack_poll_transmit(s, 0, buf.as_mut_ptr(), buf.len()),
            n as i64
        );
        assert_eq!(sluice_stack_poll_timeout(s, &mut t), n as i32);
        assert_eq!(sluice_stack_handle_timeout(s, 0), n);
        assert_eq!(sluice_stack_add_neighbor(s, B_IP, B_MAC.as_ptr()), n);
        assert_eq!(sluice_listen(s, 80, 8, &mut l), n);
        assert_eq!(sluice_unlisten(s, l), n);
        assert_eq!(sluice_accept(s, l, &mut c), n);
        assert_eq!(sluice_connect(s, 0, B_IP, 80, &mut c), n);
        assert_eq!(sluice_send(s, c, buf.as_ptr(), 1), n as i64);
        assert_eq!(sluice_recv(s, c, buf.as_mut_ptr(), 1), n as i64);
        assert_eq!(sluice_shutdown(s, c), n);
        assert_eq!(sluice_close(s, c), n);
        assert_eq!(sluice_abort(s, c), n);
        assert_eq!(sluice_poll_event(s, e.as_mut_ptr()), n as i32);
        assert_eq!(sluice_conn_get_info(s, c, i.as_mut_ptr()), n);
        assert_eq!(sluice_stack_counters(s, &mut k), n);
        assert_eq!(sluice_stack_counter(s, c"frames_rx".as_ptr(), &mut v), n);
        sluice_stack_free(s);
        assert_eq!(sluice_stack_new(null(), &mut null_mut()), n);
        assert_eq!(sluice_stack_new(&config(A_IP, A_MAC), null_mut()), n);
        assert_eq!(sluice_config_default(null_mut()), n);
        assert_eq!(sluice_config_check(null(), null_mut(), 0), n);
    }
}

#[test]
fn null_arguments_on_a_live_stack_change_nothing() {
    let a = Host::new(A_IP, A_MAC);
    let n = sluice_error::NullPointer;
    // SAFETY: a live stack; the NULL arguments are allowed and refused.
    unsafe {
        assert_eq!(sluice_stack_handle_frame(a.0, 0, null(), 60), n);
        assert_eq!(
            sluice_stack_poll_transmit(a.0, 0, null_mut(), 1514),
            n as i64
        );
        assert_eq!(sluice_stack_poll_timeout(a.0, null_mut()), n as i32);
        assert_eq!(sluice_stack_add_neighbor(a.0, B_IP, null()), n);
        assert_eq!(sluice_listen(a.0, 80, 8, null_mut()), n);
        assert_eq!(sluice_connect(a.0, 0, B_IP, 80, null_mut()), n);
        assert_eq!(sluice_poll_event(a.0, null_mut()), n as i32);
        assert_eq!(sluice_stack_counters(a.0, null_mut()), n);
        assert_eq!(sluice_stack_counter(a.0, null(), &mut 0), n);
        assert_eq!(
            sluice_stack_counter(a.0, c"frames_rx".as_ptr(), null_mut()),
            n
        );
    }
    // The refused listen took no port, the refused connect opened nothing; each refusal
    // is counted.
    assert_eq!(a.counters().connections, 0);
    assert_eq!(a.counters().abi_refused, 10);
    assert_eq!(a.timeout(), None);
    let l = a.listen(80).unwrap();
    let c = a.connect(0, B_IP, 80).unwrap();
    // SAFETY: a live stack; the NULL arguments are allowed and refused.
    unsafe {
        assert_eq!(sluice_accept(a.0, l, null_mut()), n);
        assert_eq!(sluice_send(a.0, c, null(), 1), n as i64);
        assert_eq!(sluice_recv(a.0, c, null_mut(), 1), n as i64);
        assert_eq!(sluice_conn_get_info(a.0, c, null_mut()), n);
        // Empty data may be NULL.
        assert_eq!(
            sluice_send(a.0, c, null(), 0),
            sluice_error::WouldBlock as i64
        );
        assert_eq!(
            sluice_stack_handle_frame(a.0, 0, null(), 0),
            sluice_error::Ok
        );
    }
}

#[test]
fn a_short_frame_buffer_is_refused_and_the_frame_stays_queued() {
    let a = Host::new(A_IP, A_MAC);
    // SAFETY: a live stack.
    let need = unsafe { sluice_stack_max_frame_len(a.0) };
    assert_eq!(need, 1514);
    a.connect(0, B_IP, 80).unwrap();
    let mut buf = vec![0u8; 1514];
    assert_eq!(
        a.transmit(0, &mut buf[..1513]),
        sluice_error::BufferTooSmall as i64
    );
    assert_eq!(
        a.transmit(0, &mut buf[..0]),
        sluice_error::BufferTooSmall as i64
    );
    let n = a.transmit(0, &mut buf);
    assert!(n >= 42, "the ARP request is still there: {n}");
    assert_eq!(&buf[12..14], &[0x08, 0x06]);
    assert_eq!(a.transmit(0, &mut buf), 0);
    assert_eq!(a.counters().frames_tx, 1);
}

#[test]
fn handles_never_issued_or_of_another_kind_are_refused() {
    let a = Host::new(A_IP, A_MAC);
    let l = a.listen(80).unwrap();
    let c = a.connect(0, B_IP, 80).unwrap();
    for bogus in [0, 1, u64::MAX, c ^ 1, c + (1 << 32), l] {
        assert_eq!(
            a.info(bogus),
            Err(sluice_error::InvalidHandle),
            "{bogus:#x}"
        );
    }
    for bogus in [0, l ^ 1, l + (1 << 16), c] {
        assert_eq!(
            a.accept(bogus),
            Err(sluice_error::InvalidHandle),
            "{bogus:#x}"
        );
    }
    // Another stack's handle is refused, even where that stack has a live connection in
    // the same slot with the same generation (the handles' stack tags differ).
    let b = Host::new(B_IP, B_MAC);
    let twin = b.connect(0, A_IP, 80).unwrap();
    assert_eq!(
        twin & 0x00ff_ffff_ffff_ffff,
        c & 0x00ff_ffff_ffff_ffff,
        "same slot, same generation"
    );
    assert_eq!(b.info(c), Err(sluice_error::InvalidHandle));
    assert_eq!(a.info(twin), Err(sluice_error::InvalidHandle));
    assert!(b.info(twin).is_ok());
    assert_eq!(a.connect(0, B_IP, 0), Err(sluice_error::InvalidArgument));
    assert_eq!(a.connect(0, A_IP, 80), Err(sluice_error::InvalidArgument));
    assert_eq!(a.listen(0), Err(sluice_error::InvalidArgument));
}

#[test]
fn bad_frames_are_counted_not_errors() {
    let a = Host::new(A_IP, A_MAC);
    assert_eq!(a.frame(0, &[0xff; 60]), sluice_error::Ok);
    assert_eq!(a.frame(0, &[0; 3]), sluice_error::Ok);
    assert_eq!(a.frame(0, &[0x45; 9000]), sluice_error::Ok);
    let k = a.counters();
    assert_eq!(k.frames_rx, 3);
    assert_eq!(k.malformed + k.not_for_us, 3);
}

#[test]
fn an_invalid_config_creates_nothing() {
    let mut c = config(A_IP, A_MAC);
    c.mtu = 100;
    let mut s = null_mut();
    // SAFETY: valid pointers.
    let r = unsafe { sluice_stack_new(&c, &mut s) };
    assert_eq!(r, sluice_error::InvalidConfig);
    assert!(s.is_null());
}

#[test]
fn stacks_share_nothing_and_can_live_on_different_threads() {
    // Each thread runs its own pair of stacks; the same seeds give the same frames.
    let frames: Vec<u64> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                let (a, b) = (Host::new(A_IP, A_MAC), Host::new(B_IP, B_MAC));
                let _l = b.listen(80).unwrap();
                let c = a.connect(0, B_IP, 80).unwrap();
                let now = run(&a, &b, 0, 1_000_000_000, || false);
                assert!(a.send(c, &[7; 5000]) > 0);
                run(&a, &b, now, 1_000_000_000, || false);
                a.counters().frames_tx + b.counters().frames_tx
            })
        })
        .map(|t| t.join().unwrap())
        .collect();
    assert!(frames.iter().all(|f| *f == frames[0] && *f > 4));
}

#[test]
fn per_connection_options() {
    let (a, b) = (Host::new(A_IP, A_MAC), Host::new(B_IP, B_MAC));
    let l = b.listen(80).unwrap();
    let mut c = 0;
    // SAFETY: a live stack; valid out-pointer.
    let r = unsafe { sluice_connect_with(a.0, 0, B_IP, 80, 99, &mut c) };
    assert_eq!(r, sluice_error::InvalidArgument);
    assert_eq!(a.counters().connections, 0);
    // SAFETY: as above.
    let r = unsafe { sluice_connect_with(a.0, 0, B_IP, 80, SLUICE_CC_CUBIC, &mut c) };
    assert_eq!(r, sluice_error::Ok);
    run(&a, &b, 0, 1_000_000_000, || false);
    let s = b.accept(l).unwrap();
    let info = a.info(c).unwrap();
    assert_eq!(info.congestion_control, SLUICE_CC_CUBIC);
    assert_eq!(info.ecn, 0, "CUBIC does not ask for ECN");
    assert_eq!(b.info(s).unwrap().congestion_control, SLUICE_CC_DCTCP);
    // SAFETY: a live stack.
    unsafe {
        assert_eq!(
            sluice_set_congestion_control(a.0, c, SLUICE_CC_NEWRENO),
            sluice_error::Ok
        );
        assert_eq!(
            sluice_set_congestion_control(a.0, c, 5),
            sluice_error::InvalidArgument
        );
        assert_eq!(sluice_set_nagle(a.0, c, 0), sluice_error::Ok);
        assert_eq!(sluice_set_rate(a.0, c, 1_000_000_000), sluice_error::Ok);
    }
    let info = a.info(c).unwrap();
    assert_eq!(info.congestion_control, SLUICE_CC_NEWRENO);
    assert_eq!(a.close(c), sluice_error::Ok);
    // SAFETY: a live stack; the handle is closed.
    unsafe {
        assert_eq!(
            sluice_set_congestion_control(a.0, c, SLUICE_CC_NEWRENO),
            sluice_error::InvalidHandle
        );
        assert_eq!(sluice_set_nagle(a.0, c, 1), sluice_error::InvalidHandle);
        assert_eq!(sluice_set_rate(a.0, c, 0), sluice_error::InvalidHandle);
        assert_eq!(
            sluice_set_nagle(null_mut(), c, 1),
            sluice_error::NullPointer
        );
        assert_eq!(sluice_set_rate(null_mut(), c, 0), sluice_error::NullPointer);
        assert_eq!(
            sluice_set_congestion_control(null_mut(), c, 0),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_connect_with(null_mut(), 0, B_IP, 80, 0, &mut 0),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_connect_with(a.0, 0, B_IP, 80, 0, null_mut()),
            sluice_error::NullPointer
        );
    }
}

/// A small deterministic generator (xorshift64*), so the random-call test needs no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_calls_with_random_handles_and_bytes_never_panic() {
    // Every call with handles that are live, closed, of the other stack or made up, with
    // random lengths and random frames (and mutants of real ones): each returns a known code,
    // none panics (a panic would poison the stack and show as PANIC/POISONED).
    let (a, b) = (Host::new(A_IP, A_MAC), Host::new(B_IP, B_MAC));
    let mut rng = Rng(0x5eed_f00d);
    let mut handles: Vec<u64> = vec![0, 1, u64::MAX];
    let mut now = 0u64;
    let mut buf = vec![0u8; 4096];
    let mut last_frame = vec![0u8; 60];
    for step in 0..20_000 {
        now += rng.below(50_000);
        let h = handles[rng.below(handles.len() as u64) as usize];
        let (me, other) = if rng.below(2) == 0 {
            (&a, &b)
        } else {
            (&b, &a)
        };
        let len = rng.below(buf.len() as u64) as usize;
        let code: i64 = match rng.below(14) {
            0 => me.listen(rng.below(4) as u16 + 79).map_or_else(
                |e| e as i64,
                |l| {
                    handles.push(l);
                    0
                },
            ),
            1 => me.accept(h).map_or_else(
                |e| e as i64,
                |c| {
                    handles.push(c);
                    0
                },
            ),
            2 => {
                let ip = if rng.below(4) == 0 { A_IP } else { B_IP };
                me.connect(now, ip, rng.below(4) as u16 + 79).map_or_else(
                    |e| e as i64,
                    |c| {
                        handles.push(c);
                        0
                    },
                )
            }
            3 => me.send(h, &buf[..len]),
            4 => me.recv(h, &mut buf[..len]),
            // SAFETY: a live stack.
            5 => unsafe { sluice_shutdown(me.0, h) as i64 },
            6 => me.close(h) as i64,
            // SAFETY: a live stack.
            7 => unsafe { sluice_abort(me.0, h) as i64 },
            8 => me.info(h).map_or_else(|e| e as i64, |_| 0),
            // SAFETY: a live stack.
            9 => unsafe { sluice_unlisten(me.0, h) as i64 },
            10 => {
                while me.event().is_some() {}
                0
            }
            11 => {
                // A real frame moved across, or a mutant of the last one.
                let n = me.transmit(now, &mut buf);
                if n > 0 {
                    last_frame = buf[..n as usize].to_vec();
                    other.frame(now, &last_frame) as i64
                } else {
                    let mut m = last_frame.clone();
                    let i = rng.below(m.len() as u64) as usize;
                    m[i] ^= 1 << rng.below(8);
                    m.truncate(rng.below(m.len() as u64 + 1) as usize);
                    other.frame(now, &m) as i64
                }
            }
            12 => {
                for h in [me, other] {
                    // SAFETY: a live stack.
                    unsafe { sluice_stack_handle_timeout(h.0, now) };
                }
                0
            }
            _ => {
                let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                me.frame(now, &junk) as i64
            }
        };
        let known = code >= 0 || sluice_error::from_code(code).is_some();
        assert!(known, "step {step}: unknown code {code}");
        assert!(
            code != sluice_error::Panic as i64 && code != sluice_error::Poisoned as i64,
            "step {step}: a call panicked"
        );
    }
    assert!(a.counters().abi_refused + b.counters().abi_refused > 0);
    assert!(a.counters().frames_rx + b.counters().frames_rx > 1000);
}
