//! The MTP part of the C ABI (`sluice_mtp_*`) from Rust: each function's work and its error
//! paths (NULL pointers, stale, foreign and made-up endpoints, short buffers, invalid
//! arguments and configs), and seeded random calls that never panic.

use std::ptr::{null, null_mut};

use sluice_ffi::*;

const A_IP: u32 = 0x0a00_0001;
const B_IP: u32 = 0x0a00_0002;
const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const FRAME: usize = 1514;

fn config(ip: u32, mac: [u8; 6]) -> sluice_mtp_config {
    let mut c = std::mem::MaybeUninit::uninit();
    // SAFETY: valid for a write of a sluice_mtp_config.
    let r = unsafe { sluice_mtp_config_default(c.as_mut_ptr()) };
    assert_eq!(r, sluice_error::Ok);
    // SAFETY: written whole by sluice_mtp_config_default.
    let mut c: sluice_mtp_config = unsafe { c.assume_init() };
    c.ip = ip;
    c.mac = mac;
    c.max_endpoints = 8;
    c
}

/// An MTP stack, freed on drop.
struct Host(*mut sluice_mtp_stack);

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: from sluice_mtp_stack_new, not used afterwards.
        unsafe { sluice_mtp_stack_free(self.0) }
    }
}

impl Host {
    fn new(ip: u32, mac: [u8; 6], peer_ip: u32, peer_mac: [u8; 6]) -> Host {
        let mut s = null_mut();
        // SAFETY: a valid config and out-pointer.
        let r = unsafe { sluice_mtp_stack_new(&config(ip, mac), &mut s) };
        assert_eq!(r, sluice_error::Ok);
        assert!(!s.is_null());
        // SAFETY: a live stack; a 6-byte MAC.
        let r = unsafe { sluice_mtp_set_neighbor(s, peer_ip, peer_mac.as_ptr()) };
        assert_eq!(r, sluice_error::Ok);
        Host(s)
    }
    fn pair() -> (Host, Host) {
        (
            Host::new(A_IP, A_MAC, B_IP, B_MAC),
            Host::new(B_IP, B_MAC, A_IP, A_MAC),
        )
    }
    fn bind(&self, port: u16) -> Result<sluice_mtp_endpoint, sluice_error> {
        let mut ep = 0;
        // SAFETY: a live stack; valid out-pointer.
        match unsafe { sluice_mtp_bind(self.0, port, &mut ep) } {
            sluice_error::Ok => Ok(ep),
            e => Err(e),
        }
    }
    fn send(&self, ep: sluice_mtp_endpoint, ip: u32, port: u16, data: &[u8]) -> i64 {
        // SAFETY: a live stack; `data` valid for its length.
        unsafe { sluice_mtp_send(self.0, 0, ep, ip, port, 1, 0, data.as_ptr(), data.len()) }
    }
    fn recv(&self, ep: sluice_mtp_endpoint, buf: &mut [u8]) -> (i64, sluice_mtp_message_info) {
        let mut info = sluice_mtp_message_info::default();
        // SAFETY: a live stack; `buf` valid for its length; valid out-pointer.
        let n = unsafe { sluice_mtp_recv(self.0, ep, buf.as_mut_ptr(), buf.len(), &mut info) };
        (n, info)
    }
    fn counters(&self) -> sluice_mtp_counters {
        let mut k = sluice_mtp_counters::default();
        assert_eq!(
            // SAFETY: a live stack; valid out-pointer.
            unsafe { sluice_mtp_stack_counters(self.0, &mut k) },
            sluice_error::Ok
        );
        k
    }
    fn events(&self) -> Vec<sluice_mtp_event> {
        let mut v = Vec::new();
        loop {
            let mut e = std::mem::MaybeUninit::uninit();
            // SAFETY: a live stack; valid out-pointer.
            match unsafe { sluice_mtp_poll_event(self.0, e.as_mut_ptr()) } {
                // SAFETY: written by sluice_mtp_poll_event when it returns 1.
                1 => v.push(unsafe { e.assume_init() }),
                0 => return v,
                r => panic!("poll_event: {r}"),
            }
        }
    }
}

