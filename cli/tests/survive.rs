//! Nothing outlives reaper: its parent's death, its stdin's EOF, and its own SIGKILL (alone or
//! with its whole process group) all end the run's tree.

mod common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// The first `--events` line of a reaper started with stderr piped (the `spawned` event).
fn first_event(child: &mut std::process::Child) -> serde_json::Value {
    let mut first = String::new();
    let mut err = child.stderr.take().expect("stderr is piped");
    let mut byte = [0u8; 1];
    while err.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        first.push(byte[0] as char);
    }
    serde_json::from_str(&first).expect("the first event is JSON")
}

#[test]
fn parent_sigkilled_with_die_with_parent_ends_the_tree_despite_a_long_grace() {
    let t = Tree::new();
    // `; :` keeps the shell as reaper's parent instead of exec'ing it.
    let mut reaper_cmd = vec![
        env!("CARGO_BIN_EXE_reaper").to_string(),
        "run".into(),
        "--die-with-parent".into(),
        "--grace".into(),
        "30s".into(),
        "--".into(),
    ];
    reaper_cmd.extend(t.fixture(&["tree", "20", "--setsid-every", "3"]));
    let quoted: Vec<String> = reaper_cmd.iter().map(|a| format!("'{a}'")).collect();
    let mut parent = Command::new("sh")
        .args(["-c", &format!("{}; :", quoted.join(" "))])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    t.wait_ready(Duration::from_secs(10));
    signal_child(&parent, Signal::KILL);
    let _ = parent.wait();
    // The 30 s grace is capped on parent death: the tree goes well before it would end.
    assert!(
        wait_until(Duration::from_secs(5), || t.all_dead()),
        "survivors: {:?}",
        t.survivors()
    );
    t.assert_all_dead("parent death");
}

#[test]
fn sigkill_to_reapers_process_group_still_kills_the_tree() {
    if !have(Need::Cgroup) {
        return;
    }
    let t = Tree::new();
    let mut cmd = reaper();
    cmd.args(["run", "--events", "--grace", "30s", "--"])
        .args(t.fixture(&["setsid-grandchild"]));
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    t.wait_ready(Duration::from_secs(10));
    let spawned = first_event(&mut child);
    let cgroup = std::path::PathBuf::from(spawned["cgroup"].as_str().unwrap());
    let guardian = guardian_of(child.id() as i32).expect("a guardian runs beside reaper");
    kill_group_and_expect_cleanup(&mut child, &t, &cgroup, guardian);
}

/// What an MCP client does to its stdio server: SIGKILL reaper's whole process group. Then the
/// guardian must kill the tree, remove the run's cgroup and exit.
fn kill_group_and_expect_cleanup(
    child: &mut std::process::Child,
    t: &Tree,
    cgroup: &std::path::Path,
    (gpid, gstart): (i32, u64),
) {
    let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process_group(pgid, Signal::KILL).unwrap();
    let _ = child.wait();
    assert!(
        wait_until(Duration::from_secs(5), || t.all_dead()),
        "survivors: {:?}",
        t.survivors()
    );
    t.assert_all_dead("reaper's group SIGKILLed");
    assert!(
        wait_until(Duration::from_secs(5), || !cgroup.exists()),
        "cgroup {} left behind",
        cgroup.display()
    );
    assert!(
        wait_until(Duration::from_secs(5), || !alive(gpid, gstart)),
        "the guardian outlived the run"
    );
}

