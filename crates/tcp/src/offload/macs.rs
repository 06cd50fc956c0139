//! Next-hop MAC addresses shared by the offload stages' flows: a flow keeps a 2-byte index
//! instead of 6 bytes (in a data center almost every flow's next hop is the same router).

use hashbrown::HashMap;
use sluice_wire::EthernetAddress;

/// Interned MACs with reference counts; an index is reused once its last flow leaves.
#[derive(Debug, Default)]
pub(crate) struct MacTable {
    entries: Vec<(EthernetAddress, u32)>,
    by_mac: HashMap<EthernetAddress, u16>,
    free: Vec<u16>,
}

impl MacTable {
    /// The index of `mac`, taking a reference. None if 65,536 distinct MACs are in use.
    pub(crate) fn intern(&mut self, mac: EthernetAddress) -> Option<u16> {
        if let Some(&i) = self.by_mac.get(&mac) {
            self.entries[i as usize].1 += 1;
            return Some(i);
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u16::try_from(self.entries.len()).ok()?;
                self.entries.push((mac, 0));
                i
            }
        };
        self.entries[i as usize] = (mac, 1);
        self.by_mac.insert(mac, i);
        Some(i)
    }

    /// The MAC at `index`.
    pub(crate) fn get(&self, index: u16) -> EthernetAddress {
        self.entries[index as usize].0
    }

    /// Drops a reference to `index`.
    pub(crate) fn release(&mut self, index: u16) {
        let e = &mut self.entries[index as usize];
        e.1 -= 1;
        if e.1 == 0 {
            self.by_mac.remove(&e.0);
            self.free.push(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_shared_and_reused_after_its_last_release() {
        let mut t = MacTable::default();
        let a = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let b = EthernetAddress([2, 0, 0, 0, 0, 2]);
        let i = t.intern(a).unwrap();
        assert_eq!(t.intern(a), Some(i));
        let j = t.intern(b).unwrap();
        assert_ne!(i, j);
        t.release(i);
        assert_eq!(t.get(i), a, "one reference left");
        t.release(i);
        let k = t.intern(EthernetAddress([2, 0, 0, 0, 0, 3])).unwrap();
        assert_eq!(k, i, "the freed index is reused");
        assert_eq!(t.get(j), b);
    }
}
