//! Laminar's shared log (laminar.txt 5) between two cores on a lossy, reordering wire:
//! several clients on one core send records to a server core whose connections are all
//! attached to one log. Whatever the wire loses or reorders, once the application has
//! filled every gap from the redirected bytes, the log's records, taken per connection,
//! are exactly that connection's records in order (each record whole: the clients keep
//! records within one segment, footnote 2, here by records that divide the MSS).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use sluice_sim::{Impairment, LinkConfig, Sim};
use sluice_tcp::{ConnId, Event, LogId, Stack};
use support::*;

const PORT: u16 = 9000;
/// A record's header: length (2), client (1), padding (1), index (4).
const HEADER: usize = 8;

fn record(client: u8, index: u32, size: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(size);
    r.extend_from_slice(&(size as u16).to_be_bytes());
    r.push(client);
    r.push(0xa5);
    r.extend_from_slice(&index.to_be_bytes());
    r.extend((HEADER..size).map(|i| (i as u8) ^ client ^ (index as u8)));
    r
}

/// The server application: attaches accepted connections, fills gaps from redirects,
/// parses whole records off the log's head and trims them.
struct LogServer {
    log: LogId,
    pending: Vec<ConnId>,
    /// Records per client byte, in log order.
    got: BTreeMap<u8, Vec<Vec<u8>>>,
    /// Connections each record came from, by client byte (one connection per client).
    total: usize,
}

impl LogServer {
    fn step(&mut self, stack: &mut Stack) {
        while let Some(ev) = stack.poll_event() {
            if let Event::Acceptable(l) = ev {
                while let Ok(c) = stack.accept(l) {
                    self.pending.push(c);
                }
            }
        }
        // Out-of-order data already in a ring defers the attach until it is in order.
        self.pending
            .retain(|&c| stack.log_attach(self.log, c).is_err());
        while let Some(r) = stack.poll_log_redirect(self.log).unwrap() {
            assert!(!r.abandoned, "no client ends early");
            stack.log_fill(self.log, r.offset, &r.data).unwrap();
        }
        let (a, b) = stack.log_peek(self.log).unwrap();
        let bytes = [a, b].concat();
        let mut at = 0;
        while bytes.len() - at >= HEADER {
            let len = usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
            assert!(len >= HEADER, "a record boundary at log offset {at}");
            if bytes.len() - at < len {
                break;
            }
            let r = bytes[at..at + len].to_vec();
            self.got.entry(r[2]).or_default().push(r);
            self.total += 1;
            at += len;
        }
        stack.log_trim(self.log, at as u64).unwrap();
    }
}

/// Runs the clients and checks the log; returns the server's counters.
fn run(
    seed: u64,
    clients: u8,
    per_client: u32,
    k: u16,
    loss: f64,
    reorder: f64,
) -> sluice_tcp::Counters {
    let mut sim: Sim<Stack> = Sim::new(seed);
    let server = sim.add_host(Stack::new(config(1)).unwrap());
    let client = sim.add_host(Stack::new(config(2)).unwrap());
    let data = Impairment::default()
        .with_loss(loss)
        .with_reorder(reorder, Duration::from_micros(30));
    let acks = Impairment::default().with_loss(loss / 2.0);
    let link = |imp| {
        LinkConfig::new(10_000_000_000, Duration::from_micros(10))
            .with_queue(4 << 20)
            .with_impairment(imp)
    };
    sim.connect_asymmetric(server, client, link(acks), link(data))
        .unwrap();
    let (log, l) = {
        let s = sim.host_mut(server).unwrap();
        (
            s.log_register(4 << 20).unwrap(),
            s.listen(PORT, 64).unwrap(),
        )
    };
    let _ = l;
    let now = sim.now();
    let conns: Vec<ConnId> = (0..clients)
        .map(|_| {
            sim.host_mut(client)
                .unwrap()
                .connect(now, A_IP, PORT)
                .unwrap()
        })
        .collect();
    let mut app = LogServer {
        log,
        pending: Vec::new(),
        got: BTreeMap::new(),
        total: 0,
    };
    let mut next = vec![0u32; usize::from(clients)];
    let mut size = 0usize;
    let want = usize::from(clients) * per_client as usize;
    let deadline = sim.now() + Duration::from_secs(20);
    sim.run_until(deadline, |_, hosts| {
        let (s, c) = hosts.get_pair_mut(server, client).unwrap();
        while c.poll_event().is_some() {}
        for (i, &id) in conns.iter().enumerate() {
            let Ok(info) = c.info(id) else { continue };
            if size == 0 && info.state == sluice_tcp::TcpState::Established {
                let _ = c.set_nagle(id, false);
                let k = if info.mss % k == 0 { k } else { 1 };
                size = usize::from(info.mss / k);
            }
            if size == 0 || info.state != sluice_tcp::TcpState::Established {
                continue;
            }
            // Whole records only, so segments (MSS-sized, or all that is queued) hold whole
            // records.
            while next[i] < per_client && c.info(id).unwrap().writable >= size {
                let r = record(i as u8, next[i], size);
                assert_eq!(c.send(id, &r), Ok(size));
                next[i] += 1;
            }
        }
        app.step(s);
        s.check_invariants().unwrap();
        app.total == want
    })
    .unwrap_or_else(|e| panic!("records did not all arrive: {e:?}, {} of {want}", app.total));
    for i in 0..clients {
        let expect: Vec<Vec<u8>> = (0..per_client).map(|n| record(i, n, size)).collect();
        assert_eq!(
            app.got.get(&i),
            Some(&expect),
            "client {i}'s records in order"
        );
    }
    let info = sim.host(server).unwrap().log_info(log).unwrap();
    assert_eq!(info.gaps, 0);
    assert_eq!(info.readable_end, info.tail);
    sim.host(server).unwrap().counters().clone()
}

#[test]
fn a_clean_wire_appends_every_record_in_order_without_gaps() {
    let c = run(1, 3, 40, 4, 0.0, 0.0);
    assert_eq!(c.log_gaps_reserved, 0);
    assert_eq!(c.log_appended_bytes, c.log_appended_bytes / 362 * 362);
}

#[test]
fn losses_open_gaps_that_redirected_bytes_fill() {
    let c = run(7, 4, 60, 2, 0.04, 0.05);
    assert!(c.log_gaps_reserved > 0, "{c:?}");
    assert!(c.log_segments_redirected > 0);
    assert!(c.log_redirected_bytes > 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn records_per_connection_survive_loss_and_reordering(
        seed: u64,
        clients in 1u8..=4,
        per_client in 10u32..60,
        k in prop::sample::select(vec![1u16, 2, 4, 8]),
        loss in 0.0f64..0.05,
        reorder in 0.0f64..0.1,
    ) {
        run(seed, clients, per_client, k, loss, reorder);
    }
}