/// issue 16 (the guardian forked, not exec'd): a reaper whose command line is too short to
/// carry `reaper guardian PID START` (typed as `reaper run -- sh` from PATH) still forks its
/// guardian rather than exec'ing it — the name then spans the argument and environment blocks
/// as one string, which only the forked guardian writes — and that guardian still kills the
/// tree and removes the cgroup when reaper's whole process group is SIGKILLed.
#[test]
fn a_guardian_forked_under_a_short_command_line_still_cleans_up() {
    if !have(Need::Cgroup) {
        return;
    }
    let t = Tree::new();
    // `r run --events -- sh`: 24 bytes of arguments, the fixture's command line on sh's stdin.
    let mut cmd = reaper();
    cmd.arg0("r")
        .args(["run", "--events", "--", "sh"])
        .process_group(0)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let script = format!("exec {}\n", t.fixture(&["setsid-grandchild"]).join(" "));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    t.wait_ready(Duration::from_secs(10));
    let spawned = first_event(&mut child);
    let cgroup = std::path::PathBuf::from(spawned["cgroup"].as_str().unwrap());
    let (gpid, gstart) = guardian_of(child.id() as i32).expect("a guardian runs beside reaper");
    let cmdline = std::fs::read(format!("/proc/{gpid}/cmdline")).unwrap();
    let start = stat(child.id() as i32).expect("reaper runs").1;
    assert_eq!(
        String::from_utf8_lossy(&cmdline),
        format!("reaper guardian {} {start}\0", child.id()),
        "the forked guardian's one-string name (an exec'd one has NUL-separated arguments)"
    );
    kill_group_and_expect_cleanup(&mut child, &t, &cgroup, (gpid, gstart));
}

/// A reaper in another PID namespace can have this reaper's pid and start time (two PID 1s
/// started in the same clock tick). Its names differ from this reaper's by their first field,
/// the PID namespace (and an older reaper's names have none). When this reaper is SIGKILLed,
/// its guardian takes over only the cgroups that carry its own namespace, pid and start time:
/// the other reapers' are never touched. Here the test stands in for those reapers: it makes
/// `reaper-OTHERNS-PID-START-999` and `reaper-PID-START-998` under the same parent, locks them,
/// and puts a process of its own in each.
#[test]
fn the_guardian_leaves_a_same_named_cgroup_another_owner_holds() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let parent = mount.join(format!("reaper-test-samename-{}", std::process::id()));
    std::fs::create_dir(&parent).unwrap();
    let mut child = reaper()
        .args(["run", "--events", "--cgroup-parent"])
        .arg(&parent)
        .args(["--", "sleep", "600"])
        .process_group(0)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let spawned = first_event(&mut child);
    let run_cgroup = std::path::PathBuf::from(spawned["cgroup"].as_str().unwrap());
    let start = stat(child.id() as i32).expect("reaper runs").1;
    // The other owners' cgroups: this reaper's pid and start time, locked, a live process in
    // each.
    let mut theirs = Vec::new();
    for name in [
        format!("reaper-{}-{}-{start}-999", pidns() + 1, child.id()),
        format!("reaper-{}-{start}-998", child.id()),
    ] {
        let dir = parent.join(name);
        std::fs::create_dir(&dir).unwrap();
        let lock = std::fs::File::open(&dir).unwrap();
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        let bystander = Command::new("sleep").arg("600").spawn().unwrap();
        std::fs::write(dir.join("cgroup.procs"), bystander.id().to_string()).unwrap();
        let start = stat(bystander.id() as i32).unwrap().1;
        theirs.push((dir, lock, bystander, start));
    }
    let (gpid, gstart) = guardian_of(child.id() as i32).expect("a guardian runs beside reaper");
    let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process_group(pgid, Signal::KILL).unwrap();
    let _ = child.wait();
    let cleaned = wait_until(Duration::from_secs(5), || {
        !run_cgroup.exists() && !alive(gpid, gstart)
    });
    let killed: Vec<String> = theirs
        .iter()
        .filter(|(dir, _, b, start)| !(alive(b.id() as i32, *start) && dir.exists()))
        .map(|(dir, ..)| dir.display().to_string())
        .collect();
    for (_, lock, mut bystander, _) in theirs {
        let _ = bystander.kill();
        let _ = bystander.wait();
        drop(lock);
    }
    remove_test_cgroup(&parent);
    assert!(cleaned, "the guardian did not clean up its own run");
    assert_eq!(
        killed,
        Vec::<String>::new(),
        "the guardian killed a process in another owner's cgroup"
    );
}

