//! `reaper check --suite`: every case is scored as leaking under a wrapper known to leak it, as
//! clean under reaper's own faces, and a wrapper that kills its caller's group as a wrong kill.
//! No case passes vacuously: the suite itself fails a case whose tree did not record itself
//! (`did-not-run`), which a wrapper that never runs `{}` proves here.

mod common;

use common::*;
use std::path::Path;

const CASES: &[&str] = &["orphan", "setsid", "daemon", "pipe", "storm", "stopped"];

/// The case that runs only with `--cgroup-parent` (its process moves into a cgroup the suite
/// creates there).
const AWAY: &str = "cgroup";

/// A wrapper that runs the case in the background and, on SIGTERM or SIGINT, kills only its
/// child (the tree's leader), then exits: what a naive tool runner does.
const KILLS_ONLY_ITS_CHILD: &str = r#"{} & c=$!; trap 'kill -KILL $c; exit 143' TERM INT; wait $c"#;

/// On SIGTERM, kills its own process group: the group it was started in, its caller's.
const KILLS_ITS_GROUP: &str = r#"trap 'kill -KILL 0' TERM INT; {} & wait"#;

/// Runs the case and returns its leader's status: `sh -c` as most tools call a command line.
const PLAIN_SH: &str = "{}; exit $?";

/// `reaper check --suite --json ARGS…`: exit code, report, stderr.
fn suite(args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["check", "--suite", "--json", "--settle", "300ms"];
    all.extend_from_slice(args);
    let out = run_reaper(&all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    (code(&out), v, stderr(&out))
}

fn cells(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["cells"].as_array().cloned().unwrap_or_default()
}

fn cell<'a>(v: &'a [serde_json::Value], case: &str, end: &str) -> &'a serde_json::Value {
    v.iter()
        .find(|c| c["case"] == case && c["end"] == end)
        .unwrap_or_else(|| panic!("no cell {case}:{end} in {v:#?}"))
}

