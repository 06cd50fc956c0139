//! SRPT with bounded starvation (`srpt_aging`): short messages go first, but every N-th
//! data packet is the oldest message's, so a long message progresses however many short
//! ones keep arriving.

mod common;

use std::net::SocketAddrV4;

use common::{config, IP_A, IP_B, MAC_A, MAC_B};
use sluice_mtp::stack::{MtpStack, SendOptions};
use sluice_mtp::wire::MtpFrameRepr;

/// The message id of each data packet a sender sends for one long message queued before
/// 20 one-packet ones, with `srpt_aging` = `aging`.
fn order(aging: u32) -> (u32, Vec<u32>) {
    let mut c = config(MAC_A, IP_A);
    c.srpt_aging = aging;
    let mut a = MtpStack::new(c).unwrap();
    a.set_neighbor(IP_B, MAC_B);
    let ep = a.bind(100).unwrap();
    let to = SocketAddrV4::new(IP_B, 200);
    let long = a
        .send_message(0, ep, to, &[1; 10_000], SendOptions::default())
        .unwrap();
    for _ in 0..20 {
        a.send_message(0, ep, to, &[2; 100], SendOptions::default())
            .unwrap();
    }
    let mut buf = vec![0u8; 2000];
    let mut ids = Vec::new();
    while let Some(n) = a.poll_transmit(0, &mut buf) {
        ids.push(MtpFrameRepr::parse(&buf[..n], true).unwrap().0.mtp.msg_id);
    }
    (long, ids)
}

#[test]
fn pure_srpt_sends_every_short_message_before_the_long_one() {
    let (long, ids) = order(0);
    let first_long = ids.iter().position(|&i| i == long).unwrap();
    assert_eq!(first_long, 20, "{ids:?}");
}

#[test]
fn with_aging_every_fourth_packet_is_the_oldest_messages() {
    let (long, ids) = order(4);
    let pkts = ids.iter().filter(|&&i| i == long).count();
    assert_eq!(ids.len(), 20 + pkts);
    // Packets 4, 8, 12, ... (1-based) while short messages wait.
    for (k, &id) in ids.iter().take(24).enumerate() {
        assert_eq!(id == long, (k + 1) % 4 == 0, "packet {k}: {ids:?}");
    }
}