/// Moves frames between two stacks until both are quiet, advancing time to deadlines;
/// returns the frames moved.
fn run(a: &Host, b: &Host, now: &mut u64) -> usize {
    let mut moved = 0;
    let mut buf = [0u8; FRAME];
    for _ in 0..100_000 {
        let mut any = false;
        for (from, to) in [(a, b), (b, a)] {
            loop {
                // SAFETY: live stacks; `buf` valid for its length.
                let n = unsafe {
                    sluice_mtp_stack_poll_transmit(from.0, *now, buf.as_mut_ptr(), FRAME)
                };
                assert!(n >= 0, "{n}");
                if n == 0 {
                    break;
                }
                // SAFETY: as above.
                let r =
                    unsafe { sluice_mtp_stack_handle_frame(to.0, *now, buf.as_ptr(), n as usize) };
                assert_eq!(r, sluice_error::Ok);
                moved += 1;
                any = true;
            }
        }
        if any {
            continue;
        }
        let mut next = u64::MAX;
        for h in [a, b] {
            let mut t = 0;
            // SAFETY: a live stack; valid out-pointer.
            if unsafe { sluice_mtp_stack_poll_timeout(h.0, &mut t) } == 1 {
                next = next.min(t);
            } else {
                assert_eq!(t, u64::MAX);
            }
        }
        if next == u64::MAX {
            return moved;
        }
        *now = (*now).max(next);
        for h in [a, b] {
            assert_eq!(
                // SAFETY: a live stack.
                unsafe { sluice_mtp_stack_handle_timeout(h.0, *now) },
                sluice_error::Ok
            );
        }
    }
    panic!("the stacks never went quiet");
}

#[test]
fn a_message_goes_from_bind_to_recv_with_its_events() {
    let (a, b) = Host::pair();
    let ea = a.bind(7000).unwrap();
    let eb = b.bind(0).unwrap();
    // SAFETY: a live stack.
    let port = unsafe { sluice_mtp_local_port(b.0, eb) };
    assert!((49152..=65535).contains(&port), "{port}");
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 300) as u8).collect();
    let id = a.send(ea, B_IP, port as u16, &data);
    assert!(id >= 0);
    let mut now = 1;
    assert!(run(&a, &b, &mut now) >= 5);
    let ev = b.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].kind, sluice_mtp_event_kind::Readable);
    assert_eq!(ev[0].endpoint, eb);
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_mtp_next_len(b.0, eb) }, 5000);
    let mut buf = vec![0u8; 8000];
    let (n, info) = b.recv(eb, &mut buf);
    assert_eq!(n, 5000);
    assert_eq!(&buf[..5000], &data[..]);
    assert_eq!(
        info,
        sluice_mtp_message_info {
            src_ip: A_IP,
            src_port: 7000,
            priority: 1,
            tc: 0,
            msg_id: id as u32,
            len: 5000,
        }
    );
    assert_eq!(b.recv(eb, &mut buf).0, sluice_error::WouldBlock as i64);
    let ev = a.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].kind, sluice_mtp_event_kind::Delivered);
    assert_eq!((ev[0].endpoint, ev[0].msg_id), (ea, id as u32));
    // The wire in `run` has no delay: everything happened at time 1.
    assert_eq!(ev[0].at_ns, 1);
    assert_eq!(ev[0].fail_reason, sluice_mtp_fail_reason::None);
    let mut srtt = 7;
    // SAFETY: a live stack; valid out-pointer.
    assert_eq!(unsafe { sluice_mtp_srtt(a.0, B_IP, &mut srtt) }, 1);
    // SAFETY: as above.
    assert_eq!(unsafe { sluice_mtp_srtt(a.0, 0x0a00_0009, &mut srtt) }, 0);
    assert_eq!(srtt, 0);
    let (ka, kb) = (a.counters(), b.counters());
    assert_eq!(ka.messages_acked, 1);
    assert_eq!(kb.messages_delivered, 1);
    assert_eq!(ka.frames_out, kb.frames_in);
    assert_eq!((ka.abi_refused, kb.abi_refused), (0, 0));
}

