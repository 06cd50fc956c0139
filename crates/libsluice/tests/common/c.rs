//! Compiling C programs against include/sluice.h and the libsluice.so cargo built.

use std::path::{Path, PathBuf};
use std::process::Command;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// The directory holding libsluice.so (built with the tests: the lib is a cdylib too).
pub fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    // deps/ holds the library built with this test run; target/<profile>/ only what the
    // last `cargo build` made (possibly older).
    let profile_dir = deps.parent().unwrap();
    if deps.join("libsluice.so").exists() {
        return deps.to_path_buf();
    }
    if profile_dir.join("libsluice.so").exists() {
        eprintln!(
            "tests: libsluice.so is not in {} (built with this test run); using {}, from the \
             last `cargo build` (possibly older)",
            deps.display(),
            profile_dir.display()
        );
        return profile_dir.to_path_buf();
    }
    // Not built yet (a test binary built alone): ask cargo for the library, in this test's
    // profile.
    let mut args = vec!["build", "-p", "sluice", "--lib"];
    if profile_dir.file_name().is_some_and(|d| d == "release") {
        args.push("--release");
    }
    eprintln!(
        "tests: no libsluice.so near {}; building it with `cargo {}`",
        exe.display(),
        args.join(" ")
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(&args)
        .current_dir(CRATE)
        .status()
        .unwrap();
    assert!(status.success());
    let dir = profile_dir.to_path_buf();
    assert!(
        dir.join("libsluice.so").exists(),
        "no libsluice.so in {}",
        dir.display()
    );
    dir
}

/// Compiles a C program against the header and the library.
pub fn compile(source: &Path, out: &Path) {
    let lib = library_dir();
    let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c99",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O2",
        ])
        .arg("-I")
        .arg(Path::new(CRATE).join("include"))
        .arg(source)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lsluice")
        .output()
        .expect("a C compiler (cc) is needed for this test");
    assert!(
        output.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A command running a compiled C program: it loads the libsluice.so of this build (cargo
/// puts target/<profile>/ on LD_LIBRARY_PATH for tests, which would win over the rpath and
/// may hold an older library).
pub fn command(exe: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("LD_LIBRARY_PATH", library_dir());
    c
}
