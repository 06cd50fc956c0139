//! `sluice kserve` (hidden): the Linux kernel server of the bench: echo, sink or source on
//! kernel sockets, a thread per connection. It prints "ready" once listening and exits when
//! its standard input closes, so it never outlives the bench that started it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::thread;

use clap::{Args, ValueEnum};

use crate::error::BenchError;

/// What the server does with each connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Service {
    /// Sends back what it receives.
    Echo,
    /// Reads and discards.
    Sink,
    /// Sends until the client goes away.
    Source,
}

/// `sluice kserve`.
#[derive(Args, Debug, Clone)]
pub struct KserveArgs {
    /// The service.
    #[arg(value_enum)]
    pub service: Service,
    /// Port to listen on (all addresses).
    #[arg(long)]
    pub port: u16,
}

/// Runs `sluice kserve` until standard input closes.
pub fn run(args: &KserveArgs) -> Result<(), BenchError> {
    let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, args.port);
    let listener =
        TcpListener::bind(addr).map_err(|e| BenchError::io(format!("bind {addr}"), e))?;
    println!("ready");
    std::io::stdout()
        .flush()
        .map_err(|e| BenchError::io("stdout", e))?;
    // The parent holds our stdin; when it exits or closes it, so do we.
    thread::spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    let service = args.service;
    for conn in listener.incoming() {
        let Ok(s) = conn else { continue };
        thread::spawn(move || serve(service, s));
    }
    Ok(())
}

/// Serves one connection until the client closes it or it fails.
fn serve(service: Service, mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 256 * 1024];
    match service {
        Service::Echo => {
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
        Service::Sink => while matches!(s.read(&mut buf), Ok(n) if n > 0) {},
        Service::Source => {
            buf.fill(crate::measure::SOURCE_BYTE);
            while s.write_all(&buf).is_ok() {}
        }
    }
}
