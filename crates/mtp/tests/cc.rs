//! Pathlet congestion control between two stacks: DCTCP on one ECN-marking pathlet, the
//! RCP-like window from Rate feedback, and path exclusion of a congested pathlet.

mod common;

use common::{dst, Dir, Pair, IP_B};
use sluice_mtp::cc::Law;
use sluice_mtp::stack::SendOptions;
use sluice_mtp::wire::edit::Summary;
use sluice_mtp::wire::{Feedback, FeedbackKind, PathletTc};

const P1: PathletTc = PathletTc { pathlet: 1, tc: 0 };
const P2: PathletTc = PathletTc { pathlet: 2, tc: 0 };

#[test]
fn one_ecn_pathlet_behaves_like_dctcp() {
    // A 1 Gbit/s bottleneck, 20 us RTT, marking when more than K = 20 packets queue.
    let mut p = Pair::new(5);
    p.rate_bps = 1_000_000_000;
    p.delay = 10_000;
    p.device = Some(Box::new(|dir, f, link| {
        if dir == Dir::AtoB {
            if let Ok(s) = Summary::read(f) {
                let marked = u32::from(link.queued > 20);
                s.push_feedback(
                    f,
                    Feedback {
                        at: P1,
                        kind: FeedbackKind::Ecn,
                        value: marked,
                    },
                );
            }
        }
        true
    }));
    let ea = p.a.bind(0).unwrap();
    let eb = p.b.bind(7000).unwrap();
    let to = dst(IP_B, &p.b, eb);
    let data = vec![7u8; 3 << 20];
    p.a.send_message(p.now, ea, to, &data, SendOptions::default())
        .unwrap();
    let mss = p.a.mss() as f64;
    let (mut cuts, mut prev, mut max_cwnd) = (0, None::<(u64, f64)>, 0u64);
    while p.step() {
        let Some((k, w)) = p.a.pathlets().into_iter().next() else {
            continue;
        };
        assert_eq!(k, P1);
        assert_eq!(w.law, Law::Dctcp);
        if let Some((pc, pa)) = prev {
            if w.cuts > cuts {
                // DCTCP's cut (RFC 8257 3.3): cwnd x (1 - alpha / 2), with the alpha of
                // this ACK (updated before the cut when a window of data ended here).
                let expect = (pc as f64 * (1.0 - w.alpha / 2.0)).max(mss);
                let expect_old = (pc as f64 * (1.0 - pa / 2.0)).max(mss);
                let got = w.cwnd as f64;
                assert!(
                    (got - expect).abs() <= 1.0 || (got - expect_old).abs() <= 1.0,
                    "cut {pc} -> {got}, alpha {}",
                    w.alpha
                );
                cuts = w.cuts;
            }
        }
        max_cwnd = max_cwnd.max(w.cwnd);
        prev = Some((w.cwnd, w.alpha));
    }
    let m = p.b.recv_message(eb).expect("delivered");
    assert_eq!(m.data.len(), data.len());
    let w = p.a.pathlets()[0].1;
    assert!(cuts >= 3, "the window was cut repeatedly: {cuts}");
    assert_eq!(w.inflight, 0, "every byte released");
    assert!(w.alpha > 0.0 && w.alpha < 1.0, "alpha {}", w.alpha);
    // The window settles near BDP + K packets (20 us x 1 Gbit/s = 2.5 KB, K = 20 x 1.5 KB),
    // far below the 3 MiB it could reach without marks.
    assert!(max_cwnd < 200_000, "max cwnd {max_cwnd}");
    assert_eq!(p.a.counters().retx_timeout, 0);
}

#[test]
fn rate_feedback_sets_the_window_to_rate_times_srtt() {
    let mut p = Pair::new(6);
    p.delay = 50_000;
    p.device = Some(Box::new(|dir, f, _| {
        if dir == Dir::AtoB {
            if let Ok(s) = Summary::read(f) {
                s.push_feedback(
                    f,
                    Feedback {
                        at: P2,
                        kind: FeedbackKind::Rate,
                        value: 2_000,
                    },
                );
            }
        }
        true
    }));
    let ea = p.a.bind(0).unwrap();
    let eb = p.b.bind(7000).unwrap();
    let to = dst(IP_B, &p.b, eb);
    p.a.send_message(p.now, ea, to, &vec![1u8; 500_000], SendOptions::default())
        .unwrap();
    p.run(1_000_000_000);
    assert!(p.b.recv_message(eb).is_some());
    let (k, w) = p.a.pathlets()[0];
    assert_eq!(k, P2);
    assert_eq!(w.law, Law::Rcp);
    assert_eq!(w.rate_mbps, 2_000);
    let srtt = p.a.srtt(IP_B).expect("sampled");
    assert!((100_000..120_000).contains(&srtt), "srtt {srtt}");
    // 2 Gbit/s x srtt, in bytes.
    assert_eq!(w.cwnd, (2_000 * srtt / 8_000).max(p.a.mss() as u64));
}

