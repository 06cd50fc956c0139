//! Random TCP option areas: well-formed options with hostile values, and malformed ones
//! (bad lengths, truncation, too many SACK blocks) that the parser must refuse cleanly.

use rand::Rng;

const EOL: u8 = 0;
const NOP: u8 = 1;
const MSS: u8 = 2;
const WS: u8 = 3;
const SACK_PERM: u8 = 4;
const SACK: u8 = 5;
const TS: u8 = 8;

/// Values the options draw sequence numbers and timestamps from, so that SACK blocks and
/// TSecr land near what the victim uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct Anchors {
    /// A sequence number near the victim's send space (its snd_una or snd_max).
    pub seq: u32,
    /// A recent timestamp value seen on the connection.
    pub ts: u32,
}

fn near<R: Rng>(rng: &mut R, base: u32) -> u32 {
    match rng.gen_range(0..4) {
        0 => rng.gen(),
        1 => base,
        _ => base
            .wrapping_add(rng.gen_range(0..8192u32))
            .wrapping_sub(4096),
    }
}

/// Appends one option, well-formed or not, to `out`.
pub fn push_option<R: Rng>(rng: &mut R, a: &Anchors, out: &mut Vec<u8>) {
    match rng.gen_range(0..16) {
        0 => out.push(NOP),
        1 => out.push(EOL),
        2 => {
            let mss: u16 = match rng.gen_range(0..4) {
                0 => rng.gen_range(0..100),
                1 => u16::MAX,
                _ => rng.gen(),
            };
            out.extend_from_slice(&[MSS, 4]);
            out.extend_from_slice(&mss.to_be_bytes());
        }
        3 => out.extend_from_slice(&[NOP, WS, 3, rng.gen_range(0..20)]),
        4 => out.extend_from_slice(&[SACK_PERM, 2]),
        5 | 6 => {
            out.extend_from_slice(&[NOP, NOP, TS, 10]);
            out.extend_from_slice(&near(rng, a.ts).to_be_bytes());
            out.extend_from_slice(&near(rng, a.ts).to_be_bytes());
        }
        7 | 8 => {
            let n = rng.gen_range(1..=4usize);
            out.extend_from_slice(&[NOP, NOP, SACK, 2 + 8 * n as u8]);
            for _ in 0..n {
                let left = near(rng, a.seq);
                let right = if rng.gen_bool(0.8) {
                    left.wrapping_add(rng.gen_range(0..3000))
                } else {
                    rng.gen()
                };
                out.extend_from_slice(&left.to_be_bytes());
                out.extend_from_slice(&right.to_be_bytes());
            }
        }
        // Malformed from here on.
        9 => out.extend_from_slice(&[rng.gen_range(2..=8), rng.gen_range(0..2)]),
        10 => out.extend_from_slice(&[MSS, 3, 0]),
        11 => out.extend_from_slice(&[TS, 9, 1, 2, 3, 4, 5, 6, 7]),
        12 => {
            // Five SACK blocks (more than any header can hold) or a ragged block.
            let len = if rng.gen() {
                42
            } else {
                2 + 8 + rng.gen_range(1..8)
            };
            out.extend_from_slice(&[SACK, len]);
            out.extend((0..rng.gen_range(0..20)).map(|_| rng.gen::<u8>()));
        }
        13 => {
            // A length that runs past the end of the option area.
            out.extend_from_slice(&[rng.gen(), rng.gen_range(10..=255)]);
        }
        14 => {
            // Unknown kind with a valid length: must be skipped.
            let len = rng.gen_range(2..8u8);
            out.extend_from_slice(&[rng.gen_range(9..=254), len]);
            out.extend((2..len).map(|_| rng.gen::<u8>()));
        }
        _ => out.extend((0..rng.gen_range(1..6)).map(|_| rng.gen::<u8>())),
    }
}

/// A whole option area of up to 40 bytes.
pub fn random_options<R: Rng>(rng: &mut R, a: &Anchors) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    for _ in 0..rng.gen_range(0..5) {
        push_option(rng, a, &mut out);
    }
    out.truncate(40);
    out
}

/// A well-formed option area like the core's own (timestamps and maybe SACK blocks).
pub fn plausible_options<R: Rng>(rng: &mut R, a: &Anchors) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    if rng.gen_bool(0.7) {
        out.extend_from_slice(&[NOP, NOP, TS, 10]);
        out.extend_from_slice(&a.ts.wrapping_add(rng.gen_range(0..3)).to_be_bytes());
        out.extend_from_slice(&near(rng, a.ts).to_be_bytes());
    }
    if rng.gen_bool(0.3) {
        let n = rng.gen_range(1..=3usize);
        out.extend_from_slice(&[NOP, NOP, SACK, 2 + 8 * n as u8]);
        for _ in 0..n {
            let left = near(rng, a.seq);
            out.extend_from_slice(&left.to_be_bytes());
            out.extend_from_slice(&left.wrapping_add(rng.gen_range(1..3000)).to_be_bytes());
        }
    }
    out.truncate(40);
    out
}
