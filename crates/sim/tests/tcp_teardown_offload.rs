//! Teardown offload (acceltcp.txt 4.2) end to end in virtual time: a server answers each
//! short connection and closes it through the teardown stage, over a link that loses,
//! reorders and duplicates frames both ways. Every response must arrive byte-exact with its
//! end of stream, whether the server or the client closes first, and the stage must end
//! empty: every offloaded close completes, none gives up, none leaks.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use sluice_sim::Impairment;
use sluice_tcp::{ConnId, Counters, Error};
use support::*;

const PORT: u16 = 7000;
const REQUEST: usize = 64;

/// Response bytes for connection `n`: its length (0 to 40,000, so some tails are larger
/// than the initial window and take the normal path) and content.
fn response(n: u32) -> Vec<u8> {
    let len = (n as usize * 7919) % 40_001;
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(n) as u8)
        .collect()
}

struct Client {
    id: ConnId,
    n: u32,
    got: Vec<u8>,
    sent: bool,
}

struct Server {
    id: ConnId,
    request: Vec<u8>,
}

struct Outcome {
    server: Counters,
    client: Counters,
    done: u32,
}

/// `total` connections, `parallel` at a time; `client_closes_first`: the client half-closes
/// after its request and the server answers at end of stream (its close is LAST-ACK).
fn run(
    seed: u64,
    imp: Impairment,
    total: u32,
    parallel: usize,
    client_closes_first: bool,
) -> Outcome {
    run_with(seed, imp, total, parallel, client_closes_first, config(2))
}

/// [`run`] with the server's configuration.
fn run_with(
    seed: u64,
    imp: Impairment,
    total: u32,
    parallel: usize,
    client_closes_first: bool,
    server_config: sluice_tcp::Config,
) -> Outcome {
    let (mut sim, a, b, _) = pair_with(seed, imp, config(1), server_config);
    let listener = sim.host_mut(b).unwrap().listen(PORT, 128).unwrap();
    let mut clients: Vec<Client> = Vec::new();
    let mut servers: HashMap<ConnId, Server> = HashMap::new();
    let (mut started, mut done) = (0u32, 0u32);
    let mut buf = vec![0u8; 65536];
    let start = sim.now();
    let r = sim.run_until(start + Duration::from_secs(60), |now, hosts| {
        let (client, server) = hosts.get_pair_mut(a, b).unwrap();
        while clients.len() < parallel && started < total {
            let id = client.connect(now, B_IP, PORT).unwrap();
            clients.push(Client {
                id,
                n: started,
                got: Vec::new(),
                sent: false,
            });
            started += 1;
        }
        // Client: send the request once connected, read to end of stream, check, close.
        clients.retain_mut(|c| {
            if !c.sent {
                let mut req = vec![0u8; REQUEST];
                req[..4].copy_from_slice(&c.n.to_be_bytes());
                match client.send(c.id, &req) {
                    Ok(n) => {
                        assert_eq!(n, REQUEST);
                        c.sent = true;
                        if client_closes_first {
                            client.shutdown(c.id).unwrap();
                        }
                    }
                    Err(Error::WouldBlock | Error::NotConnected) => return true,
                    Err(e) => panic!("send: {e:?}"),
                }
            }
            loop {
                match client.recv(c.id, &mut buf) {
                    Ok(0) => {
                        assert!(
                            c.got == response(c.n),
                            "connection {} response differs",
                            c.n
                        );
                        client.close(c.id).unwrap();
                        done += 1;
                        return false;
                    }
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => return true,
                    Err(e) => panic!("connection {}: recv: {e:?}", c.n),
                }
            }
        });
        // Server: read the request (to end of stream if the client closes first), answer,
        // close through the teardown stage.
        while let Ok(id) = server.accept(listener) {
            servers.insert(
                id,
                Server {
                    id,
                    request: Vec::new(),
                },
            );
        }
        servers.retain(|_, s| {
            let mut eof = false;
            loop {
                match server.recv(s.id, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => s.request.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("server recv: {e:?}"),
                }
            }
            let ready = s.request.len() == REQUEST && (eof || !client_closes_first);
            if !ready {
                return true;
            }
            let n = u32::from_be_bytes(s.request[..4].try_into().unwrap());
            let body = response(n);
            assert_eq!(server.send(s.id, &body).unwrap_or(0), body.len());
            server.set_teardown_offload(s.id, true).unwrap();
            server.close(s.id).unwrap();
            false
        });
        done == total
    });
    assert!(
        r.is_ok(),
        "seed {seed}: {done}/{total} connections finished: {r:?}"
    );
    // Let every TIME-WAIT and FIN-WAIT-2 run out.
    sim.run_for(Duration::from_secs(5));
    let (client, server) = (sim.host(a).unwrap(), sim.host(b).unwrap());
    server.check_invariants().unwrap();
    client.check_invariants().unwrap();
    assert_eq!(
        server.teardown_flows(),
        0,
        "seed {seed}: the stage ends empty"
    );
    assert_eq!(server.connection_count(), 0, "seed {seed}: server slots");
    assert_eq!(client.connection_count(), 0, "seed {seed}: client slots");
    Outcome {
        server: server.counters().clone(),
        client: client.counters().clone(),
        done,
    }
}