#[test]
fn a_congested_pathlet_is_excluded_when_an_alternative_is_known() {
    // A balancer sends messages over pathlet 1 (always marking) but every third over
    // pathlet 2 (never marking), unless the packet excludes one: then over the other.
    let mut p = Pair::new(7);
    let seen_exclude = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let seen = seen_exclude.clone();
    p.device = Some(Box::new(move |dir, f, _| {
        if dir == Dir::AtoB {
            if let Ok(s) = Summary::read(f) {
                let mut via = if s.msg_id % 3 != 0 { P1 } else { P2 };
                if s.excludes(f, via) {
                    via = if via == P1 { P2 } else { P1 };
                    seen.set(seen.get() + 1);
                }
                assert!(!s.excludes(f, via), "both pathlets excluded");
                let value = u32::from(via == P1);
                s.push_feedback(
                    f,
                    Feedback {
                        at: via,
                        kind: FeedbackKind::Ecn,
                        value,
                    },
                );
            }
        }
        true
    }));
    let ea = p.a.bind(0).unwrap();
    let eb = p.b.bind(7000).unwrap();
    let to = dst(IP_B, &p.b, eb);
    for i in 0..400u32 {
        p.a.send_message(
            p.now,
            ea,
            to,
            &i.to_be_bytes().repeat(1000),
            SendOptions::default(),
        )
        .unwrap();
        for _ in 0..20 {
            p.step();
        }
    }
    p.run(1_000_000_000);
    let mut n = 0;
    while p.b.recv_message(eb).is_some() {
        n += 1;
    }
    assert_eq!(n, 400);
    let ws = p.a.pathlets();
    let w1 = ws.iter().find(|(k, _)| *k == P1).unwrap().1;
    let w2 = ws.iter().find(|(k, _)| *k == P2).unwrap().1;
    assert!(
        w1.alpha > 0.5 && w2.alpha == 0.0,
        "alpha {} / {}",
        w1.alpha,
        w2.alpha
    );
    assert!(p.a.counters().excluded_messages > 0);
    assert!(
        seen_exclude.get() > 0,
        "the balancer saw path-exclude lists"
    );
}

#[test]
fn bytes_in_flight_move_to_the_path_an_ack_reveals() {
    // Message ids 1 go over pathlet 1, every other over pathlet 2 (no marks anywhere).
    let mut p = Pair::new(8);
    p.delay = 50_000;
    p.device = Some(Box::new(|dir, f, _| {
        if dir == Dir::AtoB {
            if let Ok(s) = Summary::read(f) {
                let via = if s.msg_id == 1 { P1 } else { P2 };
                s.push_feedback(
                    f,
                    Feedback {
                        at: via,
                        kind: FeedbackKind::Ecn,
                        value: 0,
                    },
                );
            }
        }
        true
    }));
    let ea = p.a.bind(0).unwrap();
    let eb = p.b.bind(7000).unwrap();
    let to = dst(IP_B, &p.b, eb);
    let first =
        p.a.send_message(p.now, ea, to, &[1; 100], SendOptions::default())
            .unwrap();
    assert_eq!(first, 1);
    p.run(1_000_000_000);
    p.a.send_message(p.now, ea, to, &vec![2; 200_000], SendOptions::default())
        .unwrap();
    p.flush();
    let inflight = |p: &Pair, k| {
        p.a.pathlets()
            .iter()
            .find(|(x, _)| *x == k)
            .map_or(0, |(_, w)| w.inflight)
    };
    // Sent on the expected path (pathlet 1, from message 1's feedback) ...
    assert!(inflight(&p, P1) > 0);
    assert_eq!(inflight(&p, P2), 0);
    // ... and moved to pathlet 2 by the first ACK of message 2.
    while inflight(&p, P2) == 0 {
        assert!(p.step());
    }
    assert_eq!(inflight(&p, P1), 0);
    p.run(1_000_000_000);
    assert!(p.b.recv_message(eb).is_some() && p.b.recv_message(eb).is_some());
    assert_eq!(inflight(&p, P2), 0, "everything released");
    assert_eq!(
        p.a.usage().paths,
        2,
        "the expected path and one alternative"
    );
}

#[test]
fn the_dctcp_law_tracks_a_fixed_marked_fraction() {
    use sluice_mtp::cc::Window;
    use sluice_mtp::stack::CcParams;
    let params = CcParams::default();
    let (mss, srtt) = (1000u64, 10_000u64);
    let mut w = Window::new(64_000);
    let mut now = 0;
    let mut last_cuts = 0;
    // One ACK in four marked, one ACK per microsecond (10 per srtt).
    for i in 0..200_000u64 {
        now += 1_000;
        let before = (w.cwnd, w.alpha);
        w.on_ecn(now, mss, i % 4 == 0, srtt, mss, &params);
        if w.cuts > last_cuts {
            last_cuts = w.cuts;
            // Cut by alpha/2 (the alpha of this ACK).
            let expect = ((before.0 as f64) * (1.0 - w.alpha / 2.0)) as u64;
            assert_eq!(w.cwnd, expect.max(mss));
        }
    }
    // alpha converges to the marked fraction (g = 1/16, updated per window of data).
    assert!((w.alpha - 0.25).abs() < 0.03, "alpha {}", w.alpha);
    // At most one cut per srtt: 200 ms of ACKs / 10 us.
    assert!(w.cuts <= 200_000 * 1_000 / srtt + 1);
    assert!(w.cwnd >= mss);
}
