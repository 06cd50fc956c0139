//! The coverage-guided wire targets' properties on stable Rust: each target's seeds, its
//! checked-in corpus, seeded random bytes and seeded mutations of valid inputs. The same
//! functions run under libFuzzer in the repository's `fuzz/` folder.

use std::path::PathBuf;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_fuzz::targets::wire::{self, TARGETS};

/// Random inputs and mutants per target: a few seconds in all with the test profile.
const RANDOM_CASES: usize = 50_000;
const MUTANT_CASES: usize = 300_000;

/// Byte values that sit on the parsers' boundaries: option kinds and lengths, versions.
const INTERESTING: [u8; 14] = [0, 1, 2, 3, 4, 5, 8, 10, 18, 34, 0x45, 0x7f, 0x80, 0xff];

fn mutate(rng: &mut ChaCha8Rng, input: &mut Vec<u8>, donors: &[Vec<u8>]) {
    for _ in 0..rng.gen_range(1..=4) {
        let len = input.len();
        match rng.gen_range(0..7) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] = *INTERESTING.choose(rng).expect("not empty");
            }
            2 => {
                let i = rng.gen_range(0..=len);
                input.insert(i, rng.gen());
            }
            3 if len > 0 => {
                input.remove(rng.gen_range(0..len));
            }
            4 => input.truncate(rng.gen_range(0..=len)),
            5 if len > 0 => {
                // Repeat a chunk, as option lists and tags repeat.
                let a = rng.gen_range(0..len);
                let b = rng.gen_range(a..=len.min(a + 12));
                let chunk = input[a..b].to_vec();
                let at = rng.gen_range(0..=input.len());
                input.splice(at..at, chunk);
            }
            _ => {
                let donor = donors.choose(rng).expect("not empty");
                let at = rng.gen_range(0..=len);
                input.truncate(at);
                let from = rng.gen_range(0..=donor.len());
                input.extend_from_slice(&donor[from..]);
            }
        }
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn every_target_runs_and_has_seeds() {
    for t in TARGETS {
        assert!(wire::seeds(t).len() >= 12, "{t} has too few seeds");
        assert!(wire::run(t, &[]), "{t} is not dispatched");
    }
    assert!(!wire::run("no_such_target", &[]));
}

#[test]
fn seeds_are_accepted_by_their_parsers() {
    use sluice_wire::arp::ArpRepr;
    use sluice_wire::ethernet::EthernetRepr;
    use sluice_wire::ipv4::Ipv4Repr;
    use sluice_wire::tcp::{ChecksumCheck, TcpHeader, TcpOptions};
    for s in wire::seeds("wire_ethernet") {
        assert!(EthernetRepr::parse(&s).is_ok(), "{s:02x?}");
    }
    for s in wire::seeds("wire_arp") {
        assert!(ArpRepr::parse(&s).is_ok(), "{s:02x?}");
    }
    for s in wire::seeds("wire_ipv4") {
        assert!(Ipv4Repr::parse(&s, true).is_ok(), "{s:02x?}");
    }
    for s in wire::seeds("wire_tcp") {
        let r = TcpHeader::parse(&s, wire::TCP_SRC, wire::TCP_DST, ChecksumCheck::Verify);
        assert!(r.is_ok(), "{s:02x?}");
    }
    for s in wire::seeds("wire_tcp_options") {
        assert!(TcpOptions::parse(&s).is_ok(), "{s:02x?}");
    }
}

/// The GSO seeds reach every outcome the property distinguishes: frames cut into several
/// segments (with a short last one), a frame passed on whole, a scratch buffer too small and
/// a GSO size of 0.
#[test]
fn gso_seeds_cover_segmentation_and_its_errors() {
    use sluice_wire::gso::segment_tcp4;
    use sluice_wire::WireError;
    let (mut cut, mut whole, mut small, mut zero) = (0, 0, 0, 0);
    for s in wire::seeds("wire_gso") {
        let (prefix, frame) = s.split_at(wire::GSO_PREFIX);
        let gso_size = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
        let mut scratch = vec![0u8; usize::from(u16::from_be_bytes([prefix[2], prefix[3]]))];
        match segment_tcp4(frame, gso_size, &mut scratch, |_| {}) {
            Ok(1) => whole += 1,
            Ok(_) => cut += 1,
            Err(WireError::BufferTooSmall) => small += 1,
            Err(WireError::Malformed) if gso_size == 0 => zero += 1,
            Err(e) => panic!("seed {s:02x?}: {e}"),
        }
        wire::gso(&s);
    }
    assert!(cut >= 6 && whole >= 2 && small == 1 && zero == 1);
}

#[test]
fn checked_in_corpus_replays() {
    for t in TARGETS {
        let dir = corpus_dir(t);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut n = 0;
        for e in entries {
            let data = std::fs::read(e.expect("a directory entry").path()).expect("readable");
            wire::run(t, &data);
            n += 1;
        }
        assert!(n > 0, "{} is empty", dir.display());
    }
}

#[test]
fn random_bytes() {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    for t in TARGETS {
        for _ in 0..RANDOM_CASES {
            let len = rng.gen_range(0..100);
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            wire::run(t, &data);
        }
    }
}

#[test]
fn mutated_valid_inputs() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0024);
    for t in TARGETS {
        let seeds = wire::seeds(t);
        for _ in 0..MUTANT_CASES {
            let mut data = seeds.choose(&mut rng).expect("seeds").clone();
            mutate(&mut rng, &mut data, &seeds);
            wire::run(t, &data);
        }
    }
}
