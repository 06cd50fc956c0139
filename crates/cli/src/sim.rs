//! `--backend sim`: the engine subcommands over the simulator's wire, with simulated peers on
//! the far side of a simulated link, in virtual time (no root, exact for a given seed).
//!
//! - `sluice echo`: simulated RPC clients run closed loops; prints ops and latency percentiles.
//! - `sluice sink`: simulated sources send the deterministic stream; both sides print SHA-256.
//! - `sluice source`: the simulated host at the target address runs a sink and prints what
//!   it received and its SHA-256.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use hdrhistogram::Histogram;
use sluice_apps::hex;
use sluice_engine::apps::{EchoApp, SinkApp, SourceApp};
use sluice_engine::{App, Engine};
use sluice_sim::sim_wire::{run_with_peers, PeerRole, SimRun, SimWire, SimWireConfig};
use sluice_sim::{Impairment, LinkConfig, LinkStats};

use crate::attach::{parse_ip, Attach};
use crate::error::CliError;
use crate::sim_args::{SimEchoArgs, SimSinkArgs};

/// The engine's address when `--ip` is not given: the lab's, so commands read alike.
const DEFAULT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Most RPCs all simulated clients together may run (latencies are kept per request).
const MAX_TOTAL_RPCS: u64 = 10_000_000;

/// Checks a flag's value is within a range, naming the flag otherwise.
fn within<T: PartialOrd + std::fmt::Display>(
    flag: &str,
    value: T,
    lo: T,
    hi: T,
) -> Result<T, CliError> {
    if value >= lo && value <= hi {
        Ok(value)
    } else {
        Err(CliError::Usage(format!(
            "{flag}: {value} is not within {lo}..={hi}"
        )))
    }
}

/// The validated simulated link and run settings.
struct SimSetup {
    ip: Ipv4Addr,
    prefix: u8,
    config: SimWireConfig,
    gbps: f64,
    delay_us: u64,
    budget: Duration,
}

impl SimSetup {
    fn describe(&self) -> String {
        let imp = &self.config.link.impairment;
        format!(
            "{} Gbit/s, {} us one way, loss {} %, reorder {} %, duplicate {} %, corrupt {} %, seed {}",
            self.gbps,
            self.delay_us,
            imp.loss * 100.0,
            imp.reorder * 100.0,
            imp.duplicate * 100.0,
            imp.corrupt * 100.0,
            self.config.seed
        )
    }

    /// The address of simulated client `i` (0-based): the hosts of the engine's subnet from
    /// the first upward, skipping the engine's.
    fn client_ip(&self, i: u32) -> Result<Ipv4Addr, CliError> {
        if self.prefix > 30 {
            return Err(CliError::Usage(format!(
                "--ip: a /{} subnet has no room for simulated peers",
                self.prefix
            )));
        }
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        let net = u32::from(self.ip) & mask;
        let hosts = (!mask).saturating_sub(1); // without network and broadcast addresses
        let engine = u32::from(self.ip) - net;
        let mut n = i + 1;
        if n >= engine {
            n += 1;
        }
        if n == 0 || n > hosts {
            return Err(CliError::Usage(format!(
                "--sim-clients: the engine's /{} subnet has no room for {} clients",
                self.prefix,
                i + 1
            )));
        }
        Ok(Ipv4Addr::from(net + n))
    }
}

/// Refuses port 0, which nothing can listen on or connect to.
fn port(flag: &str, port: u16) -> Result<u16, CliError> {
    if port == 0 {
        return Err(CliError::Usage(format!(
            "{flag}: port 0 cannot be served or connected to"
        )));
    }
    Ok(port)
}

