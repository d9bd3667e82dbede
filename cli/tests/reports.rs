//! What reaper reports is what happened: how many processes a stop ended (`killed`), and why a
//! command could not start.

mod common;
mod mcp_support;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use common::{
    code, have, pidfd_checked, read_report, reaper, stderr, wait_until, wait_with_deadline, Need,
};
use serde_json::json;

/// `reaper run --timeout … --report` on `argv`; returns the report.
fn timed_out(dir: &std::path::Path, backend: &str, argv: &[&str]) -> serde_json::Value {
    let report = dir.join("report.json");
    let out = reaper()
        .args([
            "run",
            "--containment",
            backend,
            "--timeout",
            "1s",
            "-k",
            "5s",
            "--report",
        ])
        .arg(&report)
        .arg("--")
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("run reaper");
    assert_eq!(code(&out), 124, "{backend}: {}", stderr(&out));
    read_report(&report)
}

/// issue 10 item 9 (`reaper run`'s side): a timeout's report counts every process that was
/// alive when the stop began, whoever ended it: a leader alone is 1 every time, a leader with a
/// child 2. (The leader-first stop of `reaper mcp` is tested in src/run/tests.rs.)
#[test]
fn a_timeout_report_counts_every_process_it_stopped() {
    let dir = tempfile::Builder::new()
        .prefix("reaper-test-")
        .tempdir()
        .expect("temp dir");
    for backend in ["cgroup", "subreaper", "pgid"] {
        if backend == "cgroup" && !have(Need::Cgroup) {
            continue;
        }
        for i in 0..5 {
            let r = timed_out(dir.path(), backend, &["sleep", "600"]);
            assert_eq!(r["killed"], 1, "{backend}, try {i}: {r}");
            assert_eq!(r["survivors"], json!([]), "{backend}: {r}");
        }
        // The child is forked before the leader execs, well within the 1 s.
        for i in 0..3 {
            let r = timed_out(
                dir.path(),
                backend,
                &["sh", "-c", "sleep 600 & exec sleep 601"],
            );
            assert_eq!(r["killed"], 2, "{backend}, try {i}: {r}");
            assert_eq!(r["survivors"], json!([]), "{backend}: {r}");
        }
    }
}

/// issue 10 item 9: 10 MB of `env` in an MCP call made exec fail with E2BIG, reported as
/// "reaper cannot contain this call". It is a launch failure that says the arguments and
/// environment are too large, by how much, and what to do; and the server serves on.
#[tokio::test]
async fn an_mcp_call_with_10_mb_of_env_is_a_launch_failure_that_says_why() {
    use mcp_support::*;
    let s = start(Options::default()).await;
    let big = "x".repeat(10 << 20);
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\ndone", "env": {"BIG": big}}),
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    let head: String = t.chars().take(600).collect();
    assert!(
        t.starts_with(&format!(
            "[ERROR] failed to launch codex binary: cannot run '{}': its arguments and \
             environment are too large for exec (E2BIG): one argument or environment variable \
             is 10485765 bytes, over the 131072-byte limit for a single one; pass large data \
             through a file or stdin instead",
            fake_codex()
        )),
        "{head}"
    );
    assert!(!t.contains("reaper cannot contain"), "{head}");
    assert!(!t.contains("returncode="), "{head}");
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T2\nsay still here\ndone"}),
        )
        .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
}

/// execve(2)'s limit on arguments plus environment here: a quarter of the stack size limit, at
/// most 6 MiB, at least 128 KiB (fs/exec.c, `bprm_stack_limits`).
fn exec_limit() -> usize {
    let stack = rustix::process::getrlimit(rustix::process::Resource::Stack).current;
    let quarter = stack.map_or(usize::MAX, |s| usize::try_from(s / 4).unwrap_or(usize::MAX));
    quarter.clamp(128 << 10, 6 << 20)
}