fn impaired() -> Impairment {
    Impairment::default()
        .with_loss(0.05)
        .with_reorder(0.03, Duration::from_micros(50))
        .with_duplicate(0.02)
}

fn check(o: &Outcome, total: u32) {
    let s = &o.server;
    assert_eq!(o.done, total);
    assert!(
        s.teardown_offloaded > total as u64 / 4,
        "most closes offloaded: {s:?}"
    );
    assert_eq!(
        s.teardown_offloaded + s.teardown_refused_state + s.teardown_refused_full,
        total as u64,
        "every close asked: {s:?}"
    );
    // A LAST-ACK whose FIN's ACK was lost meets a client out of TIME-WAIT (100 ms here,
    // shorter than the backed-off RTO), which answers the retransmitted FIN with a RST:
    // the only way a flow may end other than cleanly.
    assert_eq!(
        s.teardown_completed + s.teardown_reset,
        s.teardown_offloaded,
        "{s:?}"
    );
    assert!(s.teardown_reset <= o.client.rst_sent, "{s:?}");
    assert_eq!(
        s.teardown_timed_out + s.teardown_data_after_close,
        0,
        "{s:?}"
    );
    assert_eq!(
        o.client.rst_received, 0,
        "no client was reset: {:?}",
        o.client
    );
}

#[test]
fn acceltcp_4_2_server_closes_first_through_the_stage_under_loss_reorder_and_duplication() {
    for seed in [1, 2, 3] {
        let o = run(seed, impaired(), 300, 16, false);
        check(&o, 300);
        assert!(
            o.server.teardown_retransmits > 0,
            "seed {seed}: the stage's RTO was exercised"
        );
    }
}

#[test]
fn acceltcp_4_2_client_closes_first_and_the_stage_finishes_last_ack_under_impairment() {
    for seed in [4, 5] {
        let o = run(seed, impaired(), 300, 16, true);
        check(&o, 300);
    }
}

#[test]
fn acceltcp_4_2_a_clean_link_needs_no_retransmission_from_the_stage() {
    let o = run(9, Impairment::default(), 200, 8, false);
    check(&o, 200);
    assert_eq!(o.server.teardown_retransmits, 0);
}

#[test]
fn acceltcp_4_1_and_4_2_setup_and_teardown_offload_together_keep_no_half_open_state() {
    // Every SYN answered with a cookie (syn_backlog 0): the server holds no state for a
    // connection until its handshake completes, and none after its close is offloaded.
    let mut cfg = config(2);
    cfg.syn_backlog = 0;
    for seed in [6, 7] {
        let o = run_with(seed, impaired(), 300, 16, false, cfg.clone());
        check(&o, 300);
        assert_eq!(
            o.server.syn_cookies_accepted, 300,
            "seed {seed}: every connection came through a cookie: {:?}",
            o.server
        );
        assert!(o.server.syn_cookies_sent >= 300, "{:?}", o.server);
    }
}
