//! The payload paths (flexins.txt 3.2-3.3): header-only TX sends the frames the staging
//! path sends, byte for byte; the bytes a frame carries are those of the application's
//! memory when the frame was built; an application that touches or frees a buffer before
//! its completion (the verbs rules forbid it) never crashes the stack nor sends another
//! region's bytes; the counters say how many bytes the engine touched.

mod common;

use common::host::{connect, host_paths, Host, BASE};
use proptest::prelude::*;
use sluice_rdma::qp::{Memory, Remote, SendOp, SendWr, Sge};
use sluice_rdma::stack::{RxPath, TxPath};
use sluice_rdma::verbs::{Access, PdId, Region, WcStatus, WorkCompletion};

/// Two connected hosts whose payloads take `tx` and `rx`; b has 8 receives of 8 KiB.
fn pair(tx: TxPath, rx: RxPath) -> (Host, Host) {
    let (mut a, mut b) = (host_paths(1, tx, rx), host_paths(2, tx, rx));
    let (qa, qb) = ((a.qpn, a.addr), (b.qpn, b.addr));
    connect(&mut a, qb, (0x10, 0x20), &[]);
    let recvs: Vec<(u64, u32)> = (0..8)
        .map(|i| (BASE + 0x8_0000 + i * 0x2000, 0x2000))
        .collect();
    connect(&mut b, qa, (0x20, 0x10), &recvs);
    (a, b)
}

/// Moves frames both ways until neither has any; every frame, in order, with its sender.
fn run_recorded(a: &mut Host, b: &mut Host) -> Vec<(u8, Vec<u8>)> {
    let mut buf = vec![0u8; 2048];
    let mut frames = Vec::new();
    loop {
        let mut moved = false;
        while let Some(n) = a.stack.poll_transmit(1, &mut a.mem, &mut buf) {
            frames.push((1, buf[..n].to_vec()));
            b.stack.handle_frame(1, &mut b.mem, &buf[..n]);
            moved = true;
        }
        while let Some(n) = b.stack.poll_transmit(1, &mut b.mem, &mut buf) {
            frames.push((2, buf[..n].to_vec()));
            a.stack.handle_frame(1, &mut a.mem, &buf[..n]);
            moved = true;
        }
        if !moved {
            return frames;
        }
    }
}

fn completions(h: &mut Host) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    h.stack.poll_cq(h.cq, 256, &mut out).unwrap();
    out
}

