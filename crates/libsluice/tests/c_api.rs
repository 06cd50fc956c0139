//! The C API end to end: examples/c/zero_copy_echo.c is compiled against include/sluice.h
//! with the system's C compiler, linked with the libsluice.so cargo built, and run as a
//! server and a client process, both attached to a fake engine running in this process.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::c::compile;
use std::sync::atomic::Ordering;

use common::*;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("libsluice-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// How long the C echo may take in all: far more than a loaded machine needs (it takes
/// well under a second alone); the programs themselves wait without a deadline.
const ECHO_LIMIT: Duration = Duration::from_secs(300);

/// Reads `r` to the end in a thread (a child's pipe must not fill while we wait for it).
fn drain<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

/// A child's exit status and everything it printed, or its output so far after `limit`
/// (then it is killed).
fn finish(mut child: Child, limit: Duration) -> (Option<ExitStatus>, String, String) {
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, out.join().unwrap(), err.join().unwrap())
}

#[test]
fn the_zero_copy_echo_in_c_round_trips_every_byte() {
    let exe = scratch("zero_copy_echo");
    compile(&Path::new(CRATE).join("examples/c/zero_copy_echo.c"), &exe);
    let engine = FakeEngine::start(Options::default());
    let mut server = common::c::command(&exe)
        .args(["server", "4"])
        .env("SLUICE_SOCKET", &engine.path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server_out = BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    server_out.read_line(&mut first).unwrap();
    let port = first
        .trim_end()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("unexpected server output {first:?}"))
        .to_string();
    // 1 MB on each of 4 connections through 8 KiB rings: the rings wrap and stall often.
    let client = common::c::command(&exe)
        .args(["client", &ENGINE_IP.to_string(), &port, "4", "1000000"])
        .env("SLUICE_SOCKET", &engine.path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let (client_status, client_out, client_err) = finish(client, ECHO_LIMIT);
    let left = ECHO_LIMIT.saturating_sub(started.elapsed());
    let server_rest = drain(Some(server_out));
    let (server_status, _, server_err) = finish(server, left.max(Duration::from_secs(5)));
    let rest = server_rest.join().unwrap();
    // Both sides' output in every failure: one side's error is often the other's cause.
    let both = format!(
        "client: {client_status:?}\n{client_out}{client_err}\nserver: {server_status:?}\n\
         {first}{rest}{server_err}"
    );
    assert!(
        client_status.is_some_and(|s| s.success()),
        "client failed or overran {ECHO_LIMIT:?}:\n{both}"
    );
    assert!(
        client_out.contains("ok 4 connections, 1000000 bytes each"),
        "{both}"
    );
    assert!(
        server_status.is_some_and(|s| s.success()),
        "server failed:\n{both}"
    );
    assert_eq!(
        rest.lines().collect::<Vec<_>>(),
        ["echoed 4000000 bytes on 4 connections"],
        "{both}"
    );
    let st = &engine.stats;
    assert_eq!(st.apps_attached.load(Ordering::Relaxed), 2);
    assert_eq!(st.bytes_moved.load(Ordering::Relaxed), 8_000_000);
    assert!(st.stalls.load(Ordering::Relaxed) > 0);
    assert_eq!(st.lost_wakeups.load(Ordering::Relaxed), 0);
    let _ = std::fs::remove_file(&exe);
}

#[test]
fn without_an_engine_the_c_api_reports_econnrefused() {
    let src = scratch("no_engine.c");
    std::fs::write(
        &src,
        r#"
#include <errno.h>
#include <stdio.h>
#include "sluice.h"
int main(void) {
    if (sluice_attach("/nonexistent/engine.sock") != -1 || errno != ECONNREFUSED) return 1;
    if (sluice_send(NULL, "x", 1) != -1 || errno != EINVAL) return 2;
    if (sluice_close(NULL) != -1 || errno != EINVAL) return 3;
    if (sluice_poll_many(NULL, 0, 0) != 0) return 4;
    puts("ok");
    return 0;
}
"#,
    )
    .unwrap();
    let exe = scratch("no_engine");
    compile(&src, &exe);
    let out = common::c::command(&exe)
        .env("SLUICE_SOCKET", "/nonexistent/engine.sock")
        .output()
        .unwrap();
    assert!(out.status.success(), "exit {:?}", out.status.code());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let _ = std::fs::remove_file(&exe);
    let _ = std::fs::remove_file(&src);
}

/// A C client killed mid-transfer: the engine resets its connection, so the Rust server
/// reads what had arrived and then ECONNRESET, never a hang or a clean end of stream.
#[test]
fn a_killed_application_resets_its_peers() {
    let exe = scratch("zero_copy_echo_killed");
    compile(&Path::new(CRATE).join("examples/c/zero_copy_echo.c"), &exe);
    let engine = FakeEngine::start(Options::default());
    let app = sluice::Sluice::attach(&engine.path).unwrap();
    let (l, addr) = listener(&app);
    let mut child = common::c::command(&exe)
        .args([
            "client",
            &ENGINE_IP.to_string(),
            &addr.port().to_string(),
            "1",
            "1000000",
        ])
        .env("SLUICE_SOCKET", &engine.path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (s, _) = l.accept().unwrap();
    let mut buf = vec![0u8; 4096];
    // The client is blocked: it waits for an echo that never comes, its rings full.
    assert!(s.recv(&mut buf).unwrap() > 0);
    child.kill().unwrap();
    child.wait().unwrap();
    loop {
        match s.recv(&mut buf) {
            Ok(0) => panic!("a killed peer must not look like a clean close"),
            Ok(_) => continue,
            Err(e) => {
                assert_eq!(e.errno(), libc::ECONNRESET);
                break;
            }
        }
    }
    assert_eq!(engine.stats.apps_gone.load(Ordering::Relaxed), 1);
    let _ = std::fs::remove_file(&exe);
}

/// sluice_splice/sluice_splice_poll from C: a refusal, then two pairs made in the program
/// spliced, bytes through the joined peers and the end with its counts.
#[test]
fn the_c_api_splices_and_reports_the_end() {
    let src = scratch("splice.c");
    std::fs::write(
        &src,
        r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include "sluice.h"
static sluice_socket *server_side(sluice_socket **client) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, "10.77.0.1", &a.sin_addr);
    sluice_socket *l = sluice_socket_open();
    if (!l || sluice_bind(l, &a) || sluice_listen(l, 4) || sluice_getsockname(l, &a)) return NULL;
    *client = sluice_socket_open();
    if (!*client || sluice_connect(*client, &a)) return NULL;
    sluice_socket *s = sluice_accept(l, NULL);
    sluice_close(l);
    return s;
}
int main(void) {
    if (sluice_attach(NULL)) return 1;
    sluice_socket *c1, *s2, *a = server_side(&c1), *b;
    s2 = server_side(&b);
    if (!a || !s2) return 2;
    sluice_splice_handle *sp = NULL;
    if (sluice_splice(a, a, &sp) != -1 || errno != EINVAL) return 3;
    if (sluice_splice(a, b, &sp) != 0 || !sp) return 4;
    char buf[16];
    if (sluice_send(a, "x", 1) != -1 || errno != EBADFD) return 5;
    if (sluice_send(c1, "hello", 5) != 5) return 6;
    size_t got = 0;
    while (got < 5) {
        ssize_t n = sluice_recv(s2, buf + got, sizeof buf - got);
        if (n <= 0) return 7;
        got += (size_t)n;
    }
    if (memcmp(buf, "hello", 5)) return 8;
    struct sluice_splice_stats st;
    if (sluice_splice_poll(sp, 0, &st) != 0 || st.outcome != SLUICE_SPLICE_INSTALLED) return 9;
    sluice_close(a);
    sluice_close(b);
    sluice_close(c1);
    if (sluice_splice_poll(sp, 10000, &st) != 1) return 10;
    printf("%d %llu %llu\n", st.outcome, (unsigned long long)st.a_to_b,
           (unsigned long long)st.b_to_a);
    sluice_splice_free(sp);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = scratch("splice");
    compile(&src, &exe);
    let engine = FakeEngine::start(Options::default());
    let out = common::c::command(&exe)
        .env("SLUICE_SOCKET", &engine.path)
        .output()
        .unwrap();
    assert!(out.status.success(), "exit {:?}", out.status.code());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3 5 0\n");
    let _ = std::fs::remove_file(&exe);
    let _ = std::fs::remove_file(&src);
}
