//! `reaper mcp`'s guarantees over a call's life: timeout, cancel, leftovers, shutdown,
//! concurrency, progress, memory. Every test checks that each process fake-codex started is
//! dead (zombies count as dead) and that the call's cgroup is gone.

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::*;
use rmcp::model::ServerResult;
use serde_json::json;

/// How long the tree may take to die after the moment it must. Generous: these machines are
/// shared and noisy; the real figures are measured by ci/bench.sh. Every bound below stays
/// well under what the failure it guards against would take (a 5 s grace, a 600 s sleeper
/// holding stdout).
const SLACK: Duration = Duration::from_secs(3);

fn server_cgroup(s: &Server) -> String {
    cgroup_of(s.pid()).unwrap_or_default()
}

/// The death oracle can fail: a live process is reported alive, a dead one dead.
#[tokio::test]
async fn the_oracle_sees_a_live_process() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep starts");
    let pid = child.id() as i32;
    let start = reaper_platform::linux::procfs::stat(pid)
        .expect("a start time")
        .starttime;
    let p = Proc {
        pid,
        starttime: start,
        role: "sleep".into(),
        cgroup: "-".into(),
    };
    assert!(alive(&p));
    assert_eq!(survivors(std::slice::from_ref(&p)).len(), 1);
    let _ = child.kill();
    // Killed but not reaped: a zombie, which is dead.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(&p) {
        assert!(Instant::now() < deadline, "SIGKILL did not kill sleep");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.wait();
    assert!(!alive(&p));
}

/// A timed-out call comes back within timeout + grace + 1 s, even though a setsid grandchild
/// that ignores SIGINT/SIGTERM holds codex's stdout open and codex ignores SIGINT; it carries
/// what codex printed, and nothing of the tree is left.
#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    // 30 "seconds" of 40 ms: 1.2 s.
    let s = start(Options {
        args: &["--test-timeout-unit", "40ms", "--grace", "500ms"],
        env: &[],
    })
    .await;
    let t0 = Instant::now();
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\nsay partial\nescapee\nchild\nignore-signals\nhang", "timeout_seconds": 30}),
        )
        .await;
    let took = t0.elapsed();
    let procs = s.recorded();
    let roles: Vec<&str> = procs.iter().map(|p| p.role.as_str()).collect();
    assert!(
        roles.contains(&"escapee") && roles.contains(&"child"),
        "{roles:?}"
    );
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(t.starts_with("[ERROR] timeout after 30s\n\nreturncode=-9\n\n[codex] thread_id=T1 status=UNKNOWN\n\nlast agent message:\npartial"), "{t}");
    assert_eq!(
        structured(&r),
        Some(json!({"threadId": "T1", "content": "partial"}))
    );
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_millis(1200 + 500) + SLACK,
        "took {took:?}"
    );
    // Dead when the result came back, not merely soon after.
    assert_eq!(survivors(&procs), []);
    assert_nothing_left(&procs, &server_cgroup(&s), SLACK).await;
}

