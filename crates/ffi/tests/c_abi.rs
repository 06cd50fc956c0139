//! tests/c/abi_test.c, compiled with the system's C compiler (`cc`, or `$CC`) against
//! include/sluice.h and the staticlib this test run built, then run: two stacks exchanging
//! 1 MB through an in-memory wire in virtual time, the error paths from C, and hundreds of
//! stacks in one process. tests/c/mtp_test.c the same way for the MTP transport: two MTP
//! stacks exchanging 100 messages each way byte-exact, and its error paths. Also:
//! docs/ffi.md's minimal examples (TCP and MTP), compiled and run, and the header compiled
//! as C++ (ns-3 is C++).

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
    compile_with("CC", "cc", "-std=c99", source, out);
}

/// Compiles and links `source` with the compiler `$var` (else `default`) in language
/// standard `std`, every warning an error.
fn compile_with(var: &str, default: &str, std: &str, source: &Path, out: &Path) {
    let output = Command::new(std::env::var(var).unwrap_or_else(|_| default.into()))
        .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g"])
        .arg("-I")
        .arg(Path::new(CRATE).join("include"))
        .arg(source)
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm"])
        .arg("-o")
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("a compiler ({default}) is needed for this test: {e}"));
    assert!(
        output.status.success(),
        "{default} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Compiles tests/c/`name`.c, runs it, and returns its standard output (it must succeed
/// and end with its count of passed checks).
fn run_c_test(name: &str) -> String {
    let dir = scratch(name);
    let exe = dir.join(name);
    compile(&Path::new(CRATE).join(format!("tests/c/{name}.c")), &exe);
    let output = Command::new(&exe).output().expect("run the C test");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    println!("{stdout}");
    stdout
}

#[test]
fn the_c_abi_test_passes_in_c() {
    let stdout = run_c_test("abi_test");
    assert!(
        stdout.contains("transfer: 1048576 bytes verified"),
        "{stdout}"
    );
}

#[test]
fn the_mtp_test_passes_in_c() {
    let stdout = run_c_test("mtp_test");
    assert!(
        stdout.contains("exchange: 100 messages each way"),
        "{stdout}"
    );
    assert!(stdout.contains("many: 300 MTP stacks"), "{stdout}");
}

/// A scratch directory for one test's binaries.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-ffi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_minimal_examples_in_docs_ffi_md_run() {
    let doc = std::fs::read_to_string(Path::new(CRATE).join("../../docs/ffi.md")).unwrap();
    let examples: Vec<&str> = doc
        .split("```c\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    // TCP's example, then MTP's.
    let want = ["hello\n", "hello from port 7000 delivered\n"];
    assert_eq!(examples.len(), want.len(), "```c blocks in docs/ffi.md");
    let dir = scratch("doc");
    for (i, (example, want)) in examples.iter().zip(want).enumerate() {
        let source = dir.join(format!("example{i}.c"));
        std::fs::write(&source, example).unwrap();
        let exe = dir.join(format!("example{i}"));
        compile(&source, &exe);
        let output = Command::new(&exe).output().unwrap();
        assert!(output.status.success(), "example {i}: {output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), want, "example {i}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_header_compiles_as_cpp() {
    let dir = scratch("cpp");
    let source = dir.join("header.cpp");
    std::fs::write(
        &source,
        "#include \"sluice.h\"\n\
         int main() {\n\
           sluice_config c;\n\
           sluice_stack *s = nullptr;\n\
           if (sluice_config_default(&c) != SLUICE_ERROR_OK) return 1;\n\
           if (sluice_stack_new(&c, &s) != SLUICE_ERROR_OK) return 2;\n\
           sluice_event e;\n\
           int r = sluice_poll_event(s, &e);\n\
           sluice_stack_free(s);\n\
           return r == 0 ? 0 : 3;\n\
         }\n",
    )
    .unwrap();
    compile_with("CXX", "c++", "-std=c++17", &source, &dir.join("header"));
    let status = Command::new(dir.join("header")).status().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{status}");
}
