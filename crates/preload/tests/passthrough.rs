//! The shim is transparent when no engine is involved: real programs run under
//! `LD_PRELOAD=libsluice_preload.so` with loopback TCP, Unix sockets, UDP, epoll/poll/select,
//! fcntl/ioctl (the C variadic entry points), dup, sendfile and fork, and behave exactly as
//! without it. No engine and no root needed.
//!
//! Everything here binds or connects to loopback, which never goes through the engine, so
//! the tests hold even on a machine where an engine runs at the default socket.

mod support;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{assert_ok, exported_symbols, preloaded, require, scratch};

fn python(script: &str) -> std::process::Output {
    preloaded("python3")
        .args(["-c", script])
        .output()
        .expect("python3 runs")
}

/// A free loopback port (bound and released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn wait_for_port(port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("server exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on 127.0.0.1:{port}");
}

/// Kills the child when dropped (also when the test fails).
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const LOOPBACK_ECHO: &str = r#"
import hashlib, os, selectors, select, socket, threading

def echo_threads(srv):
    def one(c):
        with c:
            while True:
                d = c.recv(65536)
                if not d:
                    return
                c.sendall(d)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()

def client(port, n, errors):
    data = os.urandom(n)
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=send); t.start()
    got = bytearray()
    while True:
        d = s.recv(262144)
        if not d:
            break
        got += d
    t.join(); s.close()
    if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
        errors.append(len(got))

srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64)
port = srv.getsockname()[1]
threading.Thread(target=echo_threads, args=(srv,), daemon=True).start()
errors = []
ts = [threading.Thread(target=client, args=(port, 2 << 20, errors)) for _ in range(8)]
for t in ts: t.start()
for t in ts: t.join()
assert not errors, errors

# readiness calls on kernel sockets: epoll (selectors), poll, select
a = socket.create_connection(("127.0.0.1", port)); a.setblocking(False)
sel = selectors.DefaultSelector(); sel.register(a, selectors.EVENT_READ)
assert sel.select(0) == []
a.send(b"ping")
assert len(sel.select(5)) == 1 and a.recv(10) == b"ping"
p = select.poll(); p.register(a, select.POLLOUT)
assert p.poll(1000)[0][1] & select.POLLOUT
r, w, _ = select.select([a], [a], [], 1)
assert w == [a] and r == []
print("ok")
"#;

#[test]
fn loopback_tcp_with_threads_epoll_poll_and_select_is_untouched() {
    assert_ok(&python(LOOPBACK_ECHO), "loopback echo");
}

const UNIX_AND_UDP: &str = r#"
import os, socket, tempfile
# Unix stream socket with a path
d = tempfile.mkdtemp(); path = os.path.join(d, "s")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); srv.bind(path); srv.listen(1)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(path)
s, _ = srv.accept(); c.sendall(b"x" * 100000)
got = b""
while len(got) < 100000:
    got += s.recv(65536)
assert got == b"x" * 100000
# socketpair, dup, fd passing-free close
a, b = socket.socketpair(); fd = os.dup(a.fileno()); os.write(fd, b"dup"); assert b.recv(3) == b"dup"; os.close(fd)
# UDP on loopback, IPv4 and IPv6 TCP untouched
u1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u1.bind(("127.0.0.1", 0))
u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u2.sendto(b"dgram", u1.getsockname())
assert u1.recvfrom(100)[0] == b"dgram"
try:
    l6 = socket.socket(socket.AF_INET6); l6.bind(("::1", 0)); l6.listen(1)
    c6 = socket.create_connection(("::1", l6.getsockname()[1])); c6.close()
except OSError as e:
    assert e.errno in (97, 99), e  # no IPv6 here: fine
print("ok")
"#;

#[test]
fn unix_udp_and_ipv6_sockets_are_untouched() {
    assert_ok(&python(UNIX_AND_UDP), "unix/udp");
}

const FORK_AND_EXEC: &str = r#"
import os, socket, subprocess
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
pid = os.fork()
if pid == 0:
    c = socket.create_connection(srv.getsockname()); c.sendall(b"from child"); c.close()
    os._exit(0)
s, _ = srv.accept(); assert s.recv(100) == b"from child"
os.waitpid(pid, 0)
out = subprocess.run(["sh", "-c", "echo hi | cat"], capture_output=True, check=True).stdout
assert out == b"hi\n", out
print("ok")
"#;

#[test]
fn fork_and_exec_are_untouched() {
    assert_ok(&python(FORK_AND_EXEC), "fork/exec");
}

