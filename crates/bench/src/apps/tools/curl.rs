//! curl in sluice-b: downloads a URL and hashes what came back.

use std::net::SocketAddr;
use std::time::Duration;

use crate::apps::error::AppsError;
use crate::apps::harness::Harness;
use crate::apps::process::run_bounded;
use crate::apps::program::CURL;
use crate::apps::workdir::sha256_hex;

/// What a download got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Download {
    /// Body length.
    pub bytes: usize,
    /// SHA-256 of the body, lower-case hex.
    pub sha256: String,
}

/// `curl -sS --fail -o - http://ADDR/PATH` in sluice-b.
pub fn get(h: &Harness, addr: SocketAddr, path: &str) -> Result<Download, AppsError> {
    let url = format!("http://{addr}/{}", path.trim_start_matches('/'));
    let mut cmd = h.client(CURL)?;
    cmd.args(["-sS", "--fail", "--max-time", "60", "-o", "-", &url]);
    let out = run_bounded(cmd, &format!("curl {url}"), Duration::from_secs(90))?;
    Ok(Download {
        bytes: out.stdout.len(),
        sha256: sha256_hex(&out.stdout),
    })
}
