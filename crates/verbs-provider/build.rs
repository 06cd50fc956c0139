//! Compiles the provider (csrc/provider.c, C against libibverbs' public verbs.h and our
//! definitions of its private provider ABI) into the cdylib, with libsluice's C API linked
//! in. Without libibverbs-dev (no infiniband/verbs.h) the library is built without the
//! provider and `sluice run --verbs` says so.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=csrc/provider.c");
    println!("cargo:rerun-if-changed=csrc/abi34.h");
    println!("cargo:rerun-if-changed=../libsluice/include/sluice.h");
    // Installing libibverbs-dev later must rebuild with the provider (a missing path counts
    // as changed, so without it this script reruns, cheaply).
    println!("cargo:rerun-if-changed=/usr/include/infiniband/verbs.h");
    println!("cargo::rustc-check-cfg=cfg(sluice_no_provider)");
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        println!(
            "cargo:warning=libibverbs-dev is not installed: libsluice-rdmav34.so is built \
             without the provider (scripts/setup.sh installs it)"
        );
        println!("cargo:rustc-cfg=sluice_no_provider");
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    cc::Build::new()
        .file("csrc/provider.c")
        .include("csrc")
        .include("../libsluice/include")
        .flag("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter")
        // The archive goes to the cdylib's link line alone, below.
        .cargo_metadata(false)
        .compile("sluice_verbs_provider");
    let archive = out.join("libsluice_verbs_provider.a");
    // Whole archive: nothing references the provider; its constructor registers it.
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--whole-archive,{},--no-whole-archive",
        archive.display()
    );
    // verbs_register_driver_34 and friends (IBVERBS_PRIVATE_34).
    println!("cargo:rustc-cdylib-link-arg=-libverbs");
}
