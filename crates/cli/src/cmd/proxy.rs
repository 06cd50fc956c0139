//! `sluice proxy`: an L7 proxy on the engine (acceltcp.txt 4.3, 6.3) that splices each
//! client to its backend once the request header is forwarded (or relays the bytes itself
//! with `--no-splice`). SIGTERM or SIGINT stops it; it then prints its counters as
//! `key=value` lines.

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use signal_hook::consts::{SIGINT, SIGTERM};
use sluice_apps::{ProxyConfig, ProxyMode};
use sluice_engine::apps::ProxyApp;
use sluice_engine::setup;

use crate::attach::Attach;
use crate::error::CliError;

/// What the proxy reads before connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Nothing: splice as soon as the backend connection is up.
    Tcp,
    /// The HTTP request header (an X-Forwarded-For line is added).
    Http,
}

/// `sluice proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// Address to listen on (the engine's address; the port is what matters).
    #[arg(long)]
    listen: SocketAddrV4,
    /// Backend servers, comma-separated, used round-robin (`--backend` is the engine's
    /// device backend, as for every engine command).
    #[arg(long, value_delimiter = ',', required = true)]
    upstream: Vec<SocketAddrV4>,
    /// What to read before connecting.
    #[arg(long, value_enum, default_value = "http")]
    mode: Mode,
    /// Relay the bytes in the proxy instead of splicing (the baseline).
    #[arg(long)]
    no_splice: bool,
    #[command(flatten)]
    attach: Attach,
}

/// Runs `sluice proxy` until SIGTERM or SIGINT.
pub fn run(args: &ProxyArgs) -> Result<(), CliError> {
    let opts = args.attach.options()?;
    if *args.listen.ip() != opts.ip && !args.listen.ip().is_unspecified() {
        return Err(CliError::usage(format!(
            "--listen {}: the engine's address is {}",
            args.listen, opts.ip
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|source| CliError::Signal { signal, source })?;
    }
    let cfg = ProxyConfig {
        port: args.listen.port(),
        backends: args.upstream.clone(),
        mode: match args.mode {
            Mode::Tcp => ProxyMode::Tcp,
            Mode::Http => ProxyMode::Http,
        },
        splice: !args.no_splice,
    };
    let mut engine = setup::open(&opts)?;
    engine.linger = args.attach.linger()?;
    let mut app = ProxyApp::new(cfg, stop);
    let ip = opts.ip;
    let splice = !args.no_splice;
    app.on_ready = Some(Box::new(move |port| {
        println!(
            "sluice proxy: ready on {ip}:{port} ({})",
            if splice { "splice" } else { "no-splice" }
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
    }));
    engine.run(&mut app, None)?;
    let p = app.counters();
    let c = engine.stack.counters();
    println!("accepted={}", p.accepted);
    println!("spliced={}", p.spliced);
    println!("splice_failed={}", p.splice_failed);
    println!("relayed_bytes={}", p.relayed_bytes);
    println!("completed={}", p.completed);
    println!("failed={}", p.failed);
    println!("splice_frames_relayed={}", c.splice_frames_relayed);
    println!("splice_bytes_relayed={}", c.splice_bytes_relayed);
    println!("splice_relay_full={}", c.splice_relay_full);
    println!("splice_large_frames={}", c.splice_large_frames);
    println!("splice_large_segmented={}", c.splice_large_segmented);
    for (k, v) in [
        ("splice_out_of_window", c.splice_out_of_window),
        ("splice_reopened", c.splice_reopened),
        ("teardown_offloaded", c.teardown_offloaded),
        ("teardown_refused_state", c.teardown_refused_state),
        ("teardown_refused_full", c.teardown_refused_full),
        ("time_wait_reopened", c.time_wait_reopened),
        ("time_wait_syn_refused", c.time_wait_syn_refused),
        ("conn_table_full", c.conn_table_full),
        ("syn_cookies_sent", c.syn_cookies_sent),
        ("rst_sent", c.rst_sent),
        ("connections", engine.stack.connection_count() as u64),
    ] {
        println!("{k}={v}");
    }
    Ok(())
}