#[test]
fn curl_downloads_from_a_python_http_server() {
    require("curl");
    let dir = scratch("http");
    let body: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("blob"), &body).expect("write blob");
    let port = free_port();
    let server = preloaded("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("http.server starts");
    let mut server = Reap(server);
    wait_for_port(port, &mut server.0);
    let out = dir.join("got");
    let status = preloaded("curl")
        .args(["-sS", "--fail", "-o"])
        .arg(&out)
        .arg(format!("http://127.0.0.1:{port}/blob"))
        .status()
        .expect("curl runs");
    assert!(status.success(), "curl failed: {status}");
    assert!(
        std::fs::read(&out).expect("downloaded") == body,
        "the download differs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const C_PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "failed: %s (line %d)\n", #c, __LINE__); return 1; } } while (0)

int main(int argc, char **argv) {
    (void)argc;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(l >= 0);
    int one = 1;
    CHECK(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 4) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(c, (struct sockaddr *)&a, sizeof a) == 0);
    int s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
    CHECK(s >= 0);
    /* fcntl and ioctl go through the C variadic entry points */
    CHECK(fcntl(s, F_GETFL) & O_NONBLOCK);
    int fl = fcntl(c, F_GETFL);
    CHECK(fcntl(c, F_SETFL, fl | O_NONBLOCK) == 0 && (fcntl(c, F_GETFL) & O_NONBLOCK));
    int zero = 0;
    CHECK(ioctl(c, FIONBIO, &zero) == 0 && !(fcntl(c, F_GETFL) & O_NONBLOCK));
    CHECK(fcntl(c, F_GETFD) == 0 && fcntl(l, F_GETFD) == FD_CLOEXEC);
    int d = fcntl(c, F_DUPFD_CLOEXEC, 100);
    CHECK(d >= 100 && fcntl(d, F_GETFD) == FD_CLOEXEC);
    CHECK(dup2(d, 200) == 200 && dup3(d, 201, O_CLOEXEC) == 201);
    CHECK(close(d) == 0 && close(200) == 0 && close(201) == 0);
    CHECK(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
    /* sendfile of this program's own binary over loopback */
    int f = open(argv[0], O_RDONLY);
    CHECK(f >= 0);
    off_t size = lseek(f, 0, SEEK_END);
    off_t off = 0;
    ssize_t sent = 0;
    while (sent < size) {
        ssize_t n = sendfile(c, f, &off, (size_t)(size - sent));
        CHECK(n > 0);
        sent += n;
        char buf[65536];
        struct pollfd p = { .fd = s, .events = POLLIN };
        while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
            int avail = 0;
            CHECK(ioctl(s, FIONREAD, &avail) == 0);
            if (read(s, buf, sizeof buf) <= 0) break;
        }
    }
    CHECK(off == size);
    shutdown(c, SHUT_WR);
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    struct timeval tv = { .tv_sec = 5 };
    CHECK(select(s + 1, &r, NULL, NULL, &tv) == 1);
    char buf[65536];
    while (1) {
        ssize_t n = recv(s, buf, sizeof buf, 0);
        if (n == 0) break;
        if (n < 0) { struct pollfd p = { .fd = s, .events = POLLIN }; poll(&p, 1, 1000); continue; }
    }
    close(f); close(s); close(c); close(l);
    puts("ok");
    return 0;
}
"#;

#[test]
fn a_c_program_through_fcntl_ioctl_dup_and_sendfile_is_untouched() {
    require("cc");
    let dir = scratch("c");
    let src = dir.join("t.c");
    std::fs::write(&src, C_PROGRAM).expect("write C source");
    let bin = dir.join("t");
    let st = Command::new("cc")
        .args([
            "-O1",
            "-Wall",
            "-D_FORTIFY_SOURCE=2",
            "-D_FILE_OFFSET_BITS=64",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(st.success(), "the C test program did not compile");
    let out = preloaded(bin.to_str().expect("utf-8 path"))
        .output()
        .expect("runs");
    assert_ok(&out, "C program");
    let _ = std::fs::remove_dir_all(&dir);
}

const UNREACHABLE: &str = r#"
import errno, socket
c = socket.socket()
try:
    c.connect(("10.77.0.9", 80)); raise SystemExit("connected?")
except OSError as e:
    assert e.errno == errno.ECONNREFUSED, e
s = socket.socket()
try:
    s.bind(("0.0.0.0", 0)); s.listen(1); raise SystemExit("listening?")
except OSError as e:
    assert e.errno == errno.ECONNREFUSED, e
c2 = socket.socket()
try:
    c2.connect(("10.77.0.9", 80))
except OSError as e:
    assert e.errno == errno.ECONNREFUSED, e
# loopback never needs the engine
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
k = socket.create_connection(l.getsockname()); k.close()
# an undecided socket inherited across fork is the child's kernel socket
import os
u = socket.socket()
pid = os.fork()
if pid == 0:
    try:
        u.bind(("127.0.0.1", 0)); u.listen(1)
        socket.create_connection(u.getsockname()).close()
        os._exit(0)
    except BaseException as e:
        print("child:", e, flush=True)
        os._exit(1)
_, st = os.waitpid(pid, 0)
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
print("ok")
"#;

#[test]
fn an_unreachable_engine_refuses_engine_sockets_and_says_so_once() {
    let dir = scratch("noengine");
    let out = preloaded("python3")
        .env("SLUICE_SOCKET", dir.join("no-engine.sock"))
        .args(["-c", UNREACHABLE])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ok"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let lines = stderr
        .lines()
        .filter(|l| l.starts_with("sluice-preload: cannot attach"))
        .count();
    assert_eq!(lines, 1, "logged once:\n{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_library_exports_every_interposed_call() {
    let exported = exported_symbols();
    for name in [
        "socket",
        "bind",
        "listen",
        "accept",
        "accept4",
        "connect",
        "read",
        "write",
        "readv",
        "writev",
        "send",
        "recv",
        "sendto",
        "recvfrom",
        "sendmsg",
        "recvmsg",
        "shutdown",
        "close",
        "getsockname",
        "getpeername",
        "getsockopt",
        "setsockopt",
        "fcntl",
        "fcntl64",
        "ioctl",
        "poll",
        "ppoll",
        "select",
        "pselect",
        "epoll_create",
        "epoll_create1",
        "epoll_ctl",
        "epoll_wait",
        "epoll_pwait",
        "dup",
        "dup2",
        "dup3",
        "sendfile",
        "sendfile64",
        "__read_chk",
        "__recv_chk",
        "__recvfrom_chk",
        "__poll_chk",
    ] {
        assert!(exported.contains(name), "{name} is not exported");
    }
}
