//! Finding and running the external tools the lab drives (ip, sysctl, ethtool).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::error::LabError;

/// A tool the lab runs, with the Debian package that provides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    /// Program name.
    pub name: &'static str,
    /// Debian package.
    pub package: &'static str,
}

/// iproute2's `ip`.
pub const IP: Tool = Tool {
    name: "ip",
    package: "iproute2",
};
/// procps's `sysctl`.
pub const SYSCTL: Tool = Tool {
    name: "sysctl",
    package: "procps",
};
/// `ethtool`.
pub const ETHTOOL: Tool = Tool {
    name: "ethtool",
    package: "ethtool",
};

/// Directories searched after $PATH: root's tools live in sbin, which a user's PATH may lack.
const FALLBACK_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// The absolute path of `tool`, searching $PATH and then the sbin/bin directories.
pub fn find(tool: Tool) -> Result<PathBuf, LabError> {
    search(tool, false)
}

/// Like [`find`], but the system directories come before $PATH, so that the distribution's
/// packaged program runs rather than, say, a python3 shim earlier on PATH (the apps harness
/// runs unmodified packaged programs).
pub fn find_packaged(tool: Tool) -> Result<PathBuf, LabError> {
    search(tool, true)
}

fn search(tool: Tool, system_first: bool) -> Result<PathBuf, LabError> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let from_path = std::env::split_paths(&path_var);
    let system = FALLBACK_DIRS.iter().map(PathBuf::from);
    let dirs: Vec<PathBuf> = if system_first {
        system.chain(from_path).collect()
    } else {
        from_path.chain(system).collect()
    };
    dirs.into_iter()
        .map(|dir| dir.join(tool.name))
        .find(|p| is_executable(p))
        .ok_or(LabError::MissingTool {
            tool: tool.name,
            package: tool.package,
        })
}

/// Whether the program `name` is on $PATH or in the sbin/bin directories.
pub fn is_installed(name: &str) -> bool {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .chain(FALLBACK_DIRS.iter().map(PathBuf::from))
        .any(|dir| is_executable(&dir.join(name)))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The command line as text, for error messages.
fn describe(program: &Path, args: &[&OsStr]) -> String {
    let mut s = program
        .file_name()
        .unwrap_or(program.as_os_str())
        .to_string_lossy()
        .into_owned();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `program args...` and returns its output whatever its exit status.
pub fn output<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> Result<Output, LabError> {
    let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
    Command::new(program)
        .args(&args)
        .output()
        .map_err(|source| LabError::Spawn {
            command: describe(program, &args),
            source,
        })
}

/// Runs `program args...`; a non-zero exit is an error carrying its stderr.
pub fn run<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> Result<String, LabError> {
    let out = output(program, args)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
    let command = describe(program, &args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
        return Err(LabError::PermissionDenied { command, stderr });
    }
    Err(LabError::Command {
        command,
        code: out.status.code(),
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_shell_and_reports_missing_tools() {
        let sh = Tool {
            name: "sh",
            package: "dash",
        };
        assert!(find(sh).unwrap().is_absolute());
        let none = Tool {
            name: "sluice-no-such-tool",
            package: "nothing",
        };
        let err = find(none).unwrap_err();
        assert!(err.to_string().contains("apt-get install nothing"), "{err}");
    }

    #[test]
    fn failures_carry_command_and_stderr() {
        let sh = find(Tool {
            name: "sh",
            package: "dash",
        })
        .unwrap();
        assert_eq!(run(&sh, &["-c", "echo hi"]).unwrap(), "hi\n");
        let err = run(&sh, &["-c", "echo oops >&2; exit 3"]).unwrap_err();
        match &err {
            LabError::Command { code, stderr, .. } => {
                assert_eq!(*code, Some(3));
                assert_eq!(stderr.trim(), "oops");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("exit code 3"), "{err}");
        let denied = run(&sh, &["-c", "echo 'Operation not permitted' >&2; exit 2"]).unwrap_err();
        assert!(matches!(denied, LabError::PermissionDenied { .. }));
    }
}
