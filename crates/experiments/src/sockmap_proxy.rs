//! The Linux sockmap proxy of tools/sockmap-proxy (an SK_SKB verdict program that
//! redirects each skb to the peer socket with bpf_sk_redirect_hash, and its libbpf
//! loader): built from the sources compiled into this binary, at run time, with clang and
//! libbpf-dev, so no binary is checked in and the sources cannot go missing.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_bench::apps::AppsError;
use sluice_lab::NS_KERNEL;

/// The sources and the build script, as in tools/sockmap-proxy/.
const SOURCES: [(&str, &str); 3] = [
    (
        "sockmap_proxy.bpf.c",
        include_str!("../../../tools/sockmap-proxy/sockmap_proxy.bpf.c"),
    ),
    (
        "sockmap_proxy.c",
        include_str!("../../../tools/sockmap-proxy/sockmap_proxy.c"),
    ),
    (
        "build.sh",
        include_str!("../../../tools/sockmap-proxy/build.sh"),
    ),
];

/// The built proxy: the loader and its BPF object.
#[derive(Debug)]
pub struct SockmapProxy {
    binary: PathBuf,
    object: PathBuf,
}

impl SockmapProxy {
    /// Writes the sources under `dir` and builds them there (clang -target bpf for the
    /// verdict, cc with -lbpf for the loader); the error carries the compiler's output.
    pub fn build(dir: &Path) -> Result<SockmapProxy, AppsError> {
        let src = dir.join("src");
        let out = dir.join("build");
        std::fs::create_dir_all(&src)
            .map_err(|e| AppsError::io(format!("create {}", src.display()), e))?;
        for (name, text) in SOURCES {
            let p = src.join(name);
            std::fs::write(&p, text)
                .map_err(|e| AppsError::io(format!("write {}", p.display()), e))?;
        }
        let run = Command::new("sh")
            .arg(src.join("build.sh"))
            .arg(&out)
            .output()
            .map_err(|e| AppsError::io("run sh for the sockmap proxy's build.sh", e))?;
        if !run.status.success() {
            return Err(AppsError::ServerStart {
                program: "sockmap_proxy".into(),
                place: "the build (needs clang and libbpf-dev: scripts/setup.sh)".into(),
                detail: format!("build.sh failed ({})", run.status),
                log_tail: String::from_utf8_lossy(&run.stderr).into_owned(),
            });
        }
        Ok(SockmapProxy {
            binary: out.join("sockmap_proxy"),
            object: out.join("sockmap_proxy.bpf.o"),
        })
    }

    /// The command that runs it in sluice-k on `listen:port`, relaying to `backend`.
    pub fn command(&self, listen: Ipv4Addr, port: u16, backend: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", NS_KERNEL])
            .arg(&self.binary)
            .arg("--listen")
            .arg(format!("{listen}:{port}"))
            .args(["--backend", backend, "--bpf"])
            .arg(&self.object);
        cmd
    }
}
