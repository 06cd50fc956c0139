//! The coverage-guided targets (`sluice_fuzz::targets`) as property tests on stable, so CI
//! runs them without nightly: proptest feeds each target random byte strings from a fixed
//! seed (shrinking a failure to a short input); `PROPTEST_RNG_SEED=<n>` and
//! `PROPTEST_CASES=<n>` explore further. Two hand-written inputs show that the targets'
//! decoders reach the deep paths: a connection that carries data, and a service that
//! answers bad entries while a good connection delivers. The checked-in seed corpora
//! (`fuzz/corpus/{core,service}`) are replayed too.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use sluice_fuzz::targets::core::{self, CoreInput, Forged, Host, Step};
use sluice_fuzz::targets::service::{self, FuzzCommand, IpChoice, Op, ServiceInput};

fn config(cases: u32) -> Config {
    let mut c = Config {
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x7a26_e7c0);
    }
    c
}

proptest! {
    #![proptest_config(config(3000))]

    /// No panic, the core's invariants and bounds after every step, whatever the bytes.
    #[test]
    fn core_target_holds_invariants(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        if let Err(v) = core::check(&data) {
            prop_assert!(false, "{v}\ninput: {data:?}");
        }
    }
}

proptest! {
    #![proptest_config(config(300))]

    /// No panic, every bad entry answered and counted, and the good connection exact.
    #[test]
    fn service_target_holds(data in prop::collection::vec(any::<u8>(), 0..1024)) {
        if let Err(v) = service::check(&data) {
            prop_assert!(false, "{v}\ninput: {data:?}");
        }
    }
}

proptest! {
    #![proptest_config(config(500))]

    /// Two RDMA stacks under arbitrary frames and work requests: no panic, no access
    /// outside registered memory (the target's memory panics on one).
    #[test]
    fn rdma_target_holds(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        sluice_fuzz::targets::rdma::rdma_stack(&data);
    }

    /// Two MTP stacks under arbitrary frames, edits and sends: no panic, state within the
    /// configured bounds, delivered messages byte-exact.
    #[test]
    fn mtp_target_holds(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        sluice_fuzz::targets::mtp::mtp_stack(&data);
    }
}

/// A handshake, data both ways, a forged segment in the window and a close: the steps
/// reach ESTABLISHED and move bytes, so random inputs can too.
#[test]
fn core_target_carries_data() {
    let mut steps = vec![
        Step::Listen {
            on: Host::B,
            port: 0,
            backlog: 4,
        },
        Step::Connect {
            on: Host::A,
            port: 0,
        },
    ];
    for _ in 0..6 {
        steps.push(Step::DeliverBatch {
            to: Host::B,
            count: 8,
        });
        steps.push(Step::DeliverBatch {
            to: Host::A,
            count: 8,
        });
        steps.push(Step::Accept { which: 0 });
    }
    for _ in 0..4 {
        steps.push(Step::Send { conn: 0, len: 500 });
        steps.push(Step::Send { conn: 1, len: 500 });
        steps.push(Step::Forge(Forged {
            conn: 1,
            flags: 0x10,
            seq_off: 0,
            ack_off: 0,
            window: 1000,
            ecn: 0,
            options: vec![1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 9],
            payload_len: 100,
        }));
        for _ in 0..3 {
            steps.push(Step::DeliverBatch {
                to: Host::B,
                count: 16,
            });
            steps.push(Step::DeliverBatch {
                to: Host::A,
                count: 16,
            });
            steps.push(Step::Advance { micros: 50_000 });
        }
        steps.push(Step::Recv { conn: 0, len: 4000 });
        steps.push(Step::Recv { conn: 1, len: 4000 });
    }
    steps.push(Step::Close { conn: 0 });
    steps.push(Step::Jump { secs: 120 });
    let stats = core::run_input(&CoreInput {
        configs: [1, 2],
        steps,
    })
    .expect("no violation");
    assert!(stats.established > 0, "{stats:?}");
    assert!(stats.received >= 500, "{stats:?}");
}

/// Bad entries of every kind beside the good connection: each is answered and counted,
/// and both good streams arrive exactly.
#[test]
fn service_target_counts_bad_entries() {
    let cmd = |opcode, slot, wide| {
        Op::Command(FuzzCommand {
            opcode,
            req: 77,
            slot,
            wide,
            ip: IpChoice::Peer,
            port: 0,
            peer_port: true,
            arg: 3,
        })
    };
    let ops = vec![
        Op::Raw {
            opcode: 0xee,
            rest: [1; 27],
        },
        cmd(0, 0, false),  // Open: slot 1
        cmd(3, 1, false),  // Connect slot 1 to the peer
        cmd(1, 5, false),  // Bind a slot never opened: EBADF
        cmd(2, 300, true), // Listen far out of range: EBADF
        Op::Poll { rounds: 20 },
        Op::PeerAccept,
        Op::GoodIo,
        Op::Position {
            slot: 1,
            which: service::Position::TxTail,
            value: service::PositionValue::Any(u64::MAX),
            doorbell: true,
        },
        Op::Poll { rounds: 5 },
    ];
    let stats = service::run_input(&ServiceInput {
        stream_len: 20_000,
        command_batch: 7,
        ops,
    })
    .expect("no violation");
    let c = stats.counters;
    assert_eq!(c.bad_entries, 1, "{c:?}");
    assert!(c.bad_slots >= 2, "{c:?}");
    assert!(c.bad_positions >= 1 && c.resets_bad_input >= 1, "{c:?}");
    assert!(stats.failed >= 3, "{stats:?}");
    assert!(c.tx_bytes >= 20_000 && c.rx_bytes >= 20_000, "{c:?}");
}

/// Every input of a checked-in seed corpus (`fuzz/corpus/<target>`, what libFuzzer's runs
/// kept for their coverage), replayed on stable.
fn replay_corpus(target: &str, check: impl Fn(&[u8]) -> Result<(), String>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut n = 0;
    for entry in entries {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).expect("corpus file");
        if let Err(v) = check(&data) {
            panic!("{}: {v}", path.display());
        }
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
}

#[test]
fn core_corpus_replays() {
    replay_corpus("core", |d| {
        core::check(d).map(|_| ()).map_err(|v| v.to_string())
    });
}

#[test]
fn service_corpus_replays() {
    replay_corpus("service", |d| service::check(d).map(|_| ()));
}
