//! tshark dissects what we emit with the repo's dissector (`tools/mtp.lua`): a data packet
//! (with exclude list and device feedback), an ACK with SACK/NACK runs, and a trimmed packet,
//! over both encapsulations; the fields we wrote must appear in `tshark -V`'s output. Skips,
//! with the reason printed, when tshark is not installed.

use std::net::Ipv4Addr;
use std::process::Command;

use sluice_mtp::wire::edit::Summary;
use sluice_mtp::wire::{
    Encap, Feedback, FeedbackKind, List, MtpFrameRepr, MtpRepr, PacketRun, PathletTc, FLAG_ACK,
    FLAG_DATA,
};
use sluice_wire::ethernet::EthernetAddress;

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0xA1B2_C3D4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend(0i32.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(65_535u32.to_le_bytes());
    out.extend(1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).expect("small frame");
        out.extend(1_800_000_000u32.to_le_bytes());
        out.extend((i as u32).to_le_bytes());
        out.extend(len.to_le_bytes());
        out.extend(len.to_le_bytes());
        out.extend(f);
    }
    out
}

fn frame(mtp: MtpRepr<'_>, encap: Encap, payload: &[u8]) -> Vec<u8> {
    let repr = MtpFrameRepr::new(
        (
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(10, 0, 0, 1),
        ),
        (
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            Ipv4Addr::new(10, 0, 0, 2),
        ),
        encap,
        mtp,
    );
    let mut buf = vec![0u8; repr.frame_len(payload.len()).unwrap()];
    repr.emit(&mut buf, payload).unwrap();
    buf
}

#[test]
fn tshark_dissects_data_ack_and_trimmed_packets_with_our_lua_dissector() {
    if Command::new("tshark").arg("--version").output().is_err() {
        println!("skipped: tshark is not installed (apt-get install tshark)");
        return;
    }
    let exclude = [PathletTc {
        pathlet: 4242,
        tc: 3,
    }];
    let data = MtpRepr {
        src_port: 4000,
        dst_port: 5000,
        flags: FLAG_DATA,
        priority: 6,
        tc: 3,
        msg_id: 123_456,
        msg_len: 3000,
        msg_pkts: 3,
        pkt_num: 1,
        pkt_offset: 1000,
        pkt_len: 1000,
        exclude: List::Items(&exclude),
        feedback_slots: 2,
        ..MtpRepr::default()
    };
    let mut direct = frame(data, Encap::Ip, &[0x42; 1000]);
    let s = Summary::read(&direct).unwrap();
    assert!(s.push_feedback(
        &mut direct,
        Feedback {
            at: PathletTc {
                pathlet: 777,
                tc: 3
            },
            kind: FeedbackKind::Rate,
            value: 98_765,
        }
    ));
    let sack = [PacketRun {
        msg_id: 123_456,
        first: 0,
        count: 2,
    }];
    let nack = [PacketRun {
        msg_id: 123_456,
        first: 2,
        count: 1,
    }];
    let ack = MtpRepr {
        src_port: 5000,
        dst_port: 4000,
        flags: FLAG_ACK,
        sack: List::Items(&sack),
        nack: List::Items(&nack),
        ..MtpRepr::default()
    };
    let ack = frame(ack, Encap::Udp { src_port: 50_000 }, &[]);
    let mut trimmed = frame(data, Encap::Udp { src_port: 50_001 }, &[0x42; 1000]);
    let len = Summary::read(&trimmed).unwrap().trim(&mut trimmed).unwrap();
    trimmed.truncate(len);

    let dir = std::env::temp_dir().join(format!("sluice-mtp-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mtp.pcap");
    std::fs::write(&file, pcap(&[direct, ack, trimmed])).unwrap();
    let lua = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/mtp.lua");
    let out = Command::new("tshark")
        .arg("-X")
        .arg(format!("lua_script:{lua}"))
        .arg("-r")
        .arg(&file)
        .arg("-V")
        .output()
        .expect("tshark runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "Message Transport Protocol",
        "Message ID: 123456",
        "Message Priority: 6",
        "Packet Number: 1",
        "Packet Offset: 1000",
        "Path Exclude: pathlet 4242, TC 3",
        "Pathlet ID: 777",
        "Feedback Type: Rate (Mbit/s) (2)",
        "Feedback Value: 98765",
        "SACK",
        "NACK",
        "First Packet: 2",
        "Trimmed: True",
    ] {
        assert!(text.contains(want), "tshark output lacks {want:?}:\n{text}");
    }
    assert!(!text.contains("Malformed"), "{text}");
    assert_eq!(
        text.matches("Message Transport Protocol").count(),
        3,
        "{text}"
    );
}
