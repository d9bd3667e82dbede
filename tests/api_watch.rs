//! Parent death and stdin EOF as library requests: [`reaper::Command::end_on_parent_death`] and
//! [`reaper::Command::end_on_stdin_eof`], used as an embedder would. Each test runs this test
//! binary again as the embedder (the `embedder` test, which does nothing unless told its role):
//! its parent must die, or its stdin close, while it supervises a hostile tree (a grandchild
//! that leaves its session and ignores SIGTERM, proven to have run by its pid file).
#![cfg(target_os = "linux")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio as StdStdio;
use std::time::{Duration, Instant};

use reaper::{Command, Containment, Stdio};

const ROLE: &str = "REAPER_API_WATCH_ROLE";
const DIR: &str = "REAPER_API_WATCH_DIR";

/// A shell whose grandchild leaves its session, ignores SIGTERM and writes its pid to
/// `pidfile`, then everything sleeps (the leader never reads its stdin).
fn hostile(pidfile: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 600' </dev/null & exec sleep 600",
            pidfile.display()
        ))
        .grace(Duration::from_millis(200))
        .containment(Containment::Pgid);
    cmd
}

/// The embedder: runs the hostile tree until its request ends it, says so in `ready` once the
/// grandchild runs, and writes the outcome's stop reason to `outcome`.
#[test]
fn embedder() {
    let (Ok(role), Ok(dir)) = (std::env::var(ROLE), std::env::var(DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = hostile(&dir.join("pid"));
        match role.as_str() {
            "parent" => cmd.end_on_parent_death().stdin(Stdio::Null),
            "stdin" => cmd.end_on_stdin_eof(Duration::from_millis(100)),
            other => panic!("no role {other}"),
        };
        let mut child = cmd.spawn().await.expect("spawns");
        while !dir.join("pid").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        std::fs::write(dir.join("ready"), "").unwrap();
        let outcome = child.wait().await;
        let line = format!("{:?} {}", outcome.stop_reason, outcome.survivors.len());
        std::fs::write(dir.join("outcome.tmp"), line).unwrap();
        std::fs::rename(dir.join("outcome.tmp"), dir.join("outcome")).unwrap();
    });
}

/// This test binary, as the embedder with `role`.
fn embedder_cmd(role: &str, dir: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["embedder", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir);
    cmd
}

/// Waits (a hang guard, not a timing claim) for `path` to exist.
fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what} never came");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(|c| c != 'Z' && c != 'X'))
        })
        .unwrap_or(false)
}

fn grandchild(dir: &Path) -> i32 {
    std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The embedder's parent (a shell) exits once the tree runs: the run stops with
/// `ParentDied`, and the TERM-ignoring grandchild is gone with it.
#[test]
fn the_parents_death_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut sh = std::process::Command::new("sh");
    // The shell starts the embedder, waits for its tree to run, and exits: the embedder's
    // parent is gone.
    sh.arg("-c")
        .arg(r#""$@" & while [ ! -e "$READY" ]; do sleep 0.01; done"#)
        .arg("sh")
        .arg(std::env::current_exe().unwrap())
        .args(["embedder", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, "parent")
        .env(DIR, dir.path())
        .env("READY", dir.path().join("ready"))
        .stdin(StdStdio::null());
    let status = sh.status().unwrap();
    assert!(status.success());
    let gc = grandchild(dir.path());
    wait_for(&dir.path().join("outcome"), "the embedder's outcome");
    let outcome = std::fs::read_to_string(dir.path().join("outcome")).unwrap();
    assert_eq!(outcome, "ParentDied 0");
    assert!(!alive(gc), "the grandchild {gc} outlived the run");
}

/// The embedder's stdin is relayed to the leader; when it closes, the leader (which never
/// reads) gets its allowance, then the run stops with `StdinEof`, grandchild and all.
#[test]
fn stdin_eof_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut embedder = embedder_cmd("stdin", dir.path())
        .stdin(StdStdio::piped())
        .spawn()
        .unwrap();
    wait_for(&dir.path().join("ready"), "the hostile tree");
    let gc = grandchild(dir.path());
    let mut stdin = embedder.stdin.take().unwrap();
    stdin.write_all(b"relayed\n").unwrap();
    drop(stdin);
    let status = embedder.wait().unwrap();
    assert!(status.success());
    let outcome = std::fs::read_to_string(dir.path().join("outcome")).unwrap();
    assert_eq!(outcome, "StdinEof 0");
    assert!(!alive(gc), "the grandchild {gc} outlived the run");
}
