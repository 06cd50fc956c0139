//! The offload paths: large segments for a device with TSO (`poll_transmit_offload`) and
//! frames whose checksum a device vouches for (`handle_frames_checksum_ok`).

mod harness;

use harness::*;
use sluice_tcp::Stack;
use sluice_wire::tcp::TcpFlags;

/// Ethernet, IPv4 and a TCP header without options.
const HEADERS: usize = 54;

fn tso_stack() -> Stack {
    let mut cfg = config();
    cfg.ooo_intervals = 4;
    cfg.tso_max_payload = 65_455;
    cfg.tx_checksum_offload = true;
    stack_with(cfg)
}

fn ident_of(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[18], frame[19]])
}

#[test]
fn rfc9293_shld_7_nagle_holds_the_sub_mss_tail_with_and_without_tso() {
    for tso in [false, true] {
        let mut s = if tso { tso_stack() } else { stack() };
        let c = established(&mut s, ms(0));
        s.send(c.id, &pattern(100, 1)).unwrap();
        let mut buf = vec![0u8; 65536];
        let t = s.poll_transmit_offload(ms(0), &mut buf).unwrap();
        assert_eq!(t.len, HEADERS + 100);
        s.send(c.id, &pattern(3000, 2)).unwrap();
        let mut total = 0;
        let mut frames = 0;
        while let Some(t) = s.poll_transmit_offload(ms(0), &mut buf) {
            total += t.len - HEADERS;
            frames += 1;
        }
        // 100 bytes are in flight: two full segments go, the 80-byte tail waits.
        assert_eq!(total, 2920, "tso={tso}");
        assert_eq!(frames, if tso { 1 } else { 2 }, "tso={tso}");
    }
}

/// A connection whose segments carry three SACK blocks (room below the MSS).
fn with_three_sack_blocks(s: &mut Stack) -> Conn {
    let l = s.listen(LISTEN_PORT, 16).unwrap();
    let c = passive_open(
        s,
        l,
        Peer::new(40000, LISTEN_PORT),
        ms(0),
        1000,
        full_syn_options(1460, 7, 1000),
        65535,
    );
    while s.poll_event().is_some() {}
    for k in 0..3u32 {
        let seg = c
            .data_seg(&[1; 50])
            .seq(c.peer_nxt + (100 + 200 * k))
            .ts(1001 + k, 0);
        c.peer.send(s, ms(1), seg);
    }
    let _ = c.peer.recv_all(s, ms(1));
    c
}

#[test]
fn a_buffer_just_over_the_mtu_never_strands_a_segment() {
    let mut s = tso_stack();
    let c = with_three_sack_blocks(&mut s);
    s.send(c.id, &pattern(1448, 3)).unwrap();
    let mut small = vec![0u8; 1524];
    let t = s
        .poll_transmit_offload(ms(1), &mut small)
        .expect("a segment that fits the buffer");
    assert!(t.len <= 1514 && t.gso_size == 0, "{t:?}");
}

#[test]
fn large_segments_with_sack_blocks_fit_the_mtu_keep_ident_order_and_carry_the_fin_last() {
    let mut s = tso_stack();
    let c = with_three_sack_blocks(&mut s);
    s.send(c.id, &pattern(10_000, 3)).unwrap();
    s.close(c.id).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut next_ident = None;
    let mut total = 0usize;
    let mut fins = 0;
    while let Some(t) = s.poll_transmit_offload(ms(1), &mut buf) {
        let f = &buf[..t.len];
        let thl = usize::from(f[34 + 12] >> 4) * 4;
        let payload = t.len - 34 - thl;
        let segment = if t.gso_size == 0 {
            payload
        } else {
            usize::from(t.gso_size)
        };
        assert!(segment + 34 + thl <= 1514, "segments exceed the MTU: {t:?}");
        if let Some(ident) = next_ident {
            assert_eq!(ident_of(f), ident, "one IPv4 ident per wire segment");
        }
        let segments = payload.div_ceil(segment.max(1)).max(1) as u16;
        next_ident = Some(ident_of(f).wrapping_add(segments));
        if f[34 + 13] & TcpFlags::FIN.0 != 0 {
            fins += 1;
        }
        total += payload;
    }
    assert_eq!(total, 10_000);
    assert_eq!(fins, 1);
}

#[test]
fn rfc1122_3_2_1_2_a_device_vouched_frame_still_has_its_ipv4_header_verified() {
    let mut s = stack();
    let c = established(&mut s, ms(0));
    let mut f = c.peer.frame(&c.data_seg(b"hello"));
    f[14 + 10] ^= 0x55;
    s.handle_frames_checksum_ok(ms(1), &[&f]);
    c.peer.recv_nothing(&mut s, ms(1));
    assert_eq!(s.counters().bad_checksum, 1);
}
