//! `reaper run` end to end, for each backend and each way a run ends: no live survivor (a zombie
//! counts as dead), the right exit status, no cgroup left behind.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// Runs `reaper run --containment BACKEND --report R FLAGS -- fixture SCENARIO` to completion.
fn run_tree(
    tree: &Tree,
    backend: &str,
    flags: &[&str],
    scenario: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let report = tree.report();
    let mut args: Vec<String> = vec![
        "run".into(),
        "--containment".into(),
        backend.into(),
        "--report".into(),
        report.display().to_string(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(tree.fixture(scenario));
    let out = run_reaper(&args);
    let rep = read_report(&report);
    (out, rep)
}

/// Starts reaper in the background on a fixture scenario and waits for the tree to be built.
fn spawn_tree(
    tree: &Tree,
    backend: &str,
    flags: &[&str],
    scenario: &[&str],
) -> std::process::Child {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--containment".into(),
        backend.into(),
        "--report".into(),
        tree.report().display().to_string(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(tree.fixture(scenario));
    let child = reaper()
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn reaper");
    tree.wait_ready(Duration::from_secs(20));
    child
}

/// Whether a test of `backend` must skip (only the cgroup backend can be missing here).
fn skip_without_cgroup(backend: &str) -> bool {
    backend == "cgroup" && !have(Need::Cgroup)
}

macro_rules! backend_tests {
    ($modname:ident, $backend:literal) => {
        mod $modname {
            use super::*;
            const B: &str = $backend;

            #[test]
            fn leader_exits_setsid_grandchild_ignoring_term_dies() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--grace", "300ms"],
                    &["setsid-grandchild", "--leader-exits"],
                );
                assert_eq!(code(&out), 0, "{}", stderr(&out));
                t.assert_all_dead("leader exited");
                assert_clean_report(&rep);
                assert_eq!(rep["stop_reason"], "exited");
                assert_eq!(rep["backend"], B);
                assert!(rep["killed"].as_u64().unwrap() >= 2, "{rep}");
            }

            #[test]
            fn leader_exits_double_forked_daemon_dies() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let (out, rep) =
                    run_tree(&t, B, &["--grace", "300ms"], &["daemon", "--leader-exits"]);
                assert_eq!(code(&out), 0, "{}", stderr(&out));
                t.assert_all_dead("daemon");
                assert_clean_report(&rep);
            }

            #[test]
            fn timeout_stops_the_whole_tree_with_124() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let start = Instant::now();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--timeout", "1s", "--grace", "300ms"],
                    &["setsid-grandchild"],
                );
                let took = start.elapsed();
                assert_eq!(code(&out), 124, "{}", stderr(&out));
                assert!(
                    took >= Duration::from_secs(1),
                    "stopped before the timeout: {took:?}"
                );
                t.assert_all_dead("timeout");
                assert_clean_report(&rep);
                assert_eq!(rep["stop_reason"], "timeout");
                assert_eq!(
                    rep["signal"], "TERM",
                    "the leader died of the first signal: {rep}"
                );
                assert!(
                    stderr(&out).contains("reaper: timed out after 1s"),
                    "{}",
                    stderr(&out)
                );
            }

            #[test]
            fn timeout_with_preserve_status_returns_the_leaders() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--timeout", "500ms", "--preserve-status"],
                    &["trap-term", "42"],
                );
                assert_eq!(code(&out), 42, "{}", stderr(&out));
                assert_eq!(rep["exit_code"], 42);
                t.assert_all_dead("trap-term");
            }

            #[test]
            fn a_tree_of_200_with_setsid_escapees_dies() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--timeout", "1s", "--grace", "200ms"],
                    &["tree", "200", "--setsid-every", "10"],
                );
                assert_eq!(code(&out), 124, "{}", stderr(&out));
                assert_eq!(t.recorded().len(), 200);
                t.assert_all_dead("tree 200");
                assert_clean_report(&rep);
                assert_eq!(rep["killed"], 200, "{rep}");
            }

            #[test]
            fn a_fork_storm_still_forking_dies() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--timeout", "300ms", "--grace", "0"],
                    &["fork-storm", "3000", "--ready-at", "100"],
                );
                assert_eq!(code(&out), 124, "{}", stderr(&out));
                t.assert_all_dead("fork storm");
                assert_clean_report(&rep);
            }

            #[test]
            fn a_stopped_child_dies() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--timeout", "500ms", "--grace", "300ms"],
                    &["stopped-child"],
                );
                assert_eq!(code(&out), 124, "{}", stderr(&out));
                t.assert_all_dead("stopped child");
                assert_clean_report(&rep);
            }

            #[test]
            fn a_child_holding_stdout_does_not_hang_the_caller() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let mut args = vec![
                    "run".to_string(),
                    "--containment".into(),
                    B.into(),
                    "--grace".into(),
                    "200ms".into(),
                    "--".into(),
                ];
                args.extend(t.fixture(&["hold-stdout"]));
                let start = Instant::now();
                // output() reads stdout to EOF: it returns only once the holder is dead too.
                let out = reaper()
                    .args(&args)
                    .stdin(Stdio::null())
                    .output()
                    .expect("run");
                assert_eq!(code(&out), 0, "{}", stderr(&out));
                assert!(String::from_utf8_lossy(&out.stdout).contains("leader done"));
                assert!(start.elapsed() < Duration::from_secs(10));
                t.assert_all_dead("stdout holder");
            }

            fn stopped_by_signal(sig: Signal, name: &str) {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let mut child = spawn_tree(&t, B, &["--grace", "300ms"], &["setsid-grandchild"]);
                signal_child(&child, sig);
                let st = wait_with_deadline(&mut child, Duration::from_secs(10));
                assert_eq!(st.code(), Some(143), "leader died of TERM");
                t.assert_all_dead(name);
                let rep = read_report(&t.report());
                assert_clean_report(&rep);
                assert_eq!(rep["stop_reason"], "signal");
                assert_eq!(rep["received_signal"], name);
            }

            #[test]
            fn sigterm_to_reaper_stops_the_tree() {
                stopped_by_signal(Signal::TERM, "TERM");
            }

            #[test]
            fn sigint_to_reaper_stops_the_tree() {
                stopped_by_signal(Signal::INT, "INT");
            }

            #[test]
            fn sighup_to_reaper_stops_the_tree() {
                stopped_by_signal(Signal::HUP, "HUP");
            }

            #[test]
            fn a_second_signal_cuts_the_grace_short() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let mut child = spawn_tree(
                    &t,
                    B,
                    &["--grace", "30s", "--events"],
                    &["ignore-term", "600"],
                );
                signal_child(&child, Signal::INT);
                // Two INTs that reach reaper before it takes the first are one (standard
                // signals do not queue, and its signal stream coalesces too): send the second
                // only once reaper says it took the first, however long a loaded machine
                // makes that.
                let mut err =
                    std::io::BufReader::new(child.stderr.take().expect("reaper's stderr"));
                let mut line = String::new();
                loop {
                    line.clear();
                    let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap();
                    assert!(n > 0, "reaper ended without taking the first SIGINT");
                    let ev: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                    if ev["event"] == "reaper-signalled" {
                        break;
                    }
                }
                let start = Instant::now();
                signal_child(&child, Signal::INT);
                let st = wait_with_deadline(&mut child, Duration::from_secs(10));
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "grace was not cut short"
                );
                assert_eq!(
                    st.code(),
                    Some(137),
                    "the TERM-ignoring leader was SIGKILLed"
                );
                t.assert_all_dead("second signal");
            }

            #[test]
            fn exit_codes_and_signals_are_forwarded() {
                if skip_without_cgroup(B) {
                    return;
                }
                for (scenario, want) in [
                    (["exit", "0"], 0),
                    (["exit", "3"], 3),
                    (["exit", "255"], 255),
                    (["signal", "9"], 137),
                    (["signal", "15"], 143),
                ] {
                    let t = Tree::new();
                    let (out, rep) = run_tree(&t, B, &[], &scenario);
                    assert_eq!(code(&out), want, "{scenario:?}: {}", stderr(&out));
                    assert_clean_report(&rep);
                }
            }

            #[test]
            fn linger_lets_leftovers_finish_first() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let flag = t.dir.path().join("finished");
                let script = format!("(sleep 0.3; touch {}) & exit 0", flag.display());
                let out = run_reaper([
                    "run",
                    "--containment",
                    B,
                    "--linger",
                    "5s",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ]);
                assert_eq!(code(&out), 0, "{}", stderr(&out));
                assert!(
                    flag.exists(),
                    "the background job was killed before it finished"
                );

                let flag2 = t.dir.path().join("finished2");
                let script = format!("(sleep 0.5; touch {}) & exit 0", flag2.display());
                let out = run_reaper(["run", "--containment", B, "--", "sh", "-c", &script]);
                assert_eq!(code(&out), 0, "{}", stderr(&out));
                std::thread::sleep(Duration::from_millis(800));
                assert!(
                    !flag2.exists(),
                    "without --linger the leftover must be stopped at once"
                );
            }

            #[test]
            fn the_timeout_cuts_linger_short() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let start = Instant::now();
                let (out, rep) = run_tree(
                    &t,
                    B,
                    &["--timeout", "1s", "--linger", "30s", "--grace", "100ms"],
                    &["setsid-grandchild", "--leader-exits"],
                );
                assert_eq!(code(&out), 124, "{}", stderr(&out));
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "--linger outlived --timeout"
                );
                assert_eq!(rep["stop_reason"], "timeout");
                t.assert_all_dead("linger cut short");
            }

            #[test]
            fn events_are_json_lines_in_order() {
                if skip_without_cgroup(B) {
                    return;
                }
                let t = Tree::new();
                let mut args = vec![
                    "run".to_string(),
                    "--containment".into(),
                    B.into(),
                    "--events".into(),
                    "--timeout".into(),
                    "300ms".into(),
                    "--grace".into(),
                    "100ms".into(),
                    "--".into(),
                ];
                args.extend(t.fixture(&["ignore-term", "600"]));
                let out = run_reaper(&args);
                assert_eq!(code(&out), 124);
                let events: Vec<serde_json::Value> = stderr(&out)
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
                assert_eq!(names.first(), Some(&"spawned"), "{names:?}");
                assert_eq!(names.last(), Some(&"reaped"), "{names:?}");
                for want in ["timeout", "signalled", "leader-exited", "tree-empty"] {
                    assert!(names.contains(&want), "missing {want}: {names:?}");
                }
                assert!(events.iter().all(|e| e["t_ms"].is_u64()));
                t.assert_all_dead("events");
            }
        }
    };
}

