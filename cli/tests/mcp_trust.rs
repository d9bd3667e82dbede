//! "Cancelling one call never touches another" holds against the calls themselves: one call's
//! codex orders every other call's run killed through its control socket (the fake codex's
//! `order-siblings`), and no owner obeys — plain, and with each call's tree in a sandbox.

mod common;
mod mcp_support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{have, Need};
use mcp_support::{alive, kill_recorded, start, text, Options};
use serde_json::json;

#[tokio::test]
async fn a_call_cannot_order_a_sibling_call_killed() {
    let mut modes: Vec<&[&str]> = vec![&[]];
    if have(Need::Root) && have(Need::Cgroup) {
        modes.push(&["--sandbox=pid"]);
    }
    for flags in modes {
        let records = tempfile::tempdir().expect("a records directory");
        std::fs::set_permissions(records.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let dir = records.path().to_str().expect("a UTF-8 path").to_owned();
        let s = start(Options {
            args: flags,
            env: &[("REAPER_RUNTIME_DIR", &dir)],
        })
        .await;
        let first = s
            .start_call("codex", json!({"prompt": "thread T1\nhang"}))
            .await;
        let victim = s.wait_for_role("codex").await;
        let has_socket = || {
            std::fs::read_dir(records.path())
                .map(|rd| {
                    rd.flatten()
                        .any(|e| e.file_name().to_string_lossy().ends_with(".sock"))
                })
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !has_socket() {
            assert!(
                std::time::Instant::now() < deadline,
                "{flags:?}: the first call's socket"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = s
            .call(
                "codex",
                json!({"prompt": "thread T2\norder-siblings kill\ndone"}),
            )
            .await;
        let said = text(&r);
        // In a sandbox that hides the records directory, no socket is there to ask.
        assert!(
            said.contains(".sock: ") || (!flags.is_empty() && said.contains("no sibling socket")),
            "{flags:?}: no sibling was asked: {said}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The first call's run, as `reaper ps` sees it (in a sandbox, fake-codex recorded the
        // pids of its own PID namespace).
        let ps = common::reaper()
            .args(["ps", "--json"])
            .env("REAPER_RUNTIME_DIR", &dir)
            .output()
            .expect("reaper ps");
        let runs: Vec<serde_json::Value> =
            serde_json::from_slice(&ps.stdout).expect("ps --json is a JSON array");
        assert!(
            runs.len() == 1
                && runs[0]["state"] == "running"
                && runs[0]["process_count"].as_u64() >= Some(1),
            "{flags:?}: the sibling call was killed by the other's order: {said}\n{runs:?}"
        );
        assert!(
            !flags.is_empty() || alive(&victim),
            "{flags:?}: the sibling call's codex was killed: {said}"
        );
        assert!(!said.contains("ok kill"), "{flags:?}: {said}");
        first
            .cancel(Some("done".into()))
            .await
            .expect("cancel sent");
        let procs = s.recorded();
        drop(s);
        kill_recorded(&procs);
    }
}
