//! `sluice experiment proxy`: AccelTCP's L7 proxy experiment (acceltcp.txt 6.3, Figures
//! 12-13) against the proxies Linux users run. wrk in sluice-b fetches 64 B and 1 MiB
//! messages and a 10 MiB file from nginx, also in sluice-b (10.77.0.2:8080), through a proxy:
//!
//! - `sluice proxy` on the engine in sluice-a (HTTP mode: read the header, connect, forward,
//!   splice), with `--splice-after 64k` (a session's first 64 KiB relayed, then spliced),
//!   and with `--no-splice` (it copies every byte itself);
//! - HAProxy in sluice-k (mode http, `option splice-auto`: the kernel's splice(2));
//! - nginx's stream proxy in sluice-k (an L4 relay in user space);
//! - a Linux sockmap proxy in sluice-k (tools/sockmap-proxy: an SK_SKB verdict program
//!   redirects each skb to the peer socket's egress; the bytes never reach user space).
//!
//! Each with persistent connections (wrk's keep-alive) and with a new connection per
//! request (`Connection: close`), one after the other in one run: requests/s, Gbit/s of
//! payload, p99, the machine's CPU per request (every core) and the proxy process's own.
//! Before the loads, curl fetches the 10 MiB file through each proxy and its SHA-256 must
//! match: a proxy that corrupts bytes is not measured.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::process::Command;

use clap::Args;
use sluice_bench::apps::server::ServerProcess;
use sluice_bench::apps::tools::{curl, wrk};
use sluice_bench::apps::workdir::{BIG_FILE, BIG_FILE_BYTES, MESSAGE_FILES};
use sluice_bench::apps::{App, Harness};
use sluice_bench::cpu_seconds;
use sluice_lab::{CLIENT_IP, ENGINE_IP, KERNEL_IP, NS_KERNEL};

use crate::error::ExperimentError;
use crate::plot::{Plot, Series};
use crate::report::{fmt_num, fmt_ratio, Report};
use crate::short_conns::machine_busy_seconds;
use crate::sockmap_proxy::SockmapProxy;
use crate::{lab_workload, Common, LabRun};

/// The backend nginx's port in sluice-b (the apps harness's).
const BACKEND_PORT: u16 = 8080;
/// The proxies' port.
const PROXY_PORT: u16 = 8090;
/// wrk's connections.
const CONNECTIONS: u32 = 16;

/// `sluice experiment proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// Size and output directory.
    #[command(flatten)]
    pub common: Common,
    /// Seconds per run, and the lab lock.
    #[command(flatten)]
    pub lab: LabRun,
}

/// A proxy measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proxy {
    /// `sluice proxy` (splice).
    Splice,
    /// `sluice proxy --splice-after 64k` (relay a session's first 64 KiB, then splice).
    SpliceAuto,
    /// `sluice proxy --no-splice`.
    NoSplice,
    /// HAProxy, mode http, splice-auto.
    Haproxy,
    /// nginx's stream module.
    NginxStream,
    /// The sockmap proxy (SK_SKB verdict, bpf_sk_redirect_hash).
    Sockmap,
}

impl Proxy {
    const ALL: [Proxy; 6] = [
        Proxy::Splice,
        Proxy::SpliceAuto,
        Proxy::NoSplice,
        Proxy::Haproxy,
        Proxy::NginxStream,
        Proxy::Sockmap,
    ];

    fn name(self) -> &'static str {
        match self {
            Proxy::Splice => "sluice proxy (splice)",
            Proxy::SpliceAuto => "sluice proxy (splice after 64 KiB)",
            Proxy::NoSplice => "sluice proxy --no-splice",
            Proxy::Haproxy => "haproxy (splice-auto)",
            Proxy::NginxStream => "nginx stream",
            Proxy::Sockmap => "linux sockmap (sk_skb redirect)",
        }
    }

    /// One of the Linux proxies "vs best linux" compares with.
    fn is_linux(self) -> bool {
        matches!(self, Proxy::Haproxy | Proxy::NginxStream | Proxy::Sockmap)
    }

    fn ip(self) -> Ipv4Addr {
        match self {
            Proxy::Splice | Proxy::SpliceAuto | Proxy::NoSplice => ENGINE_IP,
            Proxy::Haproxy | Proxy::NginxStream | Proxy::Sockmap => KERNEL_IP,
        }
    }
}