backend_tests!(cgroup, "cgroup");
backend_tests!(subreaper, "subreaper");
backend_tests!(pgid, "pgid");

/// The ways a leader is started: with the cgroup backend by `clone3(CLONE_INTO_CGROUP)`, or by
/// std's spawn with a join in `pre_exec` where clone3 is refused (`REAPER_CLONE3=0` forces
/// that); with the other backends always by std's spawn. Each must start the command the same.
const SPAWN_PATHS: [(&str, &str); 4] = [
    ("cgroup", "1"),
    ("cgroup", "0"),
    ("subreaper", "1"),
    ("pgid", "1"),
];

#[test]
fn command_not_found_is_127_and_not_executable_is_126() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "echo hi\n").unwrap();
    let (p1, p2) = (dir.path().join("p1"), dir.path().join("p2"));
    std::fs::create_dir(&p1).unwrap();
    std::fs::create_dir(&p2).unwrap();
    std::fs::write(p1.join("prog"), "echo hi\n").unwrap();
    std::os::unix::fs::symlink("prog", p2.join("prog")).unwrap();
    for (backend, clone3) in SPAWN_PATHS {
        if skip_without_cgroup(backend) {
            continue;
        }
        let run = |cmd: &std::ffi::OsStr| {
            let out = reaper()
                .args(["run", "--containment", backend, "--"])
                .arg(cmd)
                .env("REAPER_CLONE3", clone3)
                .output()
                .unwrap();
            (code(&out), stderr(&out))
        };
        let (rc, err) = run("/nonexistent/program".as_ref());
        assert_eq!(rc, 127, "{backend}/{clone3}: {err}");
        assert_eq!(
            err.trim(),
            "reaper: cannot run '/nonexistent/program': command not found"
        );
        let (rc, err) = run("no-such-command-on-path".as_ref());
        assert_eq!(rc, 127, "{backend}/{clone3}: {err}");
        let (rc, err) = run(plain.as_os_str());
        assert_eq!(rc, 126, "{backend}/{clone3}: {err}");
        let want = format!(
            "reaper: cannot run '{}': Permission denied",
            plain.display()
        );
        assert!(err.starts_with(&want), "{backend}/{clone3}: {err}");
        // execvp(3)'s rule: EACCES from an earlier PATH entry is reported only when the search
        // runs out; an error that ends the search (here ELOOP) is reported as it is.
        let out = reaper()
            .args(["run", "--containment", backend, "--", "prog"])
            .env("REAPER_CLONE3", clone3)
            .env("PATH", format!("{}:{}", p1.display(), p2.display()))
            .output()
            .unwrap();
        assert_eq!(code(&out), 126, "{backend}/{clone3}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("Too many levels of symbolic links"),
            "{backend}/{clone3}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn usage_errors_are_125_with_a_reason() {
    let out = run_reaper(["run", "--timeout", "soon", "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("invalid duration 'soon'"),
        "{}",
        stderr(&out)
    );
    let out = run_reaper(["run", "--signal", "NOPE", "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("invalid signal 'NOPE'"),
        "{}",
        stderr(&out)
    );
    let out = run_reaper(["run"]);
    assert_eq!(code(&out), 125);
}

#[test]
fn stdin_stdout_env_and_cwd_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    // No `#!` line: found along PATH and run by /bin/sh, as execvp(3) does.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("echo-line");
    std::fs::write(
        &script,
        "read line; echo \"$line|$1|$REAPER_TEST_VAR|$(pwd)\"\n\
         grep -E '^(SigBlk|SigIgn)' /proc/self/status; grep '^0::' /proc/self/cgroup\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (backend, clone3) in SPAWN_PATHS {
        if skip_without_cgroup(backend) {
            continue;
        }
        let mut child = reaper()
            .args(["run", "--containment", backend, "--", "echo-line", "arg 1"])
            .env("REAPER_TEST_VAR", "v1")
            .env("REAPER_CLONE3", clone3)
            .env("PATH", &path)
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let what = format!("{backend}/{clone3}: {text}");
        assert_eq!(
            lines.next(),
            Some(
                format!(
                    "hello|arg 1|v1|{}",
                    dir.path().canonicalize().unwrap().display()
                )
                .as_str()
            ),
            "{what}"
        );
        let status: std::collections::HashMap<&str, u64> = lines
            .clone()
            .filter_map(|l| {
                let (k, v) = l.split_once(":\t")?;
                Some((k, u64::from_str_radix(v.trim(), 16).ok()?))
            })
            .collect();
        // Nothing blocked, and SIGPIPE (13) not ignored although reaper, a Rust program, does.
        assert_eq!(status.get("SigBlk"), Some(&0), "{what}");
        assert_eq!(
            status.get("SigIgn").map(|m| m & (1 << 12)),
            Some(0),
            "{what}"
        );
        let cgroup = lines.find(|l| l.starts_with("0::")).unwrap_or_default();
        assert_eq!(cgroup.contains("/reaper-"), backend == "cgroup", "{what}");
    }
}

/// Negative control (the test's survivor check can fail): the same setsid escapee, killed the
/// way other tools do it — SIGKILL to the leader's process group — is reported as a survivor.
#[test]
fn negative_control_process_group_kill_misses_the_setsid_escapee() {
    let t = Tree::new();
    let argv = t.fixture(&["setsid-grandchild"]);
    let mut child = std::process::Command::new(&argv[0]);
    std::os::unix::process::CommandExt::process_group(child.args(&argv[1..]), 0);
    let mut child = child.stdin(Stdio::null()).spawn().unwrap();
    t.wait_ready(Duration::from_secs(10));
    // The leader's child is in its group too: wait for its exit through a pidfd (SIGKILL is
    // acted on when the victim next runs, which a loaded machine can delay at will).
    let victim = t
        .recorded()
        .into_iter()
        .find(|(_, _, role)| role == "child")
        .and_then(|(pid, st, _)| pidfd_checked(pid, st))
        .expect("the fixture's child is recorded and alive");
    let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process_group(pgid, Signal::KILL).unwrap();
    let _ = child.wait();
    let mut fds = [rustix::event::PollFd::new(
        &victim,
        rustix::event::PollFlags::IN,
    )];
    let ts = rustix::time::Timespec {
        tv_sec: 30,
        tv_nsec: 0,
    };
    let n = rustix::event::poll(&mut fds, Some(&ts)).expect("poll the child's pidfd");
    assert_eq!(n, 1, "the SIGKILLed child did not exit within 30 s");
    let survivors = t.survivors();
    assert!(!t.all_dead(), "the oracle must see the escapee");
    assert_eq!(
        survivors.len(),
        1,
        "exactly the setsid grandchild survives a killpg: {survivors:?}"
    );
    assert!(survivors[0].starts_with("grandchild"), "{survivors:?}");
    t.kill_leftovers();
    t.assert_all_dead("cleanup after the negative control");
}

/// A reaper that died without teardown leaves a run cgroup and its tree behind; the next reaper
/// removes them because the owner is provably gone (pid and start time), and touches nothing
/// else.
#[test]
fn stale_cgroups_of_a_dead_reaper_are_swept() {
    if !have(Need::Cgroup) {
        return;
    }
    let t = Tree::new();
    let mount = cgroup2_mount().unwrap();
    // Under a parent of this test's own: only the reaper below, placed there, sweeps it (a
    // neighbour test's reaper sweeping it first made the fixture's join below fail).
    let parent = mount.join(format!("reaper-test-sweep-{}", std::process::id()));
    std::fs::create_dir(&parent).unwrap();
    // Named like a run cgroup of reaper pid 999999999 (above any pid_max): its owner is gone.
    let stale = parent.join(format!("reaper-999999999-{}-0", std::process::id()));
    // A decoy whose name is not reaper's run-cgroup pattern must survive the sweep.
    let decoy = parent.join(format!("reaper-test-decoy-{}", std::process::id()));
    // Removed however the test ends (children first); the stale one is emptied and removed by
    // reaper.
    struct RemoveOnDrop(Vec<std::path::PathBuf>);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            for dir in &self.0 {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
                let _ = reaper_platform::linux::cgroup::Cgroup::at(dir).remove_subtree();
            }
        }
    }
    let _guard = RemoveOnDrop(vec![decoy.clone(), stale.clone(), parent.clone()]);
    std::fs::create_dir(&stale).unwrap();
    std::fs::create_dir(&decoy).unwrap();
    let join = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", stale.display());
    let mut argv = vec!["sh".to_string(), "-c".into(), join, "sh".into()];
    argv.extend(t.fixture(&["setsid-grandchild", "--leader-exits"]));
    let st = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    t.wait_ready(Duration::from_secs(10));
    // The orphaned tree now lives on in the stale cgroup.
    let out = reaper()
        .args(["run", "--containment", "cgroup", "--cgroup-parent"])
        .arg(&parent)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    t.assert_all_dead("stale sweep");
    assert!(
        !stale.exists(),
        "stale cgroup {} not removed",
        stale.display()
    );
    assert!(
        decoy.exists(),
        "the sweep touched a cgroup that is not reaper's"
    );
}

