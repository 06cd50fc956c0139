//! Socket options of engine sockets.
//!
//! While a socket is undecided its options go to the kernel socket. When it becomes an
//! engine socket, [`Options::snapshot`] reads them back from the kernel (so whatever the
//! program set, by setsockopt, fcntl, ioctl or SOCK_NONBLOCK, is carried over exactly), the
//! ones the engine acts on are applied to the libsluice socket (O_NONBLOCK, TCP_NODELAY,
//! SO_LINGER, SO_RCVTIMEO/SO_SNDTIMEO, SO_REUSEADDR/PORT for bind) and the rest are
//! remembered so getsockopt returns what was set (SO_KEEPALIVE, buffer sizes, TCP_MAXSEG,
//! TCP_KEEP*, TCP_CORK, IP_TOS, ...); getsockopt returns the reuse options too. Options the
//! engine cannot honour return ENOPROTOOPT and are logged once.

use std::time::Duration;

use libc::{c_int, linger, timeval};
use sluice::{Congestion, Socket};
use sluice_shm::CONGESTION_NAME_MAX;

/// MSS the engine uses on a 1500-byte Ethernet path (IPv4 + TCP with timestamps).
const DEFAULT_MSS: c_int = 1448;
/// `struct tcp_info`'s size in current kernels; the minimal one we fill is zero-padded.
const TCP_INFO_BYTES: usize = 232;
/// Linux's TCP_CLOSE, TCP_ESTABLISHED, TCP_LISTEN, TCP_SYN_SENT (tcpi_state values).
const TCP_ESTABLISHED: u8 = 1;
const TCP_SYN_SENT: u8 = 2;
const TCP_CLOSE: u8 = 7;
const TCP_LISTEN: u8 = 10;

/// The remembered options of one socket (shared by its dups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// SO_REUSEADDR.
    pub reuseaddr: c_int,
    /// SO_REUSEPORT.
    pub reuseport: c_int,
    /// SO_KEEPALIVE.
    pub keepalive: c_int,
    /// SO_RCVBUF as getsockopt reports it.
    pub rcvbuf: c_int,
    /// SO_SNDBUF as getsockopt reports it.
    pub sndbuf: c_int,
    /// SO_RCVTIMEO (None = block forever).
    pub rcvtimeo: Option<Duration>,
    /// SO_SNDTIMEO.
    pub sndtimeo: Option<Duration>,
    /// TCP_KEEPIDLE (s).
    pub keepidle: c_int,
    /// TCP_KEEPINTVL (s).
    pub keepintvl: c_int,
    /// TCP_KEEPCNT.
    pub keepcnt: c_int,
    /// TCP_MAXSEG as set (0: the engine's MSS).
    pub maxseg: c_int,
    /// TCP_CORK (accepted; the engine's Nagle/segmentation decides).
    pub cork: c_int,
    /// TCP_QUICKACK.
    pub quickack: c_int,
    /// TCP_DEFER_ACCEPT (s).
    pub defer_accept: c_int,
    /// TCP_USER_TIMEOUT (ms).
    pub user_timeout: c_int,
    /// TCP_NOTSENT_LOWAT.
    pub notsent_lowat: c_int,
    /// IP_TOS.
    pub tos: c_int,
    /// SO_PRIORITY.
    pub priority: c_int,
    /// SO_OOBINLINE.
    pub oobinline: c_int,
    /// SO_RCVLOWAT.
    pub rcvlowat: c_int,
}

impl Default for Options {
    /// Linux's defaults for a new TCP socket.
    fn default() -> Self {
        Options {
            reuseaddr: 0,
            reuseport: 0,
            keepalive: 0,
            rcvbuf: 131_072,
            sndbuf: 16_384,
            rcvtimeo: None,
            sndtimeo: None,
            keepidle: 7200,
            keepintvl: 75,
            keepcnt: 9,
            maxseg: 0,
            cork: 0,
            quickack: 1,
            defer_accept: 0,
            user_timeout: 0,
            notsent_lowat: -1,
            tos: 0,
            priority: 0,
            oobinline: 0,
            rcvlowat: 1,
        }
    }
}

/// What the kernel socket said about the options libsluice itself applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// O_NONBLOCK.
    pub nonblocking: bool,
    /// TCP_NODELAY.
    pub nodelay: bool,
    /// SO_LINGER.
    pub linger: Option<Duration>,
}