/// One workload: which file, and whether every request opens a connection.
#[derive(Clone, Copy, Debug)]
struct Load {
    file: &'static str,
    bytes: usize,
    close: bool,
}

impl Load {
    fn name(&self) -> String {
        let size = match self.bytes {
            b if b >= 1 << 20 => format!("{} MiB", b >> 20),
            b => format!("{b} B"),
        };
        format!(
            "{size} {}",
            if self.close {
                "conn/request"
            } else {
                "keep-alive"
            }
        )
    }
}

/// One measurement.
#[derive(Clone, Debug, Default)]
struct Row {
    rps: f64,
    gbps: f64,
    p99_ms: f64,
    machine_us: f64,
    proxy_us: f64,
    errors: u64,
}

/// Runs the experiment and returns its report.
pub fn run(args: &ProxyArgs) -> Result<Report, ExperimentError> {
    let timing = args.lab.timing(args.common.quick);
    let seconds = timing.seconds.ceil().max(1.0) as u32;
    let [(tiny, tiny_bytes), (mid, mid_bytes)] = MESSAGE_FILES;
    let load = |file, bytes, close| Load { file, bytes, close };
    let loads: Vec<Load> = if args.common.quick {
        vec![
            load(tiny, tiny_bytes, false),
            load(BIG_FILE, BIG_FILE_BYTES, false),
        ]
    } else {
        // acceltcp.txt Figures 12-13: small and large messages, persistent and one
        // connection per request; and a large transfer for throughput.
        vec![
            load(tiny, tiny_bytes, false),
            load(tiny, tiny_bytes, true),
            load(mid, mid_bytes, false),
            load(mid, mid_bytes, true),
            load(BIG_FILE, BIG_FILE_BYTES, false),
        ]
    };
    let results = args.lab.in_lab(
        "proxy",
        |lab| lab.up().map_err(|e| lab_workload(&e)),
        |_| {
            let exe = std::env::current_exe()
                .map_err(|e| ExperimentError::Io("find the sluice executable".into(), e))?;
            let h = Harness::new(&exe, "af_packet").map_err(|e| lab_workload(&e))?;
            let backend = h.start_peer(App::Nginx).map_err(|e| lab_workload(&e))?;
            let mut results = Vec::new();
            for p in Proxy::ALL {
                eprintln!("sluice experiment proxy: {}", p.name());
                let r = measure_proxy(&h, &exe, p, &loads, seconds);
                if let Err(e) = &r {
                    eprintln!("sluice experiment proxy: {} failed: {e}", p.name());
                }
                results.push((p, r));
            }
            backend.stop().map_err(|e| lab_workload(&e))?;
            Ok(results)
        },
    )?;
    Ok(report(seconds, &loads, &results))
}

/// A proxy's rows, what it printed on SIGTERM, and its byte-exact check.
type Measured = (Proxy, Result<(Vec<Row>, String, String), ExperimentError>);

