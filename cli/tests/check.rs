//! `reaper check` catches the leaked-process bug class and passes the fixed variants.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

fn check_json(args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["check", "--json"];
    all.extend_from_slice(args);
    let out = run_reaper(&all);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (code(&out), v, stderr(&out))
}

fn survivors(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["runs"][0]["survivors"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A CLI starts an "app-server" in a session of its own that ignores SIGTERM; its parent stops
/// it with SIGTERM, 0.2 s, SIGKILL. The leaky CLI just dies; the fixed one kills the app-server's
/// group and waits for it first.
const PARENT: &str =
    r#"sh -c "$CLI" & c=$!; sleep 0.3; kill -TERM $c; sleep 0.2; kill -KILL $c 2>/dev/null; wait"#;
const LEAKY_CLI: &str =
    r#"setsid sh -c 'trap "" TERM; sleep 600' & trap 'exit 0' TERM; while :; do sleep 0.05; done"#;
const FIXED_CLI: &str = r#"setsid sh -c 'trap "" TERM; sleep 600' & app=$!; trap 'kill -KILL -$app; wait $app; exit 0' TERM; while :; do sleep 0.05; done"#;

#[test]
fn app_server_in_its_own_session_is_reported_and_the_fix_is_clean() {
    let out = reaper()
        .args(["check", "--json", "--", "sh", "-c", PARENT])
        .env("CLI", LEAKY_CLI)
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = survivors(&v);
    assert!(!s.is_empty(), "{v}");
    let app: Vec<_> = s
        .iter()
        .filter(|p| {
            p["escaped_by"]
                .as_array()
                .unwrap()
                .contains(&"own-session".into())
        })
        .collect();
    assert!(!app.is_empty(), "the app-server's session is reported: {v}");
    assert!(
        stderr(&out).is_empty() || !stderr(&out).contains("leaked:"),
        "json mode keeps the table off stderr"
    );

    let out = reaper()
        .args(["check", "--", "sh", "-c", PARENT])
        .env("CLI", FIXED_CLI)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "the fixed CLI is clean: {}", stderr(&out));
    assert!(
        stderr(&out).contains("clean: nothing survived 1s after the leader exited"),
        "{}",
        stderr(&out)
    );
}

/// A client launches a stdio server that has a child, sends a request the server blocks on,
/// and exits without terminating the server's tree. The client exits only once the server
/// says its child runs (a line on its stdout): on a loaded machine the server's start can take
/// longer than the settle time, and a child not yet forked is no leak to find.
const LEAKY_CLIENT: &str = r#"
import subprocess, sys
server = subprocess.Popen([sys.executable, "-c", """
import subprocess, sys, time
subprocess.Popen(["sleep", "600"])
print("ready", flush=True)
sys.stdin.readline()
time.sleep(600)
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
server.stdout.readline()
server.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}\n')
server.stdin.flush()
sys.exit(0)
"#;

#[test]
fn stdio_server_and_its_child_left_by_a_client_are_reported() {
    let (code, v, err) = check_json(&["--settle", "500ms", "--", "python3", "-c", LEAKY_CLIENT]);
    assert_eq!(code, 1, "{err}");
    let s = survivors(&v);
    let cmds: Vec<&str> = s.iter().map(|p| p["cmdline"].as_str().unwrap()).collect();
    assert_eq!(s.len(), 2, "server and its child: {cmds:?}");
    assert!(
        cmds.iter()
            .any(|c| c.contains("python3") || c.contains("python")),
        "{cmds:?}"
    );
    assert!(cmds.contains(&"sleep 600"), "{cmds:?}");
    let server = s
        .iter()
        .find(|p| p["cmdline"].as_str().unwrap().contains("python"))
        .unwrap();
    assert!(
        server["escaped_by"]
            .as_array()
            .unwrap()
            .contains(&"reparented".into()),
        "{server}"
    );
}

#[test]
fn a_sigkilled_launcher_orphans_its_real_binary_reported_as_reparented() {
    let t = Tree::new();
    let mut args = vec![
        "check".to_string(),
        "--json".into(),
        "--interrupt-after".into(),
        "500ms".into(),
        "--interrupt-signal".into(),
        "KILL".into(),
        "--settle".into(),
        "300ms".into(),
        "--".into(),
    ];
    args.extend(t.fixture(&["setsid-grandchild"]));
    let out = run_reaper(&args);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"][0]["interrupt"]["signal"], "KILL");
    assert_eq!(v["runs"][0]["leader"]["signal"], "KILL");
    let s = survivors(&v);
    assert_eq!(s.len(), 2, "child and setsid grandchild: {v}");
    let child = s.iter().find(|p| p["sid"] != p["pid"]).expect("the child");
    assert!(
        child["escaped_by"]
            .as_array()
            .unwrap()
            .contains(&"reparented".into()),
        "{child}"
    );
    let grandchild = s
        .iter()
        .find(|p| p["sid"] == p["pid"])
        .expect("the session leader");
    assert!(
        grandchild["escaped_by"]
            .as_array()
            .unwrap()
            .contains(&"own-session".into()),
        "{grandchild}"
    );
    for key in [
        "pid",
        "ppid",
        "pgid",
        "sid",
        "state",
        "exe",
        "cmdline",
        "age_s",
        "escaped_by",
    ] {
        assert!(child.get(key).is_some(), "survivor lacks {key}");
    }
    // Reported, then killed: nothing is left running.
    t.assert_all_dead("after check");
}

#[test]
fn group_interrupt_reaches_the_whole_group() {
    // TERM to the group kills the shell and its background child; nothing leaks. (Not INT: a
    // non-interactive shell starts background jobs with SIGINT ignored.)
    let (code, v, err) = check_json(&[
        "--interrupt-after",
        "200ms",
        "--interrupt-signal",
        "TERM",
        "--interrupt-group",
        "--",
        "sh",
        "-c",
        "sleep 600 & sleep 600",
    ]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["runs"][0]["interrupt"]["target"], "group");
    // The same to the leader alone leaves the background sleep behind.
    let (code, v, _) = check_json(&[
        "--interrupt-after",
        "200ms",
        "--interrupt-signal",
        "TERM",
        "--settle",
        "200ms",
        "--",
        "sh",
        "-c",
        "sleep 600 & sleep 600",
    ]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(survivors(&v).len(), 2, "both sleeps outlive the shell: {v}");
}

#[test]
fn a_clean_program_exits_0_and_expect_leak_inverts() {
    let (c, v, _) = check_json(&["--", "sh", "-c", "exit 0"]);
    assert_eq!(c, 0);
    assert_eq!(v["result"], "clean");
    assert_eq!(v["runs"][0]["leader"]["exit_code"], 0);
    assert_eq!(survivors(&v).len(), 0);
    let out = run_reaper(["check", "--expect-leak", "--", "true"]);
    assert_eq!(code(&out), 1, "expect-leak on a clean program fails");
    let out = run_reaper([
        "check",
        "--expect-leak",
        "--settle",
        "100ms",
        "--",
        "sh",
        "-c",
        "sleep 600 & exit 0",
    ]);
    assert_eq!(
        code(&out),
        0,
        "expect-leak on a leaky program passes: {}",
        stderr(&out)
    );
}

#[test]
fn repeat_counts_leaking_runs() {
    let (c, v, err) = check_json(&[
        "--repeat",
        "3",
        "--settle",
        "100ms",
        "--",
        "sh",
        "-c",
        "sleep 600 & exit 0",
    ]);
    assert_eq!(c, 1);
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    assert_eq!(v["leaked_runs"], 3);
    assert!(err.contains("3 of 3 runs leaked"), "{err}");
}

#[test]
fn json_schema() {
    let (_, v, _) = check_json(&["--settle", "100ms", "--", "sh", "-c", "sleep 600 & exit 4"]);
    for key in ["command", "result", "runs", "leaked_runs", "error"] {
        assert!(v.get(key).is_some(), "report lacks {key}: {v}");
    }
    let run = &v["runs"][0];
    for key in [
        "result",
        "backend",
        "cgroup",
        "leader",
        "interrupt",
        "settle_ms",
        "survivors",
        "killed",
    ] {
        assert!(run.get(key).is_some(), "run lacks {key}: {run}");
    }
    assert_eq!(run["leader"]["exit_code"], 4);
    assert_eq!(run["settle_ms"], 100);
    assert_eq!(
        v["command"],
        serde_json::json!(["sh", "-c", "sleep 600 & exit 4"])
    );
}

#[test]
fn a_missing_command_is_exit_2() {
    let out = run_reaper(["check", "--", "/nonexistent/cmd"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out)
            .contains("check could not run: cannot run '/nonexistent/cmd': command not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn timeout_is_reported_not_counted_as_a_leak() {
    let (c, v, err) = check_json(&["--timeout", "300ms", "--", "sleep", "600"]);
    assert_eq!(c, 2, "{err}");
    assert_eq!(v["result"], "timeout");
    assert_eq!(v["runs"][0]["leader"]["timed_out"], true);
    assert_eq!(v["leaked_runs"], 0);
}

#[test]
fn keep_leaves_survivors_running_and_says_where() {
    let t = Tree::new();
    let mut args = vec![
        "check".to_string(),
        "--keep".into(),
        "--json".into(),
        "--settle".into(),
        "100ms".into(),
        "--".into(),
    ];
    args.extend(t.fixture(&["setsid-grandchild", "--leader-exits"]));
    // The kept processes hold CMD's stdout and stderr (reaper's stderr, with --json): send
    // those to /dev/null, or reading them to EOF would wait for processes that --keep keeps.
    let out = reaper()
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"][0]["killed"], false);
    let kept = v["runs"][0]["cgroup"].as_str().unwrap_or("");
    assert!(kept.is_empty() || kept.contains("/reaper-kept-"), "{kept}");
    assert!(!t.survivors().is_empty(), "--keep kept them");
    // Clean up what --keep left: the processes, then the cgroup.
    t.kill_leftovers();
    t.assert_all_dead("after --keep cleanup");
    if let Some(cg) = v["runs"][0]["cgroup"].as_str() {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(cg).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!std::path::Path::new(cg).exists());
    }
}

/// SIGTERM to `reaper check` while CMD runs: the tree is stopped, and the check says it could
/// not run (exit 2).
#[test]
fn a_signal_to_check_stops_the_tree_and_exits_2() {
    let t = Tree::new();
    let child = reaper()
        .args(["check", "--containment", "subreaper", "--"])
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    t.wait_ready(Duration::from_secs(10));
    signal_child(&child, rustix::process::Signal::TERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("reaper got SIGTERM; stopped CMD and everything it started"));
    t.assert_all_dead("check signalled");
}
