//! Many connections from Linux to the engine's echo server (needs root: the tests
//! are `#[ignore]`d, and scripts/test.sh runs them as root):
//! 1,000 short connections one after another, and 200 at once moving 1 MiB each.

mod lab_support;

use lab_support::{lab, linux, py_connect, start_engine, NO_IMPAIR, PEER_TIMEOUT_S};
use sluice_engine::apps::EchoApp;
use sluice_engine::setup::Backend;
use sluice_engine::AppStatus;

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn a_thousand_sequential_short_connections_all_complete() {
    let lab = lab();
    let port = 7;
    let mut echo = EchoApp::new(port);
    echo.stop_after = Some(1000);
    let engine = start_engine(Backend::AfPacket, NO_IMPAIR, echo, true);
    // Connect, send 64 B, read the echo, close; the first connect may wait for the engine.
    let out = linux(
        &lab,
        &format!(
            "{connect}\
             import os\n\
             ok=0\n\
             for i in range(1000):\n\
             \x20   s=connect() if i==0 else socket.create_connection(('{ip}',{port}),timeout={PEER_TIMEOUT_S})\n\
             \x20   d=os.urandom(64)\n\
             \x20   s.sendall(d)\n\
             \x20   b=b''\n\
             \x20   while len(b)<64:\n\
             \x20       x=s.recv(64-len(b))\n\
             \x20       if not x: break\n\
             \x20       b+=x\n\
             \x20   ok+= b==d\n\
             \x20   s.close()\n\
             print(ok)",
            connect = py_connect(port),
            ip = sluice_lab::ENGINE_IP,
        ),
    );
    let (_, status, _, _) = engine.join();
    assert_eq!(out, "1000", "every connection got its 64 bytes back");
    assert_eq!(
        status,
        AppStatus::Done,
        "the engine saw all 1000 connections close"
    );
    lab.teardown().expect("lab down");
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn two_hundred_concurrent_connections_each_echo_a_mebibyte() {
    let lab = lab();
    let port = 7;
    let mut echo = EchoApp::new(port);
    echo.stop_after = Some(201); // the readiness probe, then 200
    let engine = start_engine(Backend::AfPacket, NO_IMPAIR, echo, true);
    // All 200 connect first, then each sends 1 MiB from one thread while another reads the
    // echo back; every echo is compared with what was sent.
    let out = linux(
        &lab,
        &format!(
            "{connect}\
             import os,threading\n\
             connect().close()\n\
             N=200; M=1<<20\n\
             socks=[socket.create_connection(('{ip}',{port}),timeout={PEER_TIMEOUT_S}) for _ in range(N)]\n\
             data=[os.urandom(M) for _ in range(N)]\n\
             ok=[False]*N\n\
             def writer(i):\n\
             \x20   socks[i].sendall(data[i]); socks[i].shutdown(socket.SHUT_WR)\n\
             def reader(i):\n\
             \x20   b=bytearray()\n\
             \x20   while True:\n\
             \x20       x=socks[i].recv(1<<16)\n\
             \x20       if not x: break\n\
             \x20       b+=x\n\
             \x20   ok[i]= bytes(b)==data[i]\n\
             \x20   socks[i].close()\n\
             ts=[threading.Thread(target=f,args=(i,)) for i in range(N) for f in (writer,reader)]\n\
             for t in ts: t.start()\n\
             for t in ts: t.join()\n\
             print(sum(ok))",
            connect = py_connect(port),
            ip = sluice_lab::ENGINE_IP,
        ),
    );
    let (_, status, _, _) = engine.join();
    assert_eq!(out, "200", "every connection's 1 MiB came back intact");
    assert_eq!(status, AppStatus::Done);
    lab.teardown().expect("lab down");
}