/// codex is stopped with SIGINT first: a codex that handles it ends its turn within the grace,
/// and its last words are in the result. The default timeout comes from the environment.
#[tokio::test]
async fn timeout_interrupts_codex_with_sigint_first() {
    let s = start(Options {
        args: &["--test-timeout-unit", "20ms", "--grace", "5s"],
        env: &[("CODEX_CLI_MCP_SLIM_TIMEOUT", "31")],
    })
    .await;
    let t0 = Instant::now();
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\non-int turn interrupted\nhang"}),
        )
        .await;
    // Well before the 5 s grace ran out.
    assert!(
        t0.elapsed() < Duration::from_millis(600) + SLACK,
        "{:?}",
        t0.elapsed()
    );
    let t = text(&r);
    assert!(
        t.starts_with("[ERROR] timeout after 31s\n\nreturncode=130\n\nerrors:\nturn interrupted\n\n[codex] thread_id=T1 status=failed"),
        "{t}"
    );
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// notifications/cancelled: SIGINT, the grace, then the whole tree is killed, setsid
/// grandchild and signal-ignoring codex included. Another call is not touched.
#[tokio::test]
async fn cancel_kills_the_tree_and_only_that_tree() {
    let s = start(Options {
        args: &["--grace", "300ms"],
        env: &[],
    })
    .await;
    let other = s
        .start_call(
            "codex",
            json!({"prompt": "thread T2\nsleep 2\nsay survived\ndone"}),
        )
        .await;
    let handle = s
        .start_call(
            "codex",
            json!({"prompt": "thread T1\nescapee\nignore-signals\nhang"}),
        )
        .await;
    let escapee = s.wait_for_role("escapee").await;
    let codex: Vec<Proc> = s
        .recorded()
        .into_iter()
        .filter(|p| p.cgroup == escapee.cgroup)
        .collect();
    assert!(codex.len() >= 3, "{codex:?}");
    assert!(alive(&escapee));
    let t0 = Instant::now();
    handle
        .cancel(Some("test".into()))
        .await
        .expect("cancel sent");
    let left = wait_all_dead(&codex, Duration::from_millis(300) + SLACK).await;
    kill_recorded(&left);
    assert_eq!(left, [], "survivors {:?} after the cancel", t0.elapsed());
    assert_nothing_left(&codex, &server_cgroup(&s), SLACK).await;
    // The other call finishes as if nothing happened.
    let r = other
        .await_response()
        .await
        .expect("the other call's result");
    let ServerResult::CallToolResult(r) = r else {
        panic!("not a tool result: {r:?}");
    };
    assert_eq!(r.is_error, Some(false));
    assert_eq!(structured(&r).expect("structured")["content"], "survived");
    // And the server still serves.
    let r = s
        .call("codex", json!({"prompt": "thread T3\nsay again\ndone"}))
        .await;
    assert_eq!(r.is_error, Some(false));
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// codex exits and leaves a setsid grandchild holding its stdout: the result comes back at
/// once (not on pipe EOF, which would never come), and the grandchild is dead by then.
#[tokio::test]
async fn leftovers_are_killed_before_the_result() {
    let s = start(Options::default()).await;
    let t0 = Instant::now();
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\nescapee\nchild\nsay done here\ndone"}),
        )
        .await;
    assert!(
        t0.elapsed() < Duration::from_secs(2) + SLACK,
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(r.is_error, Some(false));
    assert!(text(&r).starts_with("done here\n\n[codex] thread_id=T1 status=completed"));
    let procs = s.recorded();
    assert!(procs.iter().any(|p| p.role == "escapee"));
    assert_eq!(survivors(&procs), []);
    assert_nothing_left(&procs, &server_cgroup(&s), SLACK).await;
}

/// The client closes stdin mid-call: the server kills the tree and exits within a second.
#[tokio::test]
async fn closing_stdin_stops_everything_within_a_second() {
    let s = start(Options::default()).await;
    let _call = s
        .start_call(
            "codex",
            json!({"prompt": "thread T1\nescapee\nignore-signals\nhang"}),
        )
        .await;
    s.wait_for_role("escapee").await;
    let procs = s.recorded();
    let cgroup = server_cgroup(&s);
    let t0 = Instant::now();
    // Cancelling the client service closes its transport: the server's stdin reaches EOF.
    let Server {
        mut child, client, ..
    } = s;
    let _ = client.cancel().await;
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("the server exits")
        .expect("wait");
    let took = t0.elapsed();
    let left = survivors(&procs);
    kill_recorded(&left);
    // Under the 5 s default grace: shutdown does not wait for it.
    assert!(took < SLACK, "exit took {took:?}");
    assert_eq!(status.code(), Some(0));
    assert_eq!(left, []);
    assert_nothing_left(&procs, &cgroup, SLACK).await;
}

/// SIGTERM (and INT, HUP): the same.
#[tokio::test]
async fn sigterm_stops_everything_within_a_second() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut s = start(Options::default()).await;
        let _call = s
            .start_call(
                "codex",
                json!({"prompt": "thread T1\nescapee\nignore-signals\nhang"}),
            )
            .await;
        s.wait_for_role("escapee").await;
        let procs = s.recorded();
        let cgroup = server_cgroup(&s);
        let t0 = Instant::now();
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our live child.
        unsafe {
            libc::kill(s.pid(), sig);
        }
        let status = tokio::time::timeout(Duration::from_secs(5), s.child.wait())
            .await
            .expect("the server exits")
            .expect("wait");
        let took = t0.elapsed();
        let left = survivors(&procs);
        kill_recorded(&left);
        assert!(took < SLACK, "signal {sig}: exit took {took:?}");
        assert_eq!(status.code(), Some(128 + sig), "signal {sig}");
        assert_eq!(left, [], "signal {sig}");
        assert_nothing_left(&procs, &cgroup, SLACK).await;
    }
}

