//! What the preload's tests share: the library, the programs they run under it, and their
//! verdicts.
#![allow(dead_code)]

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// libsluice_preload.so, built by cargo with this test (in deps/ beside the test binary;
/// `cargo build` also copies it one level up): the newer one, by the rule `sluice run`
/// follows (`sluice_shm::preload_library`); any other build it falls back to is named on
/// stderr.
pub fn preload() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    sluice_shm::preload_library::locate(None, None, &exe)
        .unwrap_or_else(|missing| panic!("{missing}"))
        .announce("tests")
}

/// Panics unless `program` is installed: a test that needs it fails without it, rather than
/// passing without running (scripts/setup.sh installs them all).
pub fn require(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "this test needs `{program}` installed (scripts/setup.sh installs it)"
    );
}

/// A command under the preload, with no engine configured.
///
/// `SLUICE_TEST_PRELOAD_FIRST` names a library to load before the preload: the shared
/// AddressSanitizer runtime when `scripts/sanitize.sh` built the preload with ASan, since the
/// programs here are not built with it (their own leaks are not checked then).
pub fn preloaded(program: &str) -> Command {
    let mut c = Command::new(program);
    let mut list = std::ffi::OsString::new();
    if let Some(first) = std::env::var_os("SLUICE_TEST_PRELOAD_FIRST").filter(|f| !f.is_empty()) {
        list.push(first);
        list.push(":");
        c.env("ASAN_OPTIONS", "detect_leaks=0");
    }
    list.push(preload());
    c.env("LD_PRELOAD", list).env_remove("SLUICE_SOCKET");
    c
}

/// A fresh scratch directory for `name`, unique to this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-preload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Panics unless `out` succeeded and printed a line `ok`, and the shim logged nothing (no
/// engine is involved).
pub fn assert_ok(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.lines().any(|l| l == "ok"),
        "{what}: status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("sluice-preload:"),
        "{what}: the shim logged without an engine:\n{stderr}"
    );
}

/// The symbols the library exports (`nm -D --defined-only`).
pub fn exported_symbols() -> HashSet<String> {
    let Ok(out) = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(preload())
        .output()
    else {
        panic!("this test needs `nm` installed (binutils; scripts/setup.sh installs it)");
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}
