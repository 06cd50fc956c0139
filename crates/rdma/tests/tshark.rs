//! tshark dissects what we emit: a classic pcap (written by hand here) with one frame per RC
//! opcode, read with `tshark -V`; the opcodes and the fields we wrote must appear in its
//! output. Skips, with the reason printed, when tshark is not installed.

mod common;

use std::process::Command;

use sluice_rdma::wire::{Opcode, RoceRepr};
use sluice_wire::ipv4::Ecn;

/// The classic pcap format: a 24-byte global header, then a 16-byte record header per frame
/// (microsecond timestamps, link type 1 = Ethernet).
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0xA1B2_C3D4u32.to_le_bytes()); // magic: microseconds, our byte order
    out.extend(2u16.to_le_bytes()); // version 2.4
    out.extend(4u16.to_le_bytes());
    out.extend(0i32.to_le_bytes()); // GMT offset
    out.extend(0u32.to_le_bytes()); // timestamp accuracy
    out.extend(65_535u32.to_le_bytes()); // snap length
    out.extend(1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).expect("small frame");
        out.extend(1_800_000_000u32.to_le_bytes()); // seconds
        out.extend((i as u32).to_le_bytes()); // microseconds
        out.extend(len.to_le_bytes()); // captured
        out.extend(len.to_le_bytes()); // on the wire
        out.extend(f);
    }
    out
}

/// tshark's name for each opcode ("Reliable Connection (RC) - NAME (n)").
fn tshark_name(op: Opcode) -> &'static str {
    match op {
        Opcode::SendFirst => "SEND First",
        Opcode::SendMiddle => "SEND Middle",
        Opcode::SendLast => "SEND Last",
        Opcode::SendLastImm => "SEND Last with Immediate",
        Opcode::SendOnly => "SEND Only",
        Opcode::SendOnlyImm => "SEND Only with Immediate",
        Opcode::WriteFirst => "RDMA WRITE First",
        Opcode::WriteMiddle => "RDMA WRITE Middle",
        Opcode::WriteLast => "RDMA WRITE Last",
        Opcode::WriteLastImm => "RDMA WRITE Last with Immediate",
        Opcode::WriteOnly => "RDMA WRITE Only",
        Opcode::WriteOnlyImm => "RDMA WRITE Only with Immediate",
        Opcode::ReadRequest => "RDMA READ Request",
        Opcode::ReadResponseFirst => "RDMA READ response First",
        Opcode::ReadResponseMiddle => "RDMA READ response Middle",
        Opcode::ReadResponseLast => "RDMA READ response Last",
        Opcode::ReadResponseOnly => "RDMA READ response Only",
        Opcode::Acknowledge => "Acknowledge",
        Opcode::Cnp => "CNP",
        // IBA's reserved RC opcodes Sluice's offload engine uses (not in Opcode::ALL).
        Opcode::OffloadRequest | Opcode::OffloadResponse => "Reserved",
    }
}

/// Runs `tshark -V` over `frames`; None (with the reason printed) when it is not installed.
fn dissect(frames: &[Vec<u8>], name: &str) -> Option<String> {
    if Command::new("tshark").arg("--version").output().is_err() {
        println!("skipped: tshark is not installed (apt-get install tshark)");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("sluice-rdma-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("roce.pcap");
    std::fs::write(&file, pcap(frames)).expect("write pcap");
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .arg("-V")
        .output()
        .expect("tshark runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn tshark_dissects_our_cnp() {
    // The CNP of RoCEv2 annex A17.9.3, as the stack sends it (Not-ECT, BECN set).
    let mut f = common::frame_repr(RoceRepr::cnp(common::SRC_QP));
    f.ip.ecn = Ecn::NotEct;
    let mut buf = vec![0u8; f.frame_len(0)];
    f.emit(&mut buf, b"").expect("a CNP fits");
    let Some(text) = dissect(&[buf], "cnp") else {
        return;
    };
    // Wireshark 4.0 has no name for opcode 0x81 and shows byte 4 (FECN/BECN) as its
    // reserved byte: BECN alone is 0x40. The 16 reserved bytes and the ICRC follow the BTH.
    let opcode_named = text.contains("Opcode: Unknown (129)") || text.contains("CNP (129)");
    assert!(opcode_named, "opcode 129 not dissected:\n{text}");
    for want in [
        "Destination Queue Pair: 0x000011",
        "Reserved: 40",
        "Packet Sequence Number: 0",
        "UDP payload (32 bytes)",
        "Data: 00000000000000000000000000000000",
    ] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
    assert!(!text.contains("Malformed"), "{text}");
    println!("tshark dissected our CNP");
}

#[test]
fn tshark_dissects_every_opcode_and_our_fields() {
    let frames = common::sample_frames();
    let bytes: Vec<Vec<u8>> = frames.iter().map(|(_, f)| f.clone()).collect();
    let Some(text) = dissect(&bytes, "tshark") else {
        return;
    };
    // tshark -V prints one "Frame N:" block per frame.
    let blocks: Vec<&str> = text.split("\nFrame ").collect();
    assert_eq!(blocks.len(), frames.len(), "{text}");
    // The last two frames are the NAK and the RNR NAK (PSN 7); the others carry ACKs.
    let syndromes = ["Syndrome: 98, Nak", "Syndrome: 46, RNR Nak"];
    for (i, ((op, _), block)) in frames.iter().zip(&blocks).enumerate() {
        let name = format!(
            "Opcode: Reliable Connection (RC) - {} ({})",
            tshark_name(*op),
            op.to_u8()
        );
        assert!(block.contains(&name), "{op:?}: no {name:?} in\n{block}");
        assert!(
            block.contains("Destination Queue Pair: 0x123456"),
            "{block}"
        );
        assert!(block.contains("Partition Key: 65535"), "{block}");
        assert!(!block.contains("Malformed"), "{op:?} malformed:\n{block}");
        let psn = syndromes
            .get(i.wrapping_sub(Opcode::ALL.len()))
            .map_or(100 + u32::from(op.to_u8()), |_| 7);
        let psn_line = format!("Packet Sequence Number: {psn}");
        assert!(
            block.contains(&psn_line),
            "{op:?}: no {psn_line:?}\n{block}"
        );
        if op.headers().reth {
            assert!(
                block.contains("Virtual Address: 0x00007f00dead0000"),
                "{block}"
            );
            assert!(block.contains("Remote Key: 0x00001234"), "{block}");
            assert!(block.contains("DMA Length: 4096"), "{block}");
        }
        if op.headers().immdt {
            assert!(block.contains("Immediate Data: cafef00d"), "{block}");
        }
        if op.headers().aeth {
            let syndrome = syndromes
                .get(i.wrapping_sub(Opcode::ALL.len()))
                .copied()
                .unwrap_or("Syndrome: 31, Ack");
            assert!(block.contains(syndrome), "{op:?}: no {syndrome:?}\n{block}");
            assert!(block.contains("Message Sequence Number: 66"), "{block}");
        }
        if op.headers().payload {
            assert!(
                block.contains("Data: 736c756963652072646d612121"),
                "{op:?}: payload\n{block}"
            );
        }
    }
    println!("tshark named all {} frames and their fields", blocks.len());
}
