//! Header-only TX for TCP (flexins.txt 3.2, Figure 6): the API of a connection whose send
//! buffer is the caller's memory (service mode: the socket's shared TX ring). The caller
//! gives the core a [`PayloadSource`] and its stream position of the next byte; it then
//! commits bytes ([`Stack::send_external`]) without handing them over, and may reuse them only
//! once acknowledged ([`Stack::tx_positions`]). The core keeps sequence bookkeeping only;
//! datapath/transmit.rs gathers each segment's payload from the source into the frame.

use crate::buffer::PayloadRing;
use crate::control::state::ConnError;
use crate::error::Error;
use crate::handle::ConnId;
use crate::host::Stack;
use crate::payload_source::{ExternalTx, PayloadSource, Touched};

/// A header-only connection's positions in the caller's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxPositions {
    /// Everything before it is acknowledged: the caller may reuse those bytes.
    pub released: u64,
    /// Everything before it was committed ([`Stack::send_external`], or `send`).
    pub committed: u64,
    /// Whether the source is still the send buffer (false once the core took the bytes in:
    /// at close, splice, or a `send` on the connection).
    pub external: bool,
}

impl Stack {
    /// Makes `source` the connection's send buffer, `pos` being the caller's stream
    /// position of the next byte it will commit. Only with nothing unacknowledged (else
    /// WouldBlock), on a connection the application owns and does not splice.
    pub fn set_payload_source(
        &mut self,
        id: ConnId,
        source: Box<dyn PayloadSource>,
        pos: u64,
    ) -> Result<(), Error> {
        let slot = self.slot_of(id)?;
        if self.conns[slot as usize].splicing {
            return Err(Error::NotConnected);
        }
        if source.capacity() == 0 {
            return Err(Error::InvalidArgument);
        }
        let b = self.bufs[slot as usize]
            .as_mut()
            .ok_or(Error::InvalidHandle)?;
        if b.tx_used() != 0 {
            return Err(Error::WouldBlock);
        }
        // An empty ring's storage goes back to the pool: the caller's buffer replaces it.
        self.tx_pool.detach(&mut b.tx);
        b.ext = Some(ExternalTx {
            source: Some(source),
            head_pos: pos,
        });
        Ok(())
    }

    /// Commits the caller's next `n` bytes (already in its source, at the positions after
    /// those committed before) for sending, without copying them. Returns how many were
    /// taken: at most the source's capacity less what is unacknowledged. The same states
    /// as [`Stack::send`]; InvalidHandle if the connection has no source (any more).
    pub fn send_external(&mut self, id: ConnId, n: usize) -> Result<usize, Error> {
        let slot = self.slot_of(id)?;
        if !self.bufs[slot as usize]
            .as_ref()
            .is_some_and(|b| b.external())
        {
            return Err(Error::InvalidHandle);
        }
        self.sendable(slot)?;
        let b = self.bufs[slot as usize]
            .as_mut()
            .ok_or(Error::InvalidHandle)?;
        let n = n.min(b.tx_room(usize::MAX));
        if n == 0 {
            b.want_writable = true;
            return Err(Error::WouldBlock);
        }
        b.tx_tail += n;
        // Doorbell (FlexTOE HC workflow), as `send`.
        self.dp.proto[slot as usize].tx_end = b.tx_tail;
        self.dp.ready.push(slot);
        self.charge_delta(slot, n as i64);
        Ok(n)
    }

    /// The connection's positions in the caller's stream, if it was given a source; None
    /// for one whose send buffer was always the core's.
    pub fn tx_positions(&self, id: ConnId) -> Result<Option<TxPositions>, Error> {
        let slot = self.slot_of(id)?;
        let b = self.bufs[slot as usize]
            .as_ref()
            .ok_or(Error::InvalidHandle)?;
        Ok(b.ext.as_ref().map(|e| TxPositions {
            released: e.head_pos,
            committed: e.head_pos + b.tx_used() as u64,
            external: e.source.is_some(),
        }))
    }

    /// Transmit-side bytes the core touched so far (copies into frames, staging copies,
    /// software checksums): "engine memory touched per payload byte".
    pub fn tx_touch(&self) -> Touched {
        self.tx_touch
    }

    /// A segment's source could not gather its payload (the caller's buffer is gone): the
    /// connection is reset and its application told; counted.
    pub(crate) fn source_failed(&mut self, slot: u32) {
        self.tx_touch.gather_failed += 1;
        if let Some(b) = self.bufs[slot as usize].as_mut() {
            b.ext = None;
        }
        self.abort_slot(slot, ConnError::Aborted);
    }

    /// Takes a header-only connection's unacknowledged bytes into the core's own ring and
    /// drops its source: afterwards the core never reads the caller's memory for it. One
    /// copy of at most the source's capacity; a no-op for other connections.
    pub(crate) fn internalize_tx(&mut self, slot: u32) {
        let Some(b) = self.bufs[slot as usize].as_mut() else {
            return;
        };
        let used = b.tx_used();
        let Some(ext) = b.ext.as_mut() else {
            return;
        };
        let head_pos = ext.head_pos;
        let Some(source) = ext.source.take() else {
            return;
        };
        if used == 0 {
            return;
        }
        if (b.tx.capacity() as usize) < used {
            // The bytes fit the caller's buffer, bounded by its capacity; the ring takes
            // them all (never shrunk while they are unacknowledged).
            b.tx = PayloadRing::unallocated(used.next_power_of_two());
            self.counters.tx_buffer_grown += 1;
        }
        self.tx_pool.attach(&mut b.tx);
        // Straight into the ring, in its (up to two) pieces.
        let (a, z) = b.tx.slices_mut(b.tx_head, used);
        let split = a.len() as u64;
        let mut ok = source.gather(head_pos, a);
        ok = source.gather(head_pos + split, z) && ok;
        if !ok {
            // What the caller could not give goes out as zeros (counted), never as what
            // the ring held before.
            a.fill(0);
            z.fill(0);
        }
        self.tx_touch.staging += used as u64;
        self.tx_touch.gather_failed += u64::from(!ok);
    }
}
