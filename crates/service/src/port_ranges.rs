//! The per-uid port-range map (issue 23 item 2): ports reserved for one uid, which only it
//! (and uid 0) may bind; ports outside every range follow the default policy.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// Ports `lo..=hi` reserved for `uid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// The uid the ports are reserved for.
    pub uid: u32,
    /// The ports, inclusive.
    pub ports: RangeInclusive<u16>,
}

/// Why a port-range map is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRangeError {
    /// Not `UID:LO-HI`.
    Syntax(String),
    /// `lo > hi`, or port 0 in a range.
    Empty(PortRange),
    /// Two ranges share a port.
    Overlap(PortRange, PortRange),
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}-{}",
            self.uid,
            self.ports.start(),
            self.ports.end()
        )
    }
}

impl fmt::Display for PortRangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRangeError::Syntax(s) => write!(f, "port range {s:?} is not UID:LO-HI"),
            PortRangeError::Empty(r) => {
                write!(
                    f,
                    "port range {r} is empty or has port 0 (LO <= HI, LO >= 1)"
                )
            }
            PortRangeError::Overlap(a, b) => write!(f, "port ranges {a} and {b} overlap"),
        }
    }
}

impl std::error::Error for PortRangeError {}

impl FromStr for PortRange {
    type Err = PortRangeError;

    /// `UID:LO-HI`, as `sluice engine --port-range` takes it.
    fn from_str(s: &str) -> Result<PortRange, PortRangeError> {
        let bad = || PortRangeError::Syntax(s.to_string());
        let (uid, ports) = s.split_once(':').ok_or_else(bad)?;
        let (lo, hi) = ports.split_once('-').ok_or_else(bad)?;
        Ok(PortRange {
            uid: uid.trim().parse().map_err(|_| bad())?,
            ports: lo.trim().parse().map_err(|_| bad())?..=hi.trim().parse().map_err(|_| bad())?,
        })
    }
}

/// The map, sorted by port: who a port is reserved for in O(log ranges).
#[derive(Clone, Debug, Default)]
pub(crate) struct PortRanges {
    sorted: Vec<PortRange>,
}

impl PortRanges {
    /// Checks and sorts `ranges`: none empty, none overlapping.
    pub(crate) fn new(ranges: &[PortRange]) -> Result<PortRanges, PortRangeError> {
        let mut sorted = ranges.to_vec();
        if let Some(r) = sorted
            .iter()
            .find(|r| r.ports.is_empty() || *r.ports.start() == 0)
        {
            return Err(PortRangeError::Empty(r.clone()));
        }
        sorted.sort_by_key(|r| *r.ports.start());
        for w in sorted.windows(2) {
            if w[1].ports.start() <= w[0].ports.end() {
                return Err(PortRangeError::Overlap(w[0].clone(), w[1].clone()));
            }
        }
        Ok(PortRanges { sorted })
    }

    /// The uid `port` is reserved for, if any.
    pub(crate) fn reserved_for(&self, port: u16) -> Option<u32> {
        let i = self.sorted.partition_point(|r| *r.ports.end() < port);
        self.sorted
            .get(i)
            .filter(|r| r.ports.contains(&port))
            .map(|r| r.uid)
    }

    /// Whether `uid` may bind `port`: outside every range, in its own, or uid 0.
    pub(crate) fn allows(&self, uid: u32, port: u16) -> bool {
        uid == 0 || self.reserved_for(port).is_none_or(|owner| owner == uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> PortRange {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_parse_and_bad_ones_are_refused() {
        assert_eq!(
            r("1000:8000-8099"),
            PortRange {
                uid: 1000,
                ports: 8000..=8099
            }
        );
        for bad in ["1000", "1000:8000", "x:1-2", "1:2-70000", "1:-3"] {
            assert!(
                matches!(bad.parse::<PortRange>(), Err(PortRangeError::Syntax(_))),
                "{bad}"
            );
        }
        let empty = PortRanges::new(&[r("1:9-8")]).unwrap_err();
        assert!(matches!(empty, PortRangeError::Empty(_)));
        assert!(empty.to_string().contains("1:9-8"), "{empty}");
        assert!(PortRanges::new(&[r("1:0-5")]).is_err(), "port 0");
        let overlap = PortRanges::new(&[r("2:8050-8200"), r("1:8000-8050")]).unwrap_err();
        assert_eq!(
            overlap.to_string(),
            "port ranges 1:8000-8050 and 2:8050-8200 overlap"
        );
    }

    #[test]
    fn a_reserved_port_admits_its_uid_and_root_only() {
        let map = PortRanges::new(&[r("1000:8000-8099"), r("2000:9000-9000")]).unwrap();
        assert_eq!(map.reserved_for(7999), None);
        assert_eq!(map.reserved_for(8000), Some(1000));
        assert_eq!(map.reserved_for(8099), Some(1000));
        assert_eq!(map.reserved_for(8100), None);
        assert_eq!(map.reserved_for(9000), Some(2000));
        assert!(map.allows(1000, 8050));
        assert!(map.allows(0, 8050));
        assert!(!map.allows(2000, 8050));
        assert!(map.allows(2000, 7000), "outside every range");
        assert!(!map.allows(1000, 9000));
    }
}
