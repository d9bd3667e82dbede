//! What reaper reports is what happened: how many processes a stop ended (`killed`), and why a
//! command could not start.

mod common;
mod mcp_support;

use std::process::Stdio;

use common::{cgroup_usable, code, read_report, reaper, stderr};
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
        if backend == "cgroup" && !cgroup_usable() {
            eprintln!("skipped (cgroup): the cgroup backend is not usable here");
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
            "[ERROR] failed to launch codex binary: cannot run '{FAKE_CODEX}': its arguments and \
             environment are too large for exec (E2BIG): one argument or environment variable \
             is 10485765 bytes, over the 131072-byte limit for a single one; pass large data \
             through a file or stdin instead"
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
