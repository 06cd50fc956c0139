//! RDMA for Sluice (issue 16). So far only the RoCEv2 wire format: the InfiniBand transport
//! headers (BTH, RETH, AETH, ImmDt) over UDP port 4791 with their invariant CRC, for the
//! reliable-connected opcodes. The transport (queue pairs) is to come.
#![forbid(unsafe_code)]

pub mod wire;
