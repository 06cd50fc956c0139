//! The engine's applications (echo, sink, source) between two simulated cores.

mod support;

use std::time::Duration;

use sha2::{Digest, Sha256};
use sluice_apps::{pattern_fill, EchoServer, Sink, Source};
use sluice_sim::Impairment;
use support::*;

#[test]
fn source_to_sink_verifies_by_sha256_under_loss() {
    let (mut sim, a, b, _) = pair(41, Impairment::default().with_loss(0.01));
    let mut sink = Sink::listen(sim.host_mut(b).unwrap(), 9000, 16).unwrap();
    let now = sim.now();
    let bytes = 3 * 1024 * 1024 + 17;
    let mut source = Source::connect(sim.host_mut(a).unwrap(), now, B_IP, 9000, bytes, 7).unwrap();
    let mut reports = Vec::new();
    let mut done = false;
    let r = sim.run_until(now + Duration::from_secs(20), |_, hosts| {
        let (x, y) = hosts.get_pair_mut(a, b).unwrap();
        done = done || source.poll(x).expect("source");
        reports.extend(sink.poll(y));
        done && !reports.is_empty()
    });
    assert!(r.is_ok(), "{r:?}");
    let mut expected = vec![0u8; bytes as usize];
    pattern_fill(7, 0, &mut expected);
    let digest: [u8; 32] = Sha256::digest(&expected).into();
    assert_eq!(source.sha256, Some(digest));
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].bytes, bytes);
    assert_eq!(reports[0].sha256, Some(digest));
}

#[test]
fn echo_returns_every_byte_to_every_client() {
    let (mut sim, a, b, _) = pair(
        42,
        Impairment::default().with_reorder(0.01, Duration::from_micros(30)),
    );
    let mut echo = EchoServer::listen(sim.host_mut(b).unwrap(), 7, 64).unwrap();
    let now = sim.now();
    let clients: Vec<_> = (0..8)
        .map(|_| sim.host_mut(a).unwrap().connect(now, B_IP, 7).unwrap())
        .collect();
    let msg: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut sent = vec![0usize; clients.len()];
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); clients.len()];
    let mut buf = vec![0u8; 65536];
    let r = sim.run_until(now + Duration::from_secs(10), |_, hosts| {
        let (x, y) = hosts.get_pair_mut(a, b).unwrap();
        for (i, &c) in clients.iter().enumerate() {
            if sent[i] < msg.len() {
                if let Ok(n) = x.send(c, &msg[sent[i]..]) {
                    sent[i] += n;
                }
            }
            while let Ok(n) = x.recv(c, &mut buf) {
                if n == 0 {
                    break;
                }
                got[i].extend_from_slice(&buf[..n]);
            }
        }
        echo.poll(y);
        got.iter().all(|g| g.len() == msg.len())
    });
    assert!(r.is_ok(), "{r:?}");
    for g in &got {
        assert!(g == &msg, "echoed bytes differ");
    }
    assert_eq!(echo.open_connections(), clients.len());
}
