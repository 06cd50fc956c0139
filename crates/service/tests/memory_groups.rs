//! Each uid's memory group (src/memory_groups.rs, `ServiceConfig::buffered_bytes_per_uid`):
//! an application that never reads takes its uid over its limit on buffered bytes, its
//! listener's next SYN goes unanswered, and once it reads the SYN (sent again) gets in.
//! (That another uid goes on meanwhile is the core's test, crates/tcp/tests/memory_groups.rs.)

mod support;

use std::time::{Duration, Instant};

use sluice_tcp::{Error, TcpState};
use support::*;

const PER_UID: u64 = 40 << 10;

#[test]
fn a_uid_over_its_buffered_bytes_gets_no_new_connections_until_it_reads() {
    let mut net = Net::start_with("memory-groups", |sc| {
        sc.buffered_bytes_per_uid = Some(PER_UID)
    });
    let mut app = net.attach("never-reads");
    let ctx = app.context();
    let port = 7100;
    let l = app.listen(ctx, port, &mut || net.peer.pump());
    // The peer sends more than the engine's receive ring (64 KiB) and the application's
    // (8 KiB) hold together; the application does not read.
    let data = pattern(96 << 10, 7);
    let first = net.peer.connect(ENGINE_IP, port);
    let rec = app.accept(ctx, l, &mut || net.peer.pump());
    let mut sent = 0;
    net.peer.until("the engine's window closes", |s| {
        match s.send(first, &data[sent..]) {
            Ok(n) => sent += n,
            Err(Error::WouldBlock) => {}
            Err(e) => panic!("peer send: {e}"),
        }
        let info = s.info(first).expect("live");
        (info.snd_wnd == 0 && sent > PER_UID as usize).then_some(())
    });
    // The uid holds over its limit in the core: the next SYN gets no SYN-ACK, however often
    // the peer sends it.
    let second = net.peer.connect(ENGINE_IP, port);
    let until = Instant::now() + Duration::from_millis(400);
    while Instant::now() < until {
        net.peer.pump();
    }
    assert_eq!(net.peer.stack.state(second), Ok(TcpState::SynSent));
    // It reads everything: the group drains, the SYN sent again gets in.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    let deadline = Instant::now() + WAIT;
    while got.len() < data.len() {
        if sent < data.len() {
            if let Ok(n) = net.peer.stack.send(first, &data[sent..]) {
                sent += n;
            }
        }
        let n = app.read_some(ctx, rec.slot, &mut buf);
        got.extend_from_slice(&buf[..n]);
        net.peer.pump();
        assert!(Instant::now() < deadline, "stuck after {} bytes", got.len());
    }
    assert_eq!(sha256(&got), sha256(&data));
    net.peer.until("the second connection is established", |s| {
        (s.state(second) == Ok(TcpState::Established)).then_some(())
    });
    let rec2 = app.accept(ctx, l, &mut || net.peer.pump());
    assert_ne!(rec2.slot, rec.slot);
    assert_eq!(net.counters().uid_groups_full, 0);
}
