//! `sluice switch`'s forwarding core with MTP frames (no namespaces): route groups chosen by
//! the message balancer, pathlet feedback, trimming on overflow, all configured from the
//! command line's words.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_mtp::wire::{
    Encap, FeedbackKind, List, MtpFrameRepr, MtpRepr, DEVICE_TRIMMED, FLAG_DATA,
};
use sluice_switch::device::{Balancer, FeedbackPolicy};
use sluice_switch::{default_egress, MtpConfig, PortSpec, SwitchCore, TxResult};
use sluice_wire::ethernet::EthernetAddress;
use sluice_wire::ipv4::Ecn;

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

/// Packet `pkt` of message `msg` (`pkts` packets of `payload` bytes) from A to B.
fn mtp(msg: u32, pkt: u16, pkts: u16, payload: usize) -> Vec<u8> {
    let mut repr = MtpFrameRepr::new(
        (EthernetAddress(A), Ipv4Addr::new(10, 0, 0, 1)),
        (EthernetAddress(B), Ipv4Addr::new(10, 0, 0, 2)),
        Encap::Ip,
        MtpRepr {
            src_port: 4000,
            dst_port: 5000,
            flags: FLAG_DATA,
            tc: 2,
            msg_id: msg,
            msg_len: u32::from(pkts) * payload as u32,
            msg_pkts: pkts,
            pkt_num: pkt,
            pkt_offset: u32::from(pkt) * payload as u32,
            pkt_len: payload as u16,
            exclude: List::Items(&[]),
            feedback_slots: 2,
            ..MtpRepr::default()
        },
    );
    // ECN-capable, so the links' marking applies as to the stack's traffic.
    repr.ip.ecn = Ecn::Ect0;
    let mut buf = vec![0u8; repr.frame_len(payload).unwrap()];
    repr.emit(&mut buf, &vec![7u8; payload]).unwrap();
    buf
}

/// The core for `specs` (as `--port` spells them) and switch-wide MTP words.
fn core(specs: &[&str], words: &[(&str, &str)]) -> (SwitchCore, Vec<PortSpec>) {
    let ports: Vec<PortSpec> = specs
        .iter()
        .map(|s| PortSpec::parse(s, &default_egress()).unwrap())
        .collect();
    let mut cfg = MtpConfig::default();
    for (k, v) in words {
        cfg.set(k, v).unwrap();
    }
    let egress: Vec<_> = ports.iter().map(|p| p.egress.clone()).collect();
    let mut core = SwitchCore::new(&egress, 9000, 1);
    core.configure_mtp(&ports, &cfg).unwrap();
    (core, ports)
}

fn drain(core: &mut SwitchCore, now: Duration, port: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    core.transmit(now, port, &mut |f| {
        out.push(f.to_vec());
        TxResult::Sent
    });
    out
}

#[test]
fn messages_are_pinned_to_one_uplink_with_pathlet_feedback() {
    let (mut sw, ports) = core(
        &[
            "down",
            "up1,rate=1g,pathlet=1,feedback=ecn:4k",
            "up2,rate=1g,pathlet=2,pathlet-tc=9,feedback=queue",
        ],
        &[("balancer", "message"), ("route", "02:00:00:00:00:0b=1+2")],
    );
    assert_eq!(ports[2].pathlet.unwrap().tc, Some(9));
    let now = Duration::ZERO;
    // Four messages of five packets, interleaved packet by packet.
    for pkt in 0..5 {
        for msg in 0..4 {
            sw.receive(now, 0, &mtp(msg, pkt, 5, 1000));
        }
    }
    let mut on_port = [Vec::new(), Vec::new()];
    let end = Duration::from_millis(1);
    for (i, port) in [1, 2].into_iter().enumerate() {
        for f in drain(&mut sw, end, port) {
            let (p, payload) = MtpFrameRepr::parse(&f, true).expect("valid after the device");
            assert_eq!(payload.len(), 1000);
            let fb: Vec<_> = p.mtp.feedback.iter().collect();
            assert_eq!(fb.len(), 1);
            let got = (fb[0].at.pathlet, fb[0].at.tc, fb[0].kind);
            match port {
                1 => assert_eq!(got, (1, 2, FeedbackKind::Ecn)),
                _ => assert_eq!(got, (2, 9, FeedbackKind::QueueBytes)),
            }
            on_port[i].push(p.mtp.msg_id);
        }
    }
    // Every message whole on one port; two messages each way (by expected load).
    for msg in 0..4 {
        let counts = on_port
            .each_ref()
            .map(|v| v.iter().filter(|&&m| m == msg).count());
        assert!(
            counts == [5, 0] || counts == [0, 5],
            "message {msg}: {counts:?}"
        );
    }
    assert_eq!((on_port[0].len(), on_port[1].len()), (10, 10));
    let stats = sw.mtp_stats().unwrap();
    assert_eq!(
        (stats.pins, stats.pin_hits, stats.feedback_appended),
        (4, 16, 20)
    );
}

