//! Root-only tests of the namespace lab and of the device backends on it.
//!
//! Each test is `#[ignore]`d (run them with `--ignored`, as root, as scripts/test.sh does) and
//! fails, never passes without running, when not root or when ip(8) is missing.
//! Every test holds the lab lock through `LabGuard`/`LabLock`, so they run one at a time
//! even though cargo runs the tests of this binary in parallel, and the guard tears the lab
//! down even when an assertion fails.

use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_device::{
    netns, AfPacket, AfPacketConfig, AfXdp, AfXdpConfig, Device, DeviceError, EthernetAddress,
    RxChecksum, Tap, TapConfig, XdpMode,
};
use sluice_lab::{
    mac_string, Lab, LabGuard, LabLock, BRIDGE, BRIDGE_MAC, CLIENT_IP, ENGINE2_IFACE, ENGINE2_MAC,
    ENGINE_IFACE, ENGINE_IP, ENGINE_MAC, KERNEL_IP, NS_CLIENT, NS_ENGINE, NS_ENGINE2, NS_KERNEL,
    TAP_ENGINE_MAC, TAP_IFACE,
};
use sluice_wire::arp::{ArpOperation, ArpRepr};
use sluice_wire::ethernet::{EtherType, EthernetRepr};
use sluice_wire::ipv4::{Ipv4Repr, PROTOCOL_TCP};
use sluice_wire::tcp::{self, TcpFlags, TcpSegment};

/// The port the test's TCP SYN is sent to.
const SYN_PORT: u16 = 7;

