//! [`List`]: one of the header's lists, either as received (bytes, decoded on access, so
//! parsing allocates nothing) or as given to emit (a slice of entries).

use super::entries::Entry;

/// A list of header entries: the bytes of a received header, or entries to emit.
#[derive(Debug, Clone, Copy)]
pub enum List<'a, T> {
    /// Entries as they are on the wire (a whole number of entries).
    Wire(&'a [u8]),
    /// Entries given by the caller.
    Items(&'a [T]),
}

impl<T> Default for List<'_, T> {
    fn default() -> Self {
        List::Items(&[])
    }
}

impl<'a, T: Entry> List<'a, T> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            List::Wire(b) => b.len() / T::WIRE_LEN,
            List::Items(items) => items.len(),
        }
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry at `i`.
    pub fn get(&self, i: usize) -> Option<T> {
        match self {
            List::Wire(b) => T::read_entry(b.get(i.checked_mul(T::WIRE_LEN)?..)?),
            List::Items(items) => items.get(i).copied(),
        }
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        let list = *self;
        (0..list.len()).filter_map(move |i| list.get(i))
    }

    /// Writes the entries into `out` (which holds exactly `len() * WIRE_LEN` bytes).
    pub(crate) fn write(&self, out: &mut [u8]) {
        match self {
            List::Wire(b) => {
                if let Some(dst) = out.get_mut(..b.len()) {
                    dst.copy_from_slice(b);
                }
            }
            List::Items(items) => {
                for (item, chunk) in items.iter().zip(out.chunks_exact_mut(T::WIRE_LEN)) {
                    item.write_entry(chunk);
                }
            }
        }
    }
}

impl<T: Entry + PartialEq> PartialEq for List<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<T: Entry + Eq> Eq for List<'_, T> {}
