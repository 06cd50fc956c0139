//! Memory access rights (`enum ibv_access_flags`).

use std::fmt;

/// Access rights of a memory region or a queue pair, as libibverbs numbers them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// The local HCA may write (receives, READ responses land here).
    pub const LOCAL_WRITE: Access = Access(1);
    /// A peer may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// A peer may RDMA READ.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// A peer may run atomics.
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Flags this transport understands; others are refused at registration.
    pub const KNOWN: Access = Access(0xf);

    /// No rights (local reads only).
    pub const fn empty() -> Access {
        Access(0)
    }

    /// Whether every right in `other` is here.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of rights.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        let unknown = self.0 & !Access::KNOWN.0;
        if unknown != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{unknown:#x}")?;
            first = false;
        }
        if first {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}