#[test]
fn the_guardian_exits_with_a_normal_run_and_is_in_the_report() {
    if !have(Need::Cgroup) {
        return;
    }
    let t = Tree::new();
    let out = reaper()
        .args(["run", "--report"])
        .arg(t.report())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    let rep = read_report(&t.report());
    let gpid = rep["guardian_pid"].as_i64().expect("guardian in report") as i32;
    assert!(
        wait_until(
            Duration::from_secs(5),
            || !matches!(state(gpid), Some(s) if s != 'Z')
        ),
        "guardian still running"
    );
    let out = reaper()
        .args(["run", "--no-guardian", "--report"])
        .arg(t.report())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    assert!(read_report(&t.report())["guardian_pid"].is_null());
}

#[test]
fn on_stdin_eof_relays_binary_data_and_lets_a_well_behaved_child_exit() {
    let mut child = reaper()
        .args(["run", "--on-stdin-eof", "1s", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let mut stdin = child.stdin.take().unwrap();
    let payload = data.clone();
    // Write on a thread: back-pressure means cat's output must be read meanwhile.
    let writer = std::thread::spawn(move || {
        stdin.write_all(&payload).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "cat exits by itself on EOF with its own status"
    );
    assert!(
        out.stdout == data,
        "relay is not byte-exact ({} of {} bytes)",
        out.stdout.len(),
        data.len()
    );
}

#[test]
fn on_stdin_eof_stops_a_child_that_ignores_eof() {
    let t = Tree::new();
    let start = Instant::now();
    let out = reaper()
        .args([
            "run",
            "--on-stdin-eof",
            "1s",
            "--grace",
            "200ms",
            "--report",
        ])
        .arg(t.report())
        .arg("--")
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(code(&out), 143, "{}", stderr(&out));
    assert!(
        took >= Duration::from_secs(1),
        "stopped before the 1s allowance: {took:?}"
    );
    assert_eq!(read_report(&t.report())["stop_reason"], "stdin-eof");
    assert!(
        stderr(&out).contains("stdin closed and the command did not exit within 1s"),
        "{}",
        stderr(&out)
    );
    t.assert_all_dead("stdin eof");
}

/// A closed stderr (the client that read it is gone) must not abort the teardown: writing
/// events and the summary line fails with EPIPE, and reaper still stops the tree and exits
/// with the right status.
#[test]
fn a_closed_stderr_does_not_abort_the_teardown() {
    let t = Tree::new();
    let mut child = reaper()
        .args([
            "run",
            "--events",
            "--timeout",
            "500ms",
            "--grace",
            "100ms",
            "--",
        ])
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take()); // the reader goes away
    let st = wait_with_deadline(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(124), "reaper must not die of EPIPE");
    t.assert_all_dead("closed stderr");
}

/// The guardian takes over whatever run cgroup of its reaper is left when reaper's pipe closes —
/// also after a `done`, when reaper could not clean up itself (a panicking call, survivors) —
/// under the directories reaper named, and touches nothing else there: not another reaper's
/// (same pid, other start time), not a kept one, not a foreign one.
#[test]
fn the_guardian_takes_over_what_reaper_left_watched() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().unwrap();
    let parent = mount.join(format!("reaper-test-guarded-{}", std::process::id()));
    std::fs::create_dir(&parent).unwrap();
    // This test process plays reaper: alive, so only the pipe tells the guardian anything.
    let me = std::process::id();
    let start = stat(me as i32).unwrap().1;
    let ns = pidns();
    let cg = parent.join(format!("reaper-{ns}-{me}-{start}-0"));
    let others: Vec<_> = [
        format!("reaper-{ns}-{me}-{}-0", start + 1),
        format!("reaper-kept-{ns}-{me}-{start}-1"),
        format!("reaper-{}-{me}-{start}-2", ns + 1),
        format!("reaper-{me}-{start}-3"),
        "reaper-test-unwatched".into(),
    ]
    .iter()
    .map(|n| parent.join(n))
    .collect();
    for d in std::iter::once(&cg).chain(&others) {
        std::fs::create_dir(d).unwrap();
    }
    let t = Tree::new();
    let join = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cg.display());
    let st = Command::new("sh")
        .args(["-c", &join, "sh"])
        .args(t.fixture(&["setsid-grandchild", "--leader-exits"]))
        .status()
        .unwrap();
    assert!(st.success());
    assert!(wait_until(Duration::from_secs(5), || t.recorded().len() == 3));
    let mut guardian = reaper()
        .args(["guardian", &me.to_string(), &start.to_string()])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = guardian.stdin.take().unwrap();
    let mut msg = format!("+{}", parent.display()).into_bytes();
    msg.push(0);
    pipe.write_all(&msg).unwrap();
    drop(pipe);
    let st = wait_with_deadline(&mut guardian, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0));
    t.assert_all_dead("guardian takeover");
    assert!(!cg.exists(), "the run cgroup left behind is removed");
    for d in &others {
        assert!(
            d.exists(),
            "{} is not this reaper's: left alone",
            d.display()
        );
        std::fs::remove_dir(d).unwrap();
    }
    std::fs::remove_dir(&parent).unwrap();
}