#[test]
fn every_function_refuses_null_pointers() {
    let (a, _b) = Host::pair();
    let ep = a.bind(1).unwrap();
    let mut buf = [0u8; FRAME];
    let s = null_mut();
    let n = sluice_error::NullPointer as i64;
    // SAFETY: NULL is allowed everywhere (refused); other pointers are valid.
    unsafe {
        assert_eq!(
            sluice_mtp_config_default(null_mut()),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_mtp_stack_new(null(), &mut null_mut()),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_mtp_stack_new(&config(A_IP, A_MAC), null_mut()),
            sluice_error::NullPointer
        );
        sluice_mtp_stack_free(null_mut());
        assert_eq!(sluice_mtp_stack_max_frame_len(s), n);
        assert_eq!(
            sluice_mtp_stack_handle_frame(s, 0, buf.as_ptr(), 1),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_mtp_stack_poll_transmit(s, 0, buf.as_mut_ptr(), FRAME),
            n
        );
        assert_eq!(sluice_mtp_stack_poll_timeout(s, &mut 0), n as i32);
        assert_eq!(
            sluice_mtp_stack_handle_timeout(s, 0),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_mtp_set_neighbor(s, B_IP, B_MAC.as_ptr()),
            sluice_error::NullPointer
        );
        assert_eq!(sluice_mtp_bind(s, 2, &mut 0), sluice_error::NullPointer);
        assert_eq!(sluice_mtp_unbind(s, ep), sluice_error::NullPointer);
        assert_eq!(sluice_mtp_local_port(s, ep), n as i32);
        assert_eq!(sluice_mtp_send(s, 0, ep, B_IP, 9, 0, 0, buf.as_ptr(), 1), n);
        assert_eq!(
            sluice_mtp_recv(s, ep, buf.as_mut_ptr(), FRAME, null_mut()),
            n
        );
        assert_eq!(sluice_mtp_next_len(s, ep), n);
        assert_eq!(sluice_mtp_poll_event(s, null_mut()), n as i32);
        assert_eq!(
            sluice_mtp_stack_counters(s, null_mut()),
            sluice_error::NullPointer
        );
        assert_eq!(sluice_mtp_srtt(s, B_IP, &mut 0), n as i32);
        // Live stack, NULL arguments.
        let s = a.0;
        assert_eq!(
            sluice_mtp_stack_handle_frame(s, 0, null(), 1),
            sluice_error::NullPointer
        );
        assert_eq!(
            sluice_mtp_stack_handle_frame(s, 0, null(), 0),
            sluice_error::Ok
        );
        assert_eq!(sluice_mtp_stack_poll_transmit(s, 0, null_mut(), FRAME), n);
        assert_eq!(sluice_mtp_stack_poll_timeout(s, null_mut()), n as i32);
        assert_eq!(
            sluice_mtp_set_neighbor(s, B_IP, null()),
            sluice_error::NullPointer
        );
        assert_eq!(sluice_mtp_bind(s, 2, null_mut()), sluice_error::NullPointer);
        assert_eq!(sluice_mtp_send(s, 0, ep, B_IP, 9, 0, 0, null(), 1), n);
        assert_eq!(sluice_mtp_recv(s, ep, null_mut(), 1, null_mut()), n);
        assert_eq!(sluice_mtp_poll_event(s, null_mut()), n as i32);
        assert_eq!(
            sluice_mtp_stack_counters(s, null_mut()),
            sluice_error::NullPointer
        );
        assert_eq!(sluice_mtp_srtt(s, B_IP, null_mut()), n as i32);
    }
    // Nothing was bound by the refused bind; every refusal on the live stack is counted.
    assert_eq!(a.bind(2).map(|_| ()), Ok(()));
    assert_eq!(a.counters().abi_refused, 10);
}

