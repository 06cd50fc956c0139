//! Builds the eBPF programs in programs/ (and the verifier's bad corpus in programs/bad/) with
//! clang into OUT_DIR; src/programs.rs includes the objects as bytes.

use std::path::Path;
use std::process::Command;

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    // clang -target bpf still needs the host's asm/types.h (Debian's multiarch include dir).
    let arch_inc = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    for dir in ["programs", "programs/bad"] {
        println!("cargo:rerun-if-changed={dir}");
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "c"))
            .collect();
        entries.sort();
        for src in entries {
            println!("cargo:rerun-if-changed={}", src.display());
            let stem = src
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("utf-8 file name");
            let obj = Path::new(&out).join(format!("{stem}.o"));
            let status = Command::new("clang")
                .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
                .arg(format!("-I{arch_inc}"))
                .arg("-c")
                .arg(&src)
                .arg("-o")
                .arg(&obj)
                .status()
                .unwrap_or_else(|e| {
                    panic!("clang not found ({e}): scripts/setup.sh installs clang and libbpf-dev")
                });
            assert!(status.success(), "clang failed on {}", src.display());
        }
    }
}
