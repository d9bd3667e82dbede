//! Issue 14 point 1: a process that descends from the run is the run's even after it left the
//! run's cgroup. reaper stops it with the rest and says so (the summary, `--report`'s
//! `escapees`, `reaper check`), instead of claiming an empty tree that is not.
//!
//! Every escapee holds the fixture's lock-file oracle (a shared flock on an inherited fd) and
//! records `PID STARTTIME ROLE` in the tree's pid file, so `Tree` tells for certain whether it
//! died, and kills it through a pidfd (and fails the test) if it did not.

mod common;
mod mcp_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;

/// A cgroup of this test's own under the mount (`reaper-test-esc-…`), removed on drop with
/// whatever is left in it (killed first through its own `cgroup.kill`).
struct OwnCgroup(PathBuf);

impl OwnCgroup {
    fn new(mount: &Path, what: &str) -> OwnCgroup {
        let dir = mount.join(format!("reaper-test-esc-{what}-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        OwnCgroup(dir)
    }
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        remove_test_cgroup(&self.0);
    }
}

/// Writes `body` as a shell script in the tree's directory, after a prologue that takes the
/// oracle lock (shared, on fd 9, inherited by everything the script starts). `$PIDS` is the
/// tree's pid file, and `record PID ROLE` appends a line for it. The script's output goes to
/// /dev/null: an escapee that held reaper's stderr would keep the test's read of it open.
fn script(tree: &Tree, body: &str) -> PathBuf {
    let path = tree.dir.path().join("cmd.sh");
    let text = format!(
        "exec 9>>'{oracle}' </dev/null >/dev/null 2>&1\nflock -s 9 || exit 99\nPIDS='{pids}'\n\
         record() {{ echo \"$1 $(cut -d' ' -f22 /proc/$1/stat) $2\" >> \"$PIDS\"; }}\n{body}\n",
        oracle = tree.oracle().display(),
        pids = tree.pids().display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn report_escapees(report: &serde_json::Value) -> Vec<String> {
    report["escapees"]
        .as_array()
        .unwrap_or_else(|| panic!("no escapees array in the report: {report}"))
        .iter()
        .map(|e| e.as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The pid the tree recorded for `role`.
fn recorded_pid(tree: &Tree, role: &str) -> i32 {
    tree.recorded()
        .into_iter()
        .find(|(_, _, r)| r == role)
        .map(|(p, _, _)| p)
        .unwrap_or_else(|| panic!("the command recorded no {role}: {:?}", tree.recorded()))
}

fn assert_names(escapees: &[String], pid: i32, to: &str, what: &str) {
    let want = format!("(pid {pid}): moved out of the cgroup to {to}");
    assert!(
        escapees.iter().any(|e| e.contains(&want)),
        "{what}: no escapee `… {want}` in {escapees:?}"
    );
}

/// Issue 14 point 1, measured on main: as root, a command writes itself into the root cgroup
/// and starts `setsid sleep` from a subshell; reaper timed out, said "stopped 0 process(es)",
/// and `sleep` lived on with PPID 1. Now it is killed, and the summary and the report say it
/// had moved out of the run's cgroup.
#[test]
fn a_root_command_that_moves_to_the_root_cgroup_is_killed_and_reported() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let tree = Tree::new();
    let cmd = script(
        &tree,
        &format!(
            "echo $$ > '{}/cgroup.procs' || exit 98\n\
             (setsid sleep 4321 & record $! escapee)\nsleep 5",
            mount.display()
        ),
    );
    let out = run_reaper([
        "run".as_ref(),
        "-t".as_ref(),
        "1".as_ref(),
        "--report".as_ref(),
        tree.report().as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        cmd.as_os_str(),
    ]);
    let err = stderr(&out);
    tree.assert_all_dead("the escapee in the root cgroup");
    assert_eq!(code(&out), 124, "{err}");
    assert!(
        err.contains("of them had moved out of the run's cgroup"),
        "the summary says so: {err}"
    );
    let report = read_report(&tree.report());
    assert_clean_report(&report);
    let pid = recorded_pid(&tree, "escapee");
    assert_names(&report_escapees(&report), pid, "/", "root escape");
    assert!(report["killed"].as_u64().unwrap_or(0) >= 2, "{report}");
}

/// Issue 14 point 1: a process writes itself into the *parent* of the run cgroup, then
/// double-forks with setsid, so its `sleep` is an orphan reparented to reaper (the subreaper)
/// in a cgroup that is not the run's. The leader exits by itself right after: the common end,
/// where main saw an empty cgroup and stopped nothing.
#[test]
fn an_orphan_in_the_parent_cgroup_is_killed_when_the_leader_exits() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let parent = OwnCgroup::new(&mount, "parent");
    let tree = Tree::new();
    let cmd = script(
        &tree,
        &format!(
            "sh -c 'echo $$ > \"$1/cgroup.procs\" || exit 98; \
             (setsid sleep 4322 & echo \"$! $(cut -d\" \" -f22 /proc/$!/stat) escapee\" >> \"$2\")' \
             - '{}' \"$PIDS\" || exit 97\nexit 0",
            parent.0.display()
        ),
    );
    let out = run_reaper([
        "run".as_ref(),
        "--containment".as_ref(),
        "cgroup".as_ref(),
        "--cgroup-parent".as_ref(),
        parent.0.as_os_str(),
        "--report".as_ref(),
        tree.report().as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        cmd.as_os_str(),
    ]);
    let err = stderr(&out);
    tree.assert_all_dead("the orphan in the parent cgroup");
    assert_eq!(code(&out), 0, "the leader's own status: {err}");
    assert!(
        err.contains("stopped 1 leftover process(es), 1 of them had moved out of the run's cgroup"),
        "the summary says so: {err}"
    );
    let report = read_report(&tree.report());
    assert_clean_report(&report);
    let to = format!("/{}", parent.0.file_name().unwrap().to_string_lossy());
    let pid = recorded_pid(&tree, "escapee");
    assert_names(&report_escapees(&report), pid, &to, "parent escape");
}

/// Issue 14 point 1, the delegated-user escape measured on main: a user who owns the parent
/// cgroup (systemd `Delegate=yes`) may move its processes there; a uid-65534 command did, and
/// its `setsid sleep` outlived reaper. reaper (as that user, in that cgroup) now kills it and
/// reports it.
#[test]
fn a_delegated_user_moving_to_the_parent_cgroup_is_killed_and_reported() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let deleg = OwnCgroup::new(&mount, "deleg");
    for f in [
        "",
        "cgroup.procs",
        "cgroup.subtree_control",
        "cgroup.threads",
    ] {
        let p = deleg.0.join(f);
        std::os::unix::fs::chown(&p, Some(65534), Some(65534))
            .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
    }
    let tree = Tree::new();
    // The user writes the oracle, the pid file and the report.
    std::fs::set_permissions(tree.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for f in [tree.oracle(), tree.pids()] {
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let cmd = script(
        &tree,
        &format!(
            "echo $$ > '{}/cgroup.procs' || exit 98\n\
             (setsid sleep 4324 & record $! escapee)\nsleep 5",
            deleg.0.display()
        ),
    );
    // reaper starts inside the delegated cgroup, as a delegated user's service would: a user
    // may move a process only between cgroups below one whose cgroup.procs it owns.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "echo $$ > \"$1/cgroup.procs\" || exit 97; shift; \
             exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$@\"",
        )
        .arg("-")
        .arg(&deleg.0)
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .args(["run", "-t", "1", "--containment", "cgroup", "--no-guardian"])
        .arg("--cgroup-parent")
        .arg(&deleg.0)
        .arg("--report")
        .arg(tree.report())
        .args(["--", "sh"])
        .arg(&cmd)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    tree.assert_all_dead("the delegated user's escapee");
    assert_eq!(code(&out), 124, "{err}");
    assert!(
        err.contains("of them had moved out of the run's cgroup"),
        "the summary says so: {err}"
    );
    let report = read_report(&tree.report());
    assert_clean_report(&report);
    let to = format!("/{}", deleg.0.file_name().unwrap().to_string_lossy());
    let pid = recorded_pid(&tree, "escapee");
    assert_names(&report_escapees(&report), pid, &to, "delegated escape");
}

/// Issue 14 point 1: an escapee below a live member, ignoring SIGTERM and forking as fast as it
/// can (each child inherits the oracle lock). The SIGSTOP sweep holds it and every child it
/// made before the kill, so none outruns it. It moves into a cgroup of the test's own, so
/// whatever a broken reaper leaves is killed with that cgroup.
#[test]
fn a_forking_escapee_below_a_live_member_is_stopped_and_killed() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let parent = OwnCgroup::new(&mount, "storm");
    let tree = Tree::new();
    let cmd = script(
        &tree,
        &format!(
            "sh -c 'echo $$ > \"$1/cgroup.procs\" || exit 98; trap \"\" TERM; \
             echo \"$$ $(cut -d\" \" -f22 /proc/$$/stat) forker\" >> \"$2\"; \
             i=0; while [ $i -lt 3000 ]; do sleep 30 & i=$((i+1)); done; wait' \
             - '{}' \"$PIDS\" &\nsleep 5",
            parent.0.display()
        ),
    );
    let out = run_reaper([
        "run".as_ref(),
        "-t".as_ref(),
        "1".as_ref(),
        "--grace".as_ref(),
        "100ms".as_ref(),
        "--containment".as_ref(),
        "cgroup".as_ref(),
        "--cgroup-parent".as_ref(),
        parent.0.as_os_str(),
        "--report".as_ref(),
        tree.report().as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        cmd.as_os_str(),
    ]);
    let err = stderr(&out);
    tree.assert_all_dead("the forking escapee and its children");
    assert_eq!(code(&out), 124, "{err}");
    let report = read_report(&tree.report());
    assert_clean_report(&report);
    let to = format!("/{}", parent.0.file_name().unwrap().to_string_lossy());
    let pid = recorded_pid(&tree, "forker");
    assert_names(&report_escapees(&report), pid, &to, "forking escapee");
}

/// Issue 14 point 1: `reaper check` said `clean` for a root escapee. It is a leak (exit 1),
/// listed with `escaped_by` naming `left-cgroup`, and killed afterwards.
#[test]
fn check_fails_on_an_escapee_and_lists_it() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let tree = Tree::new();
    let cmd = script(
        &tree,
        &format!(
            "echo $$ > '{}/cgroup.procs' || exit 98\n\
             (setsid sleep 4323 & record $! escapee)\nexit 0",
            mount.display()
        ),
    );
    let out = reaper()
        .args(["check", "--json", "--containment", "cgroup", "--", "sh"])
        .arg(&cmd)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    tree.assert_all_dead("check's escapee");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} / {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    assert_eq!(code(&out), 1, "{v} {}", stderr(&out));
    assert_eq!(v["result"], "leaked", "{v}");
    let pid = recorded_pid(&tree, "escapee");
    let listed = v["runs"][0]["survivors"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|s| s["pid"] == pid)
        .unwrap_or_else(|| panic!("escapee {pid} not listed: {v}"));
    assert!(
        listed["escaped_by"]
            .as_array()
            .is_some_and(|a| a.contains(&"left-cgroup".into())),
        "{listed}"
    );
}

/// Negative control: a tree that stays in its cgroup has no escapee, in the report or the
/// summary, whether it ends by itself or is stopped.
#[test]
fn a_run_that_stays_in_its_cgroup_reports_no_escapee() {
    if !have(Need::Cgroup) {
        return;
    }
    for (timeout, body) in [
        ("0", "sleep 0.1 & wait"),
        ("1", "(setsid sleep 4325 & record $! stayer)\nsleep 5"),
    ] {
        let tree = Tree::new();
        let cmd = script(&tree, body);
        let out = run_reaper([
            "run".as_ref(),
            "--containment".as_ref(),
            "cgroup".as_ref(),
            "-t".as_ref(),
            timeout.as_ref(),
            "--report".as_ref(),
            tree.report().as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            cmd.as_os_str(),
        ]);
        let err = stderr(&out);
        tree.assert_all_dead("a contained tree");
        assert!(!err.contains("moved out"), "{err}");
        let report = read_report(&tree.report());
        assert_clean_report(&report);
        assert_eq!(report_escapees(&report), Vec::<String>::new(), "{report}");
    }
}

/// Issue 14 point 1, through `reaper mcp`: "codex" moves itself to the root cgroup and leaves a
/// `setsid sleep` behind when it exits. The call's result names the escapee, and it is dead.
#[tokio::test]
async fn an_mcp_call_names_its_escapee_and_kills_it() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let tree = Tree::new();
    let codex = script(
        &tree,
        &format!(
            "cat >/dev/null\n\
             echo $$ > '{}/cgroup.procs' || exit 98\n\
             (setsid sleep 4327 & record $! escapee)\n\
             echo '{{\"type\":\"thread.started\",\"thread_id\":\"T1\"}}' >&8\n\
             echo '{{\"type\":\"item.completed\",\"item\":{{\"type\":\"agent_message\",\"text\":\"left\"}}}}' >&8\n\
             echo '{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":1,\"cached_input_tokens\":0,\"output_tokens\":1}}}}' >&8",
            mount.display()
        ),
    );
    // The prologue sends the script's own output to /dev/null; the events go to fd 8, a copy of
    // the original stdout made before it.
    let text = std::fs::read_to_string(&codex).unwrap();
    std::fs::write(&codex, format!("#!/bin/sh\nexec 8>&1\n{text}")).unwrap();
    std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o755)).unwrap();
    let codex = codex.display().to_string();
    let s = mcp_support::start(mcp_support::Options {
        env: &[("CODEX_CMD", codex.as_str())],
        ..Default::default()
    })
    .await;
    let r = s.call("codex", serde_json::json!({"prompt": "go"})).await;
    let text = mcp_support::text(&r);
    tree.assert_all_dead("the MCP call's escapee");
    let pid = recorded_pid(&tree, "escapee");
    assert!(text.starts_with("left\n"), "{text}");
    assert!(
        text.contains("had moved out of its cgroup; stopped them too: ")
            && text.contains(&format!("(pid {pid}): moved out of the cgroup to /")),
        "{text}"
    );
}
