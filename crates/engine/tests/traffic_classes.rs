//! Flow classification feeding the flow scheduler's rates (issue 19 item 2), deterministic in
//! virtual time: two cores over an in-memory pair, the shipped classifier at the sender's
//! egress puts port 5001 in class 1 (20 Mbit/s) and port 5002 in class 2 (60 Mbit/s); each
//! established connection gets its class's rate as the service programs it
//! (`traffic_class::lookup`, then `Stack::set_rate`), and the bytes the receiver reads of
//! two bulk connections over a steady interval are in the rates' proportion. Without the
//! classes both would share equally, so the proportion is the classes' doing.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sluice_device::{pair, PairConfig};
use sluice_ebpf::programs;
use sluice_engine::traffic_class::{self, FlowClass};
use sluice_engine::{pump, HookPoint, Hooks, Transports};
use sluice_tcp::{Config, ConnId, Error, Instant, Stack};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);
const STEP: Duration = Duration::from_micros(20);
const RATES: [u64; 2] = [20_000_000, 60_000_000];

fn core(mac: sluice_wire::EthernetAddress, ip: Ipv4Addr) -> Stack {
    let mut c = Config::new(mac, ip);
    c.seed = 7;
    c.max_connections = 16;
    Stack::new(c).expect("core")
}

/// Sets a u32 -> value entry of the classifier's map `map`.
fn set(hooks: &mut Hooks, map: &str, key: u32, value: &[u8]) {
    let mut chain = hooks.modules_mut();
    let id = chain.modules()[0].id;
    let m = chain.module_mut(id).unwrap();
    let map = m.maps.id(map).unwrap();
    m.maps.set(map, &key.to_le_bytes(), value, 0).unwrap();
}

/// Bytes the receiver read on each connection between 20 ms and 220 ms after both were
/// established, with (`classify`) or without the classifier's rates.
fn run(classify: bool) -> [u64; 2] {
    let cfg = PairConfig {
        capacity: 4096,
        ..PairConfig::default()
    };
    let (mut da, mut db) = pair(cfg).unwrap();
    let mut a = core(cfg.macs[0], A_IP);
    let mut b = core(cfg.macs[1], B_IP);
    a.add_neighbor(B_IP, cfg.macs[1]);
    b.add_neighbor(A_IP, cfg.macs[0]);
    let mut ha = Hooks::new();
    let (bytes, section) = programs::shipped("classify").unwrap();
    let (program, maps) = sluice_ebpf::load(bytes, section).unwrap();
    ha.modules_mut()
        .attach(HookPoint::Egress, "classify", section, program, maps)
        .unwrap();
    set(&mut ha, "port_class", 5001, &1u32.to_le_bytes());
    set(&mut ha, "port_class", 5002, &2u32.to_le_bytes());
    for (class, rate) in [1u32, 2].into_iter().zip(RATES) {
        set(&mut ha, "class_rate", class, &rate.to_le_bytes());
    }
    let mut hb = Hooks::new();
    let listeners = [b.listen(5001, 8).unwrap(), b.listen(5002, 8).unwrap()];
    let mut now = Instant::from_nanos(0);
    let senders: Vec<ConnId> = [5001, 5002]
        .iter()
        .map(|&p| a.connect(now, B_IP, p).unwrap())
        .collect();
    let mut receivers: [Option<ConnId>; 2] = [None, None];
    let mut got = [0u64; 2];
    let mut classified = false;
    let mut start = None;
    let mut before = [0u64; 2];
    let chunk = vec![0x5a; 16 << 10];
    let mut buf = vec![0u8; 64 << 10];
    loop {
        now += STEP;
        for (stack, hooks, dev) in [(&mut a, &mut ha, &mut da), (&mut b, &mut hb, &mut db)] {
            pump::receive_hooked(stack, &mut Transports::none(), hooks, dev, now).unwrap();
            pump::run_due_timers(stack, now);
            pump::transmit_hooked(stack, hooks, dev, now).unwrap();
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        for (i, l) in listeners.iter().enumerate() {
            if receivers[i].is_none() {
                receivers[i] = b.accept(*l).ok();
            }
        }
        for (i, r) in receivers.iter().enumerate() {
            let Some(r) = *r else { continue };
            loop {
                match b.recv(r, &mut buf) {
                    Ok(0) | Err(Error::WouldBlock) => break,
                    Ok(n) => got[i] += n as u64,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
        let established = senders
            .iter()
            .all(|&c| a.state(c).ok() == Some(sluice_tcp::TcpState::Established));
        if !established {
            assert!(now < Instant::from_nanos(1_000_000_000), "no handshake");
            continue;
        }
        if !classified {
            classified = true;
            for (i, &c) in senders.iter().enumerate() {
                let (local, remote) = a.endpoints(c).unwrap();
                let class = traffic_class::lookup(&mut ha.modules_mut(), local, remote);
                let want = FlowClass {
                    class: i as u32 + 1,
                    rate_bps: RATES[i],
                    module: class
                        .map(|c| c.module)
                        .unwrap_or(sluice_engine::modules::ModuleId(0)),
                };
                assert_eq!(class, Some(want), "the egress classifier recorded it");
                // Either direction finds it.
                let back = traffic_class::lookup(&mut ha.modules_mut(), remote, local);
                assert_eq!(back, Some(want));
                if classify {
                    a.set_rate(c, want.rate_bps).unwrap();
                }
            }
            let none = SocketAddrV4::new(A_IP, 1);
            assert_eq!(
                traffic_class::lookup(&mut ha.modules_mut(), none, none),
                None
            );
            start = Some(now);
        }
        for &c in &senders {
            while a.send(c, &chunk).is_ok_and(|n| n > 0) {}
        }
        let t0 = start.unwrap();
        if now == t0 + Duration::from_millis(20) {
            before = got;
        }
        if now >= t0 + Duration::from_millis(220) {
            return [got[0] - before[0], got[1] - before[1]];
        }
    }
}

#[test]
fn two_classes_get_throughput_in_proportion_to_their_rates() {
    let [slow, fast] = run(true);
    // 200 ms at the rates, less the headers (1448 of 1514 bytes a frame).
    let want = |rate: u64| rate as f64 / 8.0 * 0.2 * 1448.0 / 1514.0;
    for (got, rate) in [(slow, RATES[0]), (fast, RATES[1])] {
        let err = (got as f64 - want(rate)).abs() / want(rate);
        assert!(
            err < 0.05,
            "{got} bytes against {:.0} at {rate} bit/s",
            want(rate)
        );
    }
    let ratio = fast as f64 / slow as f64;
    assert!(
        (ratio - 3.0).abs() < 0.15,
        "ratio {ratio:.3} ({slow}, {fast})"
    );
    // The same flows unclassified share alike: the proportion above is the classes'.
    let [x, y] = run(false);
    let ratio = y as f64 / x as f64;
    assert!(
        (ratio - 1.0).abs() < 0.2,
        "unclassified ratio {ratio:.3} ({x}, {y})"
    );
}
