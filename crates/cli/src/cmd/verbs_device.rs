//! The Sluice verbs device for a program `sluice run` starts (issue 16; the route and its
//! facts: docs/notes/issue-16/provider.md): libibverbs 44.0 on a kernel without RDMA finds
//! devices by scanning `$SYSFS_PATH/class/infiniband_verbs`, opens
//! `/dev/infiniband/<uverbs>` (a fixed path), and loads the provider that `RDMAV_DRIVERS`
//! names. So, in a mount namespace of the program's own (the host is not changed, beyond an
//! empty `/dev/infiniband` and an empty state directory created once):
//!
//! - a tmpfs on the state directory holds the device tree (`sys/`, with the engine's
//!   IPv4-mapped GID, which libibverbs reads from there) and `libsluice-rdmav34.so`, a link
//!   to the provider library;
//! - a tmpfs on `/dev/infiniband` holds `sluice_uverbs0`, a link to `/dev/full` (the few
//!   commands libibverbs sends the kernel itself then fail cleanly with ENOSPC);
//! - the program gets `SYSFS_PATH` and `RDMAV_DRIVERS` (the path without `-rdmav34.so`,
//!   which libibverbs appends).

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getgid, getuid};

/// The provider library's file name as cargo builds it.
pub const PROVIDER_NAME: &str = "libsluice_verbs.so";
/// Environment variable that overrides where the provider library is.
pub const PROVIDER_ENV: &str = "SLUICE_VERBS_PROVIDER";
/// The device's name, as `ibv_devices` lists it.
pub const DEVICE: &str = "sluice0";
/// The uverbs node's name.
const UVERBS: &str = "sluice_uverbs0";

