//! Initial sequence numbers and timestamp offsets from a keyed hash of the 4-tuple.

use core::hash::Hasher;
use std::net::Ipv4Addr;

use siphasher::sip::SipHasher13;
use sluice_wire::tcp::SeqNumber;

use std::time::Duration;

use crate::table::FourTuple;
use crate::time::Instant;

/// A secret key for the keyed hashes, derived from the caller's seed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Secret(u64, u64);

impl Secret {
    /// Derives a secret for `purpose` from `seed`.
    pub(crate) fn derive(seed: u64, purpose: u64) -> Self {
        let mut h = SipHasher13::new_with_keys(seed, purpose);
        h.write_u64(0x51u64);
        let a = h.finish();
        h.write_u64(a);
        Secret(a, h.finish())
    }

    /// The keyed hash of a 4-tuple (and our address) plus `extra`.
    pub(crate) fn hash(&self, local_ip: Ipv4Addr, tuple: &FourTuple, extra: u32) -> u32 {
        let mut h = SipHasher13::new_with_keys(self.0, self.1);
        h.write_u32(u32::from(local_ip));
        h.write_u32(u32::from(tuple.remote_ip));
        h.write_u16(tuple.local_port);
        h.write_u16(tuple.remote_port);
        h.write_u32(extra);
        h.finish() as u32
    }
}

/// RFC 9293 3.4.1 (MUST-8, SHLD-1; RFC 6528): ISN = M + F(localip, localport, remoteip,
/// remoteport, secretkey), where M is a clock ticking every 4 microseconds, so that
/// successive incarnations of a connection use increasing sequence numbers (MUST-9 is met
/// by the same clock for a peer reconnecting after TIME-WAIT).
pub(crate) fn initial_sequence(
    secret: &Secret,
    local_ip: Ipv4Addr,
    tuple: &FourTuple,
    now: Instant,
) -> SeqNumber {
    let clock = (now.as_micros() / 4) as u32;
    SeqNumber(secret.hash(local_ip, tuple, 0).wrapping_add(clock))
}

/// RFC 7323 5.4: a per-connection offset added to the timestamp clock, so that TSvals leak
/// no host uptime and differ between connections; `epoch` (`Config::clock_epoch`) moves
/// it on with the wall clock across restarts.
pub(crate) fn timestamp_offset(
    secret: &Secret,
    local_ip: Ipv4Addr,
    tuple: &FourTuple,
    epoch: Duration,
) -> u32 {
    secret
        .hash(local_ip, tuple, 0x7473)
        .wrapping_add(epoch.as_millis() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(port: u16) -> FourTuple {
        FourTuple {
            remote_ip: Ipv4Addr::new(10, 0, 0, 2),
            remote_port: port,
            local_port: 80,
        }
    }

    #[test]
    fn isn_is_keyed_per_tuple_and_advances_with_the_clock() {
        // RFC 9293 MUST-8 / SHLD-1
        let s = Secret::derive(1, 2);
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let a = initial_sequence(&s, ip, &tuple(1000), Instant::ZERO);
        let b = initial_sequence(&s, ip, &tuple(1001), Instant::ZERO);
        assert_ne!(a, b, "different tuples get unrelated ISNs");
        let later = initial_sequence(&s, ip, &tuple(1000), Instant::from_millis(4));
        assert_eq!(later.diff(a), 1000, "the clock part advances 1 per 4 us");
        let other_key = initial_sequence(&Secret::derive(9, 2), ip, &tuple(1000), Instant::ZERO);
        assert_ne!(a, other_key);
    }
}
