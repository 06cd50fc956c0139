//! SYN cookies (AccelTCP 4.1): when the SYN backlog is full the SYN-ACK's ISN encodes a keyed
//! hash, a coarse clock and the MSS, and its TSval's low bits carry window scale and
//! SACK-permitted, so the final ACK alone rebuilds the connection and no state is kept.
//!
//! ISN layout: `t:5 | mss_index:3 | hash:24`, t counting 64-second periods; a cookie is
//! valid for the period it was made in and the next. TSval layout:
//! `clock:26 | ecn:1 | sack:1 | wscale:4` (wscale 15 = none). A peer that does not send
//! timestamps gets no scaling, no SACK and no ECN (RFC 3168), as with Linux's cookies.

use std::net::Ipv4Addr;
use std::time::Duration;

use sluice_wire::tcp::SeqNumber;

use super::isn::Secret;
use crate::table::FourTuple;
use crate::time::Instant;

/// MSS values a cookie can carry (the largest not above the peer's is used).
const MSS_TABLE: [u16; 8] = [536, 1220, 1300, 1360, 1400, 1440, 1460, 8960];

/// The handshake options a cookie preserves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CookieOptions {
    /// Peer's MSS (rounded down to a table value).
    pub mss: u16,
    /// Peer's window scale.
    pub wscale: Option<u8>,
    /// Peer offered SACK.
    pub sack: bool,
    /// ECN was agreed in the cookie SYN-ACK (RFC 3168 6.1.1).
    pub ecn: bool,
}

/// The length of one cookie time period, in seconds.
const PERIOD_SECS: u64 = 64;

/// The longest a cookie stays valid: [`decode`] takes the current period and the one
/// before, so a cookie sent at the start of a period lasts two.
pub(crate) const VALID_FOR: Duration = Duration::from_secs(2 * PERIOD_SECS);

fn period(now: Instant) -> u32 {
    ((now.as_millis() / 1000 / PERIOD_SECS) & 31) as u32
}

fn hash24(secret: &Secret, ip: Ipv4Addr, tuple: &FourTuple, peer_isn: SeqNumber, t: u32) -> u32 {
    secret.hash(ip, tuple, peer_isn.0 ^ t.rotate_left(24)) & 0x00ff_ffff
}

/// The cookie ISN for a SYN with sequence number `peer_isn`.
pub(crate) fn encode_isn(
    secret: &Secret,
    ip: Ipv4Addr,
    tuple: &FourTuple,
    peer_isn: SeqNumber,
    now: Instant,
    mss: u16,
) -> SeqNumber {
    let t = period(now);
    let index = MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32;
    SeqNumber(t << 27 | index << 24 | hash24(secret, ip, tuple, peer_isn, t))
}

/// Low TSval bits that carry options.
const OPTION_BITS: u32 = 0x3f;

/// The TSval of a cookie SYN-ACK: the clock with options in its low six bits, never ahead
/// of the clock. The peer keeps this TSval as TS.Recent; a TSval later than the clock would
/// make our next segments look older and the peer's PAWS would drop them (RFC 7323 5.3),
/// so when the option bits exceed the clock's, the previous 64-tick slot is used.
pub(crate) fn encode_tsval(ts_clock: u32, wscale: Option<u8>, sack: bool, ecn: bool) -> u32 {
    let bits = (ecn as u32) << 5 | (sack as u32) << 4 | wscale.map_or(15, |w| w.min(14) as u32);
    let tsval = (ts_clock & !OPTION_BITS) | bits;
    if (tsval.wrapping_sub(ts_clock) as i32) > 0 {
        tsval.wrapping_sub(OPTION_BITS + 1)
    } else {
        tsval
    }
}

/// Validates the ACK of a cookie SYN-ACK: `cookie` is SEG.ACK - 1, `peer_isn` SEG.SEQ - 1,
/// `ts_ecr` the echoed TSval. Returns the preserved options, or None for a forged or stale cookie.
pub(crate) fn decode(
    secret: &Secret,
    ip: Ipv4Addr,
    tuple: &FourTuple,
    peer_isn: SeqNumber,
    cookie: SeqNumber,
    now: Instant,
    ts_ecr: Option<u32>,
) -> Option<CookieOptions> {
    let t = cookie.0 >> 27;
    if (period(now).wrapping_sub(t)) & 31 > 1 {
        return None;
    }
    if cookie.0 & 0x00ff_ffff != hash24(secret, ip, tuple, peer_isn, t) {
        return None;
    }
    let mss = MSS_TABLE[((cookie.0 >> 24) & 7) as usize];
    let (wscale, sack, ecn) = match ts_ecr {
        Some(ecr) => {
            let w = (ecr & 0xf) as u8;
            ((w <= 14).then_some(w), ecr & 0x10 != 0, ecr & 0x20 != 0)
        }
        None => (None, false, false),
    };
    Some(CookieOptions {
        mss,
        wscale,
        sack,
        ecn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Secret, Ipv4Addr, FourTuple) {
        let tuple = FourTuple {
            remote_ip: Ipv4Addr::new(10, 0, 0, 9),
            remote_port: 4444,
            local_port: 80,
        };
        (Secret::derive(7, 8), Ipv4Addr::new(10, 0, 0, 1), tuple)
    }

    #[test]
    fn cookie_round_trips_options_and_expires() {
        let (s, ip, tuple) = setup();
        let now = Instant::from_millis(1_000_000);
        let peer = SeqNumber(12345);
        let isn = encode_isn(&s, ip, &tuple, peer, now, 1460);
        let ts = encode_tsval(987_654, Some(7), true, true);
        assert!(ts <= 987_654, "never ahead of the clock");
        let opts = decode(&s, ip, &tuple, peer, isn, now, Some(ts)).unwrap();
        assert_eq!(
            opts,
            CookieOptions {
                mss: 1460,
                wscale: Some(7),
                sack: true,
                ecn: true,
            }
        );
        let ts = encode_tsval(987_654, None, false, false);
        let opts = decode(&s, ip, &tuple, peer, isn, now, Some(ts)).unwrap();
        assert_eq!((opts.wscale, opts.sack, opts.ecn), (None, false, false));
        // Still valid in the next 64 s period, not two periods later.
        assert!(decode(
            &s,
            ip,
            &tuple,
            peer,
            isn,
            now + std::time::Duration::from_secs(64),
            Some(ts)
        )
        .is_some());
        assert!(decode(
            &s,
            ip,
            &tuple,
            peer,
            isn,
            now + std::time::Duration::from_secs(129),
            Some(ts)
        )
        .is_none());
    }

    #[test]
    fn forged_or_misdirected_cookies_fail() {
        let (s, ip, tuple) = setup();
        let now = Instant::from_millis(5_000);
        let peer = SeqNumber(1);
        let isn = encode_isn(&s, ip, &tuple, peer, now, 1400);
        assert!(decode(&s, ip, &tuple, peer, isn + 1u32, now, None).is_none());
        assert!(decode(&s, ip, &tuple, SeqNumber(2), isn, now, None).is_none());
        let other = FourTuple {
            remote_port: 4445,
            ..tuple
        };
        assert!(decode(&s, ip, &other, peer, isn, now, None).is_none());
        let opts = decode(&s, ip, &tuple, peer, isn, now, None).unwrap();
        assert_eq!(
            opts,
            CookieOptions {
                mss: 1400,
                wscale: None,
                sack: false,
                ecn: false,
            }
        );
    }
}
