//! Thin wrappers over the syscalls the backends share: interface ioctls and poll(2).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use sluice_wire::EthernetAddress;

use crate::error::DeviceError;

/// What opening a raw socket or touching interface flags needs.
pub(crate) const NEEDS_NET_RAW: &str = "root or CAP_NET_RAW";
/// What creating or configuring an interface needs.
pub(crate) const NEEDS_NET_ADMIN: &str = "root or CAP_NET_ADMIN";

/// ARPHRD_ETHER: the hardware type of Ethernet-like devices (veth, TAP, bridges, NICs).
const ARPHRD_ETHER: u16 = 1;

/// An interface name checked to fit `ifr_name`: 1 to 15 bytes, no '/', ':', whitespace or NUL.
pub(crate) fn interface_name(name: &str) -> Result<[libc::c_char; libc::IFNAMSIZ], DeviceError> {
    let bytes = name.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() < libc::IFNAMSIZ
        && bytes
            .iter()
            .all(|&b| b != 0 && b != b'/' && b != b':' && !b.is_ascii_whitespace());
    if !valid || name == "." || name == ".." {
        return Err(DeviceError::InvalidInterfaceName {
            name: name.to_owned(),
        });
    }
    let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = b as libc::c_char;
    }
    Ok(out)
}

/// An `ifreq` naming the interface, with a zeroed union.
pub(crate) fn ifreq(name: [libc::c_char; libc::IFNAMSIZ]) -> libc::ifreq {
    // SAFETY: ifreq is a C struct of integers, arrays and a union of plain data and raw
    // pointers; the all-zero bit pattern is a valid value of every field.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_name = name;
    req
}

