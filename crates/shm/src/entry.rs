//! What context-queue entries say, and their byte layout (little-endian, fixed offsets).
//!
//! Commands go from an application thread to the engine; completions answer the commands
//! that carry a request id. Decoding never panics: the engine decodes entries written by an
//! application it does not trust, and an entry it cannot decode is an [`EntryError`].

use std::fmt;
use std::net::Ipv4Addr;

use crate::le::{u16_at, u32_at};
use crate::queue::PAYLOAD_BYTES;
use crate::splice::SpliceReport;
use crate::Congestion;

/// An entry's payload.
pub type Payload = [u8; PAYLOAD_BYTES];

/// How a socket is shut down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shut {
    /// No more receiving.
    Read,
    /// No more sending (a FIN follows the queued data).
    Write,
    /// Both.
    Both,
}

/// The port-sharing options a socket set before bind (SO_REUSEADDR, SO_REUSEPORT); the
/// engine shares a port under Linux's rules (docs/service.md, Bind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuse {
    /// SO_REUSEADDR.
    pub addr: bool,
    /// SO_REUSEPORT.
    pub port: bool,
}

impl Reuse {
    /// SO_REUSEADDR's bit in a Bind entry.
    pub const ADDR_BIT: u8 = 1;
    /// SO_REUSEPORT's bit.
    pub const PORT_BIT: u8 = 2;

    /// The entry's byte.
    pub fn bits(self) -> u8 {
        let addr = if self.addr { Reuse::ADDR_BIT } else { 0 };
        let port = if self.port { Reuse::PORT_BIT } else { 0 };
        addr | port
    }

    /// The options of a byte; None if it has a bit this version does not know.
    pub fn from_bits(b: u8) -> Option<Reuse> {
        (b & !(Reuse::ADDR_BIT | Reuse::PORT_BIT) == 0).then_some(Reuse {
            addr: b & Reuse::ADDR_BIT != 0,
            port: b & Reuse::PORT_BIT != 0,
        })
    }
}

/// An application's request to the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Allocate a socket slot; completes with the slot.
    Open {
        /// Request id echoed in the completion.
        req: u32,
    },
    /// Bind a slot to a local address (the engine's address or 0.0.0.0; port 0 picks one
    /// at connect time); completes with the port.
    Bind {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// Local address.
        ip: Ipv4Addr,
        /// Local port.
        port: u16,
        /// SO_REUSEADDR / SO_REUSEPORT as set before bind (a zero byte, as entries of
        /// libraries older than the field carry, is neither).
        reuse: Reuse,
    },
    /// Listen on the slot's bound port.
    Listen {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// Accept-queue length.
        backlog: u32,
    },
    /// Start an active open; completes once the SYN is queued (the handshake's outcome shows
    /// in the socket block), with the local port.
    Connect {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// Peer address.
        ip: Ipv4Addr,
        /// Peer port.
        port: u16,
    },
    /// Doorbell: the slot's TX tail moved.
    Send {
        /// Socket slot.
        slot: u32,
    },
    /// Doorbell: the slot's RX head moved while the engine had more to deliver.
    Consumed {
        /// Socket slot.
        slot: u32,
    },
    /// Shut a direction down.
    Shutdown {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// Which direction.
        how: Shut,
    },
    /// Release the slot: the engine sends what is queued, then closes (or resets at once
    /// with `abort`, as SO_LINGER with a zero timeout asks). No completion.
    Close {
        /// Socket slot.
        slot: u32,
        /// Reset instead of a graceful close.
        abort: bool,
    },
    /// Nagle's algorithm off (TCP_NODELAY) or on.
    SetNoDelay {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// TCP_NODELAY's value.
        nodelay: bool,
    },
    /// Choose the slot's congestion-control algorithm (TCP_CONGESTION): applied to its
    /// connection at once, or remembered until it connects; accepted connections inherit
    /// their listener's. An unknown algorithm code does not decode.
    SetCongestion {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// The algorithm.
        algorithm: Congestion,
    },
    /// Ask for the slot's close to be offloaded to the engine's teardown stage (AccelTCP
    /// 4.2; advisory): applied to its connection, or remembered until it has one; accepted
    /// connections inherit their listener's.
    SetTeardownOffload {
        /// Request id.
        req: u32,
        /// Socket slot.
        slot: u32,
        /// On or off.
        on: bool,
    },
    /// Splice two established connections of this application (acceltcp.txt 4.3): completes
    /// with a splice handle (Done's value) or an errno (docs/service.md, Splice); the
    /// splice's progress comes later as [`Completion::Splice`] entries on the same context.
    Splice {
        /// Request id.
        req: u32,
        /// The first socket slot (its peer's bytes are counted as `a_to_b`).
        slot_a: u32,
        /// The second socket slot.
        slot_b: u32,
    },
    /// Doorbell: work requests were posted to the queue pair's send or receive queue (or
    /// both); the engine takes what it can (docs/verbs.md). No completion.
    QpDoorbell {
        /// The queue pair's number.
        qpn: u32,
    },
    /// Doorbell: messages were posted to the MTP endpoint's send queue or buffers to its
    /// receive queue (or both); the engine takes what it can (docs/mtp.md). No completion.
    MtpDoorbell {
        /// The endpoint.
        ep: u32,
    },
}

