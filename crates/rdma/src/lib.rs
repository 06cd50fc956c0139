//! Sluice's RDMA transport (issue 16; flexins.txt 3.1): verbs objects and, in later slices,
//! reliable-connected queue pairs over the RoCEv2 wire format, in the sans-IO style of the
//! TCP core: given frames, work requests and the time, it returns frames and completions.

#![forbid(unsafe_code)]

pub mod verbs;
