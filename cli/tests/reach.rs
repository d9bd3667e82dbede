//! The tree cannot reach reaper, the caller or the MCP server: the leader leads a process group
//! of its own (under `--sandbox`, a session of its own too), so a contained `kill 0` — the
//! `trap 'kill 0' EXIT` clean-up idiom — or `kill -STOP 0` stays inside, and `vhangup(2)` from
//! the sandbox cannot hang up the caller's terminal.
//!
//! Each caller here runs in a process group the test creates, so that a regression harms only
//! that group, never the test harness.

mod common;
mod mcp_support;

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{have, reaper, Need};

/// `sh -c SCRIPT` in a process group of its own with `$REAPER` and `$ESCAPE` set; its output,
/// or `None` if it did not end within `limit` (then its group is SIGKILLed, and anything of
/// reaper's left is its guardian's to clean up).
fn caller(script: &str, limit: Duration) -> Option<Output> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("REAPER", env!("CARGO_BIN_EXE_reaper"))
        .env("ESCAPE", reaper_testkit::escape())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start the caller");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait for the caller").is_some() {
            return Some(child.wait_with_output().expect("the caller's output"));
        }
        if Instant::now() >= deadline {
            // SAFETY: kill(2) of the process group this test created for the caller.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `reaper run -- sh -c 'kill -TERM 0'`: the leader's own group gets the signal, not the
/// calling script, which goes on; on every backend.
#[test]
fn kill_0_in_the_tree_spares_the_caller() {
    for backend in ["auto", "subreaper", "pgid"] {
        let o = caller(
            &format!(
                r#""$REAPER" run -q --containment {backend} -- sh -c 'kill -TERM 0; sleep 5'
echo "caller survived rc=$?""#
            ),
            Duration::from_secs(20),
        )
        .expect("the caller ends");
        let out = text(&o.stdout);
        assert!(
            out.contains("caller survived rc=143"),
            "{backend}: the calling script was killed: {out}\n{}",
            text(&o.stderr)
        );
    }
}

/// timeout(1)'s face: GNU timeout puts COMMAND in a group apart from its caller, so the
/// `trap 'kill 0' EXIT` idiom in COMMAND reaches only it. reaper's face must spare the caller
/// the same way (and GNU's own timeout, run the same way, shows what the caller sees).
#[test]
fn timeout_face_trap_kill_0_spares_the_caller() {
    let script = |timeout: &str| {
        format!(
            r#"{timeout} 10 sh -c 'trap "kill 0" EXIT; true'
echo "caller survived rc=$?""#
        )
    };
    let o =
        caller(&script(r#""$REAPER" timeout"#), Duration::from_secs(20)).expect("the caller ends");
    let ours = text(&o.stdout);
    assert!(
        ours.contains("caller survived"),
        "the calling script was killed: {ours}\n{}",
        text(&o.stderr)
    );
    if have(Need::Program("timeout")) {
        let gnu = caller(&script("timeout"), Duration::from_secs(20)).expect("GNU's caller ends");
        assert_eq!(
            ours,
            text(&gnu.stdout),
            "GNU timeout's caller sees the same"
        );
    }
}

/// `--sandbox=pid`: `kill -STOP 0` in the tree used to stop reaper (and its caller), so the
/// timeout never fired. Now the run times out as asked.
#[test]
fn stop_0_in_a_pid_sandbox_does_not_stop_reaper() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let o = caller(
        r#""$REAPER" run -q --sandbox=pid -t 1s --grace 200ms -- sh -c 'echo stopping; kill -STOP 0; sleep 30'
echo "caller survived rc=$?""#,
        Duration::from_secs(15),
    )
    .expect("reaper was stopped by its tree: the run never timed out");
    let out = text(&o.stdout);
    assert!(out.contains("stopping\n"), "{out}");
    assert!(
        out.contains("caller survived rc=124"),
        "{out}\n{}",
        text(&o.stderr)
    );
}

/// `vhangup(2)` from `--sandbox=pid` (and `--sandbox`) used to hang up the caller's terminal:
/// its shell got SIGHUP. Now the command has no controlling terminal and no capability of the
/// initial user namespace: the call fails and the caller's shell gets nothing.
#[test]
fn vhangup_in_the_sandbox_spares_the_callers_terminal() {
    if !have(Need::Root) || !have(Need::Cgroup) || !have(Need::Script) {
        return;
    }
    for mode in ["--sandbox=pid", "--sandbox"] {
        let inner = format!(
            r#"trap "echo caller got SIGHUP" HUP; "$REAPER" run -q {mode} -- "$ESCAPE" vhangup; echo "caller after rc=$?""#
        );
        let o = caller(
            &format!("script -qec '{}' /dev/null", inner.replace('\'', r"'\''")),
            Duration::from_secs(20),
        )
        .expect("the caller ends");
        let out = text(&o.stdout);
        assert!(out.contains("ran vhangup"), "{mode}: {out}");
        assert!(
            !out.contains("vhangup rc=0"),
            "{mode}: vhangup worked: {out}"
        );
        assert!(!out.contains("caller got SIGHUP"), "{mode}: {out}");
        assert!(out.contains("caller after rc=0"), "{mode}: {out}");
    }
}

/// A codex wrapper with the `trap 'kill 0' EXIT` idiom used to send SIGTERM to the whole MCP
/// server, which shut down and killed every other running call. Now each call's codex leads a
/// group of its own: the other call completes, and the server serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_kill_0_spares_the_server_and_the_other_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = dir.path().join("codex");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\ntrap 'kill 0' EXIT\n\"$FAKE\" \"$@\"\n",
    )
    .expect("write the wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod the wrapper");
    let s = mcp_support::start(mcp_support::Options {
        args: &[],
        env: &[
            ("CODEX_CMD", wrapper.to_str().expect("utf-8 path")),
            ("FAKE", mcp_support::fake_codex()),
        ],
    })
    .await;
    let slow = s
        .start_call(
            "codex",
            serde_json::json!({"prompt": "thread\nsleep 2\nsay slow done\ndone"}),
        )
        .await;
    let quick = s
        .call(
            "codex",
            serde_json::json!({"prompt": "thread\nsay quick\ndone"}),
        )
        .await;
    // Its own wrapper dies of its `kill 0` (returncode -15): that is the call's own business.
    assert!(
        mcp_support::text(&quick).contains("quick"),
        "{}",
        mcp_support::text(&quick)
    );
    let slow = tokio::time::timeout(Duration::from_secs(30), slow.await_response())
        .await
        .expect("the slow call answers")
        .expect("the slow call is answered, not dropped by a shutdown");
    let slow = match slow {
        rmcp::model::ServerResult::CallToolResult(r) => r,
        other => panic!("not a tool result: {other:?}"),
    };
    let slow = mcp_support::text(&slow);
    assert!(slow.contains("slow done"), "{slow}");
    assert!(!slow.contains("shutting down"), "{slow}");
    let again = s
        .call(
            "codex",
            serde_json::json!({"prompt": "thread\nsay again\ndone"}),
        )
        .await;
    assert!(mcp_support::text(&again).contains("again"));
}

