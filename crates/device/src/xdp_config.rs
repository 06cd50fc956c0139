//! The AF_XDP backend's configuration: attach mode, zero-copy, UMEM sizes. Compiled with or
//! without the `af_xdp` feature, so that options naming an XDP mode need not build libxdp.

use std::time::Duration;

use crate::error::DeviceError;

/// Largest batch accepted.
const MAX_BATCH: usize = 1024;
/// Most frames of either kind (RX or TX) in one UMEM.
const MAX_FRAMES: u32 = 1 << 16;

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic XDP, after the kernel built the skb (XDP_FLAGS_SKB_MODE): works on any device.
    Skb,
    /// Native XDP in the driver (XDP_FLAGS_DRV_MODE): veth supports it; needed for zero-copy.
    Drv,
}

impl XdpMode {
    /// The name used on the command line and in messages.
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Skb => "skb",
            XdpMode::Drv => "drv",
        }
    }
}

impl std::str::FromStr for XdpMode {
    type Err = ParseXdpModeError;
    fn from_str(s: &str) -> Result<Self, ParseXdpModeError> {
        match s {
            "skb" => Ok(XdpMode::Skb),
            "drv" => Ok(XdpMode::Drv),
            other => Err(ParseXdpModeError {
                given: other.to_owned(),
            }),
        }
    }
}

/// An XDP mode name that names no [`XdpMode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseXdpModeError {
    /// The name given.
    pub given: String,
}

impl std::fmt::Display for ParseXdpModeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown XDP mode {:?} (skb, drv)", self.given)
    }
}

impl std::error::Error for ParseXdpModeError {}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the socket may share UMEM pages with the driver instead of copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Always copy (XDP_COPY).
    Off,
    /// Zero-copy where the driver supports it, copying otherwise (the kernel decides).
    Auto,
    /// Zero-copy or fail to open (XDP_ZEROCOPY); needs [`XdpMode::Drv`].
    Required,
}

/// Configuration of an AF_XDP device (`AfXdp`, with the `af_xdp` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Where the XDP program runs.
    pub mode: XdpMode,
    /// Whether to ask for zero-copy.
    pub zero_copy: ZeroCopy,
    /// The interface queue the socket binds to (veth in the lab has one, queue 0).
    pub queue_id: u32,
    /// Frames received or queued for transmission per burst (1 to 1024).
    pub batch: usize,
    /// UMEM frames for receiving: a power of two, at least `batch`, at most 65 536.
    pub rx_frames: u32,
    /// UMEM frames for transmitting: a power of two, at least `batch`, at most 65 536.
    pub tx_frames: u32,
    /// Bytes per UMEM frame: 2048 or 4096 (256 of them are the kernel's XDP headroom).
    pub frame_size: u32,
    /// How long to retry binding while the queue is busy (a socket closed just before
    /// leaves it busy for about a second).
    pub bind_timeout: Duration,
    /// Treat a TCP/UDP checksum field equal to the pseudo-header sum as left partial by a
    /// local sender (veth: AF_XDP carries no checksum metadata) and complete it. Turn off on
    /// a physical NIC: there, a frame corrupted on the wire into that value (1 in 65 536)
    /// would be accepted.
    pub detect_partial_checksums: bool,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            mode: XdpMode::Drv,
            zero_copy: ZeroCopy::Auto,
            queue_id: 0,
            batch: 64,
            rx_frames: 2048,
            tx_frames: 2048,
            frame_size: 2048,
            bind_timeout: Duration::from_secs(2),
            detect_partial_checksums: true,
        }
    }
}

impl AfXdpConfig {
    /// Checks every value before any syscall.
    pub fn validate(&self) -> Result<(), DeviceError> {
        if self.batch == 0 || self.batch > MAX_BATCH {
            return Err(DeviceError::InvalidConfig("batch must be 1 to 1024 frames"));
        }
        for frames in [self.rx_frames, self.tx_frames] {
            if !frames.is_power_of_two() || frames > MAX_FRAMES || (frames as usize) < self.batch {
                return Err(DeviceError::InvalidConfig(
                    "rx_frames and tx_frames must be powers of two, at least batch, at most 65536",
                ));
            }
        }
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(DeviceError::InvalidConfig(
                "frame_size must be 2048 or 4096 bytes",
            ));
        }
        if self.mode == XdpMode::Skb && self.zero_copy == ZeroCopy::Required {
            return Err(DeviceError::InvalidConfig(
                "zero-copy needs DRV mode (generic XDP always copies)",
            ));
        }
        Ok(())
    }

    /// The UMEM frame count (RX and TX frames together).
    #[cfg(feature = "af_xdp")]
    pub(crate) fn umem_frames(&self) -> u32 {
        self.rx_frames + self.tx_frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI prints the refusal as clap's "invalid value" reason: the wording is kept.
    #[test]
    fn an_unknown_xdp_mode_is_refused_by_name() {
        let e = "nope".parse::<XdpMode>().unwrap_err();
        assert_eq!(
            e,
            ParseXdpModeError {
                given: "nope".into()
            }
        );
        assert_eq!(e.to_string(), "unknown XDP mode \"nope\" (skb, drv)");
    }
}
