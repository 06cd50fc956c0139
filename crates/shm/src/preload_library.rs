//! Where `libsluice_preload.so` is: one rule for `sluice run`, the harnesses that start it and
//! the tests that preload it, so that none of them guesses on its own (or falls back to
//! another build without saying so).
//!
//! In order: `--preload`, else `$SLUICE_PRELOAD`, else next to the executable (the file beside
//! it or, in a cargo target directory, the newer of that and the copy in `deps/`, where
//! `cargo test` builds it); else, as a fallback that the caller reports, the other profile's
//! build in the same target directory, then the builds in the workspace this was built from.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The preload library's file name.
pub const PRELOAD_NAME: &str = "libsluice_preload.so";
/// Environment variable that overrides where the preload library is.
pub const PRELOAD_ENV: &str = "SLUICE_PRELOAD";
/// The cargo package that builds it.
pub const PRELOAD_PACKAGE: &str = "sluice-preload";

/// The workspace this crate was built from (where a missing library can be built).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// [`WORKSPACE`] as a plain path, if it is still there.
fn workspace() -> Option<PathBuf> {
    Path::new(WORKSPACE)
        .canonicalize()
        .ok()
        .filter(|w| w.join("Cargo.toml").is_file())
}

/// The preload library, found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// Its path.
    pub path: PathBuf,
    /// Which rule chose it ("--preload", "$SLUICE_PRELOAD", "next to the sluice executable").
    pub how: &'static str,
    /// Set when it is not where the rules look first: why this one was used instead (one
    /// line the caller prints on stderr).
    pub fallback: Option<String>,
}

impl Located {
    /// Its path, after saying on stderr (prefixed with `who`) which build it falls back to,
    /// if it does.
    pub fn announce(self, who: &str) -> PathBuf {
        if let Some(why) = &self.fallback {
            eprintln!("{who}: {why}");
        }
        self.path
    }
}

/// The preload library is not where it was looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// Where it was looked for first.
    pub path: PathBuf,
    /// Which rule chose that place.
    pub how: &'static str,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the preload library {} ({}) does not exist; build it with `{}`, or give its \
             path with --preload or ${PRELOAD_ENV}",
            self.path.display(),
            self.how,
            build_command(&self.path)
        )
    }
}

impl std::error::Error for Missing {}

/// The directory an executable's build lives in: its own, or for a cargo test binary (in
/// `<profile>/deps/`) the profile directory above it.
fn build_dir(exe: &Path) -> &Path {
    let dir = exe.parent().unwrap_or(Path::new("."));
    match dir.file_name() {
        Some(name) if name == "deps" => dir.parent().unwrap_or(dir),
        _ => dir,
    }
}

/// The library in `dir` or in `dir/deps/`, the newer if both exist; the one beside if neither.
fn in_build_dir(dir: &Path) -> PathBuf {
    let beside = dir.join(PRELOAD_NAME);
    let in_deps = dir.join("deps").join(PRELOAD_NAME);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(&beside), modified(&in_deps)) {
        (Some(a), Some(b)) if b > a => in_deps,
        (None, Some(_)) => in_deps,
        _ => beside,
    }
}

/// The first choice: `flag`, else `env` (`$SLUICE_PRELOAD`), else next to `exe`; whether it
/// exists is not checked.
pub fn preload_path(
    flag: Option<&Path>,
    env: Option<&OsStr>,
    exe: &Path,
) -> (PathBuf, &'static str) {
    if let Some(p) = flag {
        return (p.to_path_buf(), "--preload");
    }
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return (PathBuf::from(p), "$SLUICE_PRELOAD");
    }
    (
        in_build_dir(build_dir(exe)),
        "next to the sluice executable",
    )
}

/// Finds the library for `exe` (see the module docs). A path given by `flag` or `env` must
/// exist: there is no fallback from an explicit choice.
pub fn locate(flag: Option<&Path>, env: Option<&OsStr>, exe: &Path) -> Result<Located, Missing> {
    let (path, how) = preload_path(flag, env, exe);
    if path.is_file() {
        return Ok(Located {
            path,
            how,
            fallback: None,
        });
    }
    if flag.is_some() || env.is_some_and(|e| !e.is_empty()) {
        return Err(Missing { path, how });
    }
    let dir = build_dir(exe);
    let mut fallbacks = Vec::new();
    // The other profile of the same target directory.
    if let (Some(profile), Some(target)) = (dir.file_name(), dir.parent()) {
        for other in ["release", "debug"] {
            if profile != other && (profile == "release" || profile == "debug") {
                fallbacks.push((target.join(other), format!("the {other} build")));
            }
        }
    }
    // The workspace this was built from (an executable copied elsewhere).
    if let Some(w) = workspace() {
        for profile in ["release", "debug"] {
            let d = w.join("target").join(profile);
            if d != dir {
                fallbacks.push((d, format!("the {profile} build of the workspace")));
            }
        }
    }
    for (d, what) in fallbacks {
        let found = in_build_dir(&d);
        if found.is_file() {
            return Ok(Located {
                fallback: Some(format!(
                    "{PRELOAD_NAME} is not next to {}; using {what}, {}",
                    exe.display(),
                    found.display()
                )),
                path: found,
                how,
            });
        }
    }
    Err(Missing { path, how })
}