/// `mcp --sandbox=pid`: one call's `kill -STOP 0` used to stop the whole server — no answer,
/// no timeout, no other call served. Now the stopped call times out on its own while another
/// call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_stop_0_in_a_pid_sandbox_spares_the_server() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = dir.path().join("codex");
    let marker = dir.path().join("stopping");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprompt=$(cat)\ncase \"$prompt\" in *STOP-ME*) echo > '{m}'; kill -STOP 0; \
             sleep 100;; esac\nprintf '%s' \"$prompt\" | \"$FAKE\" \"$@\"\n",
            m = marker.display()
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod the wrapper");
    // The sandbox's root reaches the test's (root-only) directory only as declared.
    let declared = dir.path().to_str().expect("utf-8 path").to_owned();
    let s = mcp_support::start(mcp_support::Options {
        args: &[
            "--sandbox=pid",
            "--sandbox-rw",
            &declared,
            "--containment",
            "cgroup",
            "--test-timeout-unit",
            "50ms",
            "--grace",
            "200ms",
        ],
        env: &[
            ("CODEX_CMD", wrapper.to_str().expect("utf-8 path")),
            ("FAKE", mcp_support::fake_codex()),
        ],
    })
    .await;
    let stopped = s
        .start_call(
            "codex",
            serde_json::json!({"prompt": "STOP-ME", "timeout_seconds": 30}),
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the stopping call never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let quick = tokio::time::timeout(
        Duration::from_secs(10),
        s.call(
            "codex",
            serde_json::json!({"prompt": "thread\nsay quick\ndone"}),
        ),
    )
    .await
    .expect("the server was stopped by one call's kill -STOP 0");
    assert!(mcp_support::text(&quick).contains("quick"));
    let stopped = tokio::time::timeout(Duration::from_secs(20), stopped.await_response())
        .await
        .expect("the stopped call times out")
        .expect("the stopped call is answered");
    let stopped = match stopped {
        rmcp::model::ServerResult::CallToolResult(r) => r,
        other => panic!("not a tool result: {other:?}"),
    };
    assert_eq!(stopped.is_error, Some(true));
    assert!(
        mcp_support::text(&stopped).contains("timeout"),
        "{}",
        mcp_support::text(&stopped)
    );
}

/// The tree never shares reaper's process group (nor, under `--sandbox`, its session): checked
/// from inside, on every backend and with the sandbox.
#[test]
fn the_leader_leads_a_group_of_its_own() {
    let me = |field: usize| format!("$(cut -d' ' -f{field} /proc/$$/stat)");
    let script = format!(
        "echo \"leader pid=$$ pgid={} sid={} reaper-pgid=$(cut -d' ' -f5 /proc/$PPID/stat) \
         reaper-sid=$(cut -d' ' -f6 /proc/$PPID/stat)\"",
        me(5),
        me(6)
    );
    let mut modes: Vec<Vec<&str>> = vec![
        vec!["--containment", "subreaper"],
        vec!["--containment", "pgid"],
    ];
    if have(Need::Cgroup) {
        modes.push(vec!["--containment", "cgroup"]);
        if have(Need::Root) {
            modes.push(vec!["--containment", "cgroup", "--sandbox"]);
        }
    }
    for mode in modes {
        let o = reaper()
            .args(["run", "-q"])
            .args(&mode)
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .output()
            .expect("run reaper");
        let out = text(&o.stdout);
        let field = |k: &str| {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("{mode:?}: no {k} in {out}"))
                .to_owned()
        };
        assert_eq!(field("pgid"), field("pid"), "{mode:?}: {out}");
        assert_ne!(field("pgid"), field("reaper-pgid"), "{mode:?}: {out}");
        if mode.contains(&"--sandbox") {
            assert_eq!(field("sid"), field("pid"), "{mode:?}: {out}");
            assert_ne!(field("sid"), field("reaper-sid"), "{mode:?}: {out}");
        }
    }
}
