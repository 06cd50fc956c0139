//! include/sluice.h is what cbindgen makes of the crate now: regenerated and compared, so a
//! changed function or struct without a regenerated header fails here. `SLUICE_BLESS=1
//! cargo test -p sluice-ffi --test header` rewrites it.

use std::path::Path;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn the_checked_in_header_is_what_cbindgen_generates() {
    let dir = Path::new(CRATE);
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/sluice.h");
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/sluice.h");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/sluice.h is out of date: run `SLUICE_BLESS=1 cargo test -p sluice-ffi --test header`"
    );
    // Every item is documented: each function, struct, enum and typedef follows a comment.
    let mut previous = "";
    for line in generated.lines() {
        let item = ["typedef ", "enum ", "struct ", "int", "void ", "const ", "sluice_"]
            .iter()
            .any(|p| line.starts_with(p))
            // The C23/C++ variants of an enum's typedef follow preprocessor lines.
            && !previous.starts_with('#');
        if item {
            assert!(
                previous.starts_with("//") || previous.ends_with("*/") || previous.ends_with(';'),
                "undocumented item in include/sluice.h: {line}"
            );
        }
        previous = line.trim();
    }
}
