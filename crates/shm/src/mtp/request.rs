//! The MTP control path: registering message memory and binding endpoints, asked over the
//! control socket as [`crate::control::Request::Mtp`] and answered with
//! [`crate::control::Reply::Mtp`]. The engine checks every value: an application names only
//! its own memory and endpoints (ENOENT otherwise).

use serde::{Deserialize, Serialize};

/// An MTP control request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MtpRequest {
    /// Registers memory messages are sent from and received into. Descriptor: a memfd
    /// sealed against shrinking whose bytes from `file_offset` are the application's
    /// `addr .. addr + len`, mapped shared. [`MtpReply::Mem`].
    RegMem {
        /// First byte, as the application addresses it.
        addr: u64,
        /// Length.
        len: u64,
        /// Where `addr` lies in the memfd.
        file_offset: u64,
    },
    /// Unregisters memory (EBUSY while an endpoint's posted buffer or unsent entry names
    /// it is not checked: entries naming it later complete with `BadMemory`).
    DeregMem {
        /// The memory's key.
        key: u32,
    },
    /// Binds an MTP port (0: an ephemeral one) with a send, a receive and a completion
    /// queue. Optional descriptor, non-blocking (EINVAL otherwise): an eventfd to which the
    /// engine writes `token` when the armed completion queue gets an entry. [`MtpReply::Bound`].
    Bind {
        /// The port.
        port: u16,
        /// What the engine writes on an event (1 for an eventfd).
        #[serde(default = "one")]
        token: u64,
    },
    /// Unbinds an endpoint: unacknowledged messages fail (`Unbound`), posted buffers
    /// complete flushed, its queues are free.
    Unbind {
        /// The endpoint.
        ep: u32,
    },
}

fn one() -> u64 {
    1
}

/// The engine's answer to an [`MtpRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MtpReply {
    /// Registered memory: entries name it by `key`.
    Mem {
        /// The key.
        key: u32,
    },
    /// A bound endpoint and its verbs queues.
    Bound {
        /// Its handle (doorbells name it).
        ep: u32,
        /// Its port.
        port: u16,
        /// The send queue (application to engine).
        sq: u32,
        /// The receive queue of posted buffers (application to engine).
        rq: u32,
        /// The completion queue (engine to application).
        cq: u32,
        /// The longest message the engine sends or receives.
        max_message: u32,
    },
    /// Done (dereg, unbind).
    Done,
    /// Refused with a Linux errno (EINVAL, ENOMEM, ENOENT, EADDRINUSE, ...).
    Failed {
        /// The errno.
        errno: i32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_survive_json() {
        for r in [
            MtpRequest::RegMem {
                addr: 0x7f00_0000_0000,
                len: 1 << 20,
                file_offset: 4096,
            },
            MtpRequest::Bind {
                port: 9000,
                token: 7,
            },
            MtpRequest::Unbind { ep: 3 },
            MtpRequest::DeregMem { key: 2 },
        ] {
            let s = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<MtpRequest>(&s).unwrap(), r);
        }
        let b = MtpReply::Bound {
            ep: 1,
            port: 9000,
            sq: 0,
            rq: 1,
            cq: 2,
            max_message: 1 << 22,
        };
        let s = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<MtpReply>(&s).unwrap(), b);
        // The token defaults to 1 (an eventfd's increment).
        let bind: MtpRequest = serde_json::from_str(r#"{"Bind":{"port":5}}"#).unwrap();
        assert_eq!(bind, MtpRequest::Bind { port: 5, token: 1 });
    }
}
