//! A message's charge on the pathlet windows (mtp.txt 3.1.3): its bytes in flight are
//! charged to the path it is expected to take (the path its own ACKs revealed, else its
//! pinned alternative, else the destination's expected path) and moved to the path an ACK
//! says it actually took; a balancer keeps a message on one path, so its other packets in
//! flight are there too.

use super::out::OutMessage;
use crate::cc::{Cc, DestPaths, PathId};

impl OutMessage {
    /// The path its next packet is expected to take.
    pub fn expected_path(&self, dest: &DestPaths) -> Option<PathId> {
        self.learned
            .or(self.route.as_ref().and_then(|r| r.pinned))
            .or(dest.expected)
    }

    /// Moves its charge to `to` (O(hops), not per packet).
    fn recharge(&mut self, cc: &mut Cc, to: Option<PathId>) {
        if self.charge == to {
            return;
        }
        cc.move_charge(self.charge, to, self.charged_bytes);
        if let Some(t) = to {
            cc.paths.retain(t);
        }
        if let Some(old) = std::mem::replace(&mut self.charge, to) {
            cc.paths.release(old);
        }
    }

    /// Charges a packet of `bytes` leaving now.
    pub fn charge_packet(&mut self, cc: &mut Cc, dest: &mut DestPaths, bytes: u64) {
        let to = self.expected_path(dest);
        self.recharge(cc, to);
        cc.charge(self.charge, dest, bytes);
        self.charged_bytes += bytes;
    }

    /// Releases a packet of `bytes` acknowledged, NACKed or lost.
    pub fn release_packet(&mut self, cc: &mut Cc, dest: &mut DestPaths, bytes: u64) {
        let bytes = bytes.min(self.charged_bytes);
        cc.release(self.charge, dest, bytes);
        self.charged_bytes -= bytes;
    }

    /// An ACK of it revealed the path `actual`: its bytes in flight move there.
    pub fn learn(&mut self, cc: &mut Cc, actual: PathId) {
        if self.learned != Some(actual) {
            cc.paths.retain(actual);
            if let Some(old) = self.learned.replace(actual) {
                cc.paths.release(old);
            }
        }
        self.recharge(cc, Some(actual));
    }

    /// Releases everything it holds (it is done or failed).
    pub fn release_all(&mut self, cc: &mut Cc, dest: &mut DestPaths) {
        cc.release(self.charge, dest, self.charged_bytes);
        self.charged_bytes = 0;
        self.recharge(cc, None);
        if let Some(l) = self.learned.take() {
            cc.paths.release(l);
        }
        if let Some(mut r) = self.route.take() {
            cc.drop_route(&mut r);
        }
    }
}
