//! Mutations of real frames: bit flips, truncation, flag, sequence, acknowledgment and window
//! tweaks, option rewrites and IPv4/Ethernet header damage. Most mutants get their checksums
//! recomputed so they reach TCP processing; some keep the stale checksum so the verification
//! path is exercised too.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::frames::{fix_checksums, layout, Layout};
use crate::options::{random_options, Anchors};

/// The kinds of damage, for traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// One to three bit flips anywhere in the frame (also what a frame without a TCP layout gets).
    BitFlips,
    /// One bit flip in the IPv4 or TCP header.
    HeaderBitFlips,
    /// The frame cut short at a random length.
    Truncate,
    /// Random bytes appended, sometimes claimed by the IPv4 total length.
    Extend,
    /// The TCP flags replaced, or one of them toggled.
    Flags,
    /// The sequence number nudged or replaced.
    Seq,
    /// The acknowledgment number nudged or replaced.
    Ack,
    /// The window set to zero, the maximum, a tiny or a random value.
    Window,
    /// A random urgent pointer, with URG set.
    Urgent,
    /// A random TCP data offset.
    DataOffset,
    /// The TCP options rewritten.
    Options,
    /// One payload byte replaced.
    Payload,
    /// The IPv4 total length made random, too long or too short.
    IpTotalLen,
    /// The IPv4 version/IHL byte made random.
    IpHeaderLen,
    /// Random IPv4 fragment flags and offset.
    IpFragment,
    /// Random IPv4 DSCP/ECN and TTL bytes.
    IpEcnTtl,
    /// The Ethertype replaced (ARP, VLAN, IPv6 or IPv4).
    Ethertype,
}

const ALL: [Mutation; 17] = [
    Mutation::BitFlips,
    Mutation::HeaderBitFlips,
    Mutation::Truncate,
    Mutation::Extend,
    Mutation::Flags,
    Mutation::Seq,
    Mutation::Ack,
    Mutation::Window,
    Mutation::Urgent,
    Mutation::DataOffset,
    Mutation::Options,
    Mutation::Payload,
    Mutation::IpTotalLen,
    Mutation::IpHeaderLen,
    Mutation::IpFragment,
    Mutation::IpEcnTtl,
    Mutation::Ethertype,
];

/// A small or large change to a 32-bit sequence-space field.
fn tweak_u32<R: Rng>(rng: &mut R, v: u32) -> u32 {
    match rng.gen_range(0..6) {
        0 => rng.gen(),
        1 => v.wrapping_add(1),
        2 => v.wrapping_sub(1),
        3 => v.wrapping_add(rng.gen_range(0..70_000)),
        4 => v.wrapping_sub(rng.gen_range(0..70_000)),
        _ => v ^ (1 << rng.gen_range(0..32)),
    }
}

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Applies one to three mutations to `frame`; returns the first for the trace. Checksums are
/// recomputed afterwards with probability `fix`.
pub fn mutate<R: Rng>(rng: &mut R, frame: &mut Vec<u8>, fix: f64) -> Mutation {
    let first = *ALL.choose(rng).unwrap_or(&Mutation::BitFlips);
    apply(rng, frame, first);
    for _ in 0..rng.gen_range(0..3) {
        let m = *ALL.choose(rng).unwrap_or(&Mutation::BitFlips);
        apply(rng, frame, m);
    }
    if rng.gen_bool(fix) {
        fix_checksums(frame);
    }
    first
}

