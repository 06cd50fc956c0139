//! An ACK names the packet it acknowledges and the message's acknowledged prefix, but not
//! twice: for a message's first packet (a one-packet message's only) the two runs are the
//! same and the ACK carries one, 8 bytes shorter.

mod common;

use std::net::SocketAddrV4;

use common::{config, IP_A, IP_B, MAC_A, MAC_B};
use sluice_mtp::stack::{MtpStack, SendOptions};
use sluice_mtp::wire::MtpFrameRepr;

/// The SACK runs, as (first, count), of each ACK `b` sends for a message of `len` bytes.
fn ack_runs(len: usize) -> Vec<Vec<(u16, u16)>> {
    let mut a = MtpStack::new(config(MAC_A, IP_A)).unwrap();
    let mut b = MtpStack::new(config(MAC_B, IP_B)).unwrap();
    a.set_neighbor(IP_B, MAC_B);
    b.set_neighbor(IP_A, MAC_A);
    let ea = a.bind(100).unwrap();
    let eb = b.bind(200).unwrap();
    a.send_message(
        0,
        ea,
        SocketAddrV4::new(IP_B, 200),
        &vec![3; len],
        SendOptions::default(),
    )
    .unwrap();
    let mut buf = vec![0u8; 2000];
    let mut acks = Vec::new();
    while let Some(n) = a.poll_transmit(0, &mut buf) {
        b.handle_frame(1_000, &buf[..n]);
        let mut ack = vec![0u8; 2000];
        while let Some(m) = b.poll_transmit(1_000, &mut ack) {
            let (f, _) = MtpFrameRepr::parse(&ack[..m], true).unwrap();
            acks.push(f.mtp.sack.iter().map(|r| (r.first, r.count)).collect());
            a.handle_frame(2_000, &ack[..m]);
        }
    }
    assert_eq!(b.recv_message(eb).map(|m| m.data.len()), Some(len));
    assert_eq!(
        a.counters().messages_acked,
        1,
        "the ACKs completed the message"
    );
    acks
}

#[test]
fn a_one_packet_message_is_acknowledged_by_one_run() {
    assert_eq!(ack_runs(200), [vec![(0, 1)]]);
}

#[test]
fn later_packets_carry_their_own_run_and_the_prefix() {
    let mss = MtpStack::new(config(MAC_A, IP_A)).unwrap().mss();
    assert_eq!(
        ack_runs(2 * mss + 1),
        [vec![(0, 1)], vec![(1, 1), (0, 2)], vec![(2, 1), (0, 3)]]
    );
}