/// issue 10 item 9, `reaper run`: E2BIG from the leader's exec was "cannot start …", exit 125
/// (reaper's own failure). It is 126 ("cannot invoke", as GNU timeout says) with a message that
/// says the arguments and environment are too large. reaper's own exec takes the same argv and
/// environment, so the leader's can only be larger by what differs: execve copies the file
/// name it runs as well as argv, and here that is a ~3 KB path where reaper's is short. reaper
/// is started ~1.5 KB under the limit, so its leader is ~1.5 KB over. Every spawn path.
#[test]
fn a_leader_too_large_to_exec_is_126_and_says_so() {
    let dir = tempfile::Builder::new()
        .prefix("reaper-test-")
        .tempdir()
        .expect("temp dir");
    let mut long = dir.path().to_path_buf();
    for _ in 0..12 {
        long.push("d".repeat(250));
    }
    std::fs::create_dir_all(&long).expect("a long directory path");
    let program = long.join("prog");
    std::fs::write(&program, "#!/bin/sh\nexit 0\n").expect("write the program");
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let program = program.to_str().expect("a UTF-8 path").to_owned();
    let reaper_path = env!("CARGO_BIN_EXE_reaper");
    let limit = exec_limit();
    for (backend, clone3) in [("cgroup", "1"), ("cgroup", "0"), ("pgid", "1")] {
        if backend == "cgroup" && !have(Need::Cgroup) {
            continue;
        }
        let env = [("REAPER_CLONE3", clone3), ("RUST_LOG", "warn")];
        let head = ["r", "run", "--containment", backend, "--", &program];
        // What execve counts for reaper itself: its file name, and every argument and variable
        // with its NUL and a pointer to it.
        let strings = |args: &[&str]| -> usize {
            args.iter().map(|a| a.len() + 1 + 8).sum::<usize>()
                + env
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2 + 8)
                    .sum::<usize>()
        };
        let base = reaper_path.len() + 1 + strings(&head);
        let mut left = limit - 1500 - base;
        const CHUNK: usize = 100_000;
        let mut pads: Vec<String> = Vec::new();
        while left > CHUNK + 9 + 20 {
            pads.push("p".repeat(CHUNK));
            left -= CHUNK + 9;
        }
        pads.push("p".repeat(left - 9));
        let out = std::process::Command::new(reaper_path)
            .arg0("r")
            .args(&head[1..])
            .args(&pads)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .output()
            .expect("reaper itself starts (its argv is under the limit)");
        let err = stderr(&out);
        assert_eq!(code(&out), 126, "{backend}/{clone3}: {err}");
        let want = format!(
            "reaper: cannot run '{program}': its arguments and environment are too large for \
             exec (E2BIG): "
        );
        assert!(
            err.starts_with(&want)
                && err.contains(&format!(", over this system's limit of {limit} bytes"))
                && err
                    .trim_end()
                    .ends_with("; pass large data through a file or stdin instead"),
            "{backend}/{clone3}: {err}"
        );
    }
}

/// A cgroup the test makes in the cgroup v1 freezer hierarchy, to hold one process frozen:
/// a frozen task stays frozen through SIGKILL until thawed. Dropped, it thaws, kills and waits
/// for that process (through a pidfd on its start time), then removes the cgroup.
struct Frozen {
    dir: std::path::PathBuf,
    pid: i32,
    starttime: u64,
}

impl Frozen {
    fn new(freezer: &std::path::Path, pid: i32, starttime: u64) -> Frozen {
        let dir = freezer.join(format!("reaper-test-{}-{pid}", std::process::id()));
        std::fs::create_dir(&dir).expect("make a freezer cgroup");
        let f = Frozen {
            dir,
            pid,
            starttime,
        };
        std::fs::write(f.dir.join("cgroup.procs"), pid.to_string()).expect("move into it");
        std::fs::write(f.dir.join("freezer.state"), "FROZEN").expect("freeze");
        assert!(
            wait_until(Duration::from_secs(5), || f.state() == "FROZEN"),
            "not frozen: {}",
            f.state()
        );
        f
    }