fn duration_of(tv: timeval) -> Option<Duration> {
    if tv.tv_sec <= 0 && tv.tv_usec <= 0 {
        None
    } else {
        Some(
            Duration::from_secs(tv.tv_sec.max(0) as u64)
                + Duration::from_micros(tv.tv_usec.max(0) as u64),
        )
    }
}

fn timeval_of(d: Option<Duration>) -> timeval {
    let d = d.unwrap_or_default();
    timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: d.subsec_micros() as libc::suseconds_t,
    }
}

const ZERO_TV: timeval = timeval {
    tv_sec: 0,
    tv_usec: 0,
};
const NO_LINGER: linger = linger {
    l_onoff: 0,
    l_linger: 0,
};

impl Options {
    /// Reads the options of kernel socket `fd` (the undecided socket becoming an engine one).
    pub fn snapshot(fd: c_int) -> (Options, Applied) {
        use crate::real::{getsockopt_int as get, getsockopt_struct};
        let d = Options::default();
        let sol = libc::SOL_SOCKET;
        let tcp = libc::IPPROTO_TCP;
        let o = Options {
            reuseaddr: get(fd, sol, libc::SO_REUSEADDR).unwrap_or(d.reuseaddr),
            reuseport: get(fd, sol, libc::SO_REUSEPORT).unwrap_or(d.reuseport),
            keepalive: get(fd, sol, libc::SO_KEEPALIVE).unwrap_or(d.keepalive),
            rcvbuf: get(fd, sol, libc::SO_RCVBUF).unwrap_or(d.rcvbuf),
            sndbuf: get(fd, sol, libc::SO_SNDBUF).unwrap_or(d.sndbuf),
            rcvtimeo: getsockopt_struct(fd, sol, libc::SO_RCVTIMEO, ZERO_TV).and_then(duration_of),
            sndtimeo: getsockopt_struct(fd, sol, libc::SO_SNDTIMEO, ZERO_TV).and_then(duration_of),
            keepidle: get(fd, tcp, libc::TCP_KEEPIDLE).unwrap_or(d.keepidle),
            keepintvl: get(fd, tcp, libc::TCP_KEEPINTVL).unwrap_or(d.keepintvl),
            keepcnt: get(fd, tcp, libc::TCP_KEEPCNT).unwrap_or(d.keepcnt),
            // An unconnected kernel socket reports 536 unless the program set a value.
            maxseg: 0,
            cork: get(fd, tcp, libc::TCP_CORK).unwrap_or(d.cork),
            quickack: get(fd, tcp, libc::TCP_QUICKACK).unwrap_or(d.quickack),
            defer_accept: get(fd, tcp, libc::TCP_DEFER_ACCEPT).unwrap_or(d.defer_accept),
            user_timeout: get(fd, tcp, libc::TCP_USER_TIMEOUT).unwrap_or(d.user_timeout),
            notsent_lowat: get(fd, tcp, libc::TCP_NOTSENT_LOWAT).unwrap_or(d.notsent_lowat),
            tos: get(fd, libc::IPPROTO_IP, libc::IP_TOS).unwrap_or(d.tos),
            priority: get(fd, sol, libc::SO_PRIORITY).unwrap_or(d.priority),
            oobinline: get(fd, sol, libc::SO_OOBINLINE).unwrap_or(d.oobinline),
            rcvlowat: get(fd, sol, libc::SO_RCVLOWAT).unwrap_or(d.rcvlowat),
        };
        let flags = crate::real::fcntl_int(fd, libc::F_GETFL, 0);
        let l = getsockopt_struct(fd, sol, libc::SO_LINGER, NO_LINGER).unwrap_or(NO_LINGER);
        let applied = Applied {
            nonblocking: flags >= 0 && flags & libc::O_NONBLOCK != 0,
            nodelay: get(fd, tcp, libc::TCP_NODELAY).unwrap_or(0) != 0,
            linger: (l.l_onoff != 0).then(|| Duration::from_secs(l.l_linger.max(0) as u64)),
        };
        (o, applied)
    }

