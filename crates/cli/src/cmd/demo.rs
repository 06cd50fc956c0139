//! `sluice demo`: the embedded core on two simulated hosts over an impaired link.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant as WallClock};

use clap::Args;
use hdrhistogram::Histogram;
use sluice_apps::{BulkTransfer, RpcEcho};
use sluice_sim::{Impairment, LinkConfig, Sim};
use sluice_tcp::{Config, Stack};
use sluice_wire::EthernetAddress;

/// Options of the demo.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Bytes to transfer.
    #[arg(long, default_value_t = 64 << 20)]
    bytes: u64,
    /// Link bandwidth in Gbit/s.
    #[arg(long, default_value_t = 10.0)]
    gbps: f64,
    /// One-way propagation delay in microseconds.
    #[arg(long, default_value_t = 10)]
    delay_us: u64,
    /// Random loss probability per frame.
    #[arg(long, default_value_t = 0.001)]
    loss: f64,
    /// Reordering probability per frame.
    #[arg(long, default_value_t = 0.001)]
    reorder: f64,
    /// Duplication probability per frame.
    #[arg(long, default_value_t = 0.001)]
    duplicate: f64,
    /// Corruption probability per frame (caught by checksums).
    #[arg(long, default_value_t = 0.001)]
    corrupt: f64,
    /// RPCs (64 B echo) to time.
    #[arg(long, default_value_t = 10_000)]
    rpcs: usize,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Turn RACK-TLP (RFC 8985) off, to compare: tail losses then wait for the RTO.
    #[arg(long)]
    no_rack_tlp: bool,
}

/// Errors of the demo.
#[derive(Debug)]
pub enum DemoError {
    /// An argument is out of range.
    BadArgument(&'static str),
    /// The core refused the configuration.
    Config(sluice_tcp::ConfigError),
    /// An API call failed.
    Api(sluice_tcp::Error),
    /// The workload did not finish in its virtual-time budget.
    Timeout(&'static str),
    /// The received bytes differ from the sent bytes.
    Mismatch,
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::BadArgument(what) => write!(f, "bad argument: {what}"),
            DemoError::Config(e) => write!(f, "{e}"),
            DemoError::Api(e) => write!(f, "{e}"),
            DemoError::Timeout(what) => {
                write!(f, "{what} did not finish in its virtual-time budget")
            }
            DemoError::Mismatch => f.write_str("received data differs from sent data"),
        }
    }
}

impl From<sluice_tcp::Error> for DemoError {
    fn from(e: sluice_tcp::Error) -> Self {
        DemoError::Api(e)
    }
}

fn host_config(n: u8, rack_tlp: bool) -> Config {
    let mut c = Config::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Addr::new(10, 0, 0, n),
    );
    c.seed = 0x51u64 << 8 | n as u64;
    // Data-center timers: RTO floor 5 ms instead of 200 ms.
    c.rto_min = Duration::from_millis(5);
    c.rack_tlp = rack_tlp;
    c.rx_buffer = 2 << 20;
    c.tx_buffer = 2 << 20;
    c
}

fn check(args: &DemoArgs) -> Result<(), DemoError> {
    for (name, p) in [
        ("loss", args.loss),
        ("reorder", args.reorder),
        ("duplicate", args.duplicate),
        ("corrupt", args.corrupt),
    ] {
        if !(0.0..=0.5).contains(&p) {
            let _ = name;
            return Err(DemoError::BadArgument(
                "probabilities must be within 0..=0.5",
            ));
        }
    }
    if !(0.001..=400.0).contains(&args.gbps) {
        return Err(DemoError::BadArgument("--gbps must be within 0.001..=400"));
    }
    if args.bytes == 0 || args.rpcs == 0 {
        return Err(DemoError::BadArgument(
            "--bytes and --rpcs must be positive",
        ));
    }
    Ok(())
}