/// The engine's answer to a command with a request id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The command succeeded.
    Done {
        /// Request id.
        req: u32,
        /// The slot it concerned.
        slot: u32,
        /// A result: the slot for Open, the port for Bind and Connect, otherwise 0.
        value: u32,
    },
    /// The command failed with a Linux errno.
    Failed {
        /// Request id.
        req: u32,
        /// Linux errno (EADDRINUSE, EINVAL, ...).
        errno: i32,
    },
    /// Unsolicited: a splice this context asked for was installed, failed or ended.
    Splice(SpliceReport),
}

/// Why an entry could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// The opcode is not one this version knows.
    UnknownOpcode(u8),
    /// A field has a value outside its range.
    BadField(&'static str),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::UnknownOpcode(op) => write!(f, "unknown opcode {op}"),
            EntryError::BadField(name) => write!(f, "field {name} out of range"),
        }
    }
}

impl std::error::Error for EntryError {}

/// A command's opcode: the first byte of its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// [`Command::Open`].
    Open,
    /// [`Command::Bind`].
    Bind,
    /// [`Command::Listen`].
    Listen,
    /// [`Command::Connect`].
    Connect,
    /// [`Command::Send`].
    Send,
    /// [`Command::Consumed`].
    Consumed,
    /// [`Command::Shutdown`].
    Shutdown,
    /// [`Command::Close`].
    Close,
    /// [`Command::SetNoDelay`].
    SetNoDelay,
    /// [`Command::SetCongestion`].
    SetCongestion,
    /// [`Command::SetTeardownOffload`].
    SetTeardownOffload,
    /// [`Command::Splice`].
    Splice,
    /// [`Command::QpDoorbell`].
    QpDoorbell,
    /// [`Command::MtpDoorbell`].
    MtpDoorbell,
}

impl Opcode {
    /// The byte that stands for it in an entry.
    pub fn code(self) -> u8 {
        match self {
            Opcode::Open => 1,
            Opcode::Bind => 2,
            Opcode::Listen => 3,
            Opcode::Connect => 4,
            Opcode::Send => 5,
            Opcode::Consumed => 6,
            Opcode::Shutdown => 7,
            Opcode::Close => 8,
            Opcode::SetNoDelay => 9,
            Opcode::SetCongestion => 10,
            Opcode::SetTeardownOffload => 11,
            Opcode::Splice => 12,
            Opcode::QpDoorbell => 13,
            Opcode::MtpDoorbell => 14,
        }
    }

    /// The opcode a byte stands for; None for a byte this version does not know.
    pub fn from_code(code: u8) -> Option<Opcode> {
        Some(match code {
            1 => Opcode::Open,
            2 => Opcode::Bind,
            3 => Opcode::Listen,
            4 => Opcode::Connect,
            5 => Opcode::Send,
            6 => Opcode::Consumed,
            7 => Opcode::Shutdown,
            8 => Opcode::Close,
            9 => Opcode::SetNoDelay,
            10 => Opcode::SetCongestion,
            11 => Opcode::SetTeardownOffload,
            12 => Opcode::Splice,
            13 => Opcode::QpDoorbell,
            14 => Opcode::MtpDoorbell,
            _ => return None,
        })
    }

    /// Whether its commands carry a request id (and so are answered by a completion):
    /// every one but the doorbells (Send, Consumed, QpDoorbell, MtpDoorbell) and Close.
    pub fn carries_req(self) -> bool {
        !matches!(
            self,
            Opcode::Send
                | Opcode::Consumed
                | Opcode::Close
                | Opcode::QpDoorbell
                | Opcode::MtpDoorbell
        )
    }
}

/// Completion opcodes.
mod op {
    pub const DONE: u8 = 1;
    pub const FAILED: u8 = 2;
    pub const SPLICE: u8 = 3;
}

/// Field offsets shared by every entry.
mod at {
    pub const REQ: usize = 4;
    pub const SLOT: usize = 8;
    pub const ARG: usize = 12;
    pub const PORT: usize = 16;
    /// Bind's reuse bits, after the port.
    pub const REUSE: usize = 18;
}