/// A work request from `kind` (0 SEND, 1 WRITE, 2 WRITE with immediate, 3 READ) of `len`
/// bytes at `src` in a's region and `dst` in b's.
fn wr(id: u64, kind: u8, len: u32, src: u64, dst: u64, a: &Host, b: &Host) -> SendWr {
    let remote = Remote {
        addr: BASE + 0x1_0000 + dst,
        rkey: b.key,
    };
    SendWr {
        wr_id: id,
        op: match kind {
            0 => SendOp::Send { imm: None },
            1 => SendOp::Write { remote, imm: None },
            2 => SendOp::Write {
                remote,
                imm: Some(id as u32),
            },
            _ => SendOp::Read { remote },
        },
        sge: Sge {
            addr: BASE + src,
            len,
            lkey: a.key,
        },
        signaled: true,
        solicited: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Header-only and staging TX build identical frames (and direct and staging RX place
    /// identical bytes) for arbitrary work requests; header-only touches fewer bytes.
    #[test]
    fn header_only_and_staging_frames_are_identical(
        wrs in prop::collection::vec((0u8..4, 0u32..5000, 0u64..0x8000, 0u64..0x8000), 1..8),
        rx_staging in any::<bool>(),
    ) {
        let rx = if rx_staging { RxPath::Staging } else { RxPath::Direct };
        let (mut sa, mut sb) = pair(TxPath::Staging, rx);
        let (mut ha, mut hb) = pair(TxPath::HeaderOnly, RxPath::Direct);
        for (i, &(kind, len, src, dst)) in wrs.iter().enumerate() {
            let s = wr(i as u64, kind, len, src, dst, &sa, &sb);
            let h = wr(i as u64, kind, len, src, dst, &ha, &hb);
            sa.stack.post_send(sa.qpn, s).unwrap();
            ha.stack.post_send(ha.qpn, h).unwrap();
        }
        let staged = run_recorded(&mut sa, &mut sb);
        let direct = run_recorded(&mut ha, &mut hb);
        prop_assert_eq!(staged.len(), direct.len());
        for (k, (s, d)) in staged.iter().zip(&direct).enumerate() {
            prop_assert!(s == d, "frame {} differs", k);
        }
        prop_assert!(sa.mem == ha.mem && sb.mem == hb.mem, "memory differs");
        prop_assert_eq!(completions(&mut sa), completions(&mut ha));
        prop_assert_eq!(completions(&mut sb), completions(&mut hb));
        for (s, h) in [(&sa, &ha), (&sb, &hb)] {
            let (st, ht) = (s.stack.counters.tx_touch, h.stack.counters.tx_touch);
            prop_assert_eq!(st.payload, ht.payload);
            prop_assert_eq!(st.icrc, ht.icrc);
            prop_assert_eq!(st.staging, st.payload, "staging copies every payload byte once more");
            prop_assert_eq!(ht.staging, 0);
            let (sr, hr) = (s.stack.counters.rx_touch, h.stack.counters.rx_touch);
            prop_assert_eq!(sr.payload, hr.payload);
            prop_assert_eq!(hr.staging, 0);
            prop_assert_eq!(sr.staging > 0, rx_staging && sr.icrc > 0);
        }
    }
}

#[test]
fn a_frame_carries_the_memory_as_it_was_when_the_frame_was_built() {
    let (mut a, mut b) = pair(TxPath::HeaderOnly, RxPath::Direct);
    let original: Vec<u8> = a.mem.0[..3000].to_vec();
    a.stack
        .post_send(a.qpn, wr(1, 1, 3000, 0, 0, &a, &b))
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let n = a.stack.poll_transmit(1, &mut a.mem, &mut buf).unwrap();
    let first = buf[..n].to_vec();
    // The application writes its buffer before the completion (the verbs rules say it may
    // not): the frame already built keeps what was there; the next frames read it anew.
    a.mem.0[..3000].fill(0xEE);
    b.stack.handle_frame(1, &mut b.mem, &first);
    let rest = run_recorded(&mut a, &mut b);
    assert!(rest.len() >= 3, "two more WRITE packets and an ACK");
    let placed = &b.mem.0[0x1_0000..0x1_0000 + 3000];
    assert_eq!(
        &placed[..1024],
        &original[..1024],
        "the first frame's bytes"
    );
    assert!(
        placed[1024..].iter().all(|&x| x == 0xEE),
        "the later frames'"
    );
    let wc = completions(&mut a);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(a.stack.counters.tx_touch.payload, 3000);
    assert_eq!(b.stack.counters.rx_touch.payload, 3000);
}

#[test]
fn a_buffer_freed_before_its_completion_fails_the_request_and_sends_no_other_memory() {
    for tx in [TxPath::HeaderOnly, TxPath::Staging] {
        let (mut a, mut b) = pair(tx, RxPath::Direct);
        // Another application's region on the same stack, with bytes no frame may carry.
        let secret = 0x4_0000u64;
        a.mem.0[secret as usize..secret as usize + 0x1_0000].fill(0xAB);
        let (sent, before) = (a.mem.0[..1024].to_vec(), b.mem.0.clone());
        a.stack
            .post_send(a.qpn, wr(7, 1, 8000, 0, 0, &a, &b))
            .unwrap();
        let mut buf = vec![0u8; 2048];
        let n = a.stack.poll_transmit(1, &mut a.mem, &mut buf).unwrap();
        b.stack.handle_frame(1, &mut b.mem, &buf[..n]);
        // The application frees its buffer mid-message; another's region takes its place
        // at the same addresses.
        a.stack.dereg_mr(a.key).unwrap();
        a.stack
            .reg_mr(Region {
                pd: PdId(2),
                addr: BASE,
                len: 0x1_0000,
                access: Access::LOCAL_WRITE,
                backing: 0,
                offset: secret,
            })
            .unwrap();
        let frames = run_recorded(&mut a, &mut b);
        for (from, f) in &frames {
            assert!(
                !(*from == 1 && f.windows(16).any(|w| w.iter().all(|&x| x == 0xAB))),
                "{tx:?}: a frame carried the other region's bytes"
            );
        }
        let wc = completions(&mut a);
        assert_eq!(wc.len(), 1, "{tx:?}");
        assert_eq!(wc[0].status, WcStatus::LocProtErr, "{tx:?}");
        // b holds the first packet's bytes and nothing else of the message.
        let at = 0x1_0000;
        assert_eq!(&b.mem.0[at..at + 1024], &sent[..], "{tx:?}");
        assert_eq!(&b.mem.0[at + 1024..], &before[at + 1024..], "{tx:?}");
    }
}

#[test]
fn a_device_buffer_too_short_for_an_mtu_packet_falls_back_to_staging() {
    let (mut a, mut b) = pair(TxPath::HeaderOnly, RxPath::Direct);
    a.stack
        .post_send(a.qpn, wr(1, 1, 100, 0, 0, &a, &b))
        .unwrap();
    // 1000 bytes cannot hold a 1024-byte MTU packet, but this one is short.
    let mut short = vec![0u8; 1000];
    let n = a.stack.poll_transmit(1, &mut a.mem, &mut short).unwrap();
    assert_eq!(a.stack.counters.tx_buffer_short, 1);
    assert_eq!(a.stack.counters.tx_touch.staging, 100);
    b.stack.handle_frame(1, &mut b.mem, &short[..n]);
    run_recorded(&mut a, &mut b);
    let wc = completions(&mut a);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut out = [0u8; 100];
    assert!(b.mem.read(0, 0x1_0000, &mut out));
    assert_eq!(&out[..], &a.mem.0[..100]);
}

#[test]
fn header_only_touches_two_bytes_per_payload_byte_and_staging_three() {
    let mut ratio = Vec::new();
    for tx in [TxPath::HeaderOnly, TxPath::Staging] {
        let (mut a, mut b) = pair(tx, RxPath::Direct);
        for i in 0..8 {
            a.stack
                .post_send(a.qpn, wr(i, 1, 65_536, 0, 0, &a, &b))
                .unwrap();
        }
        run_recorded(&mut a, &mut b);
        let t = a.stack.counters.tx_touch;
        assert_eq!(t.payload, 8 * 65_536);
        ratio.push(t.per_payload_byte());
    }
    // Headers add a few percent to the ICRC pass.
    assert!((2.0..2.1).contains(&ratio[0]), "header-only {}", ratio[0]);
    assert!((3.0..3.1).contains(&ratio[1]), "staging {}", ratio[1]);
}