/// Runs the demo and prints what happened.
pub fn run(args: &DemoArgs) -> Result<(), DemoError> {
    check(args)?;
    let wall = WallClock::now();
    let mut sim: Sim<Stack> = Sim::new(args.seed);
    let a = sim.add_host(Stack::new(host_config(1, !args.no_rack_tlp)).map_err(DemoError::Config)?);
    let b = sim.add_host(Stack::new(host_config(2, !args.no_rack_tlp)).map_err(DemoError::Config)?);
    let impairment = Impairment::default()
        .with_loss(args.loss)
        .with_reorder(
            args.reorder,
            Duration::from_micros(args.delay_us.max(1) * 2),
        )
        .with_duplicate(args.duplicate)
        .with_corrupt(args.corrupt);
    let link = LinkConfig::new(
        (args.gbps * 1e9) as u64,
        Duration::from_micros(args.delay_us),
    )
    .with_queue(4 << 20)
    .with_impairment(impairment);
    let l = sim.connect(a, b, link).expect("two fresh hosts connect");

    println!(
        "sluice demo: two hosts, each running the sans-IO TCP core, in the deterministic simulator"
    );
    println!(
        "link: {} Gbit/s, {} us one way, loss {} %, reorder {} %, duplicate {} %, corrupt {} %, seed {}",
        args.gbps,
        args.delay_us,
        args.loss * 100.0,
        args.reorder * 100.0,
        args.duplicate * 100.0,
        args.corrupt * 100.0,
        args.seed
    );

    // Bulk transfer host 1 -> host 2.
    let mut bulk = BulkTransfer::new(args.bytes, args.seed);
    bulk.listen(sim.host_mut(b).expect("host"), 5001)?;
    let start = sim.now();
    bulk.connect(
        start,
        sim.host_mut(a).expect("host"),
        Ipv4Addr::new(10, 0, 0, 2),
        5001,
    )?;
    let budget = Duration::from_secs(600);
    let r = sim.run_until(start + budget, |now, hosts| {
        let (s, r) = hosts.get_pair_mut(a, b).expect("two hosts");
        bulk.step(now, s, r);
        bulk.done()
    });
    if r.is_err() {
        return Err(DemoError::Timeout("the bulk transfer"));
    }
    if let Some(e) = bulk.error {
        return Err(DemoError::Api(e));
    }
    if !bulk.verified() {
        return Err(DemoError::Mismatch);
    }
    let took = bulk.finished_at.unwrap_or(sim.now()) - start;
    let gbps = bulk.total as f64 * 8.0 / took.as_secs_f64() / 1e9;
    let digest: String = bulk
        .receiver
        .digest
        .unwrap_or_default()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let sender = sim.host(a).expect("host").counters().clone();
    println!();
    println!("bulk transfer  {} MiB host1 -> host2", bulk.total >> 20);
    println!("  verified     yes, SHA-256 {digest}");
    println!(
        "  virtual time {:.3} ms, goodput {gbps:.2} Gbit/s ({:.0} % of the link)",
        took.as_secs_f64() * 1e3,
        gbps / args.gbps * 100.0
    );
    println!(
        "  recovery     {} fast retransmits ({} SACK recoveries), {} timeouts, {:.2} MiB resent",
        sender.fast_retransmits,
        sender.sack_recoveries,
        sender.timeouts,
        sender.retransmitted_bytes as f64 / (1 << 20) as f64
    );

    // Closed-loop RPC, 64 B requests.
    let before_rpc = (
        sender.clone(),
        sim.host(b).expect("host").counters().clone(),
    );
    let mut rpc = RpcEcho::new(args.rpcs, 64);
    rpc.listen(sim.host_mut(b).expect("host"), 7)?;
    let start = sim.now();
    rpc.connect(
        start,
        sim.host_mut(a).expect("host"),
        Ipv4Addr::new(10, 0, 0, 2),
        7,
    )?;
    let r = sim.run_until(start + budget, |now, hosts| {
        let (c, s) = hosts.get_pair_mut(a, b).expect("two hosts");
        rpc.step(now, c, s);
        rpc.done()
    });
    if r.is_err() {
        return Err(DemoError::Timeout("the RPC run"));
    }
    if let Some(e) = rpc.error {
        return Err(DemoError::Api(e));
    }
    let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    for d in &rpc.latencies {
        let _ = hist.record(d.as_nanos() as u64);
    }
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    println!();
    println!(
        "rpc            {} x 64 B echo, closed loop, one connection",
        rpc.latencies.len()
    );
    println!(
        "  latency      p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
        us(0.5),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1e3
    );
    println!(
        "  (the wire alone: {:.1} us round trip)",
        2.0 * args.delay_us as f64
    );
    let (ka, kb) = (
        sim.host(a).expect("host").counters(),
        sim.host(b).expect("host").counters(),
    );
    let delta =
        |f: fn(&sluice_tcp::Counters) -> u64| f(ka) + f(kb) - f(&before_rpc.0) - f(&before_rpc.1);
    println!(
        "  recovery     {} timeouts, {} fast retransmits, {} tail loss probes ({} repaired a \
         loss), {} RACK losses, {} B resent (RACK-TLP {})",
        delta(|k| k.timeouts),
        delta(|k| k.fast_retransmits),
        delta(|k| k.tlp_probes),
        delta(|k| k.tlp_recoveries),
        delta(|k| k.rack_losses),
        delta(|k| k.retransmitted_bytes),
        if args.no_rack_tlp { "off" } else { "on" }
    );

    let (ab, ba) = sim.link_stats(l);
    let counters_b = sim.host(b).expect("host").counters();
    let counters_a = sim.host(a).expect("host").counters();
    println!();
    println!(
        "link           lost {}, reordered {}, duplicated {}, corrupted {} (caught: {} bad checksums)",
        ab.lost + ba.lost,
        ab.reordered + ba.reordered,
        ab.duplicated + ba.duplicated,
        ab.corrupted + ba.corrupted,
        counters_a.bad_checksum + counters_b.bad_checksum + counters_a.malformed + counters_b.malformed
    );
    let b = sim.host(a).expect("host").datapath_state_bytes();
    let (in_use, _) = sim.host(a).expect("host").cold_pool_usage();
    // Hot: what an in-order segment and an ACK touch (issue 18: at most 128 B). Pooled:
    // held only while out of order, SACKed or recovering (none at the end of the run).
    println!(
        "data-path state per connection: hot {} B (pre {}, protocol {}, post {}); scheduler {}; cold {}; RACK {}; pooled: {} B a row x {} rows ({} held); an idle connection {} B",
        b.hot(),
        b.pre,
        b.protocol,
        b.post,
        b.scheduler,
        b.cold,
        b.rack,
        b.pooled_row,
        b.pool_rows,
        in_use,
        b.idle()
    );
    println!(
        "simulated {:.3} s of virtual time in {:.2} s of wall time",
        sim.now().as_nanos() as f64 / 1e9,
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}
