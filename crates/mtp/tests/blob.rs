//! Blobs larger than one message: split, carried as independent messages (which may
//! arrive in any order), and reassembled in order.

mod common;

use std::net::SocketAddrV4;

use common::{config, dst, Pair, IP_A, IP_B, MAC_A, MAC_B};
use sluice_mtp::blob::{split, BlobError, Reassembler, BLOB_HEADER_LEN};
use sluice_mtp::stack::SendOptions;

#[test]
fn a_blob_crosses_the_transport_in_many_messages_under_reordering() {
    let mut ca = config(MAC_A, IP_A);
    ca.max_message_len = 64 * 1024;
    let mut cb = config(MAC_B, IP_B);
    cb.max_message_len = 64 * 1024;
    let mut p = Pair::with(ca, cb, 11);
    p.reorder = 0.3;
    p.loss = 0.02;
    let ea = p.a.bind(0).unwrap();
    let eb = p.b.bind(7000).unwrap();
    let to = dst(IP_B, &p.b, eb);
    let blob: Vec<u8> = (0..1_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let pieces: Vec<_> = split(3, &blob, 64 * 1024).unwrap().collect();
    assert_eq!(
        pieces.len(),
        blob.len().div_ceil(64 * 1024 - BLOB_HEADER_LEN)
    );
    // Smaller messages first would reorder anyway (SRPT): the last piece is the shortest.
    for m in &pieces {
        p.a.send_message(p.now, ea, to, m, SendOptions::default())
            .unwrap();
    }
    p.run(2_000_000_000);
    let mut r = Reassembler::new(2_000_000, 4_000_000);
    let mut out = None;
    let mut order = Vec::new();
    while let Some(m) = p.b.recv_message(eb) {
        order.push(u32::from_be_bytes(m.data[4..8].try_into().unwrap()));
        if let Some(done) = r.push(m.src, &m.data).unwrap() {
            out = Some(done);
        }
    }
    assert_ne!(
        order,
        (0..order.len() as u32).collect::<Vec<_>>(),
        "pieces arrived out of order"
    );
    let (id, data) = out.expect("whole blob");
    assert_eq!(id, 3);
    assert_eq!(data, blob);
    assert_eq!(r.held(), 0);
}

#[test]
fn the_reassembler_is_bounded_and_refuses_bad_pieces() {
    let src = SocketAddrV4::new(IP_A, 1);
    let mut r = Reassembler::new(1000, 1500);
    assert_eq!(r.push(src, &[0; 3]), Err(BlobError::Malformed));
    let big: Vec<_> = split(1, &[0; 5000], 100).unwrap().collect();
    assert_eq!(r.push(src, &big[0]), Err(BlobError::TooLong(5000)));
    // Only the second piece of many blobs: held bytes stay within the bound.
    for id in 0..100 {
        let pieces: Vec<_> = split(id, &[7; 900], 500).unwrap().collect();
        assert_eq!(r.push(src, &pieces[1]), Ok(None));
        assert!(r.held() <= 1500);
    }
    assert!(r.evictions > 0);
    assert_eq!(
        split(0, &[1], BLOB_HEADER_LEN).err(),
        Some(BlobError::MessageTooSmall(16))
    );
    let empty: Vec<_> = split(9, &[], 100).unwrap().collect();
    assert_eq!(r.push(src, &empty[0]), Ok(Some((9, Vec::new()))));
}
