//! `sluice proxy`: an L7 proxy on the engine (acceltcp.txt 4.3, 6.3) that splices each
//! client to its backend once the request header is forwarded (or relays the bytes itself
//! with `--no-splice`). In HTTP mode it routes by Host and path prefix (`[[route]]` tables
//! of `--config FILE.toml`, proxy_file.rs). SIGTERM or SIGINT stops it; it then prints its
//! counters as `key=value` lines.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM};
use sluice_apps::{ProxyConfig, ProxyMode};
use sluice_engine::apps::ProxyApp;
use sluice_engine::setup;

use crate::attach::Attach;
use crate::cmd::proxy_file::{Mode, ProxyFile};
use crate::error::CliError;

/// `sluice proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// Address to listen on (the engine's address; the port is what matters); required
    /// here or as `listen` in the config file.
    #[arg(long)]
    listen: Option<SocketAddrV4>,
    /// The default pool: backend servers, comma-separated, used round-robin when no route
    /// matches (`--backend` is the engine's device backend, as for every engine command).
    #[arg(long, value_delimiter = ',')]
    upstream: Vec<SocketAddrV4>,
    /// What to read before connecting [default: http].
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Relay the bytes in the proxy instead of splicing (the baseline).
    #[arg(long)]
    no_splice: bool,
    /// Relay this many bytes of a session in the proxy before splicing it (k, m suffixes;
    /// e.g. 64k: one-request sessions stay relayed, large ones are spliced, as HAProxy's
    /// splice-auto) [default: 0, splice at once after the header].
    #[arg(long, value_name = "BYTES")]
    splice_after: Option<String>,
    /// A TOML file with listen, mode, splice, upstream and `[[route]]` tables (host,
    /// path_prefix, backends); flags given override its keys.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    #[command(flatten)]
    attach: Attach,
}

/// The listen address and the proxy's configuration: the flags over the config file's
/// keys, checked (a bad route is refused before the engine opens).
fn settings(args: &ProxyArgs) -> Result<(SocketAddrV4, ProxyConfig), CliError> {
    let file = match &args.config {
        Some(path) => ProxyFile::load(path)?,
        None => ProxyFile::default(),
    };
    let origin = match &args.config {
        Some(path) => format!("{}: ", path.display()),
        None => String::new(),
    };
    let listen = args
        .listen
        .or(file.listen)
        .ok_or_else(|| CliError::usage("--listen (or listen in --config) is required"))?;
    let backends = if args.upstream.is_empty() {
        file.upstream.unwrap_or_default()
    } else {
        args.upstream.clone()
    };
    let cfg = ProxyConfig {
        port: listen.port(),
        backends,
        routes: file.routes.into_iter().map(Into::into).collect(),
        mode: match args.mode.or(file.mode).unwrap_or(Mode::Http) {
            Mode::Tcp => ProxyMode::Tcp,
            Mode::Http => ProxyMode::Http,
        },
        splice: !args.no_splice && file.splice.unwrap_or(true),
        splice_after: match args.splice_after.as_deref() {
            Some(v) => sluice_switch::parse_size("--splice-after", v)
                .map_err(|e| CliError::usage(e.to_string()))? as u64,
            None => file.splice_after.unwrap_or(0),
        },
    };
    cfg.router()
        .map_err(|e| CliError::usage(format!("{origin}{e}")))?;
    Ok((listen, cfg))
}