/// The roles of the first trial's survivors.
fn roles(c: &serde_json::Value) -> Vec<String> {
    c["trials"][0]["survivors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["role"].as_str().map(str::to_owned))
        .collect()
}

fn only(cells: &[&str]) -> String {
    cells.join(",")
}

#[test]
fn a_wrapper_that_kills_only_its_child_leaks_every_case() {
    let wanted: Vec<String> = CASES.iter().map(|c| format!("{c}:term")).collect();
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let (code, v, err) = suite(&[
        "--only",
        &only(&wanted),
        "--",
        "sh",
        "-c",
        KILLS_ONLY_ITS_CHILD,
    ]);
    assert_eq!(code, 1, "a leak fails the suite: {err}");
    let cells = cells(&v);
    // Who got away, case by case: the tree's own records say these processes ran.
    let expect: &[(&str, &str)] = &[
        ("orphan", "tree"),
        ("setsid", "grandchild"),
        ("daemon", "daemon"),
        ("pipe", "holder"),
        ("storm", "storm"),
        ("stopped", "stopped"),
    ];
    for (case, role) in expect {
        let c = cell(&cells, case, "term");
        assert_eq!(c["result"], "leaked", "{case}: {c:#}");
        assert!(
            roles(c).iter().any(|r| r == role),
            "{case}: the {role} survived: {c:#}"
        );
    }
}

#[test]
fn a_wrapper_that_returns_when_its_leader_exits_leaks_the_lingering_children() {
    let wanted: Vec<String> = CASES
        .iter()
        .filter(|c| **c != "stopped")
        .map(|c| format!("{c}:exit"))
        .collect();
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let (code, v, err) = suite(&["--only", &only(&wanted), "--", "sh", "-c", PLAIN_SH]);
    assert_eq!(code, 1, "{err}");
    for c in cells(&v) {
        assert_eq!(c["result"], "leaked", "{c:#}");
        assert!(!roles(&c).is_empty(), "{c:#}");
    }
}

#[test]
fn gnu_timeout_leaks_a_setsid_grandchild_and_reaper_timeout_does_not() {
    if !have(Need::Program("timeout")) {
        return;
    }
    let (code, v, err) = suite(&[
        "--only",
        "setsid:timeout",
        "--",
        "timeout",
        "{timeout}",
        "{}",
    ]);
    assert_eq!(code, 1, "{err}");
    let c = cells(&v);
    let c = cell(&c, "setsid", "timeout");
    assert_eq!(c["result"], "leaked", "{c:#}");
    assert_eq!(roles(c), ["grandchild"], "{c:#}");
    assert_eq!(c["trials"][0]["status"], "exit 124", "{c:#}");

    let (code, v, err) = suite(&[
        "--only",
        "setsid:timeout",
        "--",
        env!("CARGO_BIN_EXE_reaper"),
        "timeout",
        "{timeout}",
        "{}",
    ]);
    assert_eq!(code, 0, "{err}: {v:#}");
    let c = cells(&v);
    let c = cell(&c, "setsid", "timeout");
    assert_eq!(c["result"], "clean", "{c:#}");
    assert_eq!(c["trials"][0]["status"], "exit 124", "{c:#}");
    assert_eq!(c["trials"][0]["status_ok"], true, "{c:#}");
}

/// reaper's run face, with the flags that make it notice its parent's death and its stdin's end,
/// holds every case against every end.
#[test]
fn reaper_run_holds_every_case_and_every_end() {
    let reaper = env!("CARGO_BIN_EXE_reaper");
    let (code, v, err) = suite(&[
        "--timeout",
        "1s",
        "--",
        reaper,
        "run",
        "--grace",
        "200ms",
        "--die-with-parent",
        "--on-stdin-eof",
        "300ms",
        "--timeout",
        "{timeout}",
        "--",
        "{}",
    ]);
    assert_eq!(code, 0, "{err}: {v:#}");
    let cells = cells(&v);
    assert_eq!(cells.len(), (CASES.len() + 1) * 7, "{v:#}");
    for c in &cells {
        let applicable = !(c["case"] == "stopped" && c["end"] == "exit") && c["case"] != AWAY;
        let want = if applicable {
            "clean"
        } else {
            "not-applicable"
        };
        assert_eq!(c["result"], want, "{c:#}");
        if applicable {
            let t = &c["trials"][0];
            assert_eq!(t["returned"], true, "{c:#}");
            assert!(t["died_ms"].is_u64(), "the tree died: {c:#}");
            assert_eq!(t["wrong_kill"], serde_json::Value::Null, "{c:#}");
        }
    }
}

#[test]
fn a_wrapper_that_kills_its_callers_group_is_a_wrong_kill() {
    let (code, v, err) = suite(&["--only", "orphan:term", "--", "sh", "-c", KILLS_ITS_GROUP]);
    assert_eq!(code, 1, "{err}");
    let c = cells(&v);
    let c = cell(&c, "orphan", "term");
    assert_eq!(c["result"], "wrong-kill", "{c:#}");
    assert_eq!(c["trials"][0]["wrong_kill"], "signal KILL", "{c:#}");
}

#[test]
fn a_wrapper_that_never_runs_the_case_fails_as_did_not_run() {
    // `{}` is sh's $0 here: the case's command is never run.
    let (code, v, err) = suite(&["--only", "setsid:term", "--", "sh", "-c", "exit 3", "{}"]);
    assert_eq!(code, 1, "{err}");
    let c = cells(&v);
    let c = cell(&c, "setsid", "term");
    assert_eq!(c["result"], "did-not-run", "{c:#}");
    let note = c["trials"][0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("exit 3"), "{note}");
}

#[test]
fn a_parent_that_dies_leaves_a_wrapper_that_does_not_notice_running() {
    let (code, v, err) = suite(&["--only", "orphan:parent", "--", "sh", "-c", "{} & wait"]);
    assert_eq!(code, 1, "{err}");
    let c = cells(&v);
    let c = cell(&c, "orphan", "parent");
    assert_eq!(c["result"], "leaked", "{c:#}");
    assert_eq!(c["trials"][0]["wrapper_survived"], true, "{c:#}");
    assert!(roles(c).iter().any(|r| r == "tree"), "{c:#}");
}

#[test]
fn expect_leak_pins_a_leak_and_reports_its_fix() {
    let (code, v, err) = suite(&[
        "--only",
        "daemon:exit",
        "--expect-leak",
        "daemon:exit",
        "--",
        "sh",
        "-c",
        PLAIN_SH,
    ]);
    assert_eq!(code, 0, "an expected leak passes: {err}");
    assert_eq!(
        cell(&cells(&v), "daemon", "exit")["result"],
        "expected-leak"
    );

    let (code, v, err) = suite(&[
        "--only",
        "daemon:exit",
        "--expect-leak",
        "daemon",
        "--",
        env!("CARGO_BIN_EXE_reaper"),
        "run",
        "--",
        "{}",
    ]);
    assert_eq!(code, 1, "an expected leak that is gone fails: {err}");
    assert_eq!(cell(&cells(&v), "daemon", "exit")["result"], "fixed");
}

#[test]
fn repeat_runs_each_cell_and_counts() {
    let (code, v, err) = suite(&[
        "--only",
        "orphan:kill",
        "--repeat",
        "2",
        "--",
        "sh",
        "-c",
        "{} & wait",
    ]);
    assert_eq!(code, 1, "{err}");
    let c = cells(&v);
    let c = cell(&c, "orphan", "kill");
    assert_eq!(c["runs"], 2, "{c:#}");
    assert_eq!(c["leaked"], 2, "{c:#}");
}

#[test]
fn the_table_names_what_got_away() {
    let out = run_reaper([
        "check",
        "--suite",
        "--settle",
        "300ms",
        "--only",
        "setsid:exit",
        "--",
        "sh",
        "-c",
        PLAIN_SH,
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("✗ "), "{table}");
    assert!(table.contains("own-session"), "{table}");
    assert!(table.contains("grandchild"), "{table}");
}

#[test]
fn a_suite_without_a_placeholder_is_refused() {
    let out = run_reaper(["check", "--suite", "--", "true"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("{}"), "{}", stderr(&out));
}

/// A cgroup of this test's own under the mount, removed on drop with whatever is left in it.
struct OwnCgroup(std::path::PathBuf);

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        remove_test_cgroup(&self.0);
    }
}

/// The cgroup case's process moves into a cgroup the suite creates under `--cgroup-parent` (here
/// a cgroup of this test's own): a wrapper that kills its child alone leaks it (`left-cgroup`),
/// reaper run stops it, and the suite removes each cgroup it created. Without `--cgroup-parent`
/// the case does not run; a parent that is no cgroup2 directory is refused.
#[test]
fn a_process_that_moves_to_another_cgroup_is_scored_and_the_suites_cgroups_removed() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let parent = OwnCgroup(mount.join(format!("reaper-test-suite-{}", std::process::id())));
    std::fs::create_dir(&parent.0)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.0.display()));
    let dir = parent.0.to_str().expect("a UTF-8 cgroup path");
    let children = || -> Vec<String> {
        std::fs::read_dir(&parent.0)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };

    let (status, v, err) = suite(&[
        "--cgroup-parent",
        dir,
        "--only",
        "cgroup:term,cgroup:exit",
        "--",
        "sh",
        "-c",
        KILLS_ONLY_ITS_CHILD,
    ]);
    assert_eq!(status, 1, "{err}: {v:#}");
    let c = cells(&v);
    let term = cell(&c, AWAY, "term");
    assert_eq!(term["result"], "leaked", "{term:#}");
    assert_eq!(roles(term), ["mover"], "{term:#}");
    let escaped = &term["trials"][0]["survivors"][0]["escaped_by"];
    assert!(
        escaped
            .as_array()
            .is_some_and(|a| a.iter().any(|w| w == "left-cgroup")),
        "{term:#}"
    );
    assert_eq!(
        children(),
        Vec::<String>::new(),
        "the suite removed its cgroups"
    );

    let (status, v, err) = suite(&[
        "--cgroup-parent",
        dir,
        "--only",
        "cgroup:term,cgroup:exit",
        "--",
        env!("CARGO_BIN_EXE_reaper"),
        "run",
        "--",
        "{}",
    ]);
    assert_eq!(status, 0, "{err}: {v:#}");
    for c in cells(&v) {
        assert_eq!(c["result"], "clean", "{c:#}");
    }
    assert_eq!(
        children(),
        Vec::<String>::new(),
        "the suite removed its cgroups"
    );

    let (status, v, err) = suite(&["--only", AWAY, "--", "sh", "-c", KILLS_ONLY_ITS_CHILD]);
    assert_eq!(status, 0, "{err}");
    for c in cells(&v) {
        assert_eq!(c["result"], "not-applicable", "{c:#}");
    }

    let out = run_reaper([
        "check",
        "--suite",
        "--cgroup-parent",
        "/tmp",
        "--only",
        AWAY,
        "--",
        "sh",
        "-c",
        "{}",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a cgroup2 directory"),
        "{}",
        stderr(&out)
    );
}

