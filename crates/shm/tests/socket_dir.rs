//! The engine's socket directory under a restrictive umask (its own test binary: the umask
//! is the process's, and no other test may create files while it is changed).

use std::os::unix::fs::PermissionsExt;

use nix::sys::stat::{umask, Mode};
use sluice_shm::control::listen_at;

#[test]
fn a_socket_directory_made_under_umask_077_is_reachable_by_the_group() {
    let base = std::env::temp_dir().join(format!("sluice-socket-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("base dir");
    let dir = base.join("run-sluice");
    let old = umask(Mode::from_bits_truncate(0o077));
    let listener = listen_at(&dir.join("engine.sock"));
    umask(old);
    let _listener = listener.expect("listen_at");
    let mode = std::fs::metadata(&dir)
        .expect("the directory")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755, "made 0755 whatever the umask, got {mode:o}");
    // An existing directory is left as it was.
    let existing = base.join("existing");
    std::fs::create_dir(&existing).expect("existing dir");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let _second = listen_at(&existing.join("engine.sock")).expect("listen_at");
    let mode = std::fs::metadata(&existing)
        .expect("dir")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o711, "an existing directory keeps its mode");
    let _ = std::fs::remove_dir_all(&base);
}
