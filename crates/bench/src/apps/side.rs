//! Which TCP stack serves a program: the engine in sluice-a or Linux in sluice-k.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use sluice_lab::{ENGINE_IP, KERNEL_IP, NS_ENGINE, NS_KERNEL};

/// Where a server program runs; its clients always run in sluice-b.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// On the Sluice engine: `sluice run --lab -- PROGRAM` in sluice-a, reached at 10.77.0.1.
    Engine,
    /// On Linux kernel TCP: `ip netns exec sluice-k PROGRAM`, reached at 10.77.0.3.
    Linux,
}

impl Side {
    /// Both sides, engine first (the order of the bench table's columns).
    pub const ALL: [Side; 2] = [Side::Engine, Side::Linux];

    /// The address clients in sluice-b reach the program at.
    pub fn server_ip(self) -> Ipv4Addr {
        match self {
            Side::Engine => ENGINE_IP,
            Side::Linux => KERNEL_IP,
        }
    }

    /// The program's listening address on this side.
    pub fn server_addr(self, port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.server_ip(), port))
    }

    /// The namespace the program runs in.
    pub fn namespace(self) -> &'static str {
        match self {
            Side::Engine => NS_ENGINE,
            Side::Linux => NS_KERNEL,
        }
    }

    /// "engine" or "linux".
    pub fn name(self) -> &'static str {
        match self {
            Side::Engine => "engine",
            Side::Linux => "linux",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
