//! The MTP wire format: header ([`MtpRepr`]), its list entries, the Ethernet/IPv4/UDP
//! encapsulation ([`MtpFrameRepr`]), and the in-place edits devices make ([`edit`]).

mod entries;
mod error;
mod frame;
mod header;
mod list;

pub mod edit;
pub mod tcp_bridge;

pub use entries::{Entry, Feedback, FeedbackKind, PacketRun, PathletId, PathletTc};
pub use error::MtpError;
pub use frame::{locate, Encap, Location, MtpFrameRepr};
pub use header::{
    MtpRepr, DEVICE_FEEDBACK_FULL, DEVICE_TRIMMED, FIXED_LEN, FLAG_ACK, FLAG_DATA, MAX_HEADER_LEN,
};
pub use list::List;

/// The header version this implementation speaks.
pub const VERSION: u8 = 1;
/// MTP's IPv4 protocol number: 253, from the range RFC 3692 reserves for experiments.
pub const IP_PROTOCOL: u8 = 253;
/// The UDP destination port of MTP's UDP encapsulation (for networks that pass only UDP).
pub const UDP_PORT: u16 = 9919;