#[test]
fn stale_foreign_and_made_up_endpoints_are_invalid_handles() {
    let (a, b) = Host::pair();
    let ea = a.bind(5).unwrap();
    let eb = b.bind(5).unwrap();
    let bad = sluice_error::InvalidHandle as i64;
    let mut buf = [0u8; 16];
    for h in [eb, 0, u64::MAX, ea ^ 1, ea | 1 << 40] {
        assert_eq!(a.send(h, B_IP, 5, b"x"), bad, "{h:#x}");
        assert_eq!(a.recv(h, &mut buf).0, bad);
        // SAFETY: a live stack.
        unsafe {
            assert_eq!(sluice_mtp_next_len(a.0, h), bad);
            assert_eq!(sluice_mtp_local_port(a.0, h), bad as i32);
            assert_eq!(sluice_mtp_unbind(a.0, h), sluice_error::InvalidHandle);
        }
    }
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_mtp_unbind(a.0, ea) }, sluice_error::Ok);
    assert_eq!(a.send(ea, B_IP, 5, b"x"), bad);
    assert_eq!(
        // SAFETY: a live stack.
        unsafe { sluice_mtp_unbind(a.0, ea) },
        sluice_error::InvalidHandle
    );
    // The port again: a new handle, the old one still refused.
    let again = a.bind(5).unwrap();
    assert_ne!(again, ea);
    assert_eq!(a.send(ea, B_IP, 5, b"x"), bad);
    assert!(a.send(again, B_IP, 5, b"x") >= 0);
}

#[test]
fn unbinding_fails_outstanding_messages_and_drops_a_held_one() {
    let (a, b) = Host::pair();
    let ea = a.bind(5).unwrap();
    let eb = b.bind(6).unwrap();
    let id = a.send(ea, B_IP, 6, &[1; 3000]);
    // Nothing moved: the message is outstanding when its endpoint goes.
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_mtp_unbind(a.0, ea) }, sluice_error::Ok);
    let ev = a.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].kind, sluice_mtp_event_kind::Failed);
    assert_eq!(ev[0].fail_reason, sluice_mtp_fail_reason::Unbound);
    assert_eq!((ev[0].endpoint, ev[0].msg_id), (ea, id as u32));
    // A message held back by a short buffer goes with its endpoint.
    let ea = a.bind(5).unwrap();
    a.send(ea, B_IP, 6, &[2; 3000]);
    run(&a, &b, &mut 0);
    assert_eq!(
        b.recv(eb, &mut [0; 10]).0,
        sluice_error::BufferTooSmall as i64
    );
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_mtp_unbind(b.0, eb) }, sluice_error::Ok);
    let eb = b.bind(6).unwrap();
    assert_eq!(
        b.recv(eb, &mut [0; 4000]).0,
        sluice_error::WouldBlock as i64
    );
}

