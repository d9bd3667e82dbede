//! Where the helper binaries are, for the integration tests of the `reaper-cli` package (cli/).
//! `reaper-fixture` and `fake-codex` belong to this package, so that `cargo install --path cli`
//! installs `reaper` alone, and Cargo's `CARGO_BIN_EXE_<name>` exists only for binaries of the
//! test's own package (a dev-dependency's binaries are not even built).
//!
//! A test executable is `<target>/<profile>/deps/<test>-<hash>`, and Cargo puts a package's
//! binaries in `<target>/<profile>/`: the helpers are looked for there. The first call in a test
//! process runs `cargo build -p reaper-testkit --bins` for that target directory and profile,
//! so a missing or stale helper is built before it is used (when they are fresh, Cargo only
//! checks: a fraction of a second). Cargo's lock on the target directory serializes concurrent
//! builds from several test processes; a `OnceLock` makes it one build per process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `reaper-fixture`, built if needed.
pub fn fixture() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| path_of("reaper-fixture"))
}

/// `reaper-escape`, built if needed.
pub fn escape() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| path_of("reaper-escape"))
}

/// `fake-codex`, built if needed.
pub fn fake_codex() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| path_of("fake-codex"))
}

/// `<target>/<profile>/NAME` once the testkit is built; panics with what went wrong.
fn path_of(name: &str) -> String {
    let dir = match built() {
        Ok(dir) => dir,
        Err(why) => panic!("the test helper {name} is not available: {why}"),
    };
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "the test helper {name} is not at {} after building reaper-testkit",
        path.display()
    );
    path.into_os_string()
        .into_string()
        .unwrap_or_else(|p| panic!("the path of {name} is not UTF-8: {p:?}"))
}

/// Builds the testkit's binaries once per test process; the directory they are in.
fn built() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(build).as_deref().map_err(String::clone)
}

fn build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot tell where this test executable is: {e}"))?;
    // <target>/<profile>/deps/<test>-<hash>
    let profile_dir = exe
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .ok_or_else(|| {
            format!(
                "{} is not in a Cargo target directory (<target>/<profile>/deps/)",
                exe.display()
            )
        })?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("no profile name in {}", profile_dir.display()))?;
    let above = profile_dir
        .parent()
        .ok_or_else(|| format!("no target directory above {}", profile_dir.display()))?;
    // With `--target TRIPLE` the profile directory is `<target>/<TRIPLE>/<profile>`; Cargo marks
    // the target directory itself with CACHEDIR.TAG.
    let (target_dir, triple) = if above.join("CACHEDIR.TAG").exists() {
        (above, None)
    } else {
        (
            above.parent().unwrap_or(above),
            above.file_name().and_then(|n| n.to_str()),
        )
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--quiet", "-p", "reaper-testkit", "--bins"])
        .arg("--manifest-path")
        // This package's manifest: the workspace (and so Cargo.lock) is found from it.
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    if let Some(triple) = triple {
        cmd.args(["--target", triple]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{cmd:?}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(profile_dir.to_path_buf())
}
