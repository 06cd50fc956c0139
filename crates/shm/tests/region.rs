//! A region passed over the control socket maps the same memory on both sides, and each
//! ring wraps without a split copy.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use sluice_shm::control::{recv_message, send_message, EngineInfo, Reply};
use sluice_shm::{
    Command, Consumer, Dir, EventFd, Layout, Producer, QueueKind, Region, ShmError, SocketBlock,
};

fn layout() -> Layout {
    Layout {
        max_sockets: 8,
        max_contexts: 2,
        queue_entries: 16,
        ring_size: 8192,
        ..Layout::default()
    }
}

/// The engine's region, and the application's mapping of it received over a socket pair.
fn engine_and_app() -> (Arc<Region>, Arc<Region>) {
    let engine = Arc::new(Region::create("sluice-test", layout()).unwrap());
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let doorbell = EventFd::new().unwrap();
    let welcome = Reply::Welcome {
        app: 1,
        layout: layout(),
        engine: EngineInfo {
            ip: "10.77.0.1".parse().unwrap(),
            prefix_len: 24,
            gateway: None,
            app_idle_us: 10_000,
        },
    };
    send_message(a.as_fd(), &welcome, &[engine.fd(), doorbell.as_fd()]).unwrap();
    let (reply, mut fds) = recv_message::<Reply>(b.as_fd()).unwrap().unwrap();
    assert_eq!(reply, welcome);
    assert_eq!(fds.len(), 2);
    let app = Arc::new(Region::open(fds.remove(0), layout()).unwrap());
    (engine, app)
}

#[test]
#[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
fn both_mappings_see_the_same_bytes_and_rings_wrap_in_one_copy() {
    let (engine, app) = engine_and_app();
    let tx = app.ring(3, Dir::Tx).unwrap();
    // Straddle the ring's end: 8192 - 100 .. 8192 + 100.
    let data: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
    tx.write(8192 - 100, &data);
    let mut out = vec![0u8; 200];
    engine.ring(3, Dir::Tx).unwrap().read(8192 - 100, &mut out);
    assert_eq!(out, data);
    // The wrapped part is at the ring's start in the file.
    let mut head = [0u8; 100];
    engine.ring(3, Dir::Tx).unwrap().read(0, &mut head);
    assert_eq!(&head[..], &data[100..]);
    // Other rings are untouched.
    let mut other = [1u8; 16];
    engine.ring(3, Dir::Rx).unwrap().read(0, &mut other);
    assert_eq!(other, [0u8; 16]);

    SocketBlock::new(&app, 5)
        .unwrap()
        .tx_tail()
        .store(42, Ordering::Release);
    assert_eq!(
        SocketBlock::new(&engine, 5)
            .unwrap()
            .tx_tail()
            .load(Ordering::Acquire),
        42
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
fn commands_cross_from_app_to_engine() {
    let (engine, app) = engine_and_app();
    let mut p = Producer::new(app, 1, QueueKind::Command).unwrap();
    let mut c = Consumer::new(engine, 1, QueueKind::Command).unwrap();
    let cmd = Command::Connect {
        req: 9,
        slot: 2,
        ip: "10.77.0.3".parse().unwrap(),
        port: 80,
    };
    assert!(p.push(&cmd.encode()).unwrap());
    assert_eq!(Command::decode(&c.pop().unwrap()), Ok(cmd));
    assert!(c.pop().is_none());
}

#[test]
#[cfg_attr(miri, ignore = "maps a memfd, which Miri cannot")]
fn a_short_file_is_refused() {
    let small = Region::create(
        "small",
        Layout {
            max_sockets: 1,
            ..layout()
        },
    )
    .unwrap();
    let fd = nix::unistd::dup(small.fd()).unwrap();
    assert!(matches!(
        Region::open(fd, layout()),
        Err(ShmError::RegionTooSmall { .. })
    ));
}