#[test]
fn a_short_receive_buffer_keeps_the_message_first_in_line() {
    let (a, b) = Host::pair();
    let ea = a.bind(5).unwrap();
    let eb = b.bind(6).unwrap();
    let first = a.send(ea, B_IP, 6, &[7; 2000]);
    run(&a, &b, &mut 0);
    let mut buf = vec![0u8; 2000];
    let short = sluice_error::BufferTooSmall as i64;
    // SAFETY: a live stack; NULL with length 0 is allowed.
    let n = unsafe { sluice_mtp_recv(b.0, eb, null_mut(), 0, null_mut()) };
    assert_eq!(n, short);
    assert_eq!(
        b.recv(eb, &mut buf[..1999]),
        (short, sluice_mtp_message_info::default())
    );
    assert_eq!(b.recv(eb, &mut buf[..10]).0, short);
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_mtp_next_len(b.0, eb) }, 2000);
    let (n, info) = b.recv(eb, &mut buf);
    assert_eq!((n, info.msg_id), (2000, first as u32));
    assert!(buf.iter().all(|&x| x == 7));
    assert_eq!(b.counters().abi_refused, 3);
    // An empty message fits any buffer, even NULL with length 0.
    let second = a.send(ea, B_IP, 6, b"");
    assert_ne!(first, second);
    run(&a, &b, &mut 0);
    // SAFETY: a live stack; NULL with length 0 is allowed.
    let n = unsafe { sluice_mtp_recv(b.0, eb, null_mut(), 0, null_mut()) };
    assert_eq!(n, 0);
    // A misaligned info pointer is refused before anything is taken.
    a.send(ea, B_IP, 6, b"abc");
    run(&a, &b, &mut 0);
    let mut words = [0u64; 4];
    let misaligned = words.as_mut_ptr().cast::<u8>().wrapping_add(1).cast();
    // SAFETY: a live stack; `buf` valid; the info pointer is refused before use.
    let r = unsafe { sluice_mtp_recv(b.0, eb, buf.as_mut_ptr(), buf.len(), misaligned) };
    assert_eq!(r, sluice_error::InvalidArgument as i64);
    assert_eq!(b.recv(eb, &mut buf).0, 3);
}

#[test]
fn bad_sends_and_binds_are_refused_with_their_codes() {
    let (a, _b) = Host::pair();
    let ea = a.bind(5).unwrap();
    assert_eq!(a.bind(5), Err(sluice_error::AddrInUse));
    let inval = sluice_error::InvalidArgument as i64;
    assert_eq!(a.send(ea, B_IP, 0, b"x"), inval);
    assert_eq!(a.send(ea, 0, 9, b"x"), inval);
    assert_eq!(a.send(ea, 0xffff_ffff, 9, b"x"), inval);
    assert_eq!(a.send(ea, 0xe000_0001, 9, b"x"), inval);
    let long = vec![0u8; (4 << 20) + 1];
    assert_eq!(a.send(ea, B_IP, 9, &long), inval);
    for p in 6..13 {
        a.bind(p).unwrap();
    }
    assert_eq!(a.bind(13), Err(sluice_error::NoResources));
}

#[test]
fn short_frame_buffers_take_nothing_and_garbage_frames_are_counted() {
    let (a, b) = Host::pair();
    let ea = a.bind(5).unwrap();
    b.bind(6).unwrap();
    a.send(ea, B_IP, 6, &[3; 100]);
    let mut buf = [0u8; FRAME];
    // SAFETY: a live stack.
    assert_eq!(unsafe { sluice_mtp_stack_max_frame_len(a.0) }, FRAME as i64);
    // SAFETY: a live stack; `buf` valid for FRAME bytes.
    unsafe {
        assert_eq!(
            sluice_mtp_stack_poll_transmit(a.0, 0, buf.as_mut_ptr(), FRAME - 1),
            sluice_error::BufferTooSmall as i64
        );
        assert!(sluice_mtp_stack_poll_transmit(a.0, 0, buf.as_mut_ptr(), FRAME) > 0);
        assert_eq!(
            sluice_mtp_stack_poll_transmit(a.0, 0, buf.as_mut_ptr(), FRAME),
            0
        );
        for junk in [&[0u8; 0][..], &[0xff; 14], &[0x45; 200]] {
            assert_eq!(
                sluice_mtp_stack_handle_frame(b.0, 0, junk.as_ptr(), junk.len()),
                sluice_error::Ok
            );
        }
    }
    let k = b.counters();
    assert_eq!(k.frames_in, 3);
    assert_eq!(k.malformed + k.not_for_us + k.bad_checksum, 3);
    assert_eq!(k.messages_delivered, 0);
}