/// SIGKILL of reaper moments after it created the run's cgroup, before or while the leader
/// joins: the guardian still finds and removes the cgroup with whatever joined it.
#[test]
fn sigkill_right_after_start_leaves_no_cgroup() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().unwrap();
    for _ in 0..10 {
        let mut child = reaper()
            .args(["run", "--", "sleep", "93"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let prefix = run_cgroup_prefix(child.id());
        let mine = || {
            std::fs::read_dir(&mount)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                        .map(|e| e.path())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        assert!(
            wait_until(Duration::from_secs(5), || !mine().is_empty()),
            "no run cgroup appeared"
        );
        let cgs = mine();
        signal_child(&child, Signal::KILL);
        let _ = child.wait();
        assert!(
            wait_until(Duration::from_secs(5), || cgs.iter().all(|c| !c.exists())),
            "left behind: {cgs:?}"
        );
    }
}

/// A reaper nested inside another reaper's run has its guardian in that run's tree, so the outer
/// reaper's first signal (TERM, or timeout(1)'s `-s` signal) reaches the guardian too: it killed
/// it, and the inner reaper lost its cover against its own SIGKILL. The guardian now ignores every
/// stop signal; only SIGKILL (the outer `cgroup.kill`) ends it. Checked by the outcome: after the
/// signals, reaper is SIGKILLed and its guardian still empties and removes the run's cgroup.
#[test]
fn stop_signals_meant_for_the_tree_do_not_end_the_guardian() {
    if !have(Need::Cgroup) {
        return;
    }
    let t = Tree::new();
    let mut child = reaper()
        .args(["run", "--events", "--grace", "30s", "--"])
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    t.wait_ready(Duration::from_secs(10));
    let spawned = first_event(&mut child);
    let cgroup = std::path::PathBuf::from(spawned["cgroup"].as_str().unwrap());
    let (gpid, gstart) = guardian_of(child.id() as i32).expect("a guardian runs beside reaper");
    let guardian = pidfd_checked(gpid, gstart).expect("the guardian is alive");
    for sig in [
        Signal::TERM,
        Signal::INT,
        Signal::HUP,
        Signal::QUIT,
        Signal::ALARM,
        Signal::USR1,
        Signal::USR2,
    ] {
        rustix::process::pidfd_send_signal(&guardian, sig).unwrap();
    }
    signal_child(&child, Signal::KILL);
    let _ = child.wait();
    assert!(
        wait_until(Duration::from_secs(5), || t.all_dead()),
        "the guardian did not take over: survivors {:?}",
        t.survivors()
    );
    t.assert_all_dead("reaper SIGKILLed after its guardian got stop signals");
    assert!(
        wait_until(Duration::from_secs(5), || !cgroup.exists()),
        "cgroup {} left behind",
        cgroup.display()
    );
}
