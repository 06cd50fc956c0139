//! The parameters of the pathlet laws.

/// The parameters of the pathlet congestion-control laws (mtp.txt 3.1.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CcParams {
    /// DCTCP's gain g as a shift: alpha += (F - alpha) >> g_shift (4: g = 1/16).
    pub g_shift: u32,
    /// A pathlet whose alpha is above this is congested (for path exclusion).
    pub exclude_alpha: f64,
    /// The largest window a pathlet may reach, bytes.
    pub max_cwnd: u64,
}

impl Default for CcParams {
    fn default() -> Self {
        CcParams {
            g_shift: 4,
            exclude_alpha: 0.5,
            max_cwnd: 64 << 20,
        }
    }
}