/// The cargo command that builds the library at `looked_for` (in a cargo target directory
/// `<target>/<profile>/`, that profile and target directory), run in the workspace this was
/// built from when it is still there.
pub fn build_command(looked_for: &Path) -> String {
    let dir = build_dir(looked_for);
    let profile = dir.file_name().and_then(OsStr::to_str);
    let (flag, in_target) = match profile {
        Some("release") => ("--release".to_string(), true),
        Some("debug") => (String::new(), true),
        _ => ("--release".to_string(), false),
    };
    let mut cmd = String::new();
    let workspace = workspace();
    if let Some(w) = &workspace {
        cmd += &format!("cd {} && ", w.display());
    }
    cmd += "cargo build";
    if !flag.is_empty() {
        cmd += " ";
        cmd += &flag;
    }
    cmd += " -p ";
    cmd += PRELOAD_PACKAGE;
    if in_target {
        let target = dir.parent().unwrap_or(dir);
        let default = workspace.map(|w| w.join("target"));
        let same = default.is_some_and(|d| target.canonicalize().is_ok_and(|t| t == d));
        if !same {
            cmd += &format!(" --target-dir {}", target.display());
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-preload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the file system, which Miri's isolation forbids")]
    fn an_explicit_path_must_exist() {
        let exe = Path::new("/opt/sluice/bin/sluice");
        let e = locate(Some(Path::new("/nowhere/x.so")), None, exe).unwrap_err();
        assert_eq!(
            (e.path.as_path(), e.how),
            (Path::new("/nowhere/x.so"), "--preload")
        );
        let e = locate(None, Some(OsStr::new("/nowhere/y.so")), exe).unwrap_err();
        assert_eq!(e.how, "$SLUICE_PRELOAD");
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the file system, which Miri's isolation forbids")]
    fn a_test_binary_in_deps_finds_its_profiles_library() {
        let d = scratch("deps");
        std::fs::create_dir_all(d.join("debug/deps")).unwrap();
        std::fs::write(d.join("debug/deps").join(PRELOAD_NAME), b"").unwrap();
        let exe = d.join("debug/deps/signals-0123");
        let found = locate(None, None, &exe).unwrap();
        assert_eq!(found.path, d.join("debug/deps").join(PRELOAD_NAME));
        assert_eq!(found.fallback, None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the file system, which Miri's isolation forbids")]
    fn the_other_profile_is_a_fallback_that_says_so() {
        let d = scratch("profile");
        std::fs::create_dir_all(d.join("debug")).unwrap();
        std::fs::create_dir_all(d.join("release")).unwrap();
        std::fs::write(d.join("debug").join(PRELOAD_NAME), b"").unwrap();
        let found = locate(None, None, &d.join("release/sluice")).unwrap();
        assert_eq!(found.path, d.join("debug").join(PRELOAD_NAME));
        let why = found.fallback.expect("a fallback is reported");
        assert!(
            why.contains("not next to") && why.contains("debug build"),
            "{why}"
        );
        assert!(why.contains(&found.path.display().to_string()), "{why}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the file system, which Miri's isolation forbids")]
    fn the_build_command_has_the_profile_and_target_directory() {
        let c = build_command(Path::new("/t/release/libsluice_preload.so"));
        assert!(
            c.ends_with("cargo build --release -p sluice-preload --target-dir /t"),
            "{c}"
        );
        let c = build_command(Path::new("/t/debug/libsluice_preload.so"));
        assert!(
            c.ends_with("cargo build -p sluice-preload --target-dir /t"),
            "{c}"
        );
        let c = build_command(Path::new("/opt/libsluice_preload.so"));
        assert!(
            c.ends_with("cargo build --release -p sluice-preload"),
            "{c}"
        );
        let ws = workspace().expect("built from this workspace");
        let c = build_command(&ws.join("target/release").join(PRELOAD_NAME));
        assert_eq!(
            c,
            format!(
                "cd {} && cargo build --release -p sluice-preload",
                ws.display()
            )
        );
    }
}