    /// Applies what libsluice acts on to a new engine socket.
    pub fn apply(&self, applied: &Applied, sock: &Socket) {
        sock.set_nonblocking(applied.nonblocking);
        // Set on the kernel socket while undecided: the engine socket's bind carries them.
        sock.set_reuse(sluice::Reuse {
            addr: self.reuseaddr != 0,
            port: self.reuseport != 0,
        });
        if applied.nodelay {
            if let Err(e) = sock.set_nodelay(true) {
                crate::log_debug!("TCP_NODELAY on a new engine socket: {e}");
            }
        }
        sock.set_linger(applied.linger);
        sock.set_read_timeout(self.rcvtimeo);
        sock.set_write_timeout(self.sndtimeo);
    }

    /// What an accepted connection inherits from its listener (as Linux's clone of the
    /// listening socket does): everything but O_NONBLOCK, which accept4's flags set.
    pub fn inherit(&self, listener: &Socket, accepted: &Socket) {
        accepted.set_linger(listener.linger());
        accepted.set_read_timeout(self.rcvtimeo);
        accepted.set_write_timeout(self.sndtimeo);
    }
}

/// An int option value (Linux accepts 1 to 4 bytes for "int" options only as int).
fn int_of(val: &[u8]) -> Result<c_int, c_int> {
    let b: [u8; 4] = val
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(c_int::from_ne_bytes(b))
}

fn struct_of<T: Copy>(val: &[u8]) -> Result<T, c_int> {
    if val.len() < std::mem::size_of::<T>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the slice holds at least size_of::<T>() bytes and T is plain C data (linger,
    // timeval); read_unaligned copes with any alignment of the caller's buffer.
    Ok(unsafe { std::ptr::read_unaligned(val.as_ptr().cast::<T>()) })
}

/// Copies the bytes of `v` into `out` (truncated as Linux does); returns the length written.
fn put<T: Copy>(out: &mut [u8], v: &T) -> usize {
    // SAFETY: v is a live plain-data value; its bytes are readable for size_of::<T>().
    let bytes = unsafe {
        std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>())
    };
    let n = out.len().min(bytes.len());
    out[..n].copy_from_slice(&bytes[..n]);
    n
}

fn put_int(out: &mut [u8], v: c_int) -> usize {
    put(out, &v)
}

/// setsockopt on an engine socket.
pub fn set(
    sock: &Socket,
    opts: &mut Options,
    level: c_int,
    name: c_int,
    val: &[u8],
) -> Result<(), c_int> {
    match (level, name) {
        // Carried by the socket's bind, as Linux reads them at bind.
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            opts.reuseaddr = (int_of(val)? != 0) as c_int;
            sock.set_reuse_address(opts.reuseaddr != 0);
        }
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => {
            opts.reuseport = (int_of(val)? != 0) as c_int;
            sock.set_reuse_port(opts.reuseport != 0);
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => opts.keepalive = (int_of(val)? != 0) as c_int,
        // Linux doubles the value for its bookkeeping and reports the doubled size.
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            opts.rcvbuf = int_of(val)?.max(1152).saturating_mul(2)
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            opts.sndbuf = int_of(val)?.max(2304).saturating_mul(2)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE) => opts.rcvbuf = int_of(val)?.saturating_mul(2),
        (libc::SOL_SOCKET, libc::SO_SNDBUFFORCE) => opts.sndbuf = int_of(val)?.saturating_mul(2),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let l: linger = struct_of(val)?;
            sock.set_linger(
                (l.l_onoff != 0).then(|| Duration::from_secs(l.l_linger.max(0) as u64)),
            );
        }
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => {
            let tv: timeval = struct_of(val)?;
            if tv.tv_usec < 0 || tv.tv_usec >= 1_000_000 {
                return Err(libc::EDOM);
            }
            opts.rcvtimeo = duration_of(tv);
            sock.set_read_timeout(opts.rcvtimeo);
        }
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => {
            let tv: timeval = struct_of(val)?;
            if tv.tv_usec < 0 || tv.tv_usec >= 1_000_000 {
                return Err(libc::EDOM);
            }
            opts.sndtimeo = duration_of(tv);
            sock.set_write_timeout(opts.sndtimeo);
        }
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => opts.priority = int_of(val)?,
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => opts.oobinline = (int_of(val)? != 0) as c_int,
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => opts.rcvlowat = int_of(val)?.max(1),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            sock.set_nodelay(int_of(val)? != 0).map_err(|e| e.errno())?
        }
        (libc::IPPROTO_TCP, sluice::TCP_TEARDOWN_OFFLOAD) => sock
            .set_teardown_offload(int_of(val)? != 0)
            .map_err(|e| e.errno())?,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let v = int_of(val)?;
            if v != 0 && !(88..=32767).contains(&v) {
                return Err(libc::EINVAL);
            }
            opts.maxseg = v;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => opts.keepidle = positive(int_of(val)?)?,
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => opts.keepintvl = positive(int_of(val)?)?,
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => opts.keepcnt = positive(int_of(val)?)?,
        (libc::IPPROTO_TCP, libc::TCP_CORK) => opts.cork = (int_of(val)? != 0) as c_int,
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK) => opts.quickack = (int_of(val)? != 0) as c_int,
        (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT) => opts.defer_accept = int_of(val)?.max(0),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => opts.user_timeout = int_of(val)?.max(0),
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => opts.notsent_lowat = int_of(val)?,
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => sock
            .set_congestion(congestion_of(val)?)
            .map_err(|e| e.errno())?,
        (libc::IPPROTO_IP, libc::IP_TOS) => opts.tos = int_of(val)? & 0xff,
        _ => {
            crate::log_once!(
                "setsockopt level {level} option {name} is not supported on engine sockets (ENOPROTOOPT)"
            );
            return Err(libc::ENOPROTOOPT);
        }
    }
    Ok(())
}

