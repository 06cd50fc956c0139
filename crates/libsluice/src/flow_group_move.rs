//! A connect the engine answers with EXDEV (docs/service.md "Several data-path cores"): the
//! socket was bound to a port by hand, and the connection's 4-tuple hashes to another flow
//! group than the core whose slot the socket has. The engine does not say which core, and
//! the library cannot compute the engine's keyed hash, so the socket tries the other cores
//! in turn: it opens a slot on the next core, gives up its old one, binds again as it was
//! bound (with its reuse options), chooses again the options it set (TCP_NODELAY, teardown
//! offload, congestion control), and connects again.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_shm::{Command, Congestion};

use crate::error::Error;
use crate::socket::Socket;

/// A Bind that finds the port still held (the old slot's core has not released it yet:
/// cores run commands in order each, not across cores) is asked again this many times.
const BIND_TRIES: u32 = 100;
/// The pause between those tries.
const BIND_RETRY_PAUSE: Duration = Duration::from_millis(1);

impl Socket {
    /// Connects to `addr` from a slot of another core, after the slot's core answered
    /// EXDEV: `Done`'s `(slot, local port)`, or the failure of the last step tried.
    /// EADDRNOTAVAIL when every core answers EXDEV (no core can own that tuple).
    pub(crate) fn connect_from_another_core(
        &self,
        addr: SocketAddrV4,
    ) -> Result<(u32, u32), Error> {
        let sluice = self.sluice().clone();
        let layout = sluice.layout();
        let cores = layout.queue_cores;
        let first = layout.slot_core(self.slot());
        for i in 1..cores {
            let core = (first + i) % cores;
            let old = self.slot();
            // The new slot first: if there is none, the socket keeps the one it has.
            let (_, slot) = sluice.call_on_core(core, |req| Command::Open { req })?;
            self.take_slot(slot)?;
            let _ = sluice.post(Command::Close {
                slot: old,
                abort: false,
            });
            self.replay_setup()?;
            let r = sluice.call(|req| Command::Connect {
                req,
                slot,
                ip: *addr.ip(),
                port: addr.port(),
            });
            match r {
                Err(Error::Os(libc::EXDEV)) => continue,
                r => return r,
            }
        }
        Err(Error::Os(libc::EADDRNOTAVAIL))
    }

    /// Binds the socket's new slot as the old one was bound, and sets the options the
    /// application chose on it again.
    fn replay_setup(&self) -> Result<(), Error> {
        let sluice = self.sluice();
        let slot = self.slot();
        let bound = self.bound.load(Ordering::Acquire);
        if bound & 1 << 48 != 0 {
            let ip = Ipv4Addr::from((bound >> 16) as u32);
            let port = bound as u16;
            let reuse = self.reuse();
            let mut tries = 0;
            loop {
                let r = sluice.call(|req| Command::Bind {
                    req,
                    slot,
                    ip,
                    port,
                    reuse,
                });
                match r {
                    Err(Error::Os(libc::EADDRINUSE)) if tries < BIND_TRIES => {
                        tries += 1;
                        std::thread::sleep(BIND_RETRY_PAUSE);
                    }
                    r => {
                        r?;
                        break;
                    }
                }
            }
        }
        if self.nodelay() {
            sluice.call(|req| Command::SetNoDelay {
                req,
                slot,
                nodelay: true,
            })?;
        }
        if self.teardown_offload() {
            sluice.call(|req| Command::SetTeardownOffload {
                req,
                slot,
                on: true,
            })?;
        }
        let chosen = self.congestion_chosen.load(Ordering::Relaxed);
        if let Some(algorithm) = Congestion::from_code(chosen) {
            sluice.call(|req| Command::SetCongestion {
                req,
                slot,
                algorithm,
            })?;
        }
        Ok(())
    }
}
