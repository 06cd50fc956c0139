//! libsluice against the fake engine playing N flow-group cores (docs/service.md "Several
//! data-path cores": a queue pair per core in each context, slots by core, a command on
//! the wrong core's queue refused and counted): sockets spread over the cores carry bytes
//! both ways through stalls and sleeps, a splice within one core works with its reports
//! coming on another core's queue, and a splice across cores is `Incompatible`.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sluice::{Sluice, Socket, SpliceError, SpliceOutcome};
use sluice_shm::Layout;

fn engine(cores: u32) -> (FakeEngine, Arc<Sluice>) {
    let engine = FakeEngine::start(Options {
        layout: Layout {
            max_sockets: 64,
            max_contexts: 16,
            queue_entries: 64,
            ring_size: 8192,
            queue_cores: cores,
            ..Layout::default()
        },
        ..Options::default()
    });
    let app = Sluice::attach(&engine.path).expect("attach to the fake engine");
    (engine, app)
}

/// Reads exactly `n` bytes.
fn read_n(s: &Socket, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        let k = s.recv(&mut out[got..]).expect("recv");
        assert!(k > 0, "end of stream after {got} of {n}");
        got += k;
    }
    out
}

#[test]
fn sockets_on_every_core_carry_bytes_both_ways_through_stalls_and_sleeps() {
    for cores in [2, 3] {
        let (engine, app) = engine(cores);
        let pairs: Vec<(Arc<Socket>, Arc<Socket>)> = (0..cores)
            .map(|_| {
                let (c, s) = pair(&app);
                (Arc::new(c), Arc::new(s))
            })
            .collect();
        let used: BTreeSet<u32> = pairs
            .iter()
            .flat_map(|(c, s)| [c.slot() % cores, s.slot() % cores])
            .collect();
        assert_eq!(used.len(), cores as usize, "sockets on every core");

        const LEN: usize = 256 << 10;
        let mut threads = Vec::new();
        for (i, (c, s)) in pairs.iter().enumerate() {
            for (from, to, seed) in [(c, s, 2 * i as u32), (s, c, 2 * i as u32 + 1)] {
                let (from, to) = (from.clone(), to.clone());
                threads.push(std::thread::spawn(move || {
                    for chunk in pattern(LEN, seed).chunks(3001) {
                        assert_eq!(from.send(chunk).unwrap(), chunk.len());
                    }
                }));
                threads.push(std::thread::spawn(move || {
                    assert!(read_n(&to, LEN) == pattern(LEN, seed), "bytes differ");
                }));
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        let st = &engine.stats;
        assert_eq!(
            st.bytes_moved.load(Ordering::Relaxed),
            2 * u64::from(cores) * LEN as u64
        );
        assert!(
            st.stalls.load(Ordering::Relaxed) > 0,
            "the rings never filled"
        );
        assert_eq!(st.misrouted.load(Ordering::Relaxed), 0, "{cores} cores");
        assert_eq!(st.bad_commands.load(Ordering::Relaxed), 0);
        assert_eq!(st.lost_wakeups.load(Ordering::Relaxed), 0);
    }
}

#[test]
fn a_splice_within_a_core_works_and_one_across_cores_is_incompatible() {
    let cores = 2;
    let (engine, app) = engine(cores);
    let (c1, s1) = pair(&app);
    let (c2, s2) = pair(&app);
    // Socket i's peer is socket i ^ 1.
    let mut v = vec![Some(c1), Some(s1), Some(c2), Some(s2)];
    let at = |v: &[Option<Socket>], i: usize| -> u32 { v[i].as_ref().unwrap().slot() % cores };
    // One socket of each pair on the same core, and one on another core than that.
    let (ia, ib) = [(0, 2), (0, 3), (1, 2), (1, 3)]
        .into_iter()
        .find(|&(i, j)| at(&v, i) == at(&v, j))
        .expect("two sockets on one core");
    let ie = (0..4)
        .find(|&i| at(&v, i) != at(&v, ia) && i != ia ^ 1)
        .expect("a socket on the other core");
    let (a, b, e) = (
        v[ia].as_ref().unwrap(),
        v[ib].as_ref().unwrap(),
        v[ie].as_ref().unwrap(),
    );

    let across = a.splice(e);
    assert!(
        matches!(across, Err(SpliceError::Incompatible)),
        "{across:?}"
    );
    assert!(!a.is_spliced() && !e.is_spliced());

    let sp = a.splice(b).expect("splice within a core");
    // The fake reports on the next core's queue after the one the splice went to.
    assert_eq!(sp.poll().map(|r| r.outcome), Some(SpliceOutcome::Installed));
    let (peer_a, peer_b) = (v[ia ^ 1].as_ref().unwrap(), v[ib ^ 1].as_ref().unwrap());
    peer_a.send(b"through").unwrap();
    assert_eq!(read_n(peer_b, 7), b"through");
    peer_b.send(b"back").unwrap();
    assert_eq!(read_n(peer_a, 4), b"back");
    // a's peer goes: the splice ends.
    drop(v[ia ^ 1].take());
    let end = sp
        .wait(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("the splice ended");
    assert_eq!(end.outcome, SpliceOutcome::Closed);
    assert_eq!((end.a_to_b, end.b_to_a), (7, 4));
    assert_eq!(engine.stats.misrouted.load(Ordering::Relaxed), 0);
    assert_eq!(engine.stats.bad_commands.load(Ordering::Relaxed), 0);
}
