//! tests/c/abi_test.c, compiled with the system's C compiler (`cc`, or `$CC`) against
//! include/sluice.h and the staticlib this test run built, then run: two stacks exchanging
//! 1 MB through an in-memory wire in virtual time, the error paths from C, and hundreds of
//! stacks in one process.

use std::path::{Path, PathBuf};
use std::process::Command;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// libsluice_ffi.a: beside this test binary (deps/), built with this run since the lib is
/// a staticlib too; else in the profile directory.
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps/");
    [deps, deps.parent().expect("profile dir")]
        .iter()
        .map(|d| d.join("libsluice_ffi.a"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no libsluice_ffi.a near {}", exe.display()))
}

/// Compiles `source` into `out`, with every warning an error.
fn compile(source: &Path, out: &Path) {
    let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O1",
            "-g",
        ])
        .arg("-I")
        .arg(Path::new(CRATE).join("include"))
        .arg(source)
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm"])
        .arg("-o")
        .arg(out)
        .output()
        .expect("a C compiler (cc) is needed for this test");
    assert!(
        output.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_c_abi_test_passes_in_c() {
    let dir = std::env::temp_dir().join(format!("sluice-ffi-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("abi_test");
    compile(&Path::new(CRATE).join("tests/c/abi_test.c"), &exe);
    let output = Command::new(&exe).output().expect("run abi_test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "abi_test failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("transfer: 1048576 bytes verified"),
        "{stdout}"
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    println!("{stdout}");
}