/// The interface name the kernel wrote back into `req` (TUNSETIFF may complete a pattern).
pub(crate) fn ifreq_name(req: &libc::ifreq) -> String {
    let bytes: Vec<u8> = req
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Runs an `ifreq` ioctl on `fd`.
pub(crate) fn ioctl_ifreq(
    fd: RawFd,
    request: libc::Ioctl,
    req: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: every ifreq ioctl used here reads and writes at most one `ifreq`, and `req`
    // points to a valid, exclusively borrowed `ifreq` for the duration of the call.
    let r = unsafe { libc::ioctl(fd, request, req as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Facts about an interface read through ioctls on a socket of its namespace.
pub(crate) struct InterfaceInfo {
    /// Interface index.
    pub index: i32,
    /// Hardware (MAC) address.
    pub mac: EthernetAddress,
    /// MTU in bytes (IP packet size, without the Ethernet header).
    pub mtu: usize,
    /// Whether the interface is administratively up.
    pub up: bool,
}

/// Reads index, MAC, MTU and flags of `name` through `fd`, and checks it is Ethernet.
pub(crate) fn interface_info(fd: RawFd, name: &str) -> Result<InterfaceInfo, DeviceError> {
    let ifname = interface_name(name)?;
    let fail = |op, e| DeviceError::from_io(op, NEEDS_NET_RAW, name, e);

    let mut req = ifreq(ifname);
    ioctl_ifreq(fd, libc::SIOCGIFINDEX, &mut req).map_err(|e| fail("look up the interface", e))?;
    // SAFETY: SIOCGIFINDEX succeeded, so the kernel wrote the `ifru_ifindex` member.
    let index = unsafe { req.ifr_ifru.ifru_ifindex };

    let mut req = ifreq(ifname);
    ioctl_ifreq(fd, libc::SIOCGIFHWADDR, &mut req)
        .map_err(|e| fail("read the interface's MAC address", e))?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel wrote the `ifru_hwaddr` member.
    let hwaddr = unsafe { req.ifr_ifru.ifru_hwaddr };
    if hwaddr.sa_family != ARPHRD_ETHER {
        return Err(DeviceError::NotEthernet {
            name: name.to_owned(),
            hardware_type: hwaddr.sa_family,
        });
    }
    let mut mac = [0u8; 6];
    for (m, &c) in mac.iter_mut().zip(hwaddr.sa_data.iter()) {
        *m = c as u8;
    }

    let mut req = ifreq(ifname);
    ioctl_ifreq(fd, libc::SIOCGIFMTU, &mut req).map_err(|e| fail("read the interface's MTU", e))?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };

    let flags = interface_flags(fd, name)?;
    Ok(InterfaceInfo {
        index,
        mac: EthernetAddress(mac),
        mtu: usize::try_from(mtu).unwrap_or(0),
        up: flags & libc::IFF_UP as libc::c_short != 0,
    })
}

/// Reads the interface flags (IFF_*) of `name`.
pub(crate) fn interface_flags(fd: RawFd, name: &str) -> Result<libc::c_short, DeviceError> {
    let mut req = ifreq(interface_name(name)?);
    ioctl_ifreq(fd, libc::SIOCGIFFLAGS, &mut req)
        .map_err(|e| DeviceError::from_io("read the interface flags", NEEDS_NET_RAW, name, e))?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote the `ifru_flags` member.
    Ok(unsafe { req.ifr_ifru.ifru_flags })
}

/// Sets IFF_UP on `name` (needs CAP_NET_ADMIN); does nothing if it is already up.
pub(crate) fn set_interface_up(fd: RawFd, name: &str) -> Result<(), DeviceError> {
    let flags = interface_flags(fd, name)?;
    let up = libc::IFF_UP as libc::c_short;
    if flags & up != 0 {
        return Ok(());
    }
    let mut req = ifreq(interface_name(name)?);
    req.ifr_ifru.ifru_flags = flags | up;
    ioctl_ifreq(fd, libc::SIOCSIFFLAGS, &mut req)
        .map_err(|e| DeviceError::from_io("bring the interface up", NEEDS_NET_ADMIN, name, e))
}

/// A datagram socket in the current network namespace, for interface ioctls.
pub(crate) fn control_socket() -> Result<OwnedFd, DeviceError> {
    // SAFETY: socket(2) takes no pointers; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(DeviceError::last_os(
            "open a control socket",
            NEEDS_NET_ADMIN,
            "",
        ));
    }
    // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Converts a wait timeout to ppoll(2)'s timespec (None: no timeout). Nanoseconds, not
/// poll(2)'s milliseconds: the core's next deadline may be microseconds away (a paced
/// connection's next send time), and a wait rounded up to a millisecond stalls it.
pub(crate) fn poll_timespec(timeout: Option<Duration>) -> Option<libc::timespec> {
    timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: t.subsec_nanos().into(),
    })
}

/// ppoll(2) over `pfds` with `timeout`.
fn ppoll(pfds: &mut [libc::pollfd], timeout: Option<Duration>) -> libc::c_int {
    let ts = poll_timespec(timeout);
    let ts_ptr = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is a valid slice of pollfds and its length is passed; `ts_ptr` is null
    // or points to `ts`, which outlives the call; a null signal mask leaves it unchanged.
    unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            ts_ptr,
            core::ptr::null(),
        )
    }
}

/// Sleeps until a device socket `fd` is readable, writable while `frames_waiting` (frames
/// queued that the kernel has not taken), or one of `extra` (a SYN lane, an application's
/// descriptor) is readable, or `timeout`.
pub(crate) fn wait_device(
    fd: RawFd,
    frames_waiting: bool,
    extra: [Option<RawFd>; 2],
    timeout: Option<Duration>,
) -> Result<(), DeviceError> {
    let mut events = libc::POLLIN;
    if frames_waiting {
        events |= libc::POLLOUT;
    }
    match extra {
        [None, e] => poll_fds(fd, events, e, timeout).map(|_| ()),
        [Some(lane), e] => {
            let pollin = |fd: Option<RawFd>| libc::pollfd {
                // A negative descriptor is ignored by poll(2).
                fd: fd.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            };
            let mut pfds = [
                libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                },
                pollin(Some(lane)),
                pollin(e),
            ];
            let r = ppoll(&mut pfds, timeout);
            if r < 0 && errno() != libc::EINTR {
                return Err(DeviceError::Os {
                    op: "wait for the device",
                    source: io::Error::last_os_error(),
                });
            }
            Ok(())
        }
    }
}

