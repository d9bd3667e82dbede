//! reaper's own priority: the `reaper` binary raises its main thread above the tree where it
//! may (root here), and nothing the command starts inherits that; a reaper started niced is
//! left as it is, and so is its tree; the library raises nothing unless asked.

mod common;

use std::process::Command;

use common::*;

/// `(nice, policy)` of a thread, from `/proc/PID/task/TID/stat` (fields 19 and 41).
fn sched_of(stat: &str) -> (i64, i64) {
    // The fields after `comm`, which may hold spaces, start after its closing parenthesis.
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state).
    (
        f[19 - 3].parse().expect("nice"),
        f[41 - 3].parse().expect("policy"),
    )
}

/// Runs a command under `prefix reaper run` that prints the stat line of reaper's main thread
/// (its parent's, as the leader is cloned by it), of itself, and of a grandchild in a session
/// of its own.
fn run_printing_stats(prefix: &[&str]) -> Vec<(i64, i64)> {
    let script = "cat /proc/$PPID/task/$PPID/stat; cat /proc/self/stat; \
                  setsid sh -c 'cat /proc/self/stat'";
    let mut cmd = Command::new(
        prefix
            .first()
            .copied()
            .unwrap_or(env!("CARGO_BIN_EXE_reaper")),
    );
    if !prefix.is_empty() {
        cmd.args(&prefix[1..]).arg(env!("CARGO_BIN_EXE_reaper"));
    }
    let out = cmd
        .args([
            "run",
            "-q",
            "--containment",
            "cgroup",
            "--",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("run reaper");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<(i64, i64)> = text.lines().map(sched_of).collect();
    assert_eq!(lines.len(), 3, "three stat lines: {text}");
    // The first line is reaper's: the leader's parent.
    assert!(
        text.lines().next().is_some_and(|l| l.contains("(reaper)")),
        "{text}"
    );
    lines
}

#[test]
fn reaper_runs_above_its_tree_which_inherits_nothing() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let stats = run_printing_stats(&[]);
    assert_eq!(
        stats[0],
        (-10, 0),
        "reaper's main thread: nice -10, SCHED_OTHER"
    );
    assert_eq!(stats[1], (0, 0), "the leader: the default");
    assert_eq!(stats[2], (0, 0), "a setsid'd grandchild: the default");
}

#[test]
fn a_niced_reaper_and_its_tree_stay_niced() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let stats = run_printing_stats(&["nice", "-n", "5"]);
    assert_eq!(stats, vec![(5, 0), (5, 0), (5, 0)]);
}

#[tokio::test(flavor = "current_thread")]
async fn the_library_raises_nothing_unless_asked() {
    if !have(Need::Root) {
        return;
    }
    let nice_here = || {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("stat");
        sched_of(&stat)
    };
    assert_eq!(nice_here(), (0, 0), "the test thread starts at the default");
    let mut cmd = reaper::Command::new("true");
    let outcome = cmd.spawn().await.expect("spawn").wait().await;
    assert_eq!(
        outcome.leader_status,
        Some(reaper::ExitStatus::Code(0)),
        "{outcome:?}"
    );
    assert_eq!(
        nice_here(),
        (0, 0),
        "the library left this thread as it was"
    );
    cmd.raise_priority(true);
    let outcome = cmd.spawn().await.expect("spawn").wait().await;
    assert_eq!(
        outcome.leader_status,
        Some(reaper::ExitStatus::Code(0)),
        "{outcome:?}"
    );
    assert_eq!(nice_here(), (-10, 0), "asked, it raised this thread");
}
