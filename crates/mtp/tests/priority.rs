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

/// RACK retransmissions when a short message sent 300 us after a long one is acknowledged
/// while the long one's packets still wait (in a lower priority queue).
fn rack_after_overtaking(cutoffs: [u64; 7]) -> u64 {
    let mut ca = config(MAC_A, IP_A);
    ca.dscp_cutoffs = cutoffs;
    let mut a = MtpStack::new(ca).unwrap();
    let mut b = MtpStack::new(config(MAC_B, IP_B)).unwrap();
    a.set_neighbor(IP_B, MAC_B);
    b.set_neighbor(IP_A, MAC_A);
    let ea = a.bind(100).unwrap();
    b.bind(200).unwrap();
    let dst = SocketAddrV4::new(IP_B, 200);
    a.send_message(0, ea, dst, &[1; 3000], SendOptions::default())
        .unwrap();
    let long = drain(&mut a, 0);
    assert_eq!(long.len(), 3);
    a.send_message(300_000, ea, dst, &[2; 100], SendOptions::default())
        .unwrap();
    let short = drain(&mut a, 300_000);
    b.handle_frame(301_000, &short[0].0);
    for ack in drain(&mut b, 301_000) {
        a.handle_frame(302_000, &ack.0);
    }
    assert_eq!(a.counters().messages_acked, 1);
    a.counters().retx_rack
}

#[test]
fn a_short_message_overtaking_a_long_one_is_not_read_as_the_long_ones_loss() {
    assert_eq!(
        rack_after_overtaking([0; 7]),
        3,
        "one FIFO: the long one was lost"
    );
    assert_eq!(
        rack_after_overtaking([500, 0, 0, 0, 0, 0, 0]),
        0,
        "classes apart: the long one may still be queued"
    );
}
