//! Readiness events for the application: bounded, one queue entry per connection or listener.

use crate::queue::ReadyQueue;

/// Event bits pending on a connection.
pub(crate) mod bits {
    /// Active open completed.
    pub(crate) const CONNECTED: u8 = 1 << 0;
    /// Data (or end of stream) can be read.
    pub(crate) const READABLE: u8 = 1 << 1;
    /// Send-buffer space opened.
    pub(crate) const WRITABLE: u8 = 1 << 2;
    /// The connection failed (see its error).
    pub(crate) const ERROR: u8 = 1 << 3;
    /// The connection is fully closed.
    pub(crate) const CLOSED: u8 = 1 << 4;
}

/// Pending event bits per slot and per listener, with a FIFO of who has any.
pub(crate) struct EventQueue {
    conn_bits: Box<[u8]>,
    conns: ReadyQueue,
    listener_pending: Box<[bool]>,
    listeners: ReadyQueue,
}

impl EventQueue {
    /// Creates queues for `slots` connections and `listeners` listeners.
    pub(crate) fn new(slots: usize, listeners: usize) -> Self {
        EventQueue {
            conn_bits: vec![0; slots].into_boxed_slice(),
            conns: ReadyQueue::new(slots),
            listener_pending: vec![false; listeners].into_boxed_slice(),
            listeners: ReadyQueue::new(listeners),
        }
    }

    /// Raises `bit` on `slot`.
    #[inline]
    pub(crate) fn raise(&mut self, slot: u32, bit: u8) {
        if let Some(b) = self.conn_bits.get_mut(slot as usize) {
            *b |= bit;
            self.conns.push(slot);
        }
    }

    /// Forgets everything pending on `slot` (it is being freed).
    pub(crate) fn clear(&mut self, slot: u32) {
        if let Some(b) = self.conn_bits.get_mut(slot as usize) {
            *b = 0;
        }
    }

    /// Marks listener `index` as having a connection to accept.
    pub(crate) fn raise_listener(&mut self, index: u16) {
        if let Some(p) = self.listener_pending.get_mut(index as usize) {
            *p = true;
            self.listeners.push(index as u32);
        }
    }

    /// Takes the next listener with connections to accept.
    pub(crate) fn pop_listener(&mut self) -> Option<u16> {
        while let Some(i) = self.listeners.pop() {
            if std::mem::take(&mut self.listener_pending[i as usize]) {
                return Some(i as u16);
            }
        }
        None
    }

    /// Takes the next connection's pending bits.
    pub(crate) fn pop_conn(&mut self) -> Option<(u32, u8)> {
        while let Some(slot) = self.conns.pop() {
            let b = std::mem::take(&mut self.conn_bits[slot as usize]);
            if b != 0 {
                return Some((slot, b));
            }
        }
        None
    }
}
