//! The virtio-net header (`struct virtio_net_hdr`) that carries offload metadata with each
//! frame through a TAP with IFF_VNET_HDR or a packet socket with PACKET_VNET_HDR: whether
//! the checksum is partial (and where it starts), and the GSO type and segment size of a
//! large segment. Little-endian (TUNSETVNETLE on TAP; native on the little-endian hosts we
//! run on for packet sockets).

use crate::checksum::RxEvidence;
use crate::TxFrame;

/// Length of `struct virtio_net_hdr` (packet sockets); TAP's v1 header adds `num_buffers`.
pub const HDR_LEN: usize = 10;
/// Flag: the checksum from `csum_start` must be completed (CHECKSUM_PARTIAL).
pub const F_NEEDS_CSUM: u8 = 1;
/// Flag: the checksum was already verified.
pub const F_DATA_VALID: u8 = 2;
/// GSO type: not a large segment.
pub const GSO_NONE: u8 = 0;
/// GSO type: IPv4 TCP (TSO4).
pub const GSO_TCPV4: u8 = 1;
/// Offset of the checksum field in a TCP header.
const TCP_CSUM_OFFSET: u16 = 16;
/// Ethernet header length without a VLAN tag.
const ETH_HLEN: usize = 14;

/// A decoded virtio-net header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioNetHdr {
    /// F_NEEDS_CSUM, F_DATA_VALID.
    pub flags: u8,
    /// GSO_NONE, GSO_TCPV4, ...
    pub gso_type: u8,
    /// Length of the headers ahead of the payload (Ethernet + IP + TCP).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where checksumming starts, from the start of the frame.
    pub csum_start: u16,
    /// Where the checksum is stored, from `csum_start`.
    pub csum_offset: u16,
}

impl VirtioNetHdr {
    /// Decodes the first [`HDR_LEN`] bytes of `b`, or None if it is shorter.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..HDR_LEN)?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VirtioNetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// Encodes into the first [`HDR_LEN`] bytes of `b` (which must hold them).
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }

    /// What the header says about the frame's transport checksum.
    pub fn rx_evidence(&self) -> RxEvidence {
        if self.flags & F_NEEDS_CSUM != 0 {
            RxEvidence::PartialAt {
                start: usize::from(self.csum_start),
                offset: usize::from(self.csum_offset),
            }
        } else if self.flags & F_DATA_VALID != 0 {
            RxEvidence::Valid
        } else {
            RxEvidence::None
        }
    }

    /// The header asking the kernel for what `tx` needs on the Ethernet/IPv4/TCP `frame`:
    /// checksum completion and segmentation. None if the frame is not IPv4 TCP with the
    /// headers in reach (the caller drops it and counts).
    pub fn for_tx(frame: &[u8], tx: &TxFrame) -> Option<Self> {
        if !tx.csum_partial && tx.gso_size == 0 {
            return Some(VirtioNetHdr::default());
        }
        // EtherType IPv4, protocol TCP.
        if frame.get(12..14)? != [0x08, 0x00] || *frame.get(ETH_HLEN + 9)? != 6 {
            return None;
        }
        let ihl = usize::from(frame.get(ETH_HLEN)? & 0x0F) * 4;
        let tcp_at = ETH_HLEN + ihl;
        let thl = usize::from(frame.get(tcp_at + 12)? >> 4) * 4;
        let hdr_len = u16::try_from(tcp_at + thl).ok()?;
        if usize::from(hdr_len) > frame.len() || ihl < 20 || thl < 20 {
            return None;
        }
        let mut h = VirtioNetHdr {
            hdr_len,
            ..VirtioNetHdr::default()
        };
        if tx.csum_partial {
            h.flags = F_NEEDS_CSUM;
            h.csum_start = tcp_at as u16;
            h.csum_offset = TCP_CSUM_OFFSET;
        }
        if tx.gso_size != 0 {
            h.gso_type = GSO_TCPV4;
            h.gso_size = tx.gso_size;
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_frame(len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12] = 0x08;
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[34 + 12] = 8 << 4; // 32-byte TCP header (timestamps)
        f
    }

    #[test]
    fn tx_header_for_large_partial_segment() {
        let f = tcp_frame(66 + 10_000);
        let tx = TxFrame {
            len: f.len(),
            gso_size: 1448,
            csum_partial: true,
        };
        let h = VirtioNetHdr::for_tx(&f, &tx).unwrap();
        assert_eq!(
            h,
            VirtioNetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_TCPV4,
                hdr_len: 66,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16
            }
        );
        let mut b = [0u8; HDR_LEN];
        h.emit(&mut b);
        assert_eq!(VirtioNetHdr::parse(&b), Some(h));
    }

    #[test]
    fn plain_frames_get_a_zero_header_and_non_tcp_is_refused() {
        let f = tcp_frame(100);
        assert_eq!(
            VirtioNetHdr::for_tx(&f, &TxFrame::plain(100)),
            Some(VirtioNetHdr::default())
        );
        let mut arp = tcp_frame(60);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let partial = TxFrame {
            len: 60,
            gso_size: 0,
            csum_partial: true,
        };
        assert_eq!(VirtioNetHdr::for_tx(&arp, &partial), None);
        assert_eq!(VirtioNetHdr::for_tx(&f[..20], &partial), None);
        assert_eq!(VirtioNetHdr::parse(&[0u8; 9]), None);
    }
}