/// `--max-concurrent 1`: the second call waits, says so, then runs.
#[tokio::test]
async fn excess_calls_queue_and_say_so() {
    let s = start(Options {
        args: &["--max-concurrent", "1", "--progress-interval", "0"],
        env: &[],
    })
    .await;
    let first = s
        .start_call(
            "codex",
            json!({"prompt": "thread T1\nsleep 1\nsay one\ndone"}),
        )
        .await;
    s.wait_for_role("codex").await;
    let t0 = Instant::now();
    let second = s
        .start_call("codex", json!({"prompt": "thread T2\nsay two\ndone"}))
        .await;
    let token = second.progress_token.clone();
    let r2 = second.await_response().await.expect("second result");
    assert!(
        t0.elapsed() >= Duration::from_millis(500),
        "it did not wait"
    );
    let r1 = first.await_response().await.expect("first result");
    for (r, want) in [(r1, "one"), (r2, "two")] {
        let ServerResult::CallToolResult(r) = r else {
            panic!("not a tool result");
        };
        assert_eq!(structured(&r).expect("structured")["content"], want);
    }
    let queued: Vec<String> = lock(&s.progress)
        .iter()
        .filter(|(_, p)| p.progress_token == token)
        .filter_map(|(_, p)| p.message.clone())
        .collect();
    assert_eq!(
        queued.first().map(String::as_str),
        Some("queued: 1 of 1 calls running, waiting for a free slot"),
        "{queued:?}"
    );
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// Without cgroups (the subreaper backend) calls cannot be told apart, so they run one at a
/// time; leftovers and timeouts are still killed.
#[tokio::test]
async fn subreaper_backend_runs_calls_one_at_a_time() {
    let s = start(Options {
        args: &[
            "--containment",
            "subreaper",
            "--max-concurrent",
            "4",
            "--progress-interval",
            "0",
            "--test-timeout-unit",
            "20ms",
            "--grace",
            "200ms",
        ],
        env: &[],
    })
    .await;
    let first = s
        .start_call(
            "codex",
            json!({"prompt": "thread T1\nescapee\nignore-signals\nhang", "timeout_seconds": 30}),
        )
        .await;
    s.wait_for_role("escapee").await;
    let second = s
        .start_call(
            "codex",
            json!({"prompt": "thread T2\nchild\nsay two\ndone"}),
        )
        .await;
    let token = second.progress_token.clone();
    let r1 = first.await_response().await.expect("first result");
    let r2 = second.await_response().await.expect("second result");
    let (ServerResult::CallToolResult(r1), ServerResult::CallToolResult(r2)) = (r1, r2) else {
        panic!("not tool results");
    };
    assert!(
        text(&r1).starts_with("[ERROR] timeout after 30s"),
        "{}",
        text(&r1)
    );
    assert_eq!(structured(&r2).expect("structured")["content"], "two");
    let first_note = lock(&s.progress)
        .iter()
        .find(|(_, p)| p.progress_token == token)
        .and_then(|(_, p)| p.message.clone());
    assert_eq!(
        first_note.as_deref(),
        Some("queued: 1 of 1 calls running, waiting for a free slot")
    );
    let procs = s.recorded();
    assert!(procs.iter().any(|p| p.role == "child"));
    assert_eq!(survivors(&procs), []);
}

/// Progress: periodic, rising, naming the last item; none after the result.
#[tokio::test]
async fn progress_notifications_rise_and_stop_at_the_result() {
    let s = start(Options {
        args: &["--progress-interval", "200ms"],
        env: &[],
    })
    .await;
    let h = s
        .start_call(
            "codex",
            json!({"prompt": "thread T1\nchild\nitem command_execution\nsleep 1.2\nsay ok\ndone"}),
        )
        .await;
    let token = h.progress_token.clone();
    let r = h.await_response().await.expect("a result");
    let done = Instant::now();
    assert!(matches!(r, ServerResult::CallToolResult(_)));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let notes: Vec<(Instant, f64, String)> = lock(&s.progress)
        .iter()
        .filter(|(_, p)| p.progress_token == token)
        .map(|(t, p)| (*t, p.progress, p.message.clone().unwrap_or_default()))
        .collect();
    assert!(notes.len() >= 4, "{notes:?}");
    for w in notes.windows(2) {
        assert!(w[1].1 > w[0].1, "progress must rise: {notes:?}");
    }
    assert!(
        notes.iter().all(|(t, _, _)| *t <= done),
        "a notification after the result"
    );
    assert!(
        notes
            .iter()
            .all(|(_, _, m)| m.starts_with("codex running for ")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|(_, _, m)| m.contains(" · 2 processes · last: command_execution")),
        "{notes:?}"
    );
}

/// Heartbeats a client's idle watchdog can rely on: progress at the interval while a call
/// waits for a slot, while codex prints nothing, and while a cancelled codex that ignores
/// SIGINT has its grace; every message short.
#[tokio::test]
async fn heartbeats_go_on_while_queued_silent_and_stopping() {
    let s = start(Options {
        args: &[
            "--max-concurrent",
            "1",
            "--progress-interval",
            "200ms",
            "--grace",
            "1s",
        ],
        env: &[],
    })
    .await;
    let first = s
        .start_call(
            "codex",
            json!({"prompt": "thread T1\nignore-signals\nhang"}),
        )
        .await;
    s.wait_for_role("codex").await;
    let second = s
        .start_call(
            "codex",
            json!({"prompt": "thread T2\nsleep 1.5\nsay two\ndone"}),
        )
        .await;
    let (t1, t2) = (first.progress_token.clone(), second.progress_token.clone());
    // The second call is queued for this long, then the first one stops for its 1 s grace.
    tokio::time::sleep(Duration::from_secs(2)).await;
    first
        .cancel(Some("enough".into()))
        .await
        .expect("the cancel is sent");
    let r = second.await_response().await.expect("second result");
    let ServerResult::CallToolResult(r) = r else {
        panic!("not a tool result");
    };
    assert_eq!(structured(&r).expect("structured")["content"], "two");
    let notes = |token| -> Vec<(Instant, String)> {
        lock(&s.progress)
            .iter()
            .filter(|(_, p)| p.progress_token == token)
            .map(|(t, p)| (*t, p.message.clone().unwrap_or_default()))
            .collect()
    };
    let (first_notes, second_notes) = (notes(t1), notes(t2));
    let count = |notes: &[(Instant, String)], prefix: &str| {
        notes.iter().filter(|(_, m)| m.starts_with(prefix)).count()
    };
    assert!(
        count(&second_notes, "queued: 1 of 1 calls running") >= 3,
        "{second_notes:?}"
    );
    assert!(
        count(&second_notes, "codex running for ") >= 3,
        "{second_notes:?}"
    );
    assert!(
        count(&first_notes, "codex stopping (cancelled)") >= 2,
        "{first_notes:?}"
    );
    // No silence longer than a few intervals from the first note to the result.
    for w in second_notes.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(
            gap < Duration::from_millis(1500),
            "{gap:?}: {second_notes:?}"
        );
    }
    for (_, m) in first_notes.iter().chain(&second_notes) {
        assert!(m.chars().count() <= 200, "{m}");
    }
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// `reaper mcp` SIGKILLed during two calls: it cannot clean up, its guardian does — both calls'
/// trees die (setsid escapees that ignore signals included) and their cgroups are removed.
#[tokio::test]
async fn sigkill_of_the_server_during_two_calls_kills_both_trees() {
    let mut s = start(Options::default()).await;
    let _a = s
        .start_call(
            "codex",
            json!({"prompt": "thread A\nescapee\nignore-signals\nhang"}),
        )
        .await;
    let _b = s
        .start_call(
            "codex",
            json!({"prompt": "thread B\nescapee\nignore-signals\nhang"}),
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.recorded().iter().filter(|p| p.role == "escapee").count() < 2 {
        assert!(Instant::now() < deadline, "two escapees within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let procs = s.recorded();
    let cgroup = server_cgroup(&s);
    let calls: std::collections::HashSet<&str> = procs.iter().map(|p| p.cgroup.as_str()).collect();
    assert_eq!(
        calls.len(),
        2,
        "each call in a cgroup of its own: {calls:?}"
    );
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our live child.
    unsafe {
        libc::kill(s.pid(), libc::SIGKILL);
    }
    let _ = s.child.wait().await;
    let left = wait_all_dead(&procs, SLACK).await;
    kill_recorded(&left);
    assert_eq!(left, []);
    assert_nothing_left(&procs, &cgroup, SLACK).await;
}