fn apply<R: Rng>(rng: &mut R, frame: &mut Vec<u8>, m: Mutation) {
    if frame.is_empty() {
        frame.push(rng.gen());
        return;
    }
    let l = layout(frame);
    match (m, l) {
        (Mutation::BitFlips, _) | (_, None) => {
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..frame.len());
                frame[i] ^= 1 << rng.gen_range(0..8);
            }
        }
        (Mutation::HeaderBitFlips, Some(l)) => {
            let end = (l.tcp + 20).min(frame.len());
            let i = rng.gen_range(l.ip.min(end - 1)..end);
            frame[i] ^= 1 << rng.gen_range(0..8);
        }
        (Mutation::Truncate, Some(_)) => {
            let n = rng.gen_range(0..frame.len());
            frame.truncate(n);
        }
        (Mutation::Extend, Some(l)) => {
            let n = rng.gen_range(1..64);
            frame.extend((0..n).map(|_| rng.gen::<u8>()));
            if rng.gen() {
                // Claim the junk as part of the IPv4 packet (and so of the TCP payload).
                let total = (frame.len() - l.ip) as u16;
                set_total_len(frame, &l, total);
            }
        }
        (Mutation::Flags, Some(l)) => {
            if let Some(f) = frame.get_mut(l.tcp + 13) {
                *f = match rng.gen_range(0..3) {
                    0 => rng.gen(),
                    // Toggle one of FIN SYN RST PSH ACK URG ECE CWR.
                    _ => *f ^ (1 << rng.gen_range(0..8)),
                };
            }
        }
        (Mutation::Seq, Some(l)) => tweak_field(rng, frame, l.tcp + 4),
        (Mutation::Ack, Some(l)) => tweak_field(rng, frame, l.tcp + 8),
        (Mutation::Window, Some(l)) => {
            let w: u16 = match rng.gen_range(0..4) {
                0 => 0,
                1 => u16::MAX,
                2 => rng.gen_range(0..64),
                _ => rng.gen(),
            };
            if let Some(s) = frame.get_mut(l.tcp + 14..l.tcp + 16) {
                s.copy_from_slice(&w.to_be_bytes());
            }
        }
        (Mutation::Urgent, Some(l)) => {
            if let Some(s) = frame.get_mut(l.tcp + 18..l.tcp + 20) {
                s.copy_from_slice(&rng.gen::<u16>().to_be_bytes());
            }
            if let Some(f) = frame.get_mut(l.tcp + 13) {
                *f |= 0x20;
            }
        }
        (Mutation::DataOffset, Some(l)) => {
            if let Some(b) = frame.get_mut(l.tcp + 12) {
                *b = (rng.gen_range(0..16u8) << 4) | (*b & 0x0F);
            }
        }
        (Mutation::Options, Some(l)) => rewrite_options(rng, frame, &l),
        (Mutation::Payload, Some(l)) => {
            let start = l.tcp + data_offset(frame, &l);
            if start < l.end {
                let i = rng.gen_range(start..l.end);
                frame[i] = rng.gen();
            } else {
                let i = l.tcp.min(frame.len() - 1);
                frame[i] ^= 1;
            }
        }
        (Mutation::IpTotalLen, Some(l)) => {
            let v: u16 = match rng.gen_range(0..3) {
                0 => rng.gen(),
                1 => (l.end - l.ip) as u16 + rng.gen_range(1..40),
                _ => (l.end - l.ip).saturating_sub(rng.gen_range(1..40)) as u16,
            };
            set_total_len(frame, &l, v);
        }
        (Mutation::IpHeaderLen, Some(l)) => {
            frame[l.ip] = match rng.gen_range(0..3) {
                0 => rng.gen(),
                _ => 0x40 | rng.gen_range(0..16u8),
            };
        }
        (Mutation::IpFragment, Some(l)) => {
            if let Some(s) = frame.get_mut(l.ip + 6..l.ip + 8) {
                s.copy_from_slice(&rng.gen::<u16>().to_be_bytes());
            }
        }
        (Mutation::IpEcnTtl, Some(l)) => {
            if let Some(b) = frame.get_mut(l.ip + 1) {
                *b = rng.gen();
            }
            if let Some(b) = frame.get_mut(l.ip + 8) {
                *b = rng.gen();
            }
        }
        (Mutation::Ethertype, Some(_)) => {
            let t: u16 = *[0x0806u16, 0x8100, 0x86DD, 0x0800]
                .choose(rng)
                .unwrap_or(&0);
            frame[12..14].copy_from_slice(&t.to_be_bytes());
        }
    }
}

fn tweak_field<R: Rng>(rng: &mut R, frame: &mut [u8], at: usize) {
    if let Some(v) = get_u32(frame, at) {
        put_u32(frame, at, tweak_u32(rng, v));
    }
}

fn set_total_len(frame: &mut [u8], l: &Layout, v: u16) {
    if let Some(s) = frame.get_mut(l.ip + 2..l.ip + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

fn data_offset(frame: &[u8], l: &Layout) -> usize {
    frame
        .get(l.tcp + 12)
        .map_or(20, |b| usize::from(b >> 4) * 4)
}

/// Replaces the option area with random (often malformed) options, moving the payload and
/// fixing the data offset and IPv4 total length so the result stays structurally consistent.
fn rewrite_options<R: Rng>(rng: &mut R, frame: &mut Vec<u8>, l: &Layout) {
    let doff = data_offset(frame, l).max(20);
    if l.tcp + doff > l.end {
        return;
    }
    let anchors = Anchors {
        seq: get_u32(frame, l.tcp + 8).unwrap_or(0),
        ts: rng.gen(),
    };
    let mut opts = random_options(rng, &anchors);
    opts.resize(opts.len().div_ceil(4) * 4, 0);
    let payload: Vec<u8> = frame[l.tcp + doff..l.end].to_vec();
    frame.truncate(l.tcp + 20);
    frame.extend_from_slice(&opts);
    frame.extend_from_slice(&payload);
    frame[l.tcp + 12] = ((((20 + opts.len()) / 4) as u8) << 4) | (frame[l.tcp + 12] & 0x0F);
    let total = (frame.len() - l.ip).min(usize::from(u16::MAX)) as u16;
    set_total_len(frame, l, total);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn mutants_never_panic_and_often_still_parse() {
        let spec = crate::frames::SegmentSpec {
            src_mac: sluice_wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: sluice_wire::EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: std::net::Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: std::net::Ipv4Addr::new(10, 0, 0, 2),
            ecn: sluice_wire::ipv4::Ecn::NotEct,
            src_port: 1,
            dst_port: 2,
            seq: 3,
            ack: 4,
            flags: 0x10,
            window: 5,
            urgent: 0,
            options: vec![],
            payload: vec![9; 100],
        };
        let base = crate::frames::build_segment(&spec);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut parsed = 0;
        for _ in 0..2000 {
            let mut f = base.clone();
            mutate(&mut rng, &mut f, 1.0);
            if crate::frames::parse_tcp(&f, spec.dst_ip, true).is_some() {
                parsed += 1;
            }
        }
        assert!(parsed > 500, "only {parsed} of 2000 fixed mutants parse");
    }
}