fn put_u32(e: &mut Payload, at: usize, v: u32) {
    e[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_bool(e: &Payload, at: usize) -> Result<bool, EntryError> {
    match e[at] {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(EntryError::BadField("flag")),
    }
}

impl Command {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        let (code, req, slot) = match *self {
            Command::Open { req } => (Opcode::Open, req, 0),
            Command::Bind {
                req,
                slot,
                ip,
                port,
                ..
            }
            | Command::Connect {
                req,
                slot,
                ip,
                port,
            } => {
                e[at::ARG..at::ARG + 4].copy_from_slice(&ip.octets());
                e[at::PORT..at::PORT + 2].copy_from_slice(&port.to_le_bytes());
                let code = if let Command::Bind { reuse, .. } = self {
                    e[at::REUSE] = reuse.bits();
                    Opcode::Bind
                } else {
                    Opcode::Connect
                };
                (code, req, slot)
            }
            Command::Listen { req, slot, backlog } => {
                put_u32(&mut e, at::ARG, backlog);
                (Opcode::Listen, req, slot)
            }
            Command::Send { slot } => (Opcode::Send, 0, slot),
            Command::Consumed { slot } => (Opcode::Consumed, 0, slot),
            Command::Shutdown { req, slot, how } => {
                e[at::ARG] = match how {
                    Shut::Read => 0,
                    Shut::Write => 1,
                    Shut::Both => 2,
                };
                (Opcode::Shutdown, req, slot)
            }
            Command::Close { slot, abort } => {
                e[at::ARG] = abort as u8;
                (Opcode::Close, 0, slot)
            }
            Command::SetNoDelay { req, slot, nodelay } => {
                e[at::ARG] = nodelay as u8;
                (Opcode::SetNoDelay, req, slot)
            }
            Command::SetCongestion {
                req,
                slot,
                algorithm,
            } => {
                e[at::ARG] = algorithm.code();
                (Opcode::SetCongestion, req, slot)
            }
            Command::SetTeardownOffload { req, slot, on } => {
                e[at::ARG] = on as u8;
                (Opcode::SetTeardownOffload, req, slot)
            }
            Command::Splice {
                req,
                slot_a,
                slot_b,
            } => {
                put_u32(&mut e, at::ARG, slot_b);
                (Opcode::Splice, req, slot_a)
            }
            Command::QpDoorbell { qpn } => (Opcode::QpDoorbell, 0, qpn),
            Command::MtpDoorbell { ep } => (Opcode::MtpDoorbell, 0, ep),
        };
        e[0] = code.code();
        put_u32(&mut e, at::REQ, req);
        put_u32(&mut e, at::SLOT, slot);
        e
    }

    /// Reads an entry; slot ranges are the engine's to check.
    pub fn decode(e: &Payload) -> Result<Command, EntryError> {
        let req = u32_at(e, at::REQ);
        let slot = u32_at(e, at::SLOT);
        let ip = || Ipv4Addr::new(e[at::ARG], e[at::ARG + 1], e[at::ARG + 2], e[at::ARG + 3]);
        let Some(code) = Opcode::from_code(e[0]) else {
            return Err(EntryError::UnknownOpcode(e[0]));
        };
        Ok(match code {
            Opcode::Open => Command::Open { req },
            Opcode::Bind => Command::Bind {
                req,
                slot,
                ip: ip(),
                port: u16_at(e, at::PORT),
                reuse: Reuse::from_bits(e[at::REUSE]).ok_or(EntryError::BadField("reuse"))?,
            },
            Opcode::Listen => Command::Listen {
                req,
                slot,
                backlog: u32_at(e, at::ARG),
            },
            Opcode::Connect => Command::Connect {
                req,
                slot,
                ip: ip(),
                port: u16_at(e, at::PORT),
            },
            Opcode::Send => Command::Send { slot },
            Opcode::Consumed => Command::Consumed { slot },
            Opcode::Shutdown => Command::Shutdown {
                req,
                slot,
                how: match e[at::ARG] {
                    0 => Shut::Read,
                    1 => Shut::Write,
                    2 => Shut::Both,
                    _ => return Err(EntryError::BadField("how")),
                },
            },
            Opcode::Close => Command::Close {
                slot,
                abort: get_bool(e, at::ARG)?,
            },
            Opcode::SetNoDelay => Command::SetNoDelay {
                req,
                slot,
                nodelay: get_bool(e, at::ARG)?,
            },
            Opcode::SetCongestion => Command::SetCongestion {
                req,
                slot,
                algorithm: Congestion::from_code(e[at::ARG])
                    .ok_or(EntryError::BadField("algorithm"))?,
            },
            Opcode::SetTeardownOffload => Command::SetTeardownOffload {
                req,
                slot,
                on: get_bool(e, at::ARG)?,
            },
            Opcode::Splice => Command::Splice {
                req,
                slot_a: slot,
                slot_b: u32_at(e, at::ARG),
            },
            Opcode::QpDoorbell => Command::QpDoorbell { qpn: slot },
            Opcode::MtpDoorbell => Command::MtpDoorbell { ep: slot },
        })
    }

    /// Its opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            Command::Open { .. } => Opcode::Open,
            Command::Bind { .. } => Opcode::Bind,
            Command::Listen { .. } => Opcode::Listen,
            Command::Connect { .. } => Opcode::Connect,
            Command::Send { .. } => Opcode::Send,
            Command::Consumed { .. } => Opcode::Consumed,
            Command::Shutdown { .. } => Opcode::Shutdown,
            Command::Close { .. } => Opcode::Close,
            Command::SetNoDelay { .. } => Opcode::SetNoDelay,
            Command::SetCongestion { .. } => Opcode::SetCongestion,
            Command::SetTeardownOffload { .. } => Opcode::SetTeardownOffload,
            Command::Splice { .. } => Opcode::Splice,
            Command::QpDoorbell { .. } => Opcode::QpDoorbell,
            Command::MtpDoorbell { .. } => Opcode::MtpDoorbell,
        }
    }

    /// Its request id; None for the commands that carry none (doorbells and Close).
    pub fn req(&self) -> Option<u32> {
        match *self {
            Command::Open { req }
            | Command::Bind { req, .. }
            | Command::Listen { req, .. }
            | Command::Connect { req, .. }
            | Command::Shutdown { req, .. }
            | Command::SetNoDelay { req, .. }
            | Command::SetCongestion { req, .. }
            | Command::SetTeardownOffload { req, .. }
            | Command::Splice { req, .. } => Some(req),
            Command::Send { .. }
            | Command::Consumed { .. }
            | Command::Close { .. }
            | Command::QpDoorbell { .. }
            | Command::MtpDoorbell { .. } => None,
        }
    }

    /// The slot it names (Splice's first); None for Open (which is given one) and for
    /// the doorbells of queue pairs and MTP endpoints.
    pub fn slot(&self) -> Option<u32> {
        match *self {
            Command::Open { .. } | Command::QpDoorbell { .. } | Command::MtpDoorbell { .. } => None,
            Command::Bind { slot, .. }
            | Command::Listen { slot, .. }
            | Command::Connect { slot, .. }
            | Command::Send { slot }
            | Command::Consumed { slot }
            | Command::Shutdown { slot, .. }
            | Command::Close { slot, .. }
            | Command::SetNoDelay { slot, .. }
            | Command::SetCongestion { slot, .. }
            | Command::SetTeardownOffload { slot, .. }
            | Command::Splice { slot_a: slot, .. } => Some(slot),
        }
    }

    /// The opcode of a raw entry, read without decoding the rest.
    pub fn opcode_of(e: &Payload) -> Result<Opcode, EntryError> {
        Opcode::from_code(e[0]).ok_or(EntryError::UnknownOpcode(e[0]))
    }

    /// The request id of a raw entry that may not decode, for answering it with a failure:
    /// None when its opcode carries none. An unknown opcode is taken to carry one (so that
    /// an application speaking a newer version is answered, not left waiting).
    pub fn req_of(e: &Payload) -> Option<u32> {
        match Command::opcode_of(e) {
            Ok(code) if !code.carries_req() => None,
            _ => Some(u32_at(e, at::REQ)),
        }
    }
}

