//! Compiles the variadic entry points (fcntl, ioctl), which stable Rust cannot define, and the
//! verbs completion-channel calls (csrc/comp_channel.c), and links them into the cdylib only
//! (unit-test binaries must not interpose on themselves).

use std::env;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    cc::Build::new()
        .file("csrc/variadic.c")
        .file("csrc/comp_channel.c")
        .flag_if_supported("-fvisibility=default")
        .warnings(true)
        // No cargo:rustc-link-lib: the archive goes to the cdylib's link line alone, below.
        .cargo_metadata(false)
        .compile("sluice_preload_variadic");
    let archive = out.join("libsluice_preload_variadic.a");
    // Whole archive: nothing in Rust references fcntl/ioctl, yet they must be kept.
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--whole-archive,{},--no-whole-archive",
        archive.display()
    );
    // rustc's version script makes every non-Rust symbol local; a second script adds the C
    // entry points to the exported set (GNU ld merges anonymous version scripts).
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        manifest.join("csrc/exports.map").display()
    );
    println!("cargo:rerun-if-changed=csrc/variadic.c");
    println!("cargo:rerun-if-changed=csrc/comp_channel.c");
    println!("cargo:rerun-if-changed=csrc/exports.map");
}