    fn state(&self) -> String {
        std::fs::read_to_string(self.dir.join("freezer.state"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    fn holds(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.trim() == self.pid.to_string())
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
        if let Some(fd) = pidfd_checked(self.pid, self.starttime) {
            let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
        }
        wait_until(Duration::from_secs(5), || {
            !common::alive(self.pid, self.starttime)
        });
        wait_until(Duration::from_secs(5), || {
            std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists()
        });
    }
}

/// `killed` counts only the processes that are gone. A process SIGKILL cannot end — held by
/// the cgroup v1 freezer — is named in `survivors` and is not also counted as killed: with it
/// and a plain `sleep` left behind by the leader, the report says 1 killed, 1 survivor.
#[test]
fn a_process_that_survives_sigkill_is_a_survivor_not_killed() {
    if !have(Need::Cgroup) || !have(Need::Freezer) {
        return;
    }
    let freezer = common::v1_freezer_mount().expect("freezer mount");
    let dir = tempfile::Builder::new()
        .prefix("reaper-test-")
        .tempdir()
        .expect("temp dir");
    let (pidfile, go, report, errfile) = (
        dir.path().join("frozen"),
        dir.path().join("go"),
        dir.path().join("report.json"),
        dir.path().join("stderr"),
    );
    // The leader leaves two sleeps behind when the test says go; the first will be frozen.
    let script = format!(
        "sleep 600 & echo $! > {p}.tmp && mv {p}.tmp {p}; sleep 601 & \
         while [ ! -e {g} ]; do sleep 0.05; done",
        p = pidfile.display(),
        g = go.display()
    );
    let mut child = reaper()
        .args([
            "run",
            "--containment",
            "cgroup",
            "--grace",
            "300ms",
            "--report",
        ])
        .arg(&report)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Not a pipe: the frozen survivor holds its copy open until thawed.
        .stderr(std::fs::File::create(&errfile).expect("stderr file"))
        .spawn()
        .expect("run reaper");
    assert!(
        wait_until(Duration::from_secs(10), || pidfile.exists()),
        "the leader did not start its sleeps"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    let (_, starttime) = common::stat(pid).expect("the sleep to freeze is alive");
    let frozen = Frozen::new(&freezer, pid, starttime);
    // It is there, and frozen (a frozen task shows as D, uninterruptible).
    assert!(frozen.holds(), "pid {pid} not in {}", frozen.dir.display());
    assert_eq!(common::state(pid), Some('D'), "pid {pid} is not frozen");

    std::fs::write(&go, "").expect("go");
    let st = wait_with_deadline(&mut child, Duration::from_secs(30));
    let err = std::fs::read_to_string(&errfile).unwrap_or_default();
    let r = read_report(&report);
    assert_eq!(st.code(), Some(125), "a survivor is exit 125: {err} {r}");
    // The same process outlived the stop, still frozen; the plain sleep was killed.
    assert!(common::alive(pid, starttime) && frozen.holds(), "{r}");
    assert_eq!(r["survivors"], json!([format!("sleep (pid {pid})")]), "{r}");
    assert_eq!(r["killed"], 1, "the survivor was counted as killed: {r}");

    // Thawed, it dies of the SIGKILL reaper sent: nothing else signals it here.
    frozen.thaw();
    assert!(
        wait_until(Duration::from_secs(5), || !common::alive(pid, starttime)),
        "pid {pid} outlived its thaw: reaper never sent it SIGKILL"
    );
    drop(frozen);
    // reaper left the run cgroup for its survivor; now empty, it is the test's to remove.
    if let Some(cg) = r["cgroup"].as_str() {
        let cg = std::path::Path::new(cg);
        if cg.exists() {
            common::remove_test_cgroup(cg);
        }
        assert!(!cg.exists(), "{} left behind", cg.display());
    }
}