/// Starts proxy `p`, checks that the big file comes through it intact, runs every load
/// through it, stops it; returns the rows, the proxy's own report (its counters) and the
/// check.
fn measure_proxy(
    h: &Harness,
    exe: &Path,
    p: Proxy,
    loads: &[Load],
    seconds: u32,
) -> Result<(Vec<Row>, String, String), ExperimentError> {
    let server = start(h, exe, p).map_err(|e| lab_workload(&e))?;
    let addr = SocketAddr::V4(SocketAddrV4::new(p.ip(), PROXY_PORT));
    let got = curl::get(h, addr, BIG_FILE).map_err(|e| lab_workload(&e))?;
    let want = &h.content().big_sha256;
    if got.bytes != BIG_FILE_BYTES || got.sha256 != *want {
        return Err(ExperimentError::Workload(format!(
            "curl /{BIG_FILE} through {}: {} bytes with SHA-256 {}, expected {BIG_FILE_BYTES} \
             bytes with {want}",
            p.name(),
            got.bytes,
            got.sha256
        )));
    }
    let intact = format!(
        "{}: curl /{BIG_FILE} through it: {} bytes, SHA-256 {} (as served)",
        p.name(),
        got.bytes,
        got.sha256
    );
    let stat = format!("/proc/{}/stat", server.pid());
    let mut rows = Vec::new();
    for load in loads {
        let close = ["Connection: close"];
        let headers: &[&str] = if load.close { &close } else { &[] };
        // Warm-up (connections, caches), not measured.
        wrk::run_with(h, addr, load.file, 1, CONNECTIONS, headers).map_err(|e| lab_workload(&e))?;
        let (machine0, proxy0) = (machine_busy_seconds(), cpu_seconds(&stat));
        let w = wrk::run_with(h, addr, load.file, seconds, CONNECTIONS, headers)
            .map_err(|e| lab_workload(&e))?;
        let (machine1, proxy1) = (machine_busy_seconds(), cpu_seconds(&stat));
        let requests = w.requests.max(1) as f64;
        rows.push(Row {
            rps: w.requests_per_sec,
            gbps: w.requests_per_sec * load.bytes as f64 * 8.0 / 1e9,
            p99_ms: w.p99_ms,
            machine_us: (machine1 - machine0) / requests * 1e6,
            proxy_us: (proxy1 - proxy0) / requests * 1e6,
            errors: w.socket_errors + w.non_2xx_3xx,
        });
    }
    let out = server.stop_with_stdout().map_err(|e| lab_workload(&e))?;
    Ok((rows, out, intact))
}

/// Starts proxy `p` and waits until it accepts from sluice-b.
fn start(
    h: &Harness,
    exe: &Path,
    p: Proxy,
) -> Result<ServerProcess, sluice_bench::apps::AppsError> {
    let backend = format!("{CLIENT_IP}:{BACKEND_PORT}");
    let dir = h.dir().join(format!(
        "proxy-{}",
        p.name().replace([' ', '(', ')', '-'], "")
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| sluice_bench::apps::AppsError::io("create the proxy's directory", e))?;
    let mut cmd;
    match p {
        Proxy::Splice | Proxy::SpliceAuto | Proxy::NoSplice => {
            cmd = Command::new(exe);
            cmd.args(["proxy", "--lab", "--listen"])
                .arg(format!("{ENGINE_IP}:{PROXY_PORT}"))
                .args(["--upstream", &backend, "--mode", "http", "--linger", "0"]);
            if p == Proxy::SpliceAuto {
                cmd.args(["--splice-after", "64k"]);
            }
            if p == Proxy::NoSplice {
                cmd.arg("--no-splice");
            }
        }
        Proxy::Haproxy => {
            let conf = dir.join("haproxy.cfg");
            std::fs::write(
                &conf,
                format!(
                    "global\n    maxconn 2000\n\
                     defaults\n    mode http\n    option splice-auto\n    option http-keep-alive\n\
                     \x20   timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\
                     frontend f\n    bind {KERNEL_IP}:{PROXY_PORT}\n    default_backend b\n\
                     backend b\n    server s1 {backend}\n"
                ),
            )
            .map_err(|e| sluice_bench::apps::AppsError::io("write haproxy.cfg", e))?;
            cmd = Command::new("ip");
            cmd.args(["netns", "exec", NS_KERNEL, "haproxy", "-db", "-f"])
                .arg(&conf);
        }
        Proxy::NginxStream => {
            let conf = dir.join("nginx.conf");
            let d = dir.display();
            std::fs::write(
                &conf,
                format!(
                    "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
                     daemon off;\nmaster_process off;\nworker_processes 1;\n\
                     error_log {d}/error.log;\npid {d}/nginx.pid;\n\
                     events {{ worker_connections 4096; }}\n\
                     stream {{ server {{ listen {KERNEL_IP}:{PROXY_PORT}; proxy_pass {backend}; }} }}\n"
                ),
            )
            .map_err(|e| sluice_bench::apps::AppsError::io("write nginx.conf", e))?;
            cmd = Command::new("ip");
            cmd.args(["netns", "exec", NS_KERNEL, "nginx", "-c"])
                .arg(&conf);
        }
        Proxy::Sockmap => {
            cmd = SockmapProxy::build(&dir)?.command(KERNEL_IP, PROXY_PORT, &backend);
        }
    }
    ServerProcess::start(
        cmd,
        p.name(),
        "the lab",
        SocketAddr::V4(SocketAddrV4::new(p.ip(), PROXY_PORT)),
        &dir.join("proxy"),
    )
}

/// `key=value` from a report (0 if absent).
fn value(out: &str, key: &str) -> u64 {
    out.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.trim().parse().ok())
        .next_back()
        .unwrap_or(0)
}

