//! Writes the wire targets' seed corpora: `cargo run -p sluice-fuzz --example wire_seeds --
//! fuzz/corpus` puts each target's seeds in `fuzz/corpus/<target>/seed-NN`.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use sluice_fuzz::targets::wire;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    for t in wire::TARGETS {
        let dir = root.join(t);
        std::fs::create_dir_all(&dir)?;
        let seeds = wire::seeds(t);
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), s)?;
        }
        println!("{}: {} seeds", dir.display(), seeds.len());
    }
    Ok(())
}