/// Validates the attachment and link flags for `--backend sim`.
fn setup(attach: &Attach) -> Result<SimSetup, CliError> {
    if attach.lab {
        return Err(CliError::usage(
            "--lab needs a real backend; --backend sim brings its own simulated network",
        ));
    }
    if attach.iface.is_some() {
        return Err(CliError::usage(
            "--iface makes no sense with --backend sim: the wire is simulated",
        ));
    }
    if attach.loss != 0.0 || attach.reorder != 0.0 {
        return Err(CliError::usage("--loss/--reorder inject faults on a real device; with --backend sim use --sim-loss/--sim-reorder"));
    }
    let (ip, prefix) = match &attach.ip {
        Some(spec) => parse_ip(spec)?,
        None => (DEFAULT_IP, 24),
    };
    let a = &attach.sim;
    let gbps = within("--sim-gbps", a.sim_gbps.unwrap_or(10.0), 0.001, 400.0)?;
    let delay_us = within("--sim-delay-us", a.sim_delay_us.unwrap_or(10), 0, 1_000_000)?;
    let queue_kib = within("--sim-queue-kib", a.sim_queue_kib.unwrap_or(1024), 2, 65536)?;
    let mut p = [0.0; 4];
    for (slot, (flag, value)) in p.iter_mut().zip([
        ("--sim-loss", a.sim_loss),
        ("--sim-reorder", a.sim_reorder),
        ("--sim-duplicate", a.sim_duplicate),
        ("--sim-corrupt", a.sim_corrupt),
    ]) {
        *slot = within(flag, value.unwrap_or(0.0), 0.0, 0.5)?;
    }
    let budget_s = within(
        "--sim-budget-s",
        a.sim_budget_s.unwrap_or(600.0),
        0.001,
        86400.0,
    )?;
    let delay = Duration::from_micros(delay_us);
    let impairment = Impairment::default()
        .with_loss(p[0])
        // A late frame is held two propagation delays, so the next ones overtake it.
        .with_reorder(p[1], (delay * 2).max(Duration::from_micros(2)))
        .with_duplicate(p[2])
        .with_corrupt(p[3]);
    let link = LinkConfig::new((gbps * 1e9) as u64, delay)
        .with_queue(queue_kib as usize * 1024)
        .with_impairment(impairment);
    Ok(SimSetup {
        ip,
        prefix,
        config: SimWireConfig {
            seed: a.sim_seed.unwrap_or(1),
            link,
            transport: attach.transport.transport()?,
            ..SimWireConfig::default()
        },
        gbps,
        delay_us,
        budget: Duration::from_secs_f64(budget_s),
    })
}

/// Builds the engine over `wire`, runs `app` with the peers, and reports the link.
fn run(
    setup: &SimSetup,
    wire: SimWire,
    app: &mut dyn App,
) -> Result<(Engine<SimWire>, SimRun), CliError> {
    eprintln!(
        "sluice: engine at {}/{} on the simulated wire ({})",
        setup.ip,
        setup.prefix,
        setup.describe()
    );
    let mut engine = wire.into_engine(setup.ip)?;
    let run = run_with_peers(&mut engine, app, setup.budget)?;
    Ok((engine, run))
}

fn link_line(name: &str, s: &LinkStats) -> String {
    format!(
        "sim: link {name}: {} frames delivered, {} lost, {} reordered, {} duplicated, {} corrupted, {} queue drops",
        s.delivered, s.lost, s.reordered, s.duplicated, s.corrupted, s.queue_drops
    )
}

fn print_link(engine: &Engine<SimWire>) {
    let (out, back) = engine.device.link_stats();
    println!("{}", link_line("engine->peers", &out));
    println!("{}", link_line("peers->engine", &back));
}

fn seconds(run: &SimRun) -> f64 {
    run.finished_at.as_nanos() as f64 / 1e9
}

/// `sluice echo --backend sim`.
pub(crate) fn echo(attach: &Attach, port: u16, args: &SimEchoArgs) -> Result<(), CliError> {
    let port = self::port("--port", port)?;
    let setup = setup(attach)?;
    let clients = within("--sim-clients", args.sim_clients.unwrap_or(4), 1, 250)?;
    let rpcs = within(
        "--sim-rpcs",
        args.sim_rpcs.unwrap_or(10_000),
        1,
        MAX_TOTAL_RPCS,
    )?;
    let size = within("--sim-rpc-size", args.sim_rpc_size.unwrap_or(64), 1, 65536)?;
    if u64::from(clients) * rpcs > MAX_TOTAL_RPCS {
        return Err(CliError::Usage(format!(
            "--sim-clients x --sim-rpcs: at most {MAX_TOTAL_RPCS} requests in all"
        )));
    }
    let mut wire = SimWire::new(setup.config.clone())?;
    for i in 0..clients {
        let role = PeerRole::Rpc {
            server: SocketAddrV4::new(setup.ip, port),
            count: rpcs,
            size,
        };
        wire.add_peer(setup.client_ip(i)?, role)?;
    }
    let mut app = EchoApp::new(port);
    app.stop_after = Some(u64::from(clients));
    let (engine, run) = run(&setup, wire, &mut app)?;
    let mut hist = Histogram::<u64>::new(3)?;
    let mut ops = 0u64;
    for peer in engine.device.peers() {
        if let Some(rpc) = peer.rpc() {
            ops += rpc.completed;
            for l in &rpc.latencies {
                hist.record(l.as_nanos().max(1) as u64)?;
            }
        }
    }
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    println!(
        "sim: {clients} clients x {rpcs} RPCs of {size} B echoed and verified: {ops} ops in {:.3} ms of virtual time, {:.0} ops/s",
        seconds(&run) * 1e3,
        ops as f64 / seconds(&run).max(1e-9)
    );
    println!(
        "sim: latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
        us(0.5),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1e3
    );
    print_link(&engine);
    Ok(())
}

