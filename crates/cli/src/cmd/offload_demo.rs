//! `sluice offload-demo server|client`: the programmable offloading engine's two examples
//! between two hosts of the lab (scripts/offload-demo.sh): the server is an RDMA stack with
//! the offload engine and its handlers (batched READ, list traversal) on one interface; the
//! client runs `sluice experiment flexins-offload`'s measurements against it over the wire
//! and prints the same table, the handler against its own one-READ-per-item baseline.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sluice_device::{AfPacket, AfPacketConfig, Device, TxFrame};
use sluice_experiments::flexins_offload::{
    measure_against, server_memory, start_offload, REGION_LEN,
};
use sluice_offload::host::{Host, Link};
use sluice_rdma::qp::VecMemory;
use sluice_rdma::stack::PeerAddr;
use sluice_wire::EthernetAddress;

/// `sluice offload-demo`.
#[derive(Args, Debug)]
pub struct OffloadDemoArgs {
    /// Which side.
    #[command(subcommand)]
    pub role: Role,
}

/// The two sides.
#[derive(Subcommand, Debug)]
pub enum Role {
    /// Serve OFFLOAD requests (and the client's READs) until the time is up.
    Server(Side),
    /// Measure both examples against the server and print the table.
    Client(Side),
}

/// One side's addresses.
#[derive(Args, Debug)]
pub struct Side {
    /// The interface (AF_PACKET), e.g. sl-e in sluice-e.
    #[arg(long)]
    pub iface: String,
    /// This side's address.
    #[arg(long)]
    pub ip: Ipv4Addr,
    /// The other side's address.
    #[arg(long)]
    pub peer_ip: Ipv4Addr,
    /// Seed of the server's list (both sides must agree).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The --quick sizes (client).
    #[arg(long)]
    pub quick: bool,
    /// Seconds the server serves.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
}

/// IBV_MTU_1024: the lab's veths carry 1500-byte frames.
const PATH_MTU: u8 = 3;

/// Frames over an AF_PACKET socket.
struct DeviceLink {
    dev: AfPacket,
    rx: VecDeque<Vec<u8>>,
}

impl Link for DeviceLink {
    fn send(&mut self, frame: &[u8]) {
        let _ = self.dev.transmit_with(&mut |buf| {
            let out = buf.get_mut(..frame.len())?;
            out.copy_from_slice(frame);
            Some(TxFrame::plain(frame.len()))
        });
        let _ = self.dev.flush();
    }

    fn recv(&mut self, buf: &mut Vec<u8>) -> bool {
        if self.rx.is_empty() {
            let rx = &mut self.rx;
            let _ = self.dev.receive(&mut |f, _| {
                // RoCEv2 only (UDP 4791): the lab's other chatter is not ours.
                if rx.len() < 1024 && f.len() > 42 && f[36..38] == [0x12, 0xb7] {
                    rx.push_back(f.to_vec());
                }
            });
        }
        match self.rx.pop_front() {
            Some(f) => {
                *buf = f;
                true
            }
            None => false,
        }
    }
}

/// Runs one side.
pub fn run(args: &OffloadDemoArgs) -> Result<(), String> {
    let side = match &args.role {
        Role::Server(s) | Role::Client(s) => s,
    };
    let dev = AfPacket::open(&side.iface, AfPacketConfig::default()).map_err(|e| e.to_string())?;
    let me = PeerAddr {
        ip: side.ip,
        mac: dev.mac(),
    };
    // The peer's MAC is not known (no ARP in the RDMA stack): broadcast, which the lab's
    // bridge floods to the other namespace; the stacks take frames by IP and QPN.
    let peer = PeerAddr {
        ip: side.peer_ip,
        mac: EthernetAddress([0xff; 6]),
    };
    let link = DeviceLink {
        dev,
        rx: VecDeque::new(),
    };
    let e = |e: &dyn std::fmt::Display| e.to_string();
    match &args.role {
        Role::Server(_) => {
            let (mem, _, _) = server_memory(side.seed);
            let mut server =
                Host::with_addr(me, mem.clone(), REGION_LEN, link).map_err(|x| e(&x))?;
            server.path_mtu = PATH_MTU;
            // Both sides make their first CQ, MR and QP alike: the peer's QPN is ours.
            server.connect(server.qpn, peer).map_err(|x| e(&x))?;
            start_offload(&mut server, &mem).map_err(|x| e(&x))?;
            println!(
                "offload-demo server: {} on {}, serving for {} s",
                side.ip, side.iface, side.seconds
            );
            let end = Instant::now() + Duration::from_secs(side.seconds);
            while Instant::now() < end {
                if !server.poll() {
                    std::thread::yield_now();
                }
            }
            let c = server.stack.offload_counters();
            println!(
                "offload-demo server: {} offload requests, {} responses ({} errors), {} unknown opcodes",
                c.requests, c.responses, c.error_responses, c.unknown_opcode
            );
            Ok(())
        }
        Role::Client(_) => {
            let mem = VecMemory(vec![0; REGION_LEN as usize]);
            let mut client = Host::with_addr(me, mem, REGION_LEN, link).map_err(|x| e(&x))?;
            client.path_mtu = PATH_MTU;
            client.connect(client.qpn, peer).map_err(|x| e(&x))?;
            // The server registered its region first too: its rkey is our key.
            let rkey = client.key;
            let report = measure_against(&mut client, rkey, side.seed, side.quick, 1024)
                .map_err(|x| e(&x))?;
            print!("{}", report.render());
            Ok(())
        }
    }
}
