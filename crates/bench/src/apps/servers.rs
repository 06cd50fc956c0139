//! The server programs and their exact command lines (the same on both sides; only the
//! launcher differs). Every server is made to listen on IPv4: an IPv6 or dual-stack socket
//! would pass through the preload library to the kernel and never reach the engine.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::Path;

use super::error::AppsError;
use super::program::{self, Program};
use super::workdir::Content;

/// The python echo server's source, written into the run directory.
const ECHO_SERVER_PY: &str = include_str!("echo_server.py");

/// A server program the harness runs on either side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum App {
    /// redis-server, no persistence.
    Redis,
    /// memcached.
    Memcached,
    /// nginx serving the content directory, one worker, no master process.
    Nginx,
    /// iperf3 server.
    Iperf3,
    /// `python3 -m http.server` serving the content directory.
    PythonHttp,
    /// The harness's python threaded echo server (echo_server.py).
    PythonEcho,
    /// `sockperf server` over TCP (the ping-pong and throughput rows of `sluice bench`).
    Sockperf,
}

impl App {
    /// Every server program.
    pub const ALL: [App; 7] = [
        App::Redis,
        App::Memcached,
        App::Nginx,
        App::Iperf3,
        App::PythonHttp,
        App::PythonEcho,
        App::Sockperf,
    ];

    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            App::Redis => "redis",
            App::Memcached => "memcached",
            App::Nginx => "nginx",
            App::Iperf3 => "iperf3",
            App::PythonHttp => "python-http",
            App::PythonEcho => "python-echo",
            App::Sockperf => "sockperf",
        }
    }

    /// The TCP port it listens on.
    pub fn port(self) -> u16 {
        match self {
            App::Redis => 6379,
            App::Memcached => 11211,
            App::Nginx => 8080,
            App::Iperf3 => 5201,
            App::PythonHttp => 8000,
            App::PythonEcho => 7000,
            App::Sockperf => 11111,
        }
    }

    /// The executable it runs.
    pub fn program(self) -> Program {
        match self {
            App::Redis => program::REDIS_SERVER,
            App::Memcached => program::MEMCACHED,
            App::Nginx => program::NGINX,
            App::Iperf3 => program::IPERF3,
            App::PythonHttp | App::PythonEcho => program::PYTHON3,
            App::Sockperf => program::SOCKPERF,
        }
    }

    /// The arguments after the program, for a run listening on `ip` (the address of the
    /// namespace it runs in) whose files go in `run_dir` (nginx.conf, the echo server's
    /// script, redis's working directory).
    pub fn args(
        self,
        ip: Ipv4Addr,
        run_dir: &Path,
        content: &Content,
    ) -> Result<Vec<OsString>, AppsError> {
        let port = self.port().to_string();
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |a: &dyn AsRef<std::ffi::OsStr>| args.push(a.as_ref().to_os_string());
        match self {
            App::Redis => {
                for a in [
                    "--port",
                    &port,
                    "--bind",
                    "0.0.0.0",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "no",
                    "--daemonize",
                    "no",
                    "--dir",
                ] {
                    push(&a);
                }
                push(&run_dir);
            }
            App::Memcached => {
                // -U 0: no UDP; -u root: memcached refuses to run as root without it.
                let ip = ip.to_string();
                for a in ["-l", &ip, "-p", &port, "-U", "0", "-u", "root"] {
                    push(&a);
                }
            }
            App::Nginx => {
                let conf = write_nginx_conf(run_dir, content, self.port())?;
                push(&"-p");
                push(&run_dir);
                push(&"-c");
                push(&conf);
                // Errors before the configuration is read would go to /var/log/nginx.
                push(&"-e");
                push(&run_dir.join("error.log"));
            }
            App::Iperf3 => {
                // Not -1 (one test and exit): one server runs both directions, and the
                // harness's readiness probe (connect, close) would count as its one test.
                for a in ["-s", "-4", "-p", &port] {
                    push(&a);
                }
            }
            App::PythonHttp => {
                for a in [
                    "-m",
                    "http.server",
                    &port,
                    "--bind",
                    "0.0.0.0",
                    "--directory",
                ] {
                    push(&a);
                }
                push(&content.root);
            }
            App::PythonEcho => {
                let script = run_dir.join("echo_server.py");
                std::fs::write(&script, ECHO_SERVER_PY)
                    .map_err(|e| AppsError::io(format!("write {}", script.display()), e))?;
                push(&"-u");
                push(&script);
                for a in ["--bind", "0.0.0.0", "--port", &port] {
                    push(&a);
                }
            }
            App::Sockperf => {
                let ip = ip.to_string();
                for a in ["server", "--tcp", "-i", &ip, "-p", &port] {
                    push(&a);
                }
            }
        }
        Ok(args)
    }
}

/// Writes nginx.conf for one run into `run_dir` and returns its path.
fn write_nginx_conf(
    run_dir: &Path,
    content: &Content,
    port: u16,
) -> Result<std::path::PathBuf, AppsError> {
    let dir = run_dir.display();
    let root = content.root.display();
    let conf = format!(
        "# Written by the sluice apps harness for one run.\n\
         daemon off;\n\
         master_process off;\n\
         worker_processes 1;\n\
         error_log {dir}/error.log;\n\
         pid {dir}/nginx.pid;\n\
         events {{\n    worker_connections 1024;\n}}\n\
         http {{\n\
         \x20   access_log off;\n\
         \x20   # Over the engine the preload library serves sendfile(2) from the file into the\n\
         \x20   # socket's TX ring.\n\
         \x20   sendfile on;\n\
         \x20   tcp_nopush on;\n\
         \x20   default_type application/octet-stream;\n\
         \x20   types {{\n        text/html html;\n    }}\n\
         \x20   client_body_temp_path {dir}/client_body;\n\
         \x20   proxy_temp_path {dir}/proxy;\n\
         \x20   fastcgi_temp_path {dir}/fastcgi;\n\
         \x20   uwsgi_temp_path {dir}/uwsgi;\n\
         \x20   scgi_temp_path {dir}/scgi;\n\
         \x20   server {{\n\
         \x20       listen 0.0.0.0:{port};\n\
         \x20       root {root};\n\
         \x20   }}\n\
         }}\n"
    );
    let path = run_dir.join("nginx.conf");
    std::fs::write(&path, conf)
        .map_err(|e| AppsError::io(format!("write {}", path.display()), e))?;
    Ok(path)
}
