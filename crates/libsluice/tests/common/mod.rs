//! Shared by the integration tests: the fake engine, and helpers.
#![allow(dead_code, unused_imports)]

pub mod c;
pub mod fake_engine;
pub mod real_engine;
pub mod two_engines;

use std::net::SocketAddrV4;
use std::sync::Arc;

use sluice::{Sluice, Socket};

pub use fake_engine::{FakeEngine, Options, BLACKHOLE_IP, ENGINE_IP};

/// A fake engine with default options and one attachment to it.
pub fn engine_and_app() -> (FakeEngine, Arc<Sluice>) {
    let engine = FakeEngine::start(Options::default());
    let app = Sluice::attach(&engine.path).expect("attach to the fake engine");
    (engine, app)
}

/// A listener on the engine's address at a port the engine picks.
pub fn listener(app: &Arc<Sluice>) -> (Socket, SocketAddrV4) {
    let l = Socket::open(app).unwrap();
    l.bind(SocketAddrV4::new(ENGINE_IP, 0)).unwrap();
    l.listen(16).unwrap();
    let addr = l.local_addr().unwrap();
    assert_ne!(addr.port(), 0);
    (l, addr)
}

/// A connected pair: (client, server side).
pub fn pair(app: &Arc<Sluice>) -> (Socket, Socket) {
    let (l, addr) = listener(app);
    let c = Socket::open(app).unwrap();
    c.connect(addr).unwrap();
    let (s, peer) = l.accept().unwrap();
    assert_eq!(peer, c.local_addr().unwrap());
    (c, s)
}

/// Deterministic test bytes.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// The executable of one of this crate's examples: `cargo test` builds them beside the test
/// executables (target/<profile>/examples); a test binary built alone asks cargo for it, in
/// the same profile directory. (After editing an example, run `cargo test` whole, or build
/// the example, so that a stale one is not used.)
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut args = vec!["build", "-p", env!("CARGO_PKG_NAME"), "--example", name];
        if profile_dir.file_name().is_some_and(|d| d == "release") {
            args.push("--release");
        }
        eprintln!(
            "tests: no example {} yet; building it with `cargo {}`",
            path.display(),
            args.join(" ")
        );
        let status = std::process::Command::new(cargo)
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cargo build --example {name}");
    }
    assert!(path.exists(), "no example {}", path.display());
    path
}