#[test]
fn invalid_configs_make_no_stack() {
    let mut c = config(A_IP, A_MAC);
    c.encapsulation = 7;
    let mut s = null_mut();
    assert_eq!(
        // SAFETY: valid config and out-pointer.
        unsafe { sluice_mtp_stack_new(&c, &mut s) },
        sluice_error::InvalidConfig
    );
    assert!(s.is_null());
    let mut c = config(A_IP, A_MAC);
    c.encapsulation = SLUICE_MTP_ENCAP_UDP;
    assert_eq!(
        // SAFETY: valid config and out-pointer.
        unsafe { sluice_mtp_stack_new(&c, &mut s) },
        sluice_error::Ok
    );
    // SAFETY: from sluice_mtp_stack_new.
    unsafe { sluice_mtp_stack_free(s) };
}

/// xorshift64*: the random calls' source, seeded.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn random_calls_return_known_codes_and_never_panic() {
    let (a, b) = Host::pair();
    let mut eps = vec![a.bind(5).unwrap(), b.bind(6).unwrap(), 0, u64::MAX];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 70_000];
    let mut now = 0u64;
    for _ in 0..20_000 {
        let r = next(&mut rng);
        let h = if r % 2 == 0 { &a } else { &b };
        let ep = eps[(r >> 8) as usize % eps.len()];
        let len = (next(&mut rng) % 70_000) as usize;
        now += next(&mut rng) % 50_000;
        let code: i64 = match (r >> 4) % 8 {
            0 => h.send(
                ep,
                if r % 3 == 0 { A_IP } else { B_IP },
                (r >> 20) as u16 % 8,
                &buf[..len],
            ),
            1 => h.recv(ep, &mut buf[..len]).0,
            2 => match h.bind((r >> 24) as u16 % 12) {
                Ok(e) => {
                    eps.push(e);
                    0
                }
                Err(e) => e as i64,
            },
            // SAFETY: a live stack.
            3 => unsafe { sluice_mtp_unbind(h.0, ep) as i64 },
            4 => {
                run(&a, &b, &mut now);
                0
            }
            5 => {
                // A bit-flipped frame of the other stack's.
                let mut f = [0u8; FRAME];
                let other = if r % 2 == 0 { &b } else { &a };
                // SAFETY: live stacks; `f` valid for FRAME bytes.
                unsafe {
                    let n = sluice_mtp_stack_poll_transmit(other.0, now, f.as_mut_ptr(), FRAME);
                    assert!(n >= 0);
                    let n = n as usize;
                    if n > 0 {
                        f[(r >> 32) as usize % n] ^= 1 << (r % 8);
                    }
                    sluice_mtp_stack_handle_frame(h.0, now, f.as_ptr(), n) as i64
                }
            }
            // SAFETY: a live stack.
            6 => unsafe { sluice_mtp_next_len(h.0, ep) },
            _ => {
                let _ = h.events();
                0
            }
        };
        assert!(
            code >= 0 || sluice_error::from_code(code).is_some(),
            "{code}"
        );
        assert_ne!(code, sluice_error::Panic as i64);
        assert_ne!(code, sluice_error::Poisoned as i64);
    }
    run(&a, &b, &mut now);
}

#[test]
fn stacks_on_distinct_threads_do_the_same_work() {
    // No global state: the same exchange on four threads at once gives the same counters.
    let exchange = || {
        let (a, b) = Host::pair();
        let ea = a.bind(5).unwrap();
        b.bind(6).unwrap();
        for i in 0..20usize {
            assert!(a.send(ea, B_IP, 6, &vec![i as u8; 1 + i * 997]) >= 0);
        }
        let mut now = 0;
        run(&a, &b, &mut now);
        (a.counters(), b.counters(), now)
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(exchange)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results[0].1.messages_delivered, 20);
    assert!(results.iter().all(|r| *r == results[0]));
}
