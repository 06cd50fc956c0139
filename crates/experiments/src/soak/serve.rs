//! `sluice soak-server` (hidden): one side's soak server as its own process, so that the
//! engine's memory is the engine's alone. `sluice soak` starts it, reads "ready" from its
//! standard output, and stops it by closing its standard input.
//!
//! - engine: the engine in sluice-a (AF_PACKET, the lab's address, the core's defaults)
//!   running [`SoakServerApp`];
//! - linux: kernel sockets, a thread per connection, in the namespace it was started in
//!   (`ip netns exec sluice-k`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use clap::{Args, ValueEnum};
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_lab::presets::LabPreset;

use super::engine_server::SoakServerApp;
use super::protocol::{mismatches, pattern_fill, Header, Mode, Verdict, HEADER_LEN, PORT};
use crate::error::ExperimentError;

/// The engine's device backend: AF_PACKET, as the lab experiments run it.
pub const BACKEND: Backend = Backend::AfPacket;

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ServerSide {
    /// The engine, in sluice-a.
    Engine,
    /// Linux kernel TCP, in this process's namespace.
    Linux,
}

/// `sluice soak-server`.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Which server.
    #[arg(value_enum)]
    pub side: ServerSide,
    /// Port to serve.
    #[arg(long, default_value_t = PORT)]
    pub port: u16,
}

/// Runs a soak server until its standard input closes.
pub fn serve(args: &ServeArgs) -> Result<(), ExperimentError> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    match args.side {
        ServerSide::Engine => {
            let fail = |e: &dyn std::fmt::Display| ExperimentError::Workload(e.to_string());
            let mut engine = setup::open(&EngineOptions::lab(BACKEND)).map_err(|e| fail(&e))?;
            // Poll briefly, then sleep on the device: the clients share the two cores.
            engine.idle_before_sleep = Duration::from_micros(100);
            let mut app = SoakServerApp::new(args.port, stop);
            // The first poll listens: only then is the server ready for clients.
            engine.poll_once(&mut app).map_err(|e| fail(&e))?;
            ready(move || flag.store(true, Ordering::Relaxed))?;
            engine.run(&mut app, None).map_err(|e| fail(&e))?;
            eprintln!(
                "sluice soak-server: engine stopped; {} connections finished, {} failed; \
                 core counters: {:?}",
                app.finished,
                app.failed,
                engine.stack.counters()
            );
            Ok(())
        }
        ServerSide::Linux => {
            let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, args.port);
            let listener = TcpListener::bind(addr)
                .map_err(|e| ExperimentError::Io(format!("bind {addr}"), e))?;
            ready(|| std::process::exit(0))?;
            for conn in listener.incoming() {
                let Ok(s) = conn else { continue };
                thread::spawn(move || {
                    // A failed connection is the client's to count.
                    let _ = serve_kernel(s);
                });
            }
            Ok(())
        }
    }
}

/// Prints "ready" and runs `on_eof` once standard input closes (the parent went away or
/// asked us to stop).
fn ready(on_eof: impl FnOnce() + Send + 'static) -> Result<(), ExperimentError> {
    println!("ready");
    std::io::stdout()
        .flush()
        .map_err(|e| ExperimentError::Io("stdout".into(), e))?;
    thread::spawn(move || {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        on_eof();
    });
    Ok(())
}

/// Serves one connection on kernel sockets.
fn serve_kernel(mut s: TcpStream) -> std::io::Result<()> {
    let _ = s.set_nodelay(true);
    let mut header = [0; HEADER_LEN];
    s.read_exact(&mut header)?;
    let h = Header::decode(&header)
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "not a soak header"))?;
    let mut buf = vec![0u8; 64 * 1024];
    match h.mode {
        Mode::Echo => loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            s.write_all(&buf[..n])?;
        },
        Mode::Upload => {
            let (mut offset, mut mismatched) = (0u64, 0u64);
            let mut scratch = Vec::new();
            while offset < h.len {
                let want = (h.len - offset).min(buf.len() as u64) as usize;
                let n = s.read(&mut buf[..want])?;
                if n == 0 {
                    return Err(ErrorKind::UnexpectedEof.into());
                }
                mismatched += mismatches(h.seed, offset, &buf[..n], &mut scratch);
                offset += n as u64;
            }
            let v = Verdict {
                matched: h.len - mismatched,
                mismatched,
            };
            s.write_all(&v.encode())?;
        }
        Mode::Download => {
            let mut offset = 0u64;
            while offset < h.len {
                let n = (h.len - offset).min(buf.len() as u64) as usize;
                pattern_fill(h.seed, offset, &mut buf[..n]);
                s.write_all(&buf[..n])?;
                offset += n as u64;
            }
        }
    }
    // Wait for the client's close.
    while s.read(&mut buf)? > 0 {}
    Ok(())
}
