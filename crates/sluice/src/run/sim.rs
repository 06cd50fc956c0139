//! `--backend sim`: the engine subcommands over the simulator's wire, with simulated peers on
//! the far side of a simulated link, in virtual time (no root, exact for a given seed).
//!
//! - `sluice echo`: simulated RPC clients run closed loops; prints ops and latency percentiles.
//! - `sluice sink`: simulated sources send the deterministic stream; both sides print SHA-256.
//! - `sluice source`: the simulated host at the target address runs a sink and prints what
//!   it received and its SHA-256.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use clap::Args;
use hdrhistogram::Histogram;
use sluice_apps::hex;
use sluice_engine::apps::{EchoApp, SinkApp, SourceApp};
use sluice_engine::{App, Engine};
use sluice_sim::sim_wire::{run_with_peers, PeerRole, SimRun, SimWire, SimWireConfig};
use sluice_sim::{Impairment, LinkConfig, LinkStats};

use super::Attach;

/// The engine's address when `--ip` is not given: the lab's, so commands read alike.
const DEFAULT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Most RPCs all simulated clients together may run (latencies are kept per request).
const MAX_TOTAL_RPCS: u64 = 10_000_000;

/// The simulated link of `--backend sim` (flags are refused with other backends).
#[derive(Args, Debug, Clone, Default)]
pub struct SimLinkArgs {
    /// sim: link rate in Gbit/s, 0.001..=400 [default: 10].
    #[arg(long)]
    sim_gbps: Option<f64>,
    /// sim: one-way propagation delay in microseconds, at most 1000000 [default: 10].
    #[arg(long)]
    sim_delay_us: Option<u64>,
    /// sim: egress queue per link direction in KiB, 2..=65536 [default: 1024].
    #[arg(long)]
    sim_queue_kib: Option<u64>,
    /// sim: probability a frame is lost, each direction, 0..=0.5 [default: 0].
    #[arg(long)]
    sim_loss: Option<f64>,
    /// sim: probability a frame is delivered late (overtaken), 0..=0.5 [default: 0].
    #[arg(long)]
    sim_reorder: Option<f64>,
    /// sim: probability a frame is delivered twice, 0..=0.5 [default: 0].
    #[arg(long)]
    sim_duplicate: Option<f64>,
    /// sim: probability one bit of a frame is flipped, 0..=0.5 [default: 0].
    #[arg(long)]
    sim_corrupt: Option<f64>,
    /// sim: seed of the run (impairments and every simulated core) [default: 1].
    #[arg(long)]
    sim_seed: Option<u64>,
    /// sim: give up after this many seconds of virtual time, 0.001..=86400 [default: 600].
    #[arg(long)]
    sim_budget_s: Option<f64>,
}

/// `sluice echo --backend sim`: the simulated RPC clients.
#[derive(Args, Debug, Clone, Default)]
pub struct SimEchoArgs {
    /// sim: simulated RPC clients, each its own host, 1..=250 [default: 4].
    #[arg(long)]
    sim_clients: Option<u32>,
    /// sim: requests per client [default: 10000].
    #[arg(long)]
    sim_rpcs: Option<u64>,
    /// sim: bytes per request, 1..=65536 [default: 64].
    #[arg(long)]
    sim_rpc_size: Option<usize>,
}

/// `sluice sink --backend sim`: the simulated sources.
#[derive(Args, Debug, Clone, Default)]
pub struct SimSinkArgs {
    /// sim: simulated sources, each its own host sending one stream, 1..=250 [default: --count or 1].
    #[arg(long)]
    sim_clients: Option<u32>,
    /// sim: bytes each source sends, at most 1 TiB [default: 16777216].
    #[arg(long)]
    sim_bytes: Option<u64>,
}