/// A wrapper that appends a line naming another process (`PID START`, given) to the tree's pid
/// file, writes MARKER, then leaks the case as `KILLS_ONLY_ITS_CHILD` does.
fn forging_wrapper(innocent: &str, marker: &Path) -> String {
    format!(
        r#"set -- {{}}; p=; prev=; for a; do [ "$prev" = --pids ] && p=$a; prev=$a; done
printf '%s child 1 1\n' '{innocent}' >> "$p" && echo forged > '{}'
"$@" & c=$!; trap 'kill -KILL $c; exit 143' TERM INT; wait $c"#,
        marker.display()
    )
}

#[test]
fn a_wrapper_that_forges_the_pid_file_gets_no_other_process_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("forged");
    // Another process of the suite's user, outside the case: not the suite's child either.
    let mut innocent = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep");
    let pid = innocent.id() as i32;
    let (_, start) = stat(pid).expect("the innocent process's stat");
    let script = forging_wrapper(&format!("{pid} {start}"), &marker);
    let (code, v, err) = suite(&["--only", "setsid:term", "--", "sh", "-c", &script]);
    let alive = matches!(innocent.try_wait(), Ok(None));
    let _ = innocent.kill();
    let _ = innocent.wait();
    assert!(
        marker.exists(),
        "the wrapper did not forge the pid file: {err}"
    );
    let c = cells(&v);
    let c = cell(&c, "setsid", "term");
    // The tree was left to the suite's cleanup, which read the forged line.
    assert_eq!(c["result"], "leaked", "{c:#}");
    assert_eq!(code, 1, "{err}");
    assert!(
        alive,
        "the suite's cleanup killed a process the wrapper named: {c:#}"
    );
    assert!(
        !roles(c).is_empty()
            && c["trials"][0]["survivors"]
                .as_array()
                .is_some_and(|s| s.iter().all(|s| s["pid"].as_i64() != Some(i64::from(pid)))),
        "the forged process was scored as a survivor: {c:#}"
    );
}