/// Runs `sluice proxy` until SIGTERM or SIGINT.
pub fn run(args: &ProxyArgs) -> Result<(), CliError> {
    let (listen, cfg) = settings(args)?;
    args.attach.cores.single_core(
        "sluice proxy",
        "its splices join connections that two flow groups may own",
    )?;
    let opts = args.attach.options()?;
    if *listen.ip() != opts.ip && !listen.ip().is_unspecified() {
        return Err(CliError::usage(format!(
            "--listen {listen}: the engine's address is {}",
            opts.ip
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|source| CliError::Signal { signal, source })?;
    }
    let splice = match (cfg.splice, cfg.splice_after) {
        (false, _) => "no-splice".to_string(),
        (true, 0) => "splice".to_string(),
        (true, n) => format!("splice after {n} bytes"),
    };
    let mut engine = setup::open(&opts)?;
    engine.linger = args.attach.linger()?;
    let mut app = ProxyApp::new(cfg, stop);
    let ip = opts.ip;
    app.on_ready = Some(Box::new(move |port| {
        println!("sluice proxy: ready on {ip}:{port} ({})", splice);
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
    println!("routed={}", p.routed);
    println!("routed_default={}", p.routed_default);
    println!("unrouted={}", p.unrouted);
    println!("bad_request={}", p.bad_request);
    println!("header_too_long={}", p.header_too_long);
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use clap::Parser;
    use sluice_apps::Route;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        proxy: ProxyArgs,
    }

    const FILE: &str = r#"
listen = "10.77.0.1:8090"
mode = "http"
splice = false
upstream = ["10.77.0.2:8080", "10.77.0.3:8080"]

[[route]]
host = "API.example"
backends = ["10.77.0.2:9001", "10.77.0.2:9002"]

[[route]]
path_prefix = "/static/"
backends = ["10.77.0.3:9003"]
"#;

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    /// `text` written to a file of its own, then the flags with `--config` it.
    fn with_file(
        name: &str,
        text: &str,
        flags: &[&str],
    ) -> Result<(SocketAddrV4, ProxyConfig), String> {
        let path =
            std::env::temp_dir().join(format!("sluice-proxy-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let path_str = path.to_str().unwrap().to_string();
        let mut argv = vec!["proxy", "--config", &path_str];
        argv.extend_from_slice(flags);
        let r = Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())
            .and_then(|cli| settings(&cli.proxy).map_err(|e| e.to_string()));
        let _ = std::fs::remove_file(&path);
        r
    }

    #[test]
    fn a_config_file_gives_listen_mode_splice_pools_and_routes() {
        let (listen, cfg) = with_file("full", FILE, &[]).unwrap();
        assert_eq!(listen, addr("10.77.0.1:8090"));
        assert_eq!(cfg.port, 8090);
        assert_eq!(cfg.mode, ProxyMode::Http);
        assert!(!cfg.splice);
        assert_eq!(
            cfg.backends,
            [addr("10.77.0.2:8080"), addr("10.77.0.3:8080")]
        );
        assert_eq!(
            cfg.routes,
            [
                Route {
                    host: Some("API.example".into()),
                    path_prefix: None,
                    backends: vec![addr("10.77.0.2:9001"), addr("10.77.0.2:9002")],
                },
                Route {
                    host: None,
                    path_prefix: Some("/static/".into()),
                    backends: vec![addr("10.77.0.3:9003")],
                },
            ]
        );
    }

    #[test]
    fn flags_override_the_file() {
        let (listen, cfg) = with_file(
            "override",
            &FILE.replace("splice = false", "splice = true"),
            &[
                "--listen",
                "0.0.0.0:9000",
                "--upstream",
                "10.0.0.9:1",
                "--no-splice",
            ],
        )
        .unwrap();
        assert_eq!(listen, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9000));
        assert_eq!(cfg.port, 9000);
        assert_eq!(cfg.backends, [addr("10.0.0.9:1")]);
        assert!(!cfg.splice, "--no-splice beats splice = true");
        assert_eq!(cfg.routes.len(), 2, "routes come from the file");
        // Routes need the header: TCP mode from a flag is refused with them.
        let e = with_file("tcp", FILE, &["--mode", "tcp"]).unwrap_err();
        assert!(e.contains("need mode http"), "{e}");
    }

    #[test]
    fn flags_alone_still_work_and_listen_is_required() {
        let cli = Cli::try_parse_from([
            "proxy",
            "--listen",
            "10.77.0.1:80",
            "--upstream",
            "10.77.0.2:8080,10.77.0.3:8080",
        ])
        .unwrap();
        let (_, cfg) = settings(&cli.proxy).unwrap();
        assert_eq!(cfg.backends.len(), 2);
        assert!(cfg.splice && cfg.routes.is_empty() && cfg.mode == ProxyMode::Http);
        let cli = Cli::try_parse_from(["proxy", "--upstream", "10.77.0.2:8080"]).unwrap();
        let e = settings(&cli.proxy).unwrap_err().to_string();
        assert!(e.contains("--listen"), "{e}");
        let cli = Cli::try_parse_from(["proxy", "--listen", "10.77.0.1:80"]).unwrap();
        let e = settings(&cli.proxy).unwrap_err().to_string();
        assert!(e.contains("no upstream"), "{e}");
    }

    #[test]
    fn bad_keys_and_values_are_refused_naming_the_key() {
        let cases = [
            ("unknown", "listen = \"10.77.0.1:80\"\nbackend = [\"10.0.0.1:1\"]\n", "backend"),
            ("addr", "listen = \"10.77.0.1\"\nupstream = [\"10.0.0.1:1\"]\n", "listen"),
            ("mode", "listen = \"10.77.0.1:80\"\nmode = \"udp\"\nupstream = [\"10.0.0.1:1\"]\n", "mode"),
            ("splice", "listen = \"10.77.0.1:80\"\nsplice = \"yes\"\nupstream = [\"10.0.0.1:1\"]\n", "splice"),
            ("route-key", "listen = \"10.77.0.1:80\"\n[[route]]\nhots = \"a\"\nbackends = [\"10.0.0.1:1\"]\n", "hots"),
            ("route-backend", "listen = \"10.77.0.1:80\"\n[[route]]\nhost = \"a\"\nbackends = [\"nowhere\"]\n", "backends"),
            ("no-backends", "listen = \"10.77.0.1:80\"\n[[route]]\nhost = \"a\"\n", "backends"),
            ("empty-pool", "listen = \"10.77.0.1:80\"\n[[route]]\nhost = \"a\"\nbackends = []\n", "route 1: backends is empty"),
            ("prefix", "listen = \"10.77.0.1:80\"\n[[route]]\npath_prefix = \"api\"\nbackends = [\"10.0.0.1:1\"]\n", "path_prefix"),
            ("syntax", "listen = \n", "line 1"),
        ];
        for (name, text, key) in cases {
            let e = with_file(name, text, &[]).unwrap_err();
            assert!(e.contains(key), "{name}: {e:?} does not name {key:?}");
            assert!(e.contains(".toml"), "{name}: {e:?} does not name the file");
        }
        let e = Cli::try_parse_from(["proxy", "--config", "/nonexistent/p.toml"])
            .map_err(|e| e.to_string())
            .and_then(|cli| settings(&cli.proxy).map_err(|e| e.to_string()))
            .unwrap_err();
        assert!(e.contains("--config /nonexistent/p.toml"), "{e}");
    }
}