impl SimLinkArgs {
    /// The first flag given, by name (to refuse it with other backends).
    pub(super) fn given(&self) -> Option<&'static str> {
        [
            (self.sim_gbps.is_some(), "--sim-gbps"),
            (self.sim_delay_us.is_some(), "--sim-delay-us"),
            (self.sim_queue_kib.is_some(), "--sim-queue-kib"),
            (self.sim_loss.is_some(), "--sim-loss"),
            (self.sim_reorder.is_some(), "--sim-reorder"),
            (self.sim_duplicate.is_some(), "--sim-duplicate"),
            (self.sim_corrupt.is_some(), "--sim-corrupt"),
            (self.sim_seed.is_some(), "--sim-seed"),
            (self.sim_budget_s.is_some(), "--sim-budget-s"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

impl SimEchoArgs {
    /// The first flag given, by name (to refuse it with other backends).
    pub(super) fn given(&self) -> Option<&'static str> {
        [
            (self.sim_clients.is_some(), "--sim-clients"),
            (self.sim_rpcs.is_some(), "--sim-rpcs"),
            (self.sim_rpc_size.is_some(), "--sim-rpc-size"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

impl SimSinkArgs {
    /// The first flag given, by name (to refuse it with other backends).
    pub(super) fn given(&self) -> Option<&'static str> {
        [
            (self.sim_clients.is_some(), "--sim-clients"),
            (self.sim_bytes.is_some(), "--sim-bytes"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

/// Refuses simulator flags with a real backend.
pub(super) fn refuse_sim_flags(flag: Option<&'static str>) -> Result<(), String> {
    match flag {
        Some(name) => Err(format!("{name} applies only to --backend sim")),
        None => Ok(()),
    }
}

/// Checks a flag's value is within a range, naming the flag otherwise.
fn within<T: PartialOrd + std::fmt::Display>(
    flag: &str,
    value: T,
    lo: T,
    hi: T,
) -> Result<T, String> {
    if value >= lo && value <= hi {
        Ok(value)
    } else {
        Err(format!("{flag}: {value} is not within {lo}..={hi}"))
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
    fn client_ip(&self, i: u32) -> Result<Ipv4Addr, String> {
        if self.prefix > 30 {
            return Err(format!(
                "--ip: a /{} subnet has no room for simulated peers",
                self.prefix
            ));
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
            return Err(format!(
                "--sim-clients: the engine's /{} subnet has no room for {} clients",
                self.prefix,
                i + 1
            ));
        }
        Ok(Ipv4Addr::from(net + n))
    }
}

/// Refuses port 0, which nothing can listen on or connect to.
fn port(flag: &str, port: u16) -> Result<u16, String> {
    if port == 0 {
        return Err(format!("{flag}: port 0 cannot be served or connected to"));
    }
    Ok(port)
}

/// Validates the attachment and link flags for `--backend sim`.
fn setup(attach: &Attach) -> Result<SimSetup, String> {
    if attach.lab {
        return Err(
            "--lab needs a real backend; --backend sim brings its own simulated network".into(),
        );
    }
    if attach.iface.is_some() {
        return Err("--iface makes no sense with --backend sim: the wire is simulated".into());
    }
    if attach.loss != 0.0 || attach.reorder != 0.0 {
        return Err(
            "--loss/--reorder inject faults on a real device; with --backend sim use --sim-loss/--sim-reorder"
                .into(),
        );
    }
    let (ip, prefix) = match &attach.ip {
        Some(spec) => super::parse_ip(spec)?,
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
) -> Result<(Engine<SimWire>, SimRun), String> {
    eprintln!(
        "sluice: engine at {}/{} on the simulated wire ({})",
        setup.ip,
        setup.prefix,
        setup.describe()
    );
    let mut engine = wire.into_engine(setup.ip).map_err(|e| e.to_string())?;
    let run = run_with_peers(&mut engine, app, setup.budget).map_err(|e| e.to_string())?;
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
pub(super) fn echo(attach: &Attach, port: u16, args: &SimEchoArgs) -> Result<(), String> {
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
        return Err(format!(
            "--sim-clients x --sim-rpcs: at most {MAX_TOTAL_RPCS} requests in all"
        ));
    }
    let mut wire = SimWire::new(setup.config.clone()).map_err(|e| e.to_string())?;
    for i in 0..clients {
        let role = PeerRole::Rpc {
            server: SocketAddrV4::new(setup.ip, port),
            count: rpcs,
            size,
        };
        wire.add_peer(setup.client_ip(i)?, role)
            .map_err(|e| e.to_string())?;
    }
    let mut app = EchoApp::new(port);
    app.stop_after = Some(u64::from(clients));
    let (engine, run) = run(&setup, wire, &mut app)?;
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut ops = 0u64;
    for peer in engine.device.peers() {
        if let Some(rpc) = peer.rpc() {
            ops += rpc.completed;
            for l in &rpc.latencies {
                hist.record(l.as_nanos().max(1) as u64)
                    .map_err(|e| e.to_string())?;
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
pub(super) fn sink(
    attach: &Attach,
    port: u16,
    count: Option<usize>,
    args: &SimSinkArgs,
) -> Result<(), String> {
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
            return Err(format!(
                "--count {c} with {clients} simulated client(s): each client makes one connection"
            ));
        }
    }
    let bytes = within(
        "--sim-bytes",
        args.sim_bytes.unwrap_or(16 << 20),
        0,
        1 << 40,
    )?;
    let mut wire = SimWire::new(setup.config.clone()).map_err(|e| e.to_string())?;
    for i in 0..clients {
        // Client i sends stream i + 1: the first matches `sluice source` with its default seed.
        let role = PeerRole::Source {
            server: SocketAddrV4::new(setup.ip, port),
            bytes,
            seed: u64::from(i) + 1,
        };
        wire.add_peer(setup.client_ip(i)?, role)
            .map_err(|e| e.to_string())?;
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
pub(super) fn source(
    attach: &Attach,
    connect: SocketAddrV4,
    bytes: u64,
    seed: u64,
) -> Result<(), String> {
    self::port("--connect", connect.port())?;
    let setup = setup(attach)?;
    if *connect.ip() == setup.ip {
        return Err(format!(
            "--connect {connect}: that is the engine's own address; the simulated sink needs another"
        ));
    }
    let mut wire = SimWire::new(setup.config.clone()).map_err(|e| e.to_string())?;
    wire.add_peer(
        *connect.ip(),
        PeerRole::Sink {
            port: connect.port(),
            connections: 1,
        },
    )
    .map_err(|e| format!("--connect {connect}: {e}"))?;
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
