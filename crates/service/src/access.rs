//! Who may attach (docs/service.md, "Who may attach"): an attaching peer's credentials,
//! taken from the kernel (SO_PEERCRED) rather than from what the application says, and the
//! engine's access policy that admits or refuses them.

use std::fmt;
use std::os::fd::AsFd;

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

/// The engine's uid and root are always admitted.
const ROOT: u32 = 0;
/// CAP_NET_BIND_SERVICE's bit in a capability set (linux/capability.h).
const CAP_NET_BIND_SERVICE: u32 = 10;

/// Who may attach: root and the engine's own uid always; then members of `group`, and the
/// uids of `allow_uids`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    /// The group (gid) whose members may attach; the socket file is created `0660` in it.
    /// None: only root, the engine's uid and `allow_uids` (socket `0600`).
    pub group: Option<u32>,
    /// Uids admitted whatever their groups.
    pub allow_uids: Vec<u32>,
}

/// An attaching application's credentials, as the kernel reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Its process id (SO_PEERCRED; the pid at connect time).
    pub pid: u32,
    /// Its effective uid at connect time.
    pub uid: u32,
    /// Its effective gid at connect time.
    pub gid: u32,
    /// Its supplementary groups (/proc/<pid>/status, read at attach).
    pub groups: Vec<u32>,
    /// Whether its effective capabilities hold CAP_NET_BIND_SERVICE (CapEff, at attach).
    pub net_bind_service: bool,
}

/// Why the policy refused a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// The uid is neither root, nor the engine's, nor allowed, nor in the group.
    NotAllowed {
        /// The peer's uid.
        uid: u32,
        /// The group that would have admitted it, if one is configured.
        group: Option<u32>,
    },
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::NotAllowed {
                uid,
                group: Some(g),
            } => write!(
                f,
                "{}: uid {uid} is not in the engine's group (gid {g}) nor allowed by uid",
                sluice_shm::control::ACCESS_DENIED
            ),
            Denied::NotAllowed { uid, group: None } => write!(
                f,
                "{}: uid {uid} is not allowed to attach (the engine admits only root \
                 and its allowed uids)",
                sluice_shm::control::ACCESS_DENIED
            ),
        }
    }
}

impl AccessPolicy {
    /// Admits `peer` or says why not; `engine_uid` is the engine's own effective uid (an
    /// application of that uid could do whatever the engine does anyway).
    pub fn admit(&self, peer: &Credentials, engine_uid: u32) -> Result<(), Denied> {
        let in_group = self
            .group
            .is_some_and(|g| peer.gid == g || peer.groups.contains(&g));
        if peer.uid == ROOT || peer.uid == engine_uid || in_group {
            return Ok(());
        }
        if self.allow_uids.contains(&peer.uid) {
            return Ok(());
        }
        Err(Denied::NotAllowed {
            uid: peer.uid,
            group: self.group,
        })
    }
}

impl Credentials {
    /// Whether it may bind a port below `unprivileged_port_start` (uid 0 or
    /// CAP_NET_BIND_SERVICE, as Linux's inet_bind).
    pub fn may_bind_privileged(&self) -> bool {
        self.uid == ROOT || self.net_bind_service
    }

    /// The peer of a connected Unix socket; None if the kernel will not say.
    pub fn of_peer(sock: &impl AsFd) -> Option<Credentials> {
        let c = getsockopt(sock, PeerCredentials).ok()?;
        let (pid, uid, gid) = (c.pid() as u32, c.uid(), c.gid());
        // The rest comes from /proc: a process that exited since is left without
        // supplementary groups or capabilities (it can only lose by it).
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let (groups, cap_eff) = parse_status(&status);
        Some(Credentials {
            pid,
            uid,
            gid,
            groups,
            net_bind_service: cap_eff & (1 << CAP_NET_BIND_SERVICE) != 0,
        })
    }
}

/// The supplementary groups and the effective capability set from a /proc/<pid>/status
/// text; what is missing or malformed counts as none.
pub fn parse_status(status: &str) -> (Vec<u32>, u64) {
    let mut groups = Vec::new();
    let mut cap_eff = 0;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Groups:") {
            groups = rest
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect();
        } else if let Some(rest) = line.strip_prefix("CapEff:") {
            cap_eff = u64::from_str_radix(rest.trim(), 16).unwrap_or(0);
        }
    }
    (groups, cap_eff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Credentials {
        Credentials {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
            net_bind_service: false,
        }
    }

    #[test]
    fn root_and_the_engines_uid_are_always_admitted() {
        let p = AccessPolicy::default();
        assert_eq!(p.admit(&peer(0, 0, &[]), 0), Ok(()));
        assert_eq!(p.admit(&peer(0, 5, &[]), 1000), Ok(()));
        assert_eq!(p.admit(&peer(1000, 1000, &[]), 1000), Ok(()));
        assert!(p.admit(&peer(1001, 1001, &[]), 1000).is_err());
    }

    #[test]
    fn the_group_admits_by_primary_or_supplementary_gid() {
        let p = AccessPolicy {
            group: Some(900),
            allow_uids: vec![],
        };
        assert_eq!(p.admit(&peer(1000, 900, &[]), 0), Ok(()));
        assert_eq!(p.admit(&peer(1000, 1000, &[4, 900]), 0), Ok(()));
        let e = p.admit(&peer(65534, 65534, &[65534]), 0).unwrap_err();
        assert_eq!(
            e,
            Denied::NotAllowed {
                uid: 65534,
                group: Some(900)
            }
        );
        assert!(e.to_string().starts_with("permission denied"), "{e}");
    }

    #[test]
    fn the_allow_list_admits_uids_outside_the_group() {
        let p = AccessPolicy {
            group: Some(900),
            allow_uids: vec![1002],
        };
        assert_eq!(p.admit(&peer(1002, 1002, &[]), 0), Ok(()));
        assert!(p.admit(&peer(1003, 1003, &[]), 0).is_err());
        let none = AccessPolicy {
            group: None,
            allow_uids: vec![1002],
        };
        assert_eq!(none.admit(&peer(1002, 1002, &[]), 0), Ok(()));
        assert!(none.admit(&peer(1000, 900, &[900]), 0).is_err());
    }

    #[test]
    fn status_gives_groups_and_cap_net_bind_service() {
        let text = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 900 \n\
                    CapInh:\t0000000000000000\nCapEff:\t0000000000000400\n";
        let (groups, cap) = parse_status(text);
        assert_eq!(groups, vec![4, 24, 900]);
        assert_eq!(cap, 1 << 10);
        assert_eq!(parse_status("Groups:\nCapEff:\tzz\n"), (vec![], 0));
        let mut c = peer(1000, 1000, &[]);
        assert!(!c.may_bind_privileged());
        c.net_bind_service = true;
        assert!(c.may_bind_privileged());
        assert!(peer(0, 0, &[]).may_bind_privileged());
    }

    #[test]
    fn a_socket_pairs_peer_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = Credentials::of_peer(&a).expect("SO_PEERCRED");
        assert_eq!(c.pid, std::process::id());
        assert_eq!(c.uid, nix::unistd::geteuid().as_raw());
    }
}