#[test]
fn overflow_trims_mtp_data_to_a_valid_header() {
    let (mut sw, _) = core(&["down", "up,rate=1g,queue-bytes=6k"], &[("trim", "1k")]);
    // Learn B behind port 1.
    let mut hello = vec![0u8; 60];
    hello[..6].copy_from_slice(&A);
    hello[6..12].copy_from_slice(&B);
    sw.receive(Duration::ZERO, 1, &hello);
    drain(&mut sw, Duration::ZERO, 0);
    for i in 0..20 {
        sw.receive(Duration::ZERO, 0, &mtp(i, 0, 1, 1400));
    }
    let out = drain(&mut sw, Duration::from_millis(1), 1);
    let trimmed = out
        .iter()
        .map(|f| MtpFrameRepr::parse(f, true).expect("valid").0)
        .filter(|p| p.mtp.device_flags & DEVICE_TRIMMED != 0)
        .inspect(|p| assert_eq!(p.mtp.pkt_len, 1400))
        .count();
    assert!(trimmed > 0);
    let stats = sw.mtp_stats().unwrap();
    let drops = sw.port_stats(1).unwrap().egress.link.queue_drops;
    // Every trimmed header was enqueued within the headroom or tail-dropped beyond it.
    assert_eq!(stats.trimmed, trimmed as u64 + drops);
    assert!(drops > 0 && out.len() + drops as usize == 20);
}

#[test]
fn bad_mtp_words_are_refused_clearly() {
    let mut cfg = MtpConfig::default();
    assert!(cfg.set("balancer", "roundrobin").is_err());
    assert!(cfg.set("balancer", "alternate:0s").is_err());
    assert!(
        cfg.set("route", "01:00:00:00:00:0b=1").is_err(),
        "multicast"
    );
    assert!(cfg.set("route", "02:00:00:00:00:0b=").is_err());
    assert!(cfg.set("fair-share", "lots").is_err());
    cfg.set("balancer", "alternate:384us").unwrap();
    assert_eq!(
        cfg.balancer,
        Balancer::Alternate {
            period: Duration::from_micros(384)
        }
    );
    let d = default_egress();
    assert!(
        PortSpec::parse("eth0,feedback=rate", &d).is_err(),
        "no pathlet id"
    );
    assert!(PortSpec::parse("eth0,pathlet=70000", &d).is_err());
    assert!(PortSpec::parse("eth0,pathlet=3,feedback=red", &d).is_err());
    let p = PortSpec::parse("eth0,ecn-k=9k,pathlet=3,class-queues=2", &d).unwrap();
    assert_eq!(p.egress.class_queues, 2);
    assert_eq!(
        p.pathlet.unwrap().feedback,
        FeedbackPolicy::Ecn { k_bytes: 9 * 1024 }
    );
    // A group naming a port the switch does not have.
    let mut core = SwitchCore::new(&[default_egress(), default_egress()], 1514, 1);
    let mut bad = MtpConfig::default();
    bad.set("route", "02:00:00:00:00:0b=1+5").unwrap();
    assert!(core.configure_mtp(&[], &bad).is_err());
}
