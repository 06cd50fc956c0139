//! The memory the RDMA transport reaches: the applications' memory-region files (mapped
//! memfds) and the QPs' inline buffers in the engine, each under a backing id, and the
//! transport itself ([`Rdma`]: the stack with that memory, as the engine drives it).
//!
//! A mapped MR file is flexins.txt's shadow memory region: the transport's MR table
//! translates an application address to (backing, offset) here, and header-only TX reads
//! payloads from this mapping straight into the device's frame (docs/verbs.md "Data path").

use std::collections::HashMap;
use std::sync::Arc;

use sluice_engine::Transport;
use sluice_rdma::qp::Memory;
use sluice_rdma::stack::RdmaStack;
use sluice_shm::MappedFile;
use sluice_tcp::Instant;

/// What backs one id.
pub(crate) enum Backing {
    /// An application's memory region, shared with it (and with the offload handlers
    /// registered over it, which keep the mapping while they live).
    File(Arc<MappedFile>),
    /// A QP's inline buffer (engine memory: the application cannot see it).
    Inline(Vec<u8>),
}

/// Every backing by id; ids are never reused while the service runs (u32 wraps only after
/// four billion registrations, and then skips ids in use).
#[derive(Default)]
pub(crate) struct Backings {
    map: HashMap<u32, Backing>,
    next: u32,
}

impl Backings {
    /// Adds `b`; its id.
    pub fn add(&mut self, b: Backing) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1);
            if !self.map.contains_key(&self.next) {
                break;
            }
        }
        self.map.insert(self.next, b);
        self.next
    }

    /// Removes (and so unmaps) backing `id`.
    pub fn remove(&mut self, id: u32) {
        self.map.remove(&id);
    }

    /// Backings held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The mapped file of backing `id`, if it is an application's region.
    pub fn file(&self, id: u32) -> Option<Arc<MappedFile>> {
        match self.map.get(&id) {
            Some(Backing::File(f)) => Some(f.clone()),
            _ => None,
        }
    }

    /// Writes into an inline buffer (engine side); false if `id` is not one or out of range.
    pub fn write_inline(&mut self, id: u32, offset: usize, data: &[u8]) -> bool {
        match self.map.get_mut(&id) {
            Some(Backing::Inline(buf)) => match buf.get_mut(offset..offset + data.len()) {
                Some(dst) => {
                    dst.copy_from_slice(data);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }
}

impl Memory for Backings {
    fn read(&self, backing: u32, offset: u64, out: &mut [u8]) -> bool {
        match self.map.get(&backing) {
            Some(Backing::File(f)) => f.read_at(offset, out),
            Some(Backing::Inline(buf)) => {
                let Ok(at) = usize::try_from(offset) else {
                    return false;
                };
                match at.checked_add(out.len()).and_then(|end| buf.get(at..end)) {
                    Some(src) => {
                        out.copy_from_slice(src);
                        true
                    }
                    None => false,
                }
            }
            None => false,
        }
    }

    fn write(&mut self, backing: u32, offset: u64, data: &[u8]) -> bool {
        match self.map.get_mut(&backing) {
            Some(Backing::File(f)) => f.write_at(offset, data),
            // The inline buffers are local-read-only regions: the transport never writes
            // them, and a write that tried would be refused.
            Some(Backing::Inline(_)) | None => false,
        }
    }
}

/// The RDMA transport as the engine drives it: the stack and the memory it works on.
pub(crate) struct Rdma {
    /// The RoCEv2 RC transport.
    pub stack: RdmaStack,
    /// The memory its regions name.
    pub mem: Backings,
}

impl Transport for Rdma {
    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.stack
            .handle_frame(now.as_nanos(), &mut self.mem, frame);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.stack.poll_transmit(now.as_nanos(), &mut self.mem, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.stack.poll_timeout().map(Instant::from_nanos)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.stack.handle_timeout(now.as_nanos(), &mut self.mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_buffers_are_read_only_to_the_transport_and_bounded() {
        let mut m = Backings::default();
        let id = m.add(Backing::Inline(vec![0; 16]));
        assert!(m.write_inline(id, 12, b"abcd"));
        assert!(!m.write_inline(id, 13, b"abcd"), "past the end");
        assert!(!m.write_inline(id + 1, 0, b"a"), "no such backing");
        let mut out = [0u8; 4];
        assert!(m.read(id, 12, &mut out));
        assert_eq!(&out, b"abcd");
        assert!(!m.read(id, 13, &mut out));
        assert!(!m.read(id, u64::MAX, &mut out));
        assert!(
            !m.write(id, 0, b"x"),
            "the transport never writes an inline buffer"
        );
        let other = m.add(Backing::Inline(vec![0; 4]));
        assert_ne!(id, other);
        m.remove(id);
        assert!(!m.read(id, 0, &mut out));
        assert_eq!(m.len(), 1);
    }
}
