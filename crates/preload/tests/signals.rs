//! Signal handlers under the preload (no engine, no root): programs install them through
//! the interposed sigaction/signal/sigset/sysv_signal/siginterrupt, and the kernel gets the
//! library's trampoline instead, which must be invisible: the program's handlers run with
//! their own signatures, old actions report what the program installed, SIG_IGN/SIG_DFL
//! behave, handlers installed before the library's constructor and from inside handlers
//! work, and a blocking call on a kernel descriptor is interrupted as before.

mod support;

use std::process::{Command, Output};

use support::{assert_ok, exported_symbols, preloaded, require, scratch};

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const C_SIGNALS: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "failed: %s (line %d)\n", #c, __LINE__); exit(1); } } while (0)

extern __sighandler_t sysv_signal(int, __sighandler_t);

static volatile sig_atomic_t info_ok, plain_runs, early_runs, nested_ok, alarms;

static void with_info(int s, siginfo_t *i, void *ctx) {
    info_ok = i != NULL && i->si_signo == s && i->si_code == SI_TKILL && ctx != NULL;
}
static void plain(int s) { (void)s; plain_runs++; }
static void early(int s) { (void)s; early_runs++; }
static void alarm_handler(int s) { (void)s; alarms++; }
static void installs_another(int s) {
    (void)s;
    struct sigaction a, o;
    memset(&a, 0, sizeof a);
    a.sa_handler = plain;
    sigemptyset(&a.sa_mask);
    nested_ok = sigaction(SIGURG, &a, &o) == 0 && o.sa_handler == SIG_DFL;
}

/* The kernel's own view, through the raw system call. */
struct kernel_action { void *handler; unsigned long flags; void *restorer; unsigned long mask; };
static void *kernel_handler(int sig) {
    struct kernel_action k;
    CHECK(syscall(SYS_rt_sigaction, sig, NULL, &k, 8) == 0);
    return k.handler;
}

/* Runs before every shared library's constructor, the preload's included. */
static void before_constructors(int argc, char **argv, char **envp) {
    (void)argc; (void)argv; (void)envp;
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = early;
    sigemptyset(&a.sa_mask);
    if (sigaction(SIGWINCH, &a, NULL) != 0) abort();
}
__attribute__((section(".preinit_array"), used))
static void (*preinit)(int, char **, char **) = before_constructors;

int main(void) {
    struct sigaction a, o;

    /* Installed before the constructors: still the program's handler, still runs. */
    CHECK(sigaction(SIGWINCH, NULL, &o) == 0 && o.sa_handler == early);
    raise(SIGWINCH);
    CHECK(early_runs == 1);

    /* An SA_SIGINFO handler with flags and a mask: the old action round-trips. */
    memset(&a, 0, sizeof a);
    a.sa_sigaction = with_info;
    a.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&a.sa_mask);
    sigaddset(&a.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGUSR1, &a, &o) == 0 && o.sa_handler == SIG_DFL);
    printf("kernel handler: %s\n", kernel_handler(SIGUSR1) == (void *)with_info ? "program" : "other");
    CHECK(sigaction(SIGUSR1, NULL, &o) == 0);
    CHECK(o.sa_sigaction == with_info);
    CHECK((o.sa_flags & (SA_SIGINFO | SA_RESTART)) == (SA_SIGINFO | SA_RESTART));
    CHECK(sigismember(&o.sa_mask, SIGUSR2) == 1 && sigismember(&o.sa_mask, SIGTERM) == 0);
    raise(SIGUSR1);
    CHECK(info_ok);

    /* Replaced by a plain handler: the old one comes back with SA_SIGINFO. */
    memset(&a, 0, sizeof a);
    a.sa_handler = plain;
    sigemptyset(&a.sa_mask);
    CHECK(sigaction(SIGUSR1, &a, &o) == 0);
    CHECK(o.sa_sigaction == with_info && (o.sa_flags & SA_SIGINFO));
    CHECK(sigaction(SIGUSR1, NULL, &o) == 0 && o.sa_handler == plain && !(o.sa_flags & SA_SIGINFO));
    raise(SIGUSR1);
    CHECK(plain_runs == 1);

    /* signal(): BSD semantics, the old handler returned; SIG_IGN and SIG_DFL. */
    CHECK(signal(SIGUSR2, plain) == SIG_DFL);
    CHECK(sigaction(SIGUSR2, NULL, &o) == 0 && (o.sa_flags & SA_RESTART));
    raise(SIGUSR2);
    CHECK(plain_runs == 2);
    CHECK(signal(SIGUSR2, SIG_IGN) == plain);
    CHECK(kernel_handler(SIGUSR2) == (void *)SIG_IGN);
    raise(SIGUSR2); /* ignored: the program lives on */
    CHECK(plain_runs == 2);
    CHECK(signal(SIGUSR2, SIG_DFL) == SIG_IGN);
    CHECK(signal(SIGPIPE, SIG_IGN) == SIG_DFL);
    int p[2];
    CHECK(pipe(p) == 0 && close(p[0]) == 0);
    CHECK(write(p[1], "x", 1) == -1 && errno == EPIPE); /* SIGPIPE ignored */
    close(p[1]);
    CHECK(signal(0, plain) == SIG_ERR && errno == EINVAL);
    CHECK(sigaction(SIGKILL, &a, NULL) == -1 && errno == EINVAL);

    /* siginterrupt turns SA_RESTART off; sysv_signal is one-shot; sigset holds. */
    CHECK(signal(SIGUSR2, plain) == SIG_DFL);
    CHECK(siginterrupt(SIGUSR2, 1) == 0);
    CHECK(sigaction(SIGUSR2, NULL, &o) == 0 && o.sa_handler == plain && !(o.sa_flags & SA_RESTART));
    CHECK(siginterrupt(SIGUSR2, 0) == 0);
    CHECK(sigaction(SIGUSR2, NULL, &o) == 0 && (o.sa_flags & SA_RESTART));
    CHECK(sysv_signal(SIGUSR2, plain) == plain);
    raise(SIGUSR2);
    CHECK(plain_runs == 3);
    CHECK(sigaction(SIGUSR2, NULL, &o) == 0 && o.sa_handler == SIG_DFL);
    CHECK(sigset(SIGUSR2, plain) == SIG_DFL);
    CHECK(sigset(SIGUSR2, SIG_HOLD) == plain);
    raise(SIGUSR2);
    CHECK(plain_runs == 3);
    CHECK(sigset(SIGUSR2, plain) == SIG_HOLD); /* unblocked: delivered now */
    CHECK(plain_runs == 4);

    /* sigaction from inside a handler. */
    CHECK(signal(SIGUSR1, installs_another) == plain);
    raise(SIGUSR1);
    CHECK(nested_ok);
    CHECK(sigaction(SIGURG, NULL, &o) == 0 && o.sa_handler == plain);
    raise(SIGURG);
    CHECK(plain_runs == 5);

    /* A blocking poll on a kernel descriptor still ends with EINTR. */
    memset(&a, 0, sizeof a);
    a.sa_handler = alarm_handler;
    sigemptyset(&a.sa_mask);
    CHECK(sigaction(SIGALRM, &a, NULL) == 0);
    int q[2];
    CHECK(pipe(q) == 0);
    struct itimerval it = { .it_value = { .tv_usec = 50000 } };
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    struct pollfd pf = { .fd = q[0], .events = POLLIN };
    CHECK(poll(&pf, 1, 10000) == -1 && errno == EINTR && alarms == 1);

    puts("ok");
    return 0;
}
"#;