/// Why the device could not be set up.
#[derive(Debug)]
pub enum VerbsDeviceError {
    /// The provider library is not where it was looked for.
    ProviderMissing(PathBuf),
    /// The engine did not say its address.
    Engine(String),
    /// A namespace, mount or file operation failed.
    Os {
        /// What was being done.
        what: String,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for VerbsDeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsDeviceError::ProviderMissing(p) => write!(
                f,
                "the verbs provider {} is missing (build it: cargo build --release -p \
                 sluice-verbs-provider, or set {PROVIDER_ENV})",
                p.display()
            ),
            VerbsDeviceError::Engine(m) => write!(f, "asking the engine for its address: {m}"),
            VerbsDeviceError::Os { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for VerbsDeviceError {}

fn os(what: impl Into<String>) -> impl FnOnce(io::Error) -> VerbsDeviceError {
    let what = what.into();
    move |source| VerbsDeviceError::Os { what, source }
}

fn nix_os(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> VerbsDeviceError {
    let what = what.into();
    move |e| VerbsDeviceError::Os {
        what,
        source: io::Error::from_raw_os_error(e as i32),
    }
}

/// The provider: `$SLUICE_VERBS_PROVIDER`, else next to the sluice executable (or in its
/// `deps/`, where `cargo test` builds it).
pub fn locate_provider(exe: &Path) -> Result<PathBuf, VerbsDeviceError> {
    if let Some(p) = std::env::var_os(PROVIDER_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(VerbsDeviceError::ProviderMissing(p))
        };
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    let beside = dir.join(PROVIDER_NAME);
    let candidates = [
        beside.clone(),
        dir.join("deps").join(PROVIDER_NAME),
        dir.parent()
            .map(|d| d.join(PROVIDER_NAME))
            .unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or(VerbsDeviceError::ProviderMissing(beside))
}

/// Whether `program` (a path, or a name looked up in `$PATH`) links libibverbs: its file
/// names `libibverbs.so` (a DT_NEEDED entry of the dynamic section). Programs that do get the
/// verbs device by default; a script or a program that loads the library at run time needs
/// `--verbs`.
pub fn links_libibverbs(program: &std::ffi::OsStr) -> bool {
    let path = Path::new(program);
    let found = if path.components().count() > 1 {
        Some(path.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(path))
                .find(|p| p.is_file())
        })
    };
    let Some(file) = found else {
        return false;
    };
    // The dynamic string table of an executable is within its first few megabytes.
    const MAX: u64 = 64 << 20;
    let mut bytes = Vec::new();
    let read = fs::File::open(&file).and_then(|f| {
        use std::io::Read;
        f.take(MAX).read_to_end(&mut bytes)
    });
    read.is_ok() && bytes.windows(14).any(|w| w == b"libibverbs.so.")
}

/// The engine's address, from the attach handshake (the connection is closed at once).
pub fn engine_ip(socket: &Path) -> Result<Ipv4Addr, VerbsDeviceError> {
    use sluice_shm::control::{connect_to, recv_message, send_message, Reply, Request};
    let err = |e: sluice_shm::ShmError| VerbsDeviceError::Engine(e.to_string());
    let sock = connect_to(socket).map_err(err)?;
    let hello = Request::Hello {
        version: sluice_shm::control::PROTOCOL_VERSION,
        pid: std::process::id(),
        name: "sluice-run-verbs".into(),
    };
    send_message(sock.as_fd(), &hello, &[]).map_err(err)?;
    match recv_message::<Reply>(sock.as_fd()).map_err(err)? {
        Some((Reply::Welcome { engine, .. }, _)) => Ok(engine.ip),
        Some((Reply::Refused { reason }, _)) => Err(VerbsDeviceError::Engine(reason)),
        _ => Err(VerbsDeviceError::Engine("unexpected reply".into())),
    }
}

/// The GID of `ip` as sysfs writes it: `0000:...:ffff:0a00:0001`.
pub fn gid_text(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    )
}

/// Writes the device tree libibverbs scans into `root` (init.c:153-238 in rdma-core 44.0).
pub fn write_tree(root: &Path, ip: Ipv4Addr) -> Result<(), VerbsDeviceError> {
    let v = root.join("class/infiniband_verbs");
    let d = root.join("class/infiniband").join(DEVICE);
    for dir in [
        v.join(UVERBS),
        d.join("device"),
        d.join("ports/1/gids"),
        d.join("ports/1/gid_attrs/types"),
    ] {
        fs::create_dir_all(&dir).map_err(os(format!("creating {}", dir.display())))?;
    }
    let files: [(PathBuf, String); 10] = [
        // IB_USER_VERBS_MIN/MAX_ABI_VERSION are 3..6 (check_abi_version).
        (v.join("abi_version"), "6".into()),
        (v.join(UVERBS).join("ibdev"), DEVICE.into()),
        // 0:0: open_cdev accepts any character device and never waits for udev.
        (v.join(UVERBS).join("dev"), "0:0".into()),
        // The provider's match_min/max_abi_version.
        (v.join(UVERBS).join("abi_version"), "1".into()),
        (d.join("node_type"), "1: CA".into()),
        (d.join("node_guid"), "5c1c:e000:0000:0001".into()),
        (d.join("board_id"), "SLUICE".into()),
        // Matched by the provider's modalias entry "sluice:*".
        (d.join("device/modalias"), "sluice:engine".into()),
        (d.join("ports/1/gids/0"), gid_text(ip)),
        (d.join("ports/1/gid_attrs/types/0"), "RoCE v2".into()),
    ];
    for (path, text) in files {
        fs::write(&path, format!("{text}\n")).map_err(os(format!("writing {}", path.display())))?;
    }
    Ok(())
}

/// Where the state tmpfs is mounted: a directory created once and left empty on the host.
fn state_dir() -> PathBuf {
    if getuid().is_root() {
        PathBuf::from("/run/sluice/verbs")
    } else {
        std::env::temp_dir().join(format!("sluice-verbs-{}", getuid()))
    }
}

fn tmpfs(at: &Path) -> Result<(), VerbsDeviceError> {
    mount(
        Some("sluice-verbs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=755,size=1m"),
    )
    .map_err(nix_os(format!("mounting a tmpfs on {}", at.display())))
}

/// Moves this process into a mount namespace of its own (and, when not root, a user
/// namespace that maps the caller to itself), where it sets the device up; returns the
/// environment the program needs. Call it last before exec: the namespace is the program's.
pub fn enter(
    provider: &Path,
    ip: Ipv4Addr,
) -> Result<Vec<(&'static str, OsString)>, VerbsDeviceError> {
    let dir = state_dir();
    fs::create_dir_all(&dir).map_err(os(format!("creating {}", dir.display())))?;
    let ib = Path::new("/dev/infiniband");
    if !ib.exists() {
        // The mount point has to exist on the host's /dev (root only); it stays empty there.
        fs::create_dir(ib).map_err(os("creating /dev/infiniband (as root, once)"))?;
    }
    if getuid().is_root() {
        unshare(CloneFlags::CLONE_NEWNS).map_err(nix_os("unshare(CLONE_NEWNS)"))?;
    } else {
        let (uid, gid) = (getuid(), getgid());
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
            .map_err(nix_os("unshare(CLONE_NEWUSER | CLONE_NEWNS)"))?;
        fs::write("/proc/self/setgroups", "deny").map_err(os("writing setgroups"))?;
        fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(os("writing uid_map"))?;
        fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(os("writing gid_map"))?;
    }
    // Nothing mounted below propagates back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(nix_os("making the mounts private"))?;
    tmpfs(&dir)?;
    write_tree(&dir.join("sys"), ip)?;
    let link = dir.join("libsluice-rdmav34.so");
    std::os::unix::fs::symlink(provider, &link)
        .map_err(os(format!("linking {}", link.display())))?;
    // A real RDMA host's devices are hidden from the program: it runs over Sluice.
    tmpfs(ib)?;
    let node = ib.join(UVERBS);
    std::os::unix::fs::symlink("/dev/full", &node)
        .map_err(os(format!("linking {}", node.display())))?;
    Ok(vec![
        ("SYSFS_PATH", dir.join("sys").into_os_string()),
        ("RDMAV_DRIVERS", dir.join("libsluice").into_os_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gid_is_the_ipv4_mapped_address() {
        assert_eq!(
            gid_text(Ipv4Addr::new(10, 0, 0, 1)),
            "0000:0000:0000:0000:0000:ffff:0a00:0001"
        );
        assert_eq!(
            gid_text(Ipv4Addr::new(192, 168, 255, 254)),
            "0000:0000:0000:0000:0000:ffff:c0a8:fffe"
        );
    }

    #[test]
    fn programs_that_link_libibverbs_are_recognised() {
        let dir = std::env::temp_dir().join(format!("sluice-links-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let verbs = dir.join("verbs-prog");
        fs::write(&verbs, b"\x7fELF....libibverbs.so.1\0libc.so.6\0").unwrap();
        let plain = dir.join("plain-prog");
        fs::write(&plain, b"\x7fELF....libc.so.6\0").unwrap();
        assert!(links_libibverbs(verbs.as_os_str()));
        assert!(!links_libibverbs(plain.as_os_str()));
        assert!(!links_libibverbs(dir.join("missing").as_os_str()));
        assert!(!links_libibverbs(std::ffi::OsStr::new(
            "no-such-program-on-path"
        )));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_tree_has_what_libibverbs_reads() {
        let dir = std::env::temp_dir().join(format!("sluice-tree-test-{}", std::process::id()));
        write_tree(&dir, Ipv4Addr::new(10, 0, 0, 1)).unwrap();
        let read = |p: &str| fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(
            read("class/infiniband_verbs/sluice_uverbs0/ibdev"),
            "sluice0\n"
        );
        assert_eq!(read("class/infiniband_verbs/sluice_uverbs0/dev"), "0:0\n");
        assert_eq!(
            read("class/infiniband/sluice0/device/modalias"),
            "sluice:engine\n"
        );
        assert!(read("class/infiniband/sluice0/ports/1/gids/0").contains("ffff:0a00:0001"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