fn report(seconds: u32, loads: &[Load], results: &[Measured]) -> Report {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let best_linux = |li: usize, f: fn(&Row) -> f64| {
        results
            .iter()
            .filter(|(p, _)| p.is_linux())
            .filter_map(|(_, r)| r.as_ref().ok().and_then(|(rows, ..)| rows.get(li)).map(f))
            .fold(0.0f64, f64::max)
    };
    for (li, load) in loads.iter().enumerate() {
        let linux_rps = best_linux(li, |r| r.rps);
        for (p, r) in results {
            match r {
                Ok((measured, ..)) => {
                    let Some(m) = measured.get(li) else { continue };
                    rows.push(vec![
                        load.name(),
                        p.name().to_string(),
                        fmt_num(m.rps),
                        if linux_rps > 0.0 {
                            fmt_ratio(m.rps, linux_rps)
                        } else {
                            "-".into()
                        },
                        fmt_num(m.gbps),
                        fmt_num(m.p99_ms),
                        fmt_num(m.machine_us),
                        fmt_num(m.proxy_us),
                        m.errors.to_string(),
                    ]);
                }
                Err(e) => rows.push(vec![
                    load.name(),
                    p.name().to_string(),
                    format!("failed: {e}"),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
            }
        }
    }
    for (p, r) in results {
        if let Ok((_, _, intact)) = r {
            notes.push(intact.clone());
        }
        if let (Proxy::Sockmap, Ok((_, out, _))) = (p, r) {
            if !out.contains("accepted=") {
                // Seen once in CI: the proxy served and exited on SIGTERM, but its stdout
                // held no counters. Say so rather than report zeros as if counted.
                notes.push(format!(
                    "{}: printed no counters on SIGTERM ({} bytes of stdout)",
                    p.name(),
                    out.len()
                ));
                continue;
            }
            notes.push(format!(
                "{}: accepted={} paired={} closed={} copied_bytes={} (copied by the proxy) \
                 redirected_bytes={} redirected_skbs={} passed_skbs={} insert_failed={} \
                 drain_timeouts={}",
                p.name(),
                value(out, "accepted"),
                value(out, "paired"),
                value(out, "closed"),
                value(out, "copied_bytes"),
                value(out, "redirected_bytes"),
                value(out, "redirected_skbs"),
                value(out, "passed_skbs"),
                value(out, "insert_failed"),
                value(out, "drain_timeouts"),
            ));
        }
        if let (Proxy::Splice | Proxy::SpliceAuto | Proxy::NoSplice, Ok((_, out, _))) = (p, r) {
            notes.push(format!(
                "{}: accepted={} spliced={} splice_failed={} relayed_bytes={} (copied by the \
                 proxy) splice_frames_relayed={}",
                p.name(),
                value(out, "accepted"),
                value(out, "spliced"),
                value(out, "splice_failed"),
                value(out, "relayed_bytes"),
                value(out, "splice_frames_relayed"),
            ));
        }
    }
    notes.push(
        "vs best linux: requests/s over the best of HAProxy, nginx stream and the sockmap \
         proxy for the same load; machine us/req counts every core (wrk and nginx's share too); proxy us/req is \
         the proxy process's own CPU (for the Linux proxies, kernel TCP work done in softirq \
         is only partly theirs; the sockmap proxy's relay runs in softirq and a kernel work \
         queue, so its own CPU is nearly nil and only the machine column compares)."
            .into(),
    );
    let plot = Plot {
        title: "L7 proxy: requests/s by load".into(),
        x_label: "load".into(),
        y_label: "thousand requests/s".into(),
        x_categories: Some(loads.iter().map(Load::name).collect()),
        series: results
            .iter()
            .filter_map(|(p, r)| {
                let (rows, ..) = r.as_ref().ok()?;
                Some(Series {
                    name: p.name().to_string(),
                    points: rows
                        .iter()
                        .enumerate()
                        .map(|(i, m)| (i as f64, m.rps / 1000.0))
                        .collect(),
                })
            })
            .collect(),
    };
    Report {
        name: "proxy".into(),
        setup: vec![
            format!(
                "sluice experiment proxy: wrk -t2 -c{CONNECTIONS} for {seconds} s (after 1 s of \
                 warm-up) from sluice-b, through each proxy, to nginx in sluice-b \
                 ({CLIENT_IP}:{BACKEND_PORT}); {} shared CPU cores",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
            format!(
                "  sluice proxy: --mode http on `--lab` ({ENGINE_IP}); haproxy, nginx stream and \
                 the sockmap proxy in sluice-k ({KERNEL_IP}) on kernel TCP"
            ),
        ],
        columns: [
            "load",
            "proxy",
            "req/s",
            "vs best linux",
            "Gbit/s",
            "p99 ms",
            "machine us/req",
            "proxy us/req",
            "errors",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        notes,
        plot: Some(plot),
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(p: Proxy, rps: f64, out: &str) -> Measured {
        let row = Row {
            rps,
            ..Row::default()
        };
        (
            p,
            Ok((vec![row], out.to_string(), format!("{}: intact", p.name()))),
        )
    }

    #[test]
    fn vs_best_linux_counts_the_sockmap_proxy_and_its_counters_are_noted() {
        let loads = [Load {
            file: "msg-64.bin",
            bytes: 64,
            close: false,
        }];
        let results = vec![
            measured(Proxy::Splice, 300.0, "spliced=1\n"),
            measured(Proxy::Haproxy, 100.0, ""),
            measured(Proxy::NginxStream, 150.0, ""),
            measured(
                Proxy::Sockmap,
                200.0,
                "accepted=3\npaired=3\ncopied_bytes=0\nredirected_bytes=4096\n",
            ),
        ];
        let r = report(1, &loads, &results);
        let ratio = |name: &str| {
            r.rows
                .iter()
                .find(|row| row[1] == name)
                .map(|row| row[3].clone())
                .unwrap()
        };
        // The sockmap proxy is the best Linux proxy here, so everything is against it.
        assert_eq!(ratio("linux sockmap (sk_skb redirect)"), "x1.00");
        assert_eq!(ratio("sluice proxy (splice)"), "x1.50");
        assert_eq!(ratio("nginx stream"), "x0.75");
        let note = r
            .notes
            .iter()
            .find(|n| n.starts_with("linux sockmap (sk_skb redirect): accepted="))
            .unwrap();
        assert!(note.contains("paired=3 ") && note.contains("redirected_bytes=4096 "));
        assert!(r
            .notes
            .contains(&"linux sockmap (sk_skb redirect): intact".to_string()));
        // A proxy whose stdout held no counters is said to have printed none.
        let silent = vec![measured(Proxy::Sockmap, 200.0, "")];
        let r = report(1, &loads, &silent);
        assert!(r
            .notes
            .iter()
            .any(|n| n == "linux sockmap (sk_skb redirect): printed no counters on SIGTERM (0 bytes of stdout)"));
    }
}
