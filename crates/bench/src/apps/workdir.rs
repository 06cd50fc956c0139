//! A private temporary directory for one harness: program logs, configuration files, the
//! engine's socket, and the files the web servers serve.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};

use super::error::AppsError;

/// Set this environment variable to keep the directory (and its logs) after the run.
pub const KEEP_ENV: &str = "SLUICE_APPS_KEEP";

/// The large file the web servers serve (curl checks its SHA-256).
pub const BIG_FILE: &str = "file.bin";
/// Its size: 10 MiB.
pub const BIG_FILE_BYTES: usize = 10 * 1024 * 1024;
/// The small page wrk requests (a request-rate benchmark, not a bandwidth one).
pub const SMALL_FILE: &str = "index.html";
/// Message files for request-size sweeps (the proxy experiment's 64 B to 1 MiB), each
/// seeded random bytes: (name, size).
pub const MESSAGE_FILES: [(&str, usize); 2] = [("msg-64.bin", 64), ("msg-1m.bin", 1 << 20)];
/// The seed of the large file's bytes.
const CONTENT_SEED: u64 = 0x5_11CE;

/// A temporary directory removed when dropped (unless [`KEEP_ENV`] is set).
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    /// Creates a fresh directory under the system's temporary directory.
    pub fn create(prefix: &str) -> Result<WorkDir, AppsError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{prefix}-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)
            .map_err(|e| AppsError::io(format!("create {}", path.display()), e))?;
        Ok(WorkDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A subdirectory, created if missing.
    pub fn subdir(&self, name: &str) -> Result<PathBuf, AppsError> {
        let p = self.path.join(name);
        std::fs::create_dir_all(&p)
            .map_err(|e| AppsError::io(format!("create {}", p.display()), e))?;
        Ok(p)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_ENV).is_some() {
            eprintln!("sluice apps: kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The files the web servers serve, and what a client must read back.
#[derive(Clone, Debug)]
pub struct Content {
    /// The document root.
    pub root: PathBuf,
    /// SHA-256 of [`BIG_FILE`], lower-case hex.
    pub big_sha256: String,
}

impl Content {
    /// Writes the document root under `dir`: [`BIG_FILE`] and [`MESSAGE_FILES`] (seeded
    /// random bytes) and [`SMALL_FILE`].
    pub fn write(dir: &Path) -> Result<Content, AppsError> {
        let root = dir.join("www");
        std::fs::create_dir_all(&root)
            .map_err(|e| AppsError::io(format!("create {}", root.display()), e))?;
        let mut big = vec![0u8; BIG_FILE_BYTES];
        ChaCha20Rng::seed_from_u64(CONTENT_SEED).fill_bytes(&mut big);
        let big_sha256 = sha256_hex(&big);
        let write = |name: &str, bytes: &[u8]| {
            let p = root.join(name);
            std::fs::write(&p, bytes)
                .map_err(|e| AppsError::io(format!("write {}", p.display()), e))
        };
        write(BIG_FILE, &big)?;
        for (name, size) in MESSAGE_FILES {
            write(name, &big[..size])?;
        }
        let page = format!(
            "<!doctype html>\n<title>sluice</title>\n<p>{}</p>\n",
            "Served over the lab. ".repeat(40)
        );
        write(SMALL_FILE, page.as_bytes())?;
        Ok(Content { root, big_sha256 })
    }
}

/// SHA-256 of `bytes` as lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}
