//! Why a device could not start or could not move frames.

use std::fmt;
use std::io;

/// Why a device backend could not start, or why a receive/transmit/wait failed.
#[derive(Debug)]
pub enum DeviceError {
    /// The kernel refused for lack of privilege (EPERM/EACCES); `needs` names what to grant.
    PermissionDenied {
        /// What was being done, e.g. "open an AF_PACKET socket".
        op: &'static str,
        /// What the process needs, e.g. "root or CAP_NET_RAW".
        needs: &'static str,
    },
    /// No interface of that name exists in the current network namespace (ENODEV).
    NoSuchInterface {
        /// The interface name asked for.
        name: String,
    },
    /// The interface name is empty, too long (over 15 bytes) or holds a forbidden character.
    InvalidInterfaceName {
        /// The interface name given.
        name: String,
    },
    /// The interface exists but is administratively down or has no carrier (ENETDOWN).
    InterfaceDown {
        /// The interface name.
        name: String,
    },
    /// The interface is a layer-3 device (no Ethernet header), so it cannot carry frames.
    NotEthernet {
        /// The interface name.
        name: String,
        /// The ARPHRD_* hardware type the kernel reported.
        hardware_type: u16,
    },
    /// The named interface is in use and cannot be shared (EBUSY), e.g. a TAP already attached.
    Busy {
        /// The interface name.
        name: String,
    },
    /// An interface of that name exists but is not a TAP device, or was made with other flags (EINVAL from TUNSETIFF).
    NotTap {
        /// The interface name.
        name: String,
    },
    /// The named network namespace does not exist under /var/run/netns.
    NoSuchNamespace {
        /// The namespace name.
        name: String,
    },
    /// /dev/net/tun is missing or the tun driver is not available (ENOENT/ENODEV on open).
    TunUnavailable,
    /// The configuration is unusable; the text says which value and why.
    InvalidConfig(&'static str),
    /// A transmit callback returned a length larger than the slot it was given.
    FrameTooLong {
        /// The length returned.
        len: usize,
        /// The slot size (`max_frame()`).
        max: usize,
    },
    /// A frame asked for segmentation offload (a GSO size) from a device that has none.
    NoSegmentationOffload {
        /// The frame's length.
        len: usize,
    },
    /// The other end of an in-memory pair was dropped.
    Disconnected,
    /// The XDP program could not be attached, or the AF_XDP socket bound, on the interface.
    XdpAttach {
        /// The interface name.
        name: String,
        /// The attach mode asked for ("skb" or "drv").
        mode: &'static str,
        /// The error the kernel (through libxdp) returned.
        source: io::Error,
    },
    /// Zero-copy AF_XDP was required but the interface's driver does not offer it.
    ZeroCopyUnavailable {
        /// The interface name.
        name: String,
    },
    /// The AF_XDP UMEM could not be locked in memory (RLIMIT_MEMLOCK too low, no CAP_IPC_LOCK).
    LockedMemory {
        /// Bytes the UMEM needs locked.
        bytes: u64,
        /// The RLIMIT_MEMLOCK soft limit in bytes, None when unlimited.
        limit: Option<u64>,
    },
    /// Any other operating-system error, with the operation that failed.
    Os {
        /// What was being done.
        op: &'static str,
        /// The error the kernel returned.
        source: io::Error,
    },
}

impl DeviceError {
    /// Maps the last OS error of operation `op` on interface `iface` to a typed error.
    pub(crate) fn last_os(op: &'static str, needs: &'static str, iface: &str) -> DeviceError {
        DeviceError::from_io(op, needs, iface, io::Error::last_os_error())
    }

