//! The SYN lane of an AF_PACKET device: connection requests (TCP SYN without ACK) arrive
//! on a socket of their own, with a small buffer, and everything else on the main socket.
//!
//! Under a SYN flood a single socket's queue fills with SYNs: frames of established
//! connections (and the ACKs that complete handshakes) wait behind tens of thousands of
//! them, or are dropped with them when it overflows. With the lane the kernel sorts each
//! frame into one of the two queues by a classic BPF filter (SO_ATTACH_FILTER, set before
//! the socket is bound, so no frame slips past it); overflow drops only SYNs, a SYN waits
//! behind at most a small buffer's worth, and the device reads at most a burst of SYNs per
//! burst of other frames, so the flood's share of the engine is bounded.

use std::io;
use std::os::fd::RawFd;

/// Which frames a socket's filter keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaneFilter {
    /// IPv4 TCP segments with SYN set and ACK clear (unfragmented), whole.
    SynsOnly,
    /// Every other frame, whole.
    AllButSyns,
}

// Classic BPF opcodes (linux/filter.h).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_B_IND: u16 = 0x50;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const AND_K: u16 = 0x54;
const RET_K: u16 = 0x06;

/// The filter program: `syn` bytes of a SYN frame are kept, `other` bytes of any other
/// (0 drops, u32::MAX keeps the whole frame).
fn program(syn: u32, other: u32) -> [libc::sock_filter; 12] {
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    [
        op(LD_H_ABS, 0, 0, 12),      // 0: EtherType
        op(JEQ_K, 0, 9, 0x0800),     // 1: IPv4, else other (11)
        op(LD_B_ABS, 0, 0, 23),      // 2: IP protocol
        op(JEQ_K, 0, 7, 6),          // 3: TCP, else other
        op(LD_H_ABS, 0, 0, 20),      // 4: flags and fragment offset
        op(JSET_K, 5, 0, 0x1fff),    // 5: a non-first fragment has no TCP header: other
        op(LDX_B_MSH, 0, 0, 14),     // 6: X = IP header length
        op(LD_B_IND, 0, 0, 14 + 13), // 7: TCP flags
        op(AND_K, 0, 0, 0x12),       // 8: SYN | ACK
        op(JEQ_K, 0, 1, 0x02),       // 9: SYN alone
        op(RET_K, 0, 0, syn),        // 10
        op(RET_K, 0, 0, other),      // 11
    ]
}

/// Attaches `which` filter to the packet socket `fd`.
pub(crate) fn attach(fd: RawFd, which: LaneFilter) -> io::Result<()> {
    let mut code = match which {
        LaneFilter::SynsOnly => program(u32::MAX, 0),
        LaneFilter::AllButSyns => program(0, u32::MAX),
    };
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_mut_ptr(),
    };
    // SAFETY: `prog` points at `code`, a valid program of `len` instructions; both live for
    // the duration of the call, and the kernel copies the program.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program over `frame` as the kernel would (the subset of opcodes it uses).
    fn run(prog: &[libc::sock_filter], frame: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let byte = |i: usize| frame.get(i).copied().map(u32::from);
        loop {
            let i = prog[pc];
            let k = i.k as usize;
            pc += 1;
            match i.code {
                LD_H_ABS => match (byte(k), byte(k + 1)) {
                    (Some(h), Some(l)) => a = h << 8 | l,
                    _ => return 0,
                },
                LD_B_ABS => match byte(k) {
                    Some(b) => a = b,
                    None => return 0,
                },
                LD_B_IND => match byte(x as usize + k) {
                    Some(b) => a = b,
                    None => return 0,
                },
                LDX_B_MSH => match byte(k) {
                    Some(b) => x = 4 * (b & 0xf),
                    None => return 0,
                },
                AND_K => a &= i.k,
                JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                RET_K => return i.k,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    fn tcp_frame(flags: u8, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = 6;
        f[14 + 20 + 13] = flags;
        f
    }

    #[test]
    fn syns_alone_go_to_the_lane_and_everything_else_to_the_main_socket() {
        let lane = program(u32::MAX, 0);
        let main = program(0, u32::MAX);
        let syn = tcp_frame(0x02, 0x4000);
        let syn_ack = tcp_frame(0x12, 0);
        let ack = tcp_frame(0x10, 0);
        let fragment = tcp_frame(0x02, 0x0010);
        let mut arp = tcp_frame(0x02, 0);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mut udp = tcp_frame(0x02, 0);
        udp[23] = 17;
        assert_eq!(run(&lane, &syn), u32::MAX);
        assert_eq!(run(&main, &syn), 0);
        for other in [&syn_ack, &ack, &fragment, &arp, &udp] {
            assert_eq!(run(&lane, other), 0);
            assert_eq!(run(&main, other), u32::MAX);
        }
        // IP options move the TCP header: the IHL is followed.
        let mut with_options = vec![0u8; 14 + 24 + 20];
        with_options[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        with_options[14] = 0x46;
        with_options[23] = 6;
        with_options[14 + 24 + 13] = 0x02;
        assert_eq!(run(&lane, &with_options), u32::MAX);
        assert_eq!(run(&lane, &with_options[..30]), 0, "truncated");
    }
}