impl Completion {
    /// The entry's bytes.
    pub fn encode(&self) -> Payload {
        let mut e = [0u8; PAYLOAD_BYTES];
        match *self {
            Completion::Done { req, slot, value } => {
                e[0] = op::DONE;
                put_u32(&mut e, at::REQ, req);
                put_u32(&mut e, at::SLOT, slot);
                put_u32(&mut e, at::ARG, value);
            }
            Completion::Failed { req, errno } => {
                e[0] = op::FAILED;
                put_u32(&mut e, at::REQ, req);
                put_u32(&mut e, at::SLOT, errno as u32);
            }
            Completion::Splice(r) => {
                e[0] = op::SPLICE;
                r.encode_into(&mut e);
            }
        }
        e
    }

    /// Reads an entry.
    pub fn decode(e: &Payload) -> Result<Completion, EntryError> {
        let req = u32_at(e, at::REQ);
        Ok(match e[0] {
            op::DONE => Completion::Done {
                req,
                slot: u32_at(e, at::SLOT),
                value: u32_at(e, at::ARG),
            },
            op::FAILED => Completion::Failed {
                req,
                errno: u32_at(e, at::SLOT) as i32,
            },
            op::SPLICE => Completion::Splice(
                SpliceReport::decode_from(e).ok_or(EntryError::BadField("outcome"))?,
            ),
            other => return Err(EntryError::UnknownOpcode(other)),
        })
    }

    /// The request id this answers; 0 (never a request id) for an unsolicited splice report.
    pub fn req(&self) -> u32 {
        match *self {
            Completion::Done { req, .. } | Completion::Failed { req, .. } => req,
            Completion::Splice(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests;