    /// Maps an I/O error of operation `op` on interface `iface` to a typed error.
    pub(crate) fn from_io(
        op: &'static str,
        needs: &'static str,
        iface: &str,
        source: io::Error,
    ) -> DeviceError {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => DeviceError::PermissionDenied { op, needs },
            Some(libc::ENODEV) | Some(libc::ENXIO) if !iface.is_empty() => {
                DeviceError::NoSuchInterface {
                    name: iface.to_owned(),
                }
            }
            Some(libc::ENETDOWN) if !iface.is_empty() => DeviceError::InterfaceDown {
                name: iface.to_owned(),
            },
            Some(libc::EBUSY) if !iface.is_empty() => DeviceError::Busy {
                name: iface.to_owned(),
            },
            _ => DeviceError::Os { op, source },
        }
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::PermissionDenied { op, needs } => {
                write!(f, "cannot {op}: permission denied (needs {needs})")
            }
            DeviceError::NoSuchInterface { name } => write!(
                f,
                "no such interface {name:?} in this network namespace (is the lab up, and did \
                 the process enter the right namespace?)"
            ),
            DeviceError::InvalidInterfaceName { name } => write!(
                f,
                "invalid interface name {name:?}: must be 1 to 15 bytes without '/', ':', \
                 whitespace or NUL"
            ),
            DeviceError::InterfaceDown { name } => {
                write!(f, "interface {name:?} is down (ip link set {name} up)")
            }
            DeviceError::NotEthernet {
                name,
                hardware_type,
            } => write!(
                f,
                "interface {name:?} is not an Ethernet device (ARPHRD type {hardware_type})"
            ),
            DeviceError::Busy { name } => write!(
                f,
                "interface {name:?} is busy (another process holds it, or it exists with \
                 other flags)"
            ),
            DeviceError::NotTap { name } => write!(
                f,
                "interface {name:?} exists but is not a TAP device made with these flags \
                 (tap, no packet info, vnet header, single queue)"
            ),
            DeviceError::NoSuchNamespace { name } => write!(
                f,
                "no network namespace {name:?} (/var/run/netns/{name} is missing; is the lab up?)"
            ),
            DeviceError::TunUnavailable => f.write_str(
                "/dev/net/tun is unavailable (load the tun module, or create the node with \
                 mknod /dev/net/tun c 10 200)",
            ),
            DeviceError::InvalidConfig(why) => write!(f, "invalid device configuration: {why}"),
            DeviceError::FrameTooLong { len, max } => write!(
                f,
                "transmit callback returned {len} bytes but the slot holds {max} (max_frame)"
            ),
            DeviceError::NoSegmentationOffload { len } => write!(
                f,
                "a {len}-byte frame asked for segmentation offload, which this device lacks"
            ),
            DeviceError::Disconnected => f.write_str("the other end of the device pair is gone"),
            DeviceError::XdpAttach { name, mode, source } => {
                write!(
                    f,
                    "cannot attach XDP in {mode} mode and bind an AF_XDP socket on {name:?}: \
                     {source}"
                )?;
                let hint = match source.raw_os_error() {
                    Some(libc::EEXIST) => {
                        " (another XDP program is attached: remove it with `ip link set dev \
                         IF xdp off`, or pick the mode it was attached in)"
                    }
                    Some(libc::EBUSY) => {
                        " (another AF_XDP socket holds the queue, or an XDP program is attached \
                         in the other mode)"
                    }
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                        " (the driver may not support this XDP mode: try skb)"
                    }
                    Some(libc::ENOENT) => " (is the BPF filesystem mounted at /sys/fs/bpf?)",
                    _ => "",
                };
                f.write_str(hint)
            }
            DeviceError::ZeroCopyUnavailable { name } => write!(
                f,
                "zero-copy AF_XDP is not available on {name:?} (the driver copies; allow copy \
                 mode)"
            ),
            DeviceError::LockedMemory { bytes, limit } => {
                write!(f, "cannot lock the {bytes}-byte AF_XDP UMEM in memory (")?;
                match limit {
                    Some(l) => write!(f, "RLIMIT_MEMLOCK is {l} bytes")?,
                    None => f.write_str("RLIMIT_MEMLOCK is unlimited")?,
                }
                f.write_str("; run as root, grant CAP_IPC_LOCK, or raise it with ulimit -l)")
            }
            DeviceError::Os { op, source } => write!(f, "cannot {op}: {source}"),
        }
    }
}

impl std::error::Error for DeviceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeviceError::Os { source, .. } | DeviceError::XdpAttach { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_maps_to_typed_errors() {
        let e =
            |errno| DeviceError::from_io("x", "root", "eth9", io::Error::from_raw_os_error(errno));
        assert!(matches!(
            e(libc::EPERM),
            DeviceError::PermissionDenied { .. }
        ));
        assert!(matches!(
            e(libc::ENODEV),
            DeviceError::NoSuchInterface { .. }
        ));
        assert!(matches!(
            e(libc::ENETDOWN),
            DeviceError::InterfaceDown { .. }
        ));
        assert!(matches!(e(libc::EBUSY), DeviceError::Busy { .. }));
        assert!(matches!(e(libc::EINVAL), DeviceError::Os { .. }));
        let attach = DeviceError::XdpAttach {
            name: "sl-a".into(),
            mode: "drv",
            source: io::Error::from_raw_os_error(libc::EEXIST),
        };
        let text = attach.to_string();
        assert!(
            text.contains("drv mode") && text.contains("another XDP program"),
            "{text}"
        );
        let locked = DeviceError::LockedMemory {
            bytes: 8 << 20,
            limit: Some(65536),
        };
        assert!(locked.to_string().contains("RLIMIT_MEMLOCK is 65536"));
        let text = e(libc::EPERM).to_string();
        assert!(
            text.contains("permission denied") && text.contains("root"),
            "{text}"
        );
    }
}