#[test]
fn c_handlers_run_and_old_actions_report_what_the_program_installed() {
    require("cc");
    let dir = scratch("signals-c");
    let src = dir.join("sig.c");
    std::fs::write(&src, C_SIGNALS).expect("write C source");
    let bin = dir.join("sig");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-Wno-deprecated-declarations", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(st.success(), "the C test program did not compile");
    let bin = bin.to_str().expect("utf-8 path");

    let plain = Command::new(bin).output().expect("runs");
    assert_ok(&plain, "without the preload");
    assert!(text(&plain).0.contains("kernel handler: program"));

    let out = preloaded(bin).output().expect("runs");
    assert_ok(&out, "under the preload");
    assert!(
        text(&out).0.contains("kernel handler: other"),
        "the kernel should run the preload's trampoline: {}",
        text(&out).0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const PYTHON_SIGNALS: &str = r#"
import os, select, signal, socket, time
hits = []
def h(sig, frame):
    hits.append(sig)
old = signal.signal(signal.SIGUSR1, h)
assert old == signal.SIG_DFL, old
os.kill(os.getpid(), signal.SIGUSR1)
assert hits == [signal.SIGUSR1], hits
assert signal.getsignal(signal.SIGUSR1) is h
signal.siginterrupt(signal.SIGUSR1, False)
os.kill(os.getpid(), signal.SIGUSR1)
assert hits == [signal.SIGUSR1] * 2, hits
signal.signal(signal.SIGUSR2, signal.SIG_IGN)
os.kill(os.getpid(), signal.SIGUSR2)
# A handler that raises ends a blocking select on a kernel socket.
class Stop(Exception):
    pass
def stop(sig, frame):
    raise Stop()
signal.signal(signal.SIGALRM, stop)
a, b = socket.socketpair()
signal.setitimer(signal.ITIMER_REAL, 0.05)
t = time.monotonic()
try:
    select.select([a], [], [], 10)
    raise SystemExit("select was not interrupted")
except Stop:
    pass
assert time.monotonic() - t < 5
print("ok")
"#;

#[test]
fn python_handlers_run_under_the_preload() {
    require("python3");
    let out = preloaded("python3")
        .args(["-c", PYTHON_SIGNALS])
        .output()
        .expect("python3 runs");
    assert_ok(&out, "python signals");
}

#[test]
fn the_library_exports_the_signal_calls() {
    let exported = exported_symbols();
    for name in [
        "sigaction",
        "__sigaction",
        "signal",
        "bsd_signal",
        "sysv_signal",
        "__sysv_signal",
        "sigset",
        "siginterrupt",
    ] {
        assert!(exported.contains(name), "{name} is not exported");
    }
}