/// A run cgroup whose owner is invisible here (another PID namespace) but alive — it holds the
/// owner lock on the directory — is not swept; once the lock is gone, it is.
#[test]
fn the_sweep_spares_a_live_owner_it_cannot_see() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().unwrap();
    let cg = mount.join(format!("reaper-999999998-{}-0", std::process::id()));
    std::fs::create_dir(&cg).unwrap();
    let dir = std::fs::File::open(&cg).unwrap();
    rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    let out = run_reaper(["run", "--containment", "cgroup", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(cg.exists(), "swept a cgroup whose owner holds the lock");
    drop(dir);
    let out = run_reaper(["run", "--containment", "cgroup", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let deadline = Instant::now() + Duration::from_secs(5);
    while cg.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = cg.exists();
    let _ = std::fs::remove_dir(&cg);
    assert!(!left, "the abandoned cgroup was not swept");
}

#[test]
fn cgroup_parent_places_the_run_cgroup() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().unwrap();
    let parent = mount.join(format!("reaper-test-parent-{}", std::process::id()));
    std::fs::create_dir(&parent).unwrap();
    let t = Tree::new();
    let out = reaper()
        .args(["run", "--containment", "cgroup", "--report"])
        .arg(t.report())
        .args(["--", "sh", "-c", "cat /proc/self/cgroup"])
        .env("REAPER_CGROUP_PARENT", &parent)
        .output()
        .unwrap();
    let rep = read_report(&t.report());
    std::fs::remove_dir(&parent).unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let cg = rep["cgroup"].as_str().unwrap();
    assert!(cg.starts_with(parent.to_str().unwrap()), "{cg}");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!(
            "0::/reaper-test-parent-{}/reaper-",
            std::process::id()
        )),
        "{shown}"
    );

    let out = run_reaper([
        "run",
        "--containment",
        "cgroup",
        "--cgroup-parent",
        "/no/such/parent",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("/no/such/parent is not a cgroup2 directory"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn auto_falls_back_to_subreaper_with_one_warning() {
    // A cgroup parent in which no cgroup can be created forces the fallback: a cgroup of the
    // test's own with `cgroup.max.descendants` 0 (mkdir fails with EAGAIN). (A parent that is
    // not a cgroup2 directory at all is a usage error instead: tests/cgroup_parent.rs.)
    struct Full(Option<std::path::PathBuf>);
    impl Drop for Full {
        fn drop(&mut self) {
            if let Some(p) = &self.0 {
                let _ = std::fs::remove_dir(p);
            }
        }
    }
    // Without a usable cgroup backend, auto falls back anyway.
    let full = Full(cgroup_usable().then(cgroup2_mount).flatten().map(|m| {
        let p = m.join(format!("reaper-test-full-{}", std::process::id()));
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("cgroup.max.descendants"), "0").unwrap();
        p
    }));
    let t = Tree::new();
    let mut cmd = reaper();
    cmd.args(["run", "--report"]).arg(t.report());
    if let Some(p) = &full.0 {
        cmd.arg("--cgroup-parent").arg(p);
    }
    let out = cmd
        .arg("--")
        .args(t.fixture(&["setsid-grandchild", "--leader-exits"]))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("reaper: warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("subreaper") && warnings[0].contains("reaper doctor"),
        "{err}"
    );
    assert_eq!(read_report(&t.report())["backend"], "subreaper");
    t.assert_all_dead("fallback");
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (major, minor)
}

#[test]
fn doctor_reports_the_backend_auto_picks() {
    let out = run_reaper(["doctor", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "kernel",
        "cgroup_mode",
        "cgroup2_mount",
        "own_cgroup",
        "cgroup_writable",
        "pidfd",
        "subreaper",
        "auto_backend",
        "why",
    ] {
        assert!(v.get(key).is_some(), "doctor --json lacks {key}: {v}");
    }
    assert!(["cgroup", "subreaper"].contains(&v["auto_backend"].as_str().unwrap()));
    // Every Linux since 5.7 creates children inside a cgroup; the probe must find it so.
    if v["cgroup_writable"] == true && kernel_at_least(5, 7) {
        assert_eq!(v["clone_into_cgroup"], true, "{v}");
    }
    let human = run_reaper(["doctor"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("auto backend"), "{human}");
    assert!(human.contains("clone3 into cgroup"), "{human}");
}

/// CI runners are often started by init without `setsid()`: reaper then sits in session 0, and
/// in a PID namespace its group and session may have no number at all (`getsid` answers 0).
/// Every backend must work there. The check runs inside a new PID namespace, by its init, right
/// after reaper exits: the namespace's end would kill any survivor and hide it.
#[test]
fn every_backend_works_when_the_session_and_group_have_no_number() {
    if !have(Need::PidNamespace) {
        return;
    }
    for backend in ["cgroup", "subreaper", "pgid"] {
        if skip_without_cgroup(backend) {
            continue;
        }
        let t = Tree::new();
        let script = r#"
            python3 -c 'import os; print("sid", os.getsid(0), "pgid", os.getpgrp())'
            "$@"; rc=$?
            if flock -n -x "$ORACLE" true; then echo "clean $rc"; else echo "leaked $rc"; fi
        "#;
        let mut args: Vec<String> = ["--pid", "--fork", "--mount-proc", "--", "sh", "-c"]
            .map(String::from)
            .to_vec();
        args.extend([
            script.into(),
            "sh".into(),
            env!("CARGO_BIN_EXE_reaper").into(),
        ]);
        args.extend(
            [
                "run",
                "--containment",
                backend,
                "--timeout",
                "1s",
                "--grace",
                "200ms",
                "--",
            ]
            .map(String::from),
        );
        args.extend(t.fixture(&["setsid-grandchild"]));
        let out = std::process::Command::new("unshare")
            .args(&args)
            .env("ORACLE", t.oracle())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("run unshare");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("sid 0 pgid 0"),
            "{backend}: the namespace did not hide the session: {stdout}"
        );
        assert!(
            stdout.contains("clean 124"),
            "{backend}: {stdout}\n{}",
            stderr(&out)
        );
    }
}

/// Runs `sh -c FEED | script -qec CMD /dev/null`: CMD on a fresh pseudo-terminal (its
/// controlling terminal, reaper's job in the foreground), typed at by FEED. Returns the
/// terminal's output without carriage returns, or None when `script` is not installed.
fn on_a_terminal(feed: &str, cmd: &str) -> Option<String> {
    if !have(Need::Script) {
        return None;
    }
    let pipeline = format!("({feed}) | script -qec \"$0\" /dev/null");
    let mut child = std::process::Command::new("sh")
        .args(["-c", &pipeline, cmd])
        .env("REAPER", env!("CARGO_BIN_EXE_reaper"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // Our own group (process_group(0) above): sh, script and what runs on the terminal.
            let g = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
            let _ = rustix::process::kill_process_group(g, Signal::KILL);
            let out = child.wait_with_output().unwrap();
            panic!(
                "hung on the terminal: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Some(String::from_utf8_lossy(&out.stdout).replace('\r', ""))
}

/// Every `want` appears in the terminal's output.
fn assert_shows(out: &str, want: &[&str]) {
    for w in want {
        assert!(out.contains(w), "no {w:?} in:\n{out}");
    }
}

/// A leader in a process group of its own (pgid backend, the macOS default) gets the terminal:
/// without the hand-over its first read stops it (SIGTTIN) and the run hangs.
#[test]
fn a_leader_in_its_own_group_can_read_the_terminal() {
    let Some(out) = on_a_terminal(
        "sleep 1; echo hello",
        "$REAPER run --containment pgid -- sh -c 'read x; echo got $x'; echo rc=$?",
    ) else {
        return;
    };
    assert_shows(&out, &["got hello", "rc=0"]);
}

/// Ctrl-Z (here the leader's own SIGTSTP) stops the job as the user's shell sees it — reaper
/// stops itself after taking the terminal back — and `fg` resumes the leader with the terminal.
#[test]
fn a_stopped_leader_stops_the_job_and_fg_resumes_it() {
    let Some(out) = on_a_terminal(
        "sleep 1; echo \"\\$REAPER run --containment pgid -- sh -c 'kill -TSTP \\$\\$; echo resumed; read y; echo got \\$y'\"; \
         sleep 2; echo fg; sleep 1; echo world; sleep 1; echo 'echo rc=$?; exit'",
        "bash --norc --noprofile -i",
    ) else {
        return;
    };
    assert_shows(&out, &["Stopped", "resumed", "got world", "rc=0"]);
}

/// `bg` after Ctrl-Z: the leader goes on in the background and the terminal stays with the
/// user's shell (which would exit on EIO if reaper took the terminal from it).
#[test]
fn bg_after_a_stop_leaves_the_terminal_with_the_shell() {
    let Some(out) = on_a_terminal(
        "sleep 1; echo \"\\$REAPER run --containment pgid -- sh -c 'kill -TSTP \\$\\$; sleep 1; echo bg-done'\"; \
         sleep 2; echo bg; sleep 3; echo 'echo still-here; exit'",
        "bash --norc --noprofile -i",
    ) else {
        return;
    };
    assert_shows(&out, &["Stopped", "bg-done", "still-here"]);
}

/// A wrapper in reaper's job (`sh -c 'reaper run …; …'`) stops with it on Ctrl-Z, so the
/// user's shell sees the job stopped and `fg` resumes all of it.
#[test]
fn a_stop_stops_the_whole_job_of_reaper_with_its_wrapper() {
    let Some(out) = on_a_terminal(
        "sleep 1; echo \"sh -c '\\$REAPER run --containment pgid -- sh -c \\\"kill -TSTP \\\\\\$\\\\\\$; echo resumed\\\"; echo wrapper-done'\"; \
         sleep 2; echo fg; sleep 2; echo 'exit'",
        "bash --norc --noprofile -i",
    ) else {
        return;
    };
    assert_shows(&out, &["Stopped", "resumed", "wrapper-done"]);
}

/// Where no shell does job control for reaper's group (it is orphaned: `ssh -t`, `script`),
/// a stop of the leader cannot stop reaper for good: it is passed on, discarded, and the leader
/// goes on with the terminal.
#[test]
fn a_stop_without_a_job_control_shell_does_not_freeze_the_run() {
    let Some(out) = on_a_terminal(
        "sleep 1; echo typed",
        "exec $REAPER run --containment pgid -- sh -c 'kill -TSTP $$; read x; echo resumed $x'",
    ) else {
        return;
    };
    assert!(out.contains("resumed typed"), "{out}");
}

/// In a pipeline reaper's group is the whole pipeline: the terminal is not handed to the
/// leader, which would stop the reader at the other end.
#[test]
fn a_pipeline_keeps_the_terminal() {
    // The last stage reads the terminal itself, as `less` does.
    let Some(out) = on_a_terminal(
        "sleep 1; echo 'echo piped | $REAPER run --containment pgid -- sh -c \"cat; sleep 2\" | \
         { read -r l; read -r t < /dev/tty; echo \"$l $t\"; }; echo rc=$?; exit'; \
         sleep 3; echo typed",
        "bash --norc --noprofile -i",
    ) else {
        return;
    };
    assert_shows(&out, &["piped typed", "rc=0"]);
    assert!(!out.contains("Stopped"), "{out}");
}

/// A command that cannot be started must not leave the terminal to its dead group: the shell
/// that runs next reads it as usual.
#[test]
fn a_failed_start_gives_the_terminal_back() {
    let Some(out) = on_a_terminal(
        "sleep 1; echo hi",
        "$REAPER run --containment pgid -- /nonexistent/cmd; read x; echo got $x",
    ) else {
        return;
    };
    assert_shows(&out, &["command not found", "got hi"]);
}

/// The same stop on the cgroup backend, where a guardian watches reaper and continues it when
/// something of its run stops it: reaper says it stops its own job, so the guardian leaves the
/// job stopped until the user's `fg` (the leader says `resumed` only after it). (`check
/// --interrupt-group`: on this backend only that gives the leader a group of its own, and so
/// the terminal.)
#[test]
fn a_job_control_stop_is_not_undone_by_the_guardian() {
    if !have(Need::Cgroup) {
        return;
    }
    // A cgroup of the test's (no stale cgroup elsewhere delays the run), removed however the
    // test ends.
    struct TestCgroup(std::path::PathBuf);
    impl Drop for TestCgroup {
        fn drop(&mut self) {
            remove_test_cgroup(&self.0);
        }
    }
    let parent = TestCgroup(
        cgroup2_mount()
            .expect("a cgroup2 mount")
            .join(format!("reaper-test-jobstop-{}", std::process::id())),
    );
    std::fs::create_dir(&parent.0).expect("create the test cgroup");
    let out = on_a_terminal(
        &format!(
            "sleep 1; echo \"\\$REAPER check --stdin inherit --interrupt-group --cgroup-parent {} -- sh -c 'kill -TSTP \\$\\$; echo resumed; read y; echo got \\$y'\"; \
             sleep 2; echo 'echo before-$((1+1))'; sleep 1; echo fg; sleep 1; echo world; sleep 1; echo 'echo rc=$?; exit'",
            parent.0.display()
        ),
        "bash --norc --noprofile -i",
    );
    let Some(out) = out else {
        return;
    };
    assert_shows(&out, &["Stopped", "resumed", "got world", "rc=0"]);
    // The lines the commands printed, not the terminal's echo of what was typed.
    let (stopped, before_fg, resumed) = (
        out.lines().position(|l| l.contains("Stopped")),
        out.lines().position(|l| l.contains("before-2")),
        out.lines().position(|l| l == "resumed"),
    );
    assert!(
        stopped < before_fg && before_fg < resumed,
        "the job went on before `fg`:\n{out}"
    );
}
