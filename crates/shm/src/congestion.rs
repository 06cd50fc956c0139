//! Congestion-control algorithms as the contract names them: a one-byte code in
//! `SetCongestion` entries and in the socket block, and Linux's TCP_CONGESTION spelling.
//!
//! The contract has its own type (rather than the core's) because applications link only
//! against this crate; the service maps each code to the core's algorithm.

use std::fmt;

/// Longest algorithm name with its NUL, as Linux's TCP_CA_NAME_MAX.
pub const CONGESTION_NAME_MAX: usize = 16;

/// A congestion-control algorithm the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Congestion {
    /// DCTCP (RFC 8257), the engine's usual default.
    Dctcp,
    /// TIMELY (RTT gradient).
    Timely,
    /// NewReno (RFC 5681, RFC 6582); Linux calls it "reno".
    Reno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// BBR v1 (model-based: bandwidth and propagation time).
    Bbr,
}

impl Congestion {
    /// Every algorithm, in code order.
    pub const ALL: [Congestion; 5] = [
        Congestion::Dctcp,
        Congestion::Timely,
        Congestion::Reno,
        Congestion::Cubic,
        Congestion::Bbr,
    ];

    /// The code in entries and socket blocks (0 is "none written").
    pub fn code(self) -> u8 {
        match self {
            Congestion::Dctcp => 1,
            Congestion::Timely => 2,
            Congestion::Reno => 3,
            Congestion::Cubic => 4,
            Congestion::Bbr => 5,
        }
    }

    /// The algorithm of a code, or None for a code this version does not know.
    pub fn from_code(code: u8) -> Option<Congestion> {
        Congestion::ALL.into_iter().find(|c| c.code() == code)
    }

    /// The name TCP_CONGESTION uses (Linux's spelling).
    pub fn name(self) -> &'static str {
        match self {
            Congestion::Dctcp => "dctcp",
            Congestion::Timely => "timely",
            Congestion::Reno => "reno",
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
        }
    }

    /// The name NUL-padded to [`CONGESTION_NAME_MAX`] bytes, as getsockopt(TCP_CONGESTION)
    /// fills its buffer on Linux.
    pub fn padded_name(self) -> [u8; CONGESTION_NAME_MAX] {
        let mut b = [0u8; CONGESTION_NAME_MAX];
        b[..self.name().len()].copy_from_slice(self.name().as_bytes());
        b
    }

    /// Parses a TCP_CONGESTION value: the bytes up to the first NUL, ASCII
    /// case-insensitive; "newreno" is accepted for Reno. None for anything else.
    pub fn from_name(name: &[u8]) -> Option<Congestion> {
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let name = &name[..end];
        if name.eq_ignore_ascii_case(b"newreno") {
            return Some(Congestion::Reno);
        }
        Congestion::ALL
            .into_iter()
            .find(|c| c.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for c in Congestion::ALL {
            assert_eq!(Congestion::from_code(c.code()), Some(c));
            assert_eq!(Congestion::from_name(c.name().as_bytes()), Some(c));
            assert_eq!(Congestion::from_name(&c.padded_name()), Some(c));
        }
        assert_eq!(Congestion::from_code(0), None);
        assert_eq!(Congestion::from_code(6), None);
        assert_eq!(Congestion::from_name(b"CUBIC"), Some(Congestion::Cubic));
        assert_eq!(
            Congestion::from_name(b"NewReno\0junk"),
            Some(Congestion::Reno)
        );
        assert_eq!(Congestion::from_name(b"BBR\0"), Some(Congestion::Bbr));
        assert_eq!(Congestion::from_name(b"bbr2"), None);
        assert_eq!(Congestion::from_name(b""), None);
        assert_eq!(Congestion::from_name(b"cubic2"), None);
    }
}