/// Pings from `ns` until it answers (bridge ports and neighbours settle in a moment).
fn ping_ok(lab: &Lab, ns: &str, addr: Ipv4Addr) -> bool {
    let addr = addr.to_string();
    (0..5).any(|_| {
        lab.exec(ns, &["ping", "-c1", "-W1", addr.as_str()])
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn lab_up_is_idempotent_and_down_removes_everything() {
    sluice_lab::require_lab();
    let _lock = LabLock::acquire().unwrap();
    let lab = Lab::new();
    // Clean up whatever a killed run may have left, then build twice.
    lab.down().unwrap();
    let result = std::panic::catch_unwind(|| {
        lab.up().unwrap();
        lab.up().unwrap();
        assert_eq!(lab.namespaces_present().unwrap().len(), 4);

        // The engine's interface: deterministic MAC, up, and no kernel address at all.
        assert_eq!(
            lab.mac_of(NS_ENGINE, ENGINE_IFACE).unwrap(),
            mac_string(ENGINE_MAC)
        );
        let addrs = lab
            .ip_in(NS_ENGINE, &["-o", "addr", "show", "dev", ENGINE_IFACE])
            .unwrap();
        assert!(addrs.trim().is_empty(), "sl-a has addresses: {addrs}");
        assert_eq!(
            lab.sysctl_get(NS_ENGINE, "net.ipv4.conf.sl-a.arp_ignore")
                .unwrap(),
            "8"
        );
        assert_eq!(
            lab.sysctl_get(NS_ENGINE, "net.ipv6.conf.sl-a.disable_ipv6")
                .unwrap(),
            "1"
        );
        assert_eq!(
            lab.mac_of(NS_CLIENT, BRIDGE).unwrap(),
            mac_string(BRIDGE_MAC)
        );
        // br0's frames skip the host's netfilter hooks (or br_netfilter is not loaded).
        let bridge_nf = lab.bridge_netfilter().unwrap();
        assert!(
            !matches!(bridge_nf, sluice_lab::BridgeNetfilter::On(_)),
            "{bridge_nf}"
        );
        if std::path::Path::new("/proc/sys/net/bridge").exists()
            && lab
                .exec(NS_CLIENT, &["sysctl", "-n", sluice_lab::BRIDGE_NF_KEYS[0]])
                .unwrap()
                .status
                .success()
        {
            for key in sluice_lab::BRIDGE_NF_KEYS {
                assert_eq!(lab.sysctl_get(NS_CLIENT, key).unwrap(), "0", "{key}");
            }
        }
        // The second engine's veth: as sl-a's, no address, no ARP answers.
        let addrs = lab
            .ip_in(
                NS_ENGINE2,
                &["-4", "-o", "addr", "show", "dev", ENGINE2_IFACE],
            )
            .unwrap();
        assert!(addrs.trim().is_empty(), "sl-e has addresses: {addrs}");
        assert_eq!(
            lab.sysctl_get(NS_ENGINE2, "net.ipv4.conf.sl-e.arp_ignore")
                .unwrap(),
            "8"
        );
        assert_eq!(
            lab.mac_of(NS_ENGINE2, ENGINE2_IFACE).unwrap(),
            mac_string(ENGINE2_MAC)
        );

        // Linux client to Linux server across the bridge, both ways.
        assert!(
            ping_ok(&lab, NS_CLIENT, KERNEL_IP),
            "sluice-b cannot ping 10.77.0.3"
        );
        assert!(
            ping_ok(&lab, NS_KERNEL, CLIENT_IP),
            "sluice-k cannot ping 10.77.0.2"
        );

        // Per-namespace knobs for the peer-variation tests.
        lab.sysctl(NS_KERNEL, "net.ipv4.tcp_sack", "0").unwrap();
        assert_eq!(lab.sysctl_get(NS_KERNEL, "net.ipv4.tcp_sack").unwrap(), "0");
        lab.ethtool_features(NS_KERNEL, "sl-k", &[("tso", false)])
            .unwrap();
        let features = lab.ethtool_show(NS_KERNEL, "sl-k").unwrap();
        assert!(features
            .iter()
            .any(|(name, on)| name == "tcp-segmentation-offload" && !on));
        lab.set_mtu(NS_KERNEL, "sl-k", 1280).unwrap();

        // Building again over a modified lab keeps it working.
        lab.up().unwrap();
        assert!(ping_ok(&lab, NS_CLIENT, KERNEL_IP));
    });
    lab.down().unwrap();
    lab.down().unwrap();
    let left = lab.namespaces_present().unwrap();
    let listed = lab_ip_netns_list();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(left.is_empty(), "left behind: {left:?}");
    for ns in [NS_ENGINE, NS_CLIENT, NS_KERNEL] {
        assert!(
            !listed.contains(ns),
            "`ip netns list` still shows {ns}: {listed}"
        );
    }
}

/// The raw `ip netns list` output.
fn lab_ip_netns_list() -> String {
    let ip = sluice_lab::command::find(sluice_lab::command::IP).unwrap();
    sluice_lab::command::run(&ip, &["netns", "list"]).unwrap()
}

/// What the engine side saw.
#[derive(Debug)]
struct Seen {
    arp_request: ArpRepr,
    arp_eth: EthernetRepr,
    syn_checksum: RxChecksum,
    syn_verifies: bool,
    partial_completed: u64,
    tx_frames: u64,
}

/// Answers the first ARP request for 10.77.0.1, then waits for a TCP SYN to port 7 and
/// records how its checksum arrived. Gives up after `limit`.
fn engine_side(dev: &mut dyn Device, limit: Duration) -> Result<Seen, String> {
    let mac = dev.mac();
    let deadline = Instant::now() + limit;
    let mut request: Option<(EthernetRepr, ArpRepr)> = None;
    let mut answered = false;
    let mut syn: Option<(RxChecksum, bool)> = None;
    while syn.is_none() {
        if Instant::now() > deadline {
            return Err(format!(
                "timed out: arp request {request:?}, answered {answered}, stats {:?}",
                dev.stats()
            ));
        }
        dev.wait(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
        dev.receive(&mut |frame, meta| {
            let Ok((eth, payload)) = EthernetRepr::parse(frame) else {
                return;
            };
            match eth.ethertype {
                EtherType::Arp => {
                    if let Ok(arp) = ArpRepr::parse(payload) {
                        if arp.operation == ArpOperation::Request
                            && arp.target_ip == ENGINE_IP
                            && request.is_none()
                        {
                            request = Some((eth, arp));
                        }
                    }
                }
                EtherType::Ipv4 => {
                    let Ok((ip, segment)) = Ipv4Repr::parse(payload, true) else {
                        return;
                    };
                    if ip.dst != ENGINE_IP || ip.protocol != PROTOCOL_TCP {
                        return;
                    }
                    let Ok(seg) = TcpSegment::new_checked(segment) else {
                        return;
                    };
                    if seg.dst_port() == SYN_PORT && seg.flags().contains(TcpFlags::SYN) {
                        let ok = tcp::verify_checksum(segment, ip.src, ip.dst);
                        syn.get_or_insert((meta.checksum, ok));
                    }
                }
                _ => {}
            }
        })
        .map_err(|e| e.to_string())?;
        if let (Some((_, arp)), false) = (request, answered) {
            let queued = dev
                .transmit_with(&mut |buf| {
                    let eth = EthernetRepr {
                        dst: arp.source_mac,
                        src: mac,
                        ethertype: EtherType::Arp,
                        vlan: None,
                    };
                    let reply = ArpRepr {
                        operation: ArpOperation::Reply,
                        source_mac: mac,
                        source_ip: ENGINE_IP,
                        target_mac: arp.source_mac,
                        target_ip: arp.source_ip,
                    };
                    let h = eth.emit(buf).ok()?;
                    let n = reply.emit(&mut buf[h..]).ok()?;
                    Some((h + n).into())
                })
                .map_err(|e| e.to_string())?;
            assert!(queued, "a fresh device has a free transmit slot");
            dev.flush().map_err(|e| e.to_string())?;
            answered = true;
        }
    }
    let (arp_eth, arp_request) = request.ok_or("SYN before ARP")?;
    let (syn_checksum, syn_verifies) = syn.ok_or("no SYN")?;
    Ok(Seen {
        arp_request,
        arp_eth,
        syn_checksum,
        syn_verifies,
        partial_completed: dev.stats().rx_checksum_completed,
        tx_frames: dev.stats().tx_frames,
    })
}

/// Drives the Linux side: ping 10.77.0.1 (which ARPs for it), then one TCP SYN to it.
fn client_side(lab: &Lab) {
    // The engine answers ARP but not ICMP, so ping fails; what matters is the ARP exchange.
    let _ = lab.exec(NS_CLIENT, &["ping", "-c1", "-W2", "10.77.0.1"]);
    // One SYN with the checksum left to offload; nobody answers, so time it out.
    let target = format!("exec 3<>/dev/tcp/{ENGINE_IP}/{SYN_PORT}");
    let _ = lab.exec(NS_CLIENT, &["timeout", "2", "bash", "-c", target.as_str()]);
}

/// Checks what the engine saw and that sluice-b learned `engine_mac` for 10.77.0.1.
fn check_exchange(lab: &Lab, seen: &Seen, engine_mac: [u8; 6]) {
    let bridge = EthernetAddress(BRIDGE_MAC);
    assert_eq!(seen.arp_eth.dst, EthernetAddress::BROADCAST);
    assert_eq!(seen.arp_eth.src, bridge);
    assert_eq!(seen.arp_request.source_mac, bridge);
    assert_eq!(seen.arp_request.source_ip, CLIENT_IP);
    assert_eq!(seen.arp_request.target_ip, ENGINE_IP);
    let (mac, state) = lab
        .neighbor(NS_CLIENT, ENGINE_IP)
        .unwrap()
        .expect("sluice-b has a neighbour entry for 10.77.0.1");
    assert_eq!(
        mac.as_deref(),
        Some(mac_string(engine_mac).as_str()),
        "state {state}"
    );
    assert!(
        !state.contains("FAILED") && !state.contains("INCOMPLETE"),
        "neighbour state {state}"
    );
    // Linux left the SYN's checksum to offload; the device completed it before handing it up.
    assert!(seen.syn_verifies, "SYN checksum does not verify: {seen:?}");
    eprintln!(
        "SYN arrived with {:?}; {} partial checksum(s) completed",
        seen.syn_checksum, seen.partial_completed
    );
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn engine_answers_arp_over_af_packet() {
    sluice_lab::require_lab();
    arp_over_af_packet(AfPacketConfig::default());
}

/// The same exchange with virtio-net headers both ways and the reply sent through a
/// mapped transmit ring (PACKET_TX_RING) instead of sendmmsg.
#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn engine_answers_arp_over_af_packet_with_offloads_and_a_tx_ring() {
    sluice_lab::require_lab();
    arp_over_af_packet(AfPacketConfig {
        tx_ring_frames: 64,
        ..AfPacketConfig::offload()
    });
}

/// The same exchange received through a mapped receive ring (PACKET_RX_RING).
#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn engine_answers_arp_over_af_packet_with_an_rx_ring() {
    sluice_lab::require_lab();
    arp_over_af_packet(AfPacketConfig {
        rx_ring_frames: 64,
        ..AfPacketConfig::offload()
    });
}

fn arp_over_af_packet(config: AfPacketConfig) {
    let lab = LabGuard::up().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let engine = thread::spawn(move || -> Result<Seen, String> {
        netns::enter(NS_ENGINE).map_err(|e| e.to_string())?;
        let mut dev = AfPacket::open(ENGINE_IFACE, config).map_err(|e| e.to_string())?;
        ready_tx
            .send((dev.mac(), dev.max_frame()))
            .map_err(|e| e.to_string())?;
        engine_side(&mut dev, Duration::from_secs(20))
    });
    let Ok((mac, max_frame)) = ready_rx.recv_timeout(Duration::from_secs(10)) else {
        panic!("engine thread failed: {:?}", engine_result(engine));
    };
    assert_eq!(mac, EthernetAddress(ENGINE_MAC));
    assert_eq!(max_frame, 1514);
    client_side(&lab);
    let seen = engine.join().unwrap().unwrap();
    check_exchange(&lab, &seen, ENGINE_MAC);
    assert_eq!(seen.syn_checksum, RxChecksum::Partial, "{seen:?}");
    // The kernel in sluice-a never spoke on sl-a (no ARP reply, no RST, no IPv6 noise):
    // every frame sl-a sent is the engine's one ARP reply.
    assert_eq!(seen.tx_frames, 1);
    let sent = lab
        .run(
            NS_ENGINE,
            &["cat", "/sys/class/net/sl-a/statistics/tx_packets"],
        )
        .unwrap();
    assert_eq!(sent.trim(), "1", "sl-a sent frames the engine did not");
    lab.teardown().unwrap();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn engine_answers_arp_over_tap() {
    sluice_lab::require_lab();
    let lab = LabGuard::up().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let engine = thread::spawn(move || -> Result<Seen, String> {
        netns::enter(NS_ENGINE).map_err(|e| e.to_string())?;
        let config = TapConfig {
            mac: EthernetAddress(TAP_ENGINE_MAC),
            ..TapConfig::default()
        };
        let mut dev = Tap::open(TAP_IFACE, config).map_err(|e| e.to_string())?;
        // A second open of the same single-queue TAP is refused with a clear error.
        match Tap::open(TAP_IFACE, config) {
            Err(DeviceError::Busy { .. }) => {}
            other => return Err(format!("second TAP open: {other:?}")),
        }
        ready_tx.send(dev.mac()).map_err(|e| e.to_string())?;
        engine_side(&mut dev, Duration::from_secs(20))
    });
    let Ok(mac) = ready_rx.recv_timeout(Duration::from_secs(10)) else {
        panic!("engine thread failed: {:?}", engine_result(engine));
    };
    assert_eq!(mac, EthernetAddress(TAP_ENGINE_MAC));
    lab.attach_tap(TAP_IFACE).unwrap();
    lab.attach_tap(TAP_IFACE).unwrap();
    client_side(&lab);
    let seen = engine.join().unwrap().unwrap();
    check_exchange(&lab, &seen, TAP_ENGINE_MAC);
    assert_eq!(seen.syn_checksum, RxChecksum::Partial, "{seen:?}");
    lab.detach_tap().unwrap();
    lab.teardown().unwrap();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn engine_answers_arp_over_af_xdp() {
    sluice_lab::require_lab();
    let lab = LabGuard::up().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let engine = thread::spawn(move || -> Result<Seen, String> {
        netns::enter(NS_ENGINE).map_err(|e| e.to_string())?;
        let mut dev =
            AfXdp::open(ENGINE_IFACE, AfXdpConfig::default()).map_err(|e| e.to_string())?;
        ready_tx
            .send((dev.mac(), dev.max_frame(), dev.mode(), dev.zero_copy()))
            .map_err(|e| e.to_string())?;
        engine_side(&mut dev, Duration::from_secs(20))
    });
    let Ok((mac, max_frame, mode, zero_copy)) = ready_rx.recv_timeout(Duration::from_secs(10))
    else {
        panic!("engine thread failed: {:?}", engine_result(engine));
    };
    assert_eq!(mac, EthernetAddress(ENGINE_MAC));
    assert_eq!(max_frame, 1514);
    assert_eq!(mode, XdpMode::Drv);
    assert!(
        !zero_copy,
        "veth has no zero-copy AF_XDP: the kernel must have copied"
    );
    // The default program sits in the driver while the socket is open.
    let link = lab
        .ip_in(NS_ENGINE, &["-d", "link", "show", "dev", ENGINE_IFACE])
        .unwrap();
    assert!(link.contains("prog/xdp"), "{link}");
    client_side(&lab);
    let seen = engine.join().unwrap().unwrap();
    check_exchange(&lab, &seen, ENGINE_MAC);
    // AF_XDP reports no checksum state: the SYN's partial checksum was recognised by its
    // field and completed.
    assert_eq!(seen.syn_checksum, RxChecksum::Partial, "{seen:?}");
    assert!(seen.syn_verifies, "{seen:?}");
    // Closing the last socket detaches the program.
    let link = lab
        .ip_in(NS_ENGINE, &["-d", "link", "show", "dev", ENGINE_IFACE])
        .unwrap();
    assert!(!link.contains("prog/xdp"), "{link}");
    lab.teardown().unwrap();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn af_xdp_refuses_clearly() {
    sluice_lab::require_lab();
    let lab = LabGuard::up().unwrap();
    thread::spawn(|| {
        // sl-a exists only inside sluice-a.
        match AfXdp::open(ENGINE_IFACE, AfXdpConfig::default()) {
            Err(DeviceError::NoSuchInterface { name }) => assert_eq!(name, ENGINE_IFACE),
            other => panic!("unexpected: {other:?}"),
        }
        netns::enter(NS_ENGINE).unwrap();
        let first = AfXdp::open(ENGINE_IFACE, AfXdpConfig::default()).unwrap();
        // The queue is taken: a second socket retries for bind_timeout, then says so.
        let quick = AfXdpConfig {
            bind_timeout: Duration::from_millis(300),
            ..AfXdpConfig::default()
        };
        let started = Instant::now();
        match AfXdp::open(ENGINE_IFACE, quick) {
            Err(e @ DeviceError::XdpAttach { .. }) => {
                assert!(e.to_string().contains("holds the queue"), "{e}")
            }
            other => panic!("unexpected: {other:?}"),
        }
        assert!(started.elapsed() >= Duration::from_millis(300));
        // A generic-mode program cannot join the driver-mode one.
        let skb = AfXdpConfig {
            mode: XdpMode::Skb,
            ..quick
        };
        match AfXdp::open(ENGINE_IFACE, skb) {
            Err(e @ DeviceError::XdpAttach { .. }) => {
                let text = e.to_string();
                assert!(text.contains("skb mode") && text.contains("sl-a"), "{text}")
            }
            other => panic!("unexpected: {other:?}"),
        }
        // Zero-copy on veth is refused with its own error.
        drop(first);
        let zc = AfXdpConfig {
            zero_copy: sluice_device::ZeroCopy::Required,
            ..AfXdpConfig::default()
        };
        match AfXdp::open(ENGINE_IFACE, zc) {
            Err(DeviceError::ZeroCopyUnavailable { name }) => assert_eq!(name, ENGINE_IFACE),
            other => panic!("unexpected: {other:?}"),
        }
        // Rebinding right after a close may meet EBUSY for a while: the retry covers it.
        let again = AfXdp::open(ENGINE_IFACE, AfXdpConfig::default()).unwrap();
        assert_eq!(again.interface(), ENGINE_IFACE);
    })
    .join()
    .unwrap();
    lab.teardown().unwrap();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn devices_refuse_clearly_outside_the_lab() {
    sluice_lab::require_lab();
    let _lab = LabGuard::up().unwrap();
    thread::spawn(|| {
        // sl-a exists only inside sluice-a.
        match AfPacket::open(ENGINE_IFACE, AfPacketConfig::default()) {
            Err(DeviceError::NoSuchInterface { name }) => assert_eq!(name, ENGINE_IFACE),
            other => panic!("unexpected: {other:?}"),
        }
        netns::enter(NS_ENGINE).unwrap();
        let dev = AfPacket::open(ENGINE_IFACE, AfPacketConfig::default()).unwrap();
        assert_eq!(dev.interface(), ENGINE_IFACE);
        match netns::enter("sluice-no-such") {
            Err(DeviceError::NoSuchNamespace { .. }) => {}
            other => panic!("unexpected: {other:?}"),
        }
    })
    .join()
    .unwrap();
}

fn engine_result(engine: thread::JoinHandle<Result<Seen, String>>) -> Result<Seen, String> {
    engine
        .join()
        .unwrap_or_else(|_| Err("engine thread panicked".into()))
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn a_failing_test_still_tears_the_lab_down() {
    sluice_lab::require_lab();
    let result = std::panic::catch_unwind(|| {
        let lab = LabGuard::up().unwrap();
        assert_eq!(lab.namespaces_present().unwrap().len(), 4);
        panic!("a test failing while it holds the lab");
    });
    assert!(result.is_err());
    // Every user tears down before releasing the lock, so a free lock means no lab.
    let _lock = LabLock::acquire().unwrap();
    assert_eq!(
        Lab::new().namespaces_present().unwrap(),
        Vec::<String>::new()
    );
}
