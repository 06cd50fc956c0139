//! A free-list of frame buffers so steady-state forwarding does not allocate.

/// Most buffers kept on the free-list; extras are released to the allocator.
const MAX_POOLED: usize = 4096;
/// Capacity of a freshly allocated buffer (a full-size Ethernet frame fits).
const INITIAL_CAPACITY: usize = 2048;

/// Recycles `Vec<u8>` frame buffers.
#[derive(Debug, Default)]
pub struct FramePool {
    free: Vec<Vec<u8>>,
}

impl FramePool {
    /// An empty buffer, recycled when possible.
    pub fn get(&mut self) -> Vec<u8> {
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(INITIAL_CAPACITY))
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.get();
        v.extend_from_slice(data);
        v
    }

    /// Returns a buffer to the free-list.
    pub fn put(&mut self, mut buf: Vec<u8>) {
        if self.free.len() < MAX_POOLED {
            buf.clear();
            self.free.push(buf);
        }
    }
}