/// A TCP_CONGESTION value as Linux reads it: at least one byte (EINVAL), at most
/// TCP_CA_NAME_MAX - 1 of them, up to a NUL; a name the engine does not run is ENOENT.
pub fn congestion_of(val: &[u8]) -> Result<Congestion, c_int> {
    if val.is_empty() {
        return Err(libc::EINVAL);
    }
    let name = &val[..val.len().min(CONGESTION_NAME_MAX - 1)];
    Congestion::from_name(name).ok_or(libc::ENOENT)
}

fn positive(v: c_int) -> Result<c_int, c_int> {
    if v < 1 {
        Err(libc::EINVAL)
    } else {
        Ok(v)
    }
}

/// getsockopt on an engine socket: fills `out` (truncated to its length) and returns the
/// length to report.
pub fn get(
    sock: &Socket,
    opts: &Options,
    level: c_int,
    name: c_int,
    out: &mut [u8],
) -> Result<usize, c_int> {
    let b = |v: bool| v as c_int;
    let n = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            put_int(out, sock.take_error().map_or(0, |e| e.errno()))
        }
        (libc::SOL_SOCKET, libc::SO_TYPE) => put_int(out, libc::SOCK_STREAM),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => put_int(out, libc::AF_INET),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => put_int(out, libc::IPPROTO_TCP),
        (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => put_int(out, b(sock.is_listener())),
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => put_int(out, opts.reuseaddr),
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => put_int(out, opts.reuseport),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => put_int(out, opts.keepalive),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => put_int(out, opts.rcvbuf),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => put_int(out, opts.sndbuf),
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => put_int(out, opts.priority),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => put_int(out, opts.oobinline),
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => put_int(out, opts.rcvlowat),
        (libc::SOL_SOCKET, libc::SO_SNDLOWAT) => put_int(out, 1),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let l = sock.linger();
            let v = linger {
                l_onoff: b(l.is_some()),
                l_linger: l.map_or(0, |d| d.as_secs().min(c_int::MAX as u64) as c_int),
            };
            put(out, &v)
        }
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => put(out, &timeval_of(opts.rcvtimeo)),
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => put(out, &timeval_of(opts.sndtimeo)),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => put_int(out, b(sock.nodelay())),
        (libc::IPPROTO_TCP, sluice::TCP_TEARDOWN_OFFLOAD) => {
            put_int(out, b(sock.teardown_offload()))
        }
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => put_int(
            out,
            if opts.maxseg > 0 {
                opts.maxseg.min(DEFAULT_MSS)
            } else {
                DEFAULT_MSS
            },
        ),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => put_int(out, opts.keepidle),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => put_int(out, opts.keepintvl),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => put_int(out, opts.keepcnt),
        (libc::IPPROTO_TCP, libc::TCP_CORK) => put_int(out, opts.cork),
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK) => put_int(out, opts.quickack),
        (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT) => put_int(out, opts.defer_accept),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => put_int(out, opts.user_timeout),
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => put_int(out, opts.notsent_lowat),
        (libc::IPPROTO_TCP, libc::TCP_INFO) => {
            let info = tcp_info(sock);
            let n = out.len().min(info.len());
            out[..n].copy_from_slice(&info[..n]);
            n
        }
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
            // Linux copies the NUL-padded name, at most TCP_CA_NAME_MAX bytes.
            let name = sock.congestion().map_err(|e| e.errno())?.padded_name();
            let n = out.len().min(name.len());
            out[..n].copy_from_slice(&name[..n]);
            n
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => put_int(out, opts.tos),
        _ => {
            crate::log_once!(
                "getsockopt level {level} option {name} is not supported on engine sockets (ENOPROTOOPT)"
            );
            return Err(libc::ENOPROTOOPT);
        }
    };
    Ok(n)
}

