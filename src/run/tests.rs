//! A run's stop on the real cgroup backend, from inside: what only the MCP server's log shows
//! (`killed` of a cancelled or timed-out call), checked where a test can see it.

use std::time::Duration;

use super::*;
use crate::{Command, Containment, Error, StopReason};

/// Starts `argv` with `env` on top of reaper's, contained as `requested`.
async fn start_with(
    requested: Containment,
    argv: &[&str],
    env: Vec<(String, String)>,
) -> Result<Run, Error> {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .envs(env)
        .stdin(crate::Stdio::Null)
        .stdout(crate::Stdio::Null)
        .stderr(crate::Stdio::Null)
        .containment(requested)
        .delegation(crate::Delegation::Never);
    Run::start(&mut cmd.spec()).await.map(|(run, _)| run)
}

/// Starts `argv` contained in a cgroup of its own, or says why it cannot and returns `None`.
async fn start(argv: &[&str]) -> Option<Run> {
    match start_with(Containment::Cgroup, argv, Vec::new()).await {
        Ok(run) => Some(run),
        Err(e) => {
            // ci/test.sh names what the machine has: there a skip would be a vacuous pass.
            let required = std::env::var("REAPER_REQUIRE")
                .is_ok_and(|r| r.split_whitespace().any(|n| n == "cgroup"));
            assert!(
                !required,
                "no cgroup backend ({e}), which REAPER_REQUIRE says this machine has"
            );
            eprintln!("skipped: no cgroup backend here ({e})");
            None
        }
    }
}

/// Waits until the run has `n` live processes.
async fn wait_members(run: &Run, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while run.members().len() < n {
        assert!(
            Instant::now() < deadline,
            "the tree never had {n} processes"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// issue 10 item 9: `killed` undercounted when the first signal went to the leader alone (a
/// `reaper mcp` cancel or timeout: SIGINT to codex, then the cgroup): the leader died of the
/// SIGINT before the look that counted it, so a hanging codex was reported `killed=0` in 3 of 15
/// tries and one with a child `killed=1`. Every process alive when the stop began counts.
#[tokio::test(flavor = "current_thread")]
async fn a_stop_from_the_leader_counts_every_process_alive_when_it_began() {
    // The leaders must die of SIGINT, as codex does. A test run started in the background of a
    // non-interactive shell inherits SIGINT ignored, and so would every leader (exec keeps an
    // ignored signal ignored): each try would then wait out its whole grace (150 s in all).
    // SAFETY: SIG_DFL is the disposition the harness itself starts with; no handler runs, and
    // nothing in this binary relies on SIGINT being ignored.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
    // A leader that dies of SIGINT at once: codex that "just hangs".
    for i in 0..30 {
        let Some(mut run) = start(&["sleep", "600"]).await else {
            return;
        };
        wait_members(&run, 1).await;
        run.stop_from_leader(Signal::INT, Duration::from_secs(5), std::future::pending())
            .await;
        let out = run.finish(StopReason::Cancel, None).await;
        assert!(out.error.is_none(), "{:?}", out.error);
        assert_eq!(out.killed, 1, "try {i}: a hanging leader: {out:?}");
    }
    // The leader and a child that ignores SIGINT (a background job of a non-interactive sh):
    // the leader dies of the SIGINT, the child of the cgroup's SIGKILL after the grace.
    for i in 0..20 {
        let Some(mut run) = start(&["sh", "-c", "sleep 600 & exec sleep 601"]).await else {
            return;
        };
        wait_members(&run, 2).await;
        run.stop_from_leader(
            Signal::INT,
            Duration::from_millis(100),
            std::future::pending(),
        )
        .await;
        let out = run.finish(StopReason::Cancel, None).await;
        assert!(out.error.is_none(), "{:?}", out.error);
        assert_eq!(out.killed, 2, "try {i}: a leader with a child: {out:?}");
    }
}

/// issue 10 item 9: E2BIG from exec (10 MB of `env` in an MCP call) was reported as reaper's own
/// failure: "reaper cannot contain this call", exit 125. It is the command that cannot be
/// invoked (126, as GNU timeout says it), and the message says why and what to do. Both spawn
/// paths: clone3 (cgroup backend) and std's fork + exec (pgid backend), and both limits (one
/// string, the total). End to end: cli/tests/reports.rs, for `reaper run` and `reaper mcp`.
#[tokio::test(flavor = "current_thread")]
async fn an_exec_too_large_for_the_kernel_is_126_and_says_so() {
    let Some(mut probe) = start(&["true"]).await else {
        return;
    };
    probe
        .stop(Signal::KILL, Duration::ZERO, std::future::pending())
        .await;
    probe.finish(StopReason::Exited, None).await;
    let one_huge = vec![("REAPER_TEST_BIG".to_owned(), "x".repeat(10 << 20))];
    let many: Vec<(String, String)> = (0..64)
        .map(|i| (format!("REAPER_TEST_BIG{i}"), "x".repeat(100 << 10)))
        .collect();
    for requested in [Containment::Cgroup, Containment::Pgid] {
        for (what, env, detail) in [
            (
                "one variable",
                one_huge.clone(),
                "one argument or environment variable is 10485777 bytes",
            ),
            (
                "in all",
                many.clone(),
                "bytes in all (each string with its NUL, and a pointer to it), over this system's limit of ",
            ),
        ] {
            let e = match start_with(requested, &["true"], env).await {
                Ok(mut run) => {
                    run.stop(Signal::KILL, Duration::ZERO, std::future::pending())
                        .await;
                    run.finish(StopReason::Exited, None).await;
                    panic!("{requested:?}, {what}: the exec succeeded");
                }
                Err(e) => e,
            };
            assert_eq!(e.exit_code(), 126, "{requested:?}, {what}: {e}");
            let m = e.to_string();
            assert!(
                m.starts_with(
                    "cannot run 'true': its arguments and environment are too large for exec (E2BIG): "
                ) && m.contains(detail)
                    && m.ends_with("; pass large data through a file or stdin instead"),
                "{requested:?}, {what}: {m}"
            );
        }
    }
}

/// The cgroup backend's failed join before exec is a typed error naming the program (a face
/// adds what to do), exit 125.
#[test]
fn a_failed_join_is_reapers_error_naming_the_program() {
    let e = std::io::Error::other(containment::Error::join_failed());
    let backend = AnyBackend::Pgid(
        crate::containment::pgid::PgidBackend::new(crate::containment::pgid::Schedule::new(
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .expect("a process table"),
    );
    let err = spawn::classify(spawn::Failure::Io(e), &backend, "sleep");
    assert_eq!(err.exit_code(), 125);
    assert_eq!(
        err.to_string(),
        "cannot move 'sleep' into its cgroup before exec"
    );
    // The cause stays typed until a face prints it.
    let cause =
        std::error::Error::source(&err).and_then(|c| c.downcast_ref::<containment::Error>());
    assert_eq!(
        cause.map(containment::Error::kind),
        Some(crate::ContainErrorKind::JoinFailed)
    );
}