/// Blocks in poll(2) until `fd` has one of `events`, `extra` (if any) is readable, or
/// `timeout` passes; EINTR returns early. Returns whether `extra` is readable (or hung up).
pub(crate) fn poll_fds(
    fd: RawFd,
    events: libc::c_short,
    extra: Option<RawFd>,
    timeout: Option<Duration>,
) -> Result<bool, DeviceError> {
    let mut pfds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            // A negative descriptor is ignored by poll(2).
            fd: extra.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let count = if extra.is_some() { 2 } else { 1 };
    let r = ppoll(&mut pfds[..count], timeout);
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(DeviceError::Os {
            op: "wait for the device",
            source: e,
        });
    }
    Ok(extra.is_some() && pfds[1].revents != 0)
}

/// Whether `fd` is readable (or hung up) right now, without blocking.
pub(crate) fn readable_now(fd: RawFd) -> Result<bool, DeviceError> {
    // The first pollfd is ignored (negative descriptor); only `fd` is looked at.
    poll_fds(-1, 0, Some(fd), Some(Duration::ZERO))
}

/// Sets an integer socket option.
pub(crate) fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is one c_int that lives for the duration of the call, and
    // the length passed is its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The errno of the last failed call.
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Frames a packet socket dropped (its buffer full) since the last call; 0 if unknown.
pub(crate) fn packet_drops(fd: RawFd) -> u64 {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `stats` and `len` live for the duration of the call and `len` is the size of
    // the buffer; the kernel writes at most that many bytes (and resets its counters).
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut stats as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if r < 0 {
        0
    } else {
        u64::from(stats.tp_drops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(interface_name("sl-a").is_ok());
        assert!(interface_name("123456789012345").is_ok());
        for bad in [
            "",
            "1234567890123456",
            "a/b",
            "a b",
            "a:b",
            "a\0b",
            ".",
            "..",
        ] {
            assert!(
                matches!(
                    interface_name(bad),
                    Err(DeviceError::InvalidInterfaceName { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn poll_timeouts_keep_microseconds() {
        assert!(poll_timespec(None).is_none());
        let ts = |d| poll_timespec(Some(d)).map(|t| (t.tv_sec, t.tv_nsec));
        assert_eq!(ts(Duration::ZERO), Some((0, 0)));
        assert_eq!(ts(Duration::from_micros(7)), Some((0, 7_000)));
        assert_eq!(ts(Duration::from_millis(1500)), Some((1, 500_000_000)));
        assert_eq!(
            ts(Duration::from_secs(u64::MAX)).map(|t| t.0),
            Some(libc::time_t::MAX)
        );
    }

    #[test]
    fn a_short_wait_is_not_rounded_up_to_a_millisecond() {
        // An empty pipe never becomes readable: the wait ends by its timeout.
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let waits: Vec<Duration> = (0..20)
            .map(|_| {
                let start = std::time::Instant::now();
                poll_fds(fds[0], libc::POLLIN, None, Some(Duration::from_micros(50))).unwrap();
                start.elapsed()
            })
            .collect();
        for fd in fds {
            // SAFETY: both descriptors were opened above and are closed once.
            unsafe { libc::close(fd) };
        }
        // A wait rounded up to poll(2)'s millisecond never ends sooner; one that ends
        // sooner proves the rounding gone (a loaded machine may delay some wake-ups).
        assert!(
            waits.iter().any(|w| *w < Duration::from_micros(900)),
            "{waits:?}"
        );
    }
}