/// A minimal `struct tcp_info`: the state, MSS, a nominal cwnd and path MTU; the counters
/// the engine does not export read zero.
pub fn tcp_info(sock: &Socket) -> [u8; TCP_INFO_BYTES] {
    let mut info = [0u8; TCP_INFO_BYTES];
    let r = sock.readiness();
    info[0] = if sock.is_listener() {
        TCP_LISTEN
    } else if sock.is_connected() {
        TCP_ESTABLISHED
    } else if r.error || r.hup {
        TCP_CLOSE
    } else {
        TCP_SYN_SENT
    };
    // Offsets of struct tcp_info (linux/tcp.h): eight u8 fields, then u32s from byte 8.
    let mut put_u32 =
        |offset: usize, v: u32| info[offset..offset + 4].copy_from_slice(&v.to_ne_bytes());
    put_u32(8, 200_000); // tcpi_rto (us): the initial RTO
    put_u32(16, DEFAULT_MSS as u32); // tcpi_snd_mss
    put_u32(20, DEFAULT_MSS as u32); // tcpi_rcv_mss
    put_u32(60, 1500); // tcpi_pmtu
    put_u32(80, 10); // tcpi_snd_cwnd (segments): the initial window
    put_u32(84, DEFAULT_MSS as u32); // tcpi_advmss
    put_u32(88, 3); // tcpi_reordering
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_and_structs_are_read_from_short_or_unaligned_buffers() {
        assert_eq!(int_of(&7i32.to_ne_bytes()), Ok(7));
        assert_eq!(int_of(&[1, 0]), Err(libc::EINVAL));
        let mut buf = [0u8; 1 + std::mem::size_of::<linger>()];
        let l = linger {
            l_onoff: 1,
            l_linger: 5,
        };
        put(&mut buf[1..], &l);
        let back: linger = struct_of(&buf[1..]).unwrap();
        assert_eq!((back.l_onoff, back.l_linger), (1, 5));
        assert_eq!(struct_of::<linger>(&buf[..3]).err(), Some(libc::EINVAL));
    }

    #[test]
    fn output_is_truncated_to_the_callers_length() {
        let mut out = [0u8; 2];
        assert_eq!(put_int(&mut out, 0x0102_0304), 2);
        let mut out = [0u8; 8];
        assert_eq!(put_int(&mut out, 5), 4);
        assert_eq!(&out[..4], &5i32.to_ne_bytes());
    }

    #[test]
    fn congestion_names_are_read_as_linux_reads_them() {
        assert_eq!(congestion_of(b""), Err(libc::EINVAL));
        assert_eq!(congestion_of(b"cubic"), Ok(Congestion::Cubic));
        assert_eq!(congestion_of(b"DCTCP\0\0\0"), Ok(Congestion::Dctcp));
        assert_eq!(congestion_of(b"newreno"), Ok(Congestion::Reno));
        assert_eq!(congestion_of(b"bbr"), Ok(Congestion::Bbr));
        assert_eq!(congestion_of(b"bbr2"), Err(libc::ENOENT));
        assert_eq!(congestion_of(b"\0"), Err(libc::ENOENT));
        // Only the first 15 bytes count: a name padded past them still parses, a longer
        // name is cut and unknown.
        assert_eq!(
            congestion_of(b"timely\0\0\0\0\0\0\0\0\0xyz"),
            Ok(Congestion::Timely)
        );
        assert_eq!(congestion_of(b"cubiccubiccubiccubic"), Err(libc::ENOENT));
    }

    #[test]
    fn timeouts_round_trip_through_timeval() {
        let d = Some(Duration::from_millis(1500));
        assert_eq!(duration_of(timeval_of(d)), d);
        assert_eq!(duration_of(timeval_of(None)), None);
    }
}