/// `sluice sink --backend sim`.
pub(crate) fn sink(
    attach: &Attach,
    port: u16,
    count: Option<usize>,
    args: &SimSinkArgs,
) -> Result<(), CliError> {
    let port = self::port("--port", port)?;
    let setup = setup(attach)?;
    let default_clients = count.map_or(1, |c| c.clamp(1, 250) as u32);
    let clients = within(
        "--sim-clients",
        args.sim_clients.unwrap_or(default_clients),
        1,
        250,
    )?;
    if let Some(c) = count {
        if c != clients as usize {
            return Err(CliError::Usage(format!(
                "--count {c} with {clients} simulated client(s): each client makes one connection"
            )));
        }
    }
    let bytes = within(
        "--sim-bytes",
        args.sim_bytes.unwrap_or(16 << 20),
        0,
        1 << 40,
    )?;
    let mut wire = SimWire::new(setup.config.clone())?;
    for i in 0..clients {
        // Client i sends stream i + 1: the first matches `sluice source` with its default seed.
        let role = PeerRole::Source {
            server: SocketAddrV4::new(setup.ip, port),
            bytes,
            seed: u64::from(i) + 1,
        };
        wire.add_peer(setup.client_ip(i)?, role)?;
    }
    let mut app = SinkApp::new(port);
    app.stop_after = Some(clients as usize);
    let (engine, run) = run(&setup, wire, &mut app)?;
    for peer in engine.device.peers() {
        if let Some((sent, digest)) = peer.sent() {
            println!("sim {}: sent {sent} bytes sha256 {}", peer.ip, hex(&digest));
        }
    }
    let total = bytes * u64::from(clients);
    println!(
        "sim: {total} bytes in {:.3} ms of virtual time, {:.2} Gbit/s",
        seconds(&run) * 1e3,
        total as f64 * 8.0 / seconds(&run).max(1e-9) / 1e9
    );
    print_link(&engine);
    Ok(())
}

/// `sluice source --backend sim`.
pub(crate) fn source(
    attach: &Attach,
    connect: SocketAddrV4,
    bytes: u64,
    seed: u64,
) -> Result<(), CliError> {
    self::port("--connect", connect.port())?;
    let setup = setup(attach)?;
    if *connect.ip() == setup.ip {
        return Err(CliError::Usage(format!(
            "--connect {connect}: that is the engine's own address; the simulated sink needs another"
        )));
    }
    let mut wire = SimWire::new(setup.config.clone())?;
    wire.add_peer(
        *connect.ip(),
        PeerRole::Sink {
            port: connect.port(),
            connections: 1,
        },
    )
    .map_err(|e| CliError::usage(format!("--connect {connect}: {e}")))?;
    let mut app = SourceApp::new(*connect.ip(), connect.port(), bytes, seed);
    let (engine, run) = run(&setup, wire, &mut app)?;
    for peer in engine.device.peers() {
        for report in peer.sink_reports() {
            if let Some(digest) = report.sha256 {
                println!(
                    "sim {}: received {} bytes sha256 {}",
                    peer.ip,
                    report.bytes,
                    hex(&digest)
                );
            }
        }
    }
    println!(
        "sim: {bytes} bytes in {:.3} ms of virtual time, {:.2} Gbit/s",
        seconds(&run) * 1e3,
        bytes as f64 * 8.0 / seconds(&run).max(1e-9) / 1e9
    );
    print_link(&engine);
    Ok(())
}
