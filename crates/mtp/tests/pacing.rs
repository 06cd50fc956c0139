//! Pacing to the local line counts what the line spends per frame: Ethernet's 20 bytes of
//! preamble and gap by default, none on a link model that serializes frame bytes only (the
//! simulator's), where counting them would leave the link idle 20 bytes a frame.

mod common;

use std::net::SocketAddrV4;

use common::{config, IP_A, IP_B, MAC_A, MAC_B};
use sluice_mtp::stack::{
    ConfigError, MtpStack, SendOptions, MAX_LINE_BACKLOG, MAX_LINE_FRAME_OVERHEAD,
};

/// Frames of 100-byte messages a stack paced to 1 Gbit/s hands out in 100 us, and their length.
fn frames_in_100us(overhead: usize) -> (u64, u64) {
    let mut c = config(MAC_A, IP_A);
    c.link_bps = 1_000_000_000;
    c.line_backlog = 0;
    c.line_frame_overhead = overhead;
    let mut s = MtpStack::new(c).unwrap();
    s.set_neighbor(IP_B, MAC_B);
    let ep = s.bind(100).unwrap();
    for _ in 0..200 {
        s.send_message(
            0,
            ep,
            SocketAddrV4::new(IP_B, 200),
            &[1; 100],
            SendOptions::default(),
        )
        .unwrap();
    }
    let mut buf = vec![0u8; 2000];
    let (mut now, mut frames, mut len) = (0u64, 0u64, 0u64);
    while now < 100_000 {
        match s.poll_transmit(now, &mut buf) {
            Some(n) => {
                frames += 1;
                len = n as u64;
            }
            None => now = s.poll_timeout().expect("data waits").max(now + 1),
        }
    }
    (frames, len)
}

#[test]
fn the_line_is_counted_as_the_link_model_counts_it() {
    let (bare, len) = frames_in_100us(0);
    let (ethernet, _) = frames_in_100us(20);
    // 1 Gbit/s: 8 ns a byte; the first frame leaves at 0.
    assert_eq!(bare, 100_000u64.div_ceil(len * 8), "frame of {len} bytes");
    assert_eq!(ethernet, 100_000u64.div_ceil((len + 20) * 8));
    assert!(bare > ethernet);
}

#[test]
fn pacing_bounds_beyond_a_line_are_refused() {
    let mut c = config(MAC_A, IP_A);
    c.link_bps = 1_000_000_000;
    c.line_frame_overhead = MAX_LINE_FRAME_OVERHEAD;
    c.line_backlog = MAX_LINE_BACKLOG;
    assert!(MtpStack::new(c).is_ok());
    let mut huge = c;
    huge.line_frame_overhead = usize::MAX;
    assert_eq!(MtpStack::new(huge).err(), Some(ConfigError::Pacing));
    let mut deep = c;
    deep.line_backlog = MAX_LINE_BACKLOG + 1;
    assert_eq!(MtpStack::new(deep).err(), Some(ConfigError::Pacing));
}
