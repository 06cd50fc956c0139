//! Switch priorities: with `dscp_cutoffs` a data packet's IPv4 DSCP says how short its
//! message is (Homa's unscheduled priorities) and ACKs go at the highest; without, all 0.

mod common;

use std::net::SocketAddrV4;

use common::{config, IP_A, IP_B, MAC_A, MAC_B};
use sluice_mtp::stack::{ConfigError, MtpStack, SendOptions};
use sluice_mtp::wire::MtpFrameRepr;

/// Every frame `s` sends now, as (DSCP, is data, message length).
fn drain(s: &mut MtpStack, now: u64) -> Vec<(Vec<u8>, u8, bool, u32)> {
    let mut buf = vec![0u8; 2000];
    let mut out = Vec::new();
    while let Some(n) = s.poll_transmit(now, &mut buf) {
        let (f, _) = MtpFrameRepr::parse(&buf[..n], true).expect("a valid frame");
        out.push((buf[..n].to_vec(), f.ip.dscp, f.mtp.is_data(), f.mtp.msg_len));
    }
    out
}

fn dscps(cutoffs: [u64; 7]) -> (Vec<(u32, u8)>, Vec<u8>) {
    let mut ca = config(MAC_A, IP_A);
    ca.dscp_cutoffs = cutoffs;
    let mut cb = config(MAC_B, IP_B);
    cb.dscp_cutoffs = cutoffs;
    let mut a = MtpStack::new(ca).unwrap();
    let mut b = MtpStack::new(cb).unwrap();
    a.set_neighbor(IP_B, MAC_B);
    b.set_neighbor(IP_A, MAC_A);
    let ea = a.bind(100).unwrap();
    b.bind(200).unwrap();
    let dst = SocketAddrV4::new(IP_B, 200);
    for len in [100usize, 1000, 5000, 60_000] {
        a.send_message(0, ea, dst, &vec![7; len], SendOptions::default())
            .unwrap();
    }
    let sent = drain(&mut a, 0);
    assert!(sent.iter().all(|s| s.2));
    let mut data: Vec<(u32, u8)> = sent.iter().map(|s| (s.3, s.1)).collect();
    data.dedup();
    for s in &sent {
        b.handle_frame(1_000, &s.0);
    }
    let acks: Vec<u8> = drain(&mut b, 1_000).iter().map(|s| s.1).collect();
    assert!(!acks.is_empty());
    (data, acks)
}

#[test]
fn data_packets_carry_their_messages_priority_class_and_acks_the_highest() {
    let (data, acks) = dscps([500, 2000, 10_000, 0, 0, 0, 0]);
    assert_eq!(
        data,
        [(100, 7), (1000, 6), (5000, 5), (60_000, 0)],
        "shortest first (SRPT), each message one class"
    );
    assert!(acks.iter().all(|&d| d == 7), "{acks:?}");
}

#[test]
fn without_cutoffs_every_packet_is_best_effort() {
    let (data, acks) = dscps([0; 7]);
    assert!(data.iter().all(|&(_, d)| d == 0), "{data:?}");
    assert!(acks.iter().all(|&d| d == 0));
}

#[test]
fn descending_cutoffs_are_refused() {
    let mut c = config(MAC_A, IP_A);
    c.dscp_cutoffs = [1000, 500, 0, 0, 0, 0, 0];
    assert_eq!(MtpStack::new(c).err(), Some(ConfigError::DscpCutoffs));
}
