//! `reaper ps`, `reaper stop` and `reaper kill`, from another process, on every backend: runs
//! are listed with their processes and memory; a stop through the owner is reported by the
//! owner (`stop_reason`); an owner that is SIGSTOPped or SIGKILLed is done without, and the
//! hostile tree dies all the same (the fixture's lock-file oracle says so).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{have, reaper, Need, Tree};
use serde_json::Value;

/// The backends to test here: the cgroup backend where it works, and the other two.
fn backends() -> Vec<&'static str> {
    let mut b = vec!["subreaper", "pgid"];
    if have(Need::Cgroup) {
        b.insert(0, "cgroup");
    }
    b
}

/// A cgroup this test creates for its runs (`--cgroup-parent`), so that no other reaper's
/// stale sweep takes a run whose owner the test killed; removed, with what is in it, on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(tag: &str) -> TestCgroup {
        let mount = common::cgroup2_mount().expect("a cgroup2 mount");
        let dir = mount.join(format!("reaper-test-{tag}-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create the test cgroup");
        TestCgroup(dir)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        common::remove_test_cgroup(&self.0);
    }
}

/// `reaper run` with these flags, in the background, running the fixture's `scenario`.
fn start(
    tree: &Tree,
    backend: &str,
    parent: Option<&Path>,
    flags: &[&str],
    scenario: &[&str],
) -> Child {
    let mut cmd = reaper();
    cmd.args([
        "run",
        "--containment",
        backend,
        "--grace",
        "300ms",
        "--report",
    ])
    .arg(tree.report())
    .args(flags);
    if let Some(p) = parent {
        cmd.arg("--cgroup-parent").arg(p);
    }
    cmd.arg("--")
        .args(tree.fixture(scenario))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("reaper starts")
}

/// `reaper ARGS… ` to completion: exit code, stdout, stderr.
fn reaper_out(args: &[&str]) -> (i32, String, String) {
    let o = common::run_reaper(args);
    (
        common::code(&o),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        common::stderr(&o),
    )
}

/// The runs `reaper ps --json` lists whose owner is `owner`.
fn runs_of(owner: u32, tree: bool) -> Vec<Value> {
    let mut args = vec!["ps", "--json"];
    if tree {
        args.push("--tree");
    }
    let (code, out, err) = reaper_out(&args);
    assert_eq!(code, 0, "reaper ps: {err}");
    let all: Vec<Value> = serde_json::from_str(&out).expect("ps --json is a JSON array");
    all.into_iter()
        .filter(|r| {
            r["short_id"]
                .as_str()
                .is_some_and(|s| s.starts_with(&format!("{owner}-")))
        })
        .collect()
}

/// The one run of `owner`, as `reaper ps --json` shows it. The owner writes the record just
/// after the leader starts, so a tree can be ready before its run is listed: asked again until
/// it is.
fn run_of(owner: u32, tree: bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let runs = runs_of(owner, tree);
        if runs.len() == 1 || std::time::Instant::now() > deadline {
            assert_eq!(runs.len(), 1, "runs of reaper {owner}: {runs:?}");
            return runs.into_iter().next().unwrap_or_default();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn recorded_pids(tree: &Tree) -> Vec<i32> {
    tree.recorded().iter().map(|(p, _, _)| *p).collect()
}

/// Every backend: a run of five processes is listed once, with its five processes, its
/// leader, its owner and command, `running`; `--tree` lists exactly the fixture's pids.
#[test]
fn runs_on_every_backend_appear_with_their_processes() {
    for backend in backends() {
        let tree = Tree::new();
        let mut owner = start(&tree, backend, None, &[], &["tree", "5"]);
        tree.wait_ready(Duration::from_secs(10));
        let r = run_of(owner.id(), true);
        assert_eq!(r["state"], "running", "{backend}: {r}");
        assert_eq!(r["record"]["backend"], backend);
        assert_eq!(r["owner_command"], "reaper run");
        assert_eq!(r["process_count"], 5, "{backend}: {r}");
        let leader = tree
            .recorded()
            .iter()
            .find(|p| p.2 == "leader")
            .map(|p| p.0);
        assert_eq!(r["record"]["leader_pid"].as_i64(), leader.map(i64::from));
        let mut listed: Vec<i32> = r["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .filter_map(|m| m["pid"].as_i64().map(|p| p as i32))
            .collect();
        let mut want = recorded_pids(&tree);
        listed.sort_unstable();
        want.sort_unstable();
        assert_eq!(
            listed, want,
            "{backend}: ps --tree lists the fixture's processes"
        );
        assert!(
            r["record"]["argv"][0]
                .as_str()
                .is_some_and(|a| a.ends_with("reaper-fixture")),
            "{r}"
        );
        // The human table has the run on one line, its processes under it.
        let (_, table, _) = reaper_out(&["ps", "--tree"]);
        let id = r["short_id"].as_str().unwrap_or("?");
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(id) && l.contains(" running ")),
            "{table}"
        );
        let (code, _, err) = reaper_out(&["kill", id]);
        assert_eq!(code, 0, "{err}");
        common::wait_with_deadline(&mut owner, Duration::from_secs(10));
        tree.assert_all_dead(backend);
        assert!(
            runs_of(owner.id(), false).is_empty(),
            "{backend}: the record is gone"
        );
    }
}

/// Every backend: a tree holding 64 MiB shows at least that much memory, and not much more.
#[test]
fn memory_is_the_trees() {
    const MIB: u64 = 64;
    for backend in backends() {
        let tree = Tree::new();
        let mut owner = start(
            &tree,
            backend,
            None,
            &[],
            &["hold-memory", &MIB.to_string()],
        );
        tree.wait_ready(Duration::from_secs(10));
        let r = run_of(owner.id(), false);
        assert_eq!(r["process_count"], 2, "{backend}: {r}");
        let bytes = r["memory"]["current_bytes"].as_u64().unwrap_or(0);
        assert!(
            (MIB << 20..(MIB + 48) << 20).contains(&bytes),
            "{backend}: {bytes} bytes for a tree holding {MIB} MiB ({})",
            r["memory"]
        );
        let (code, _, err) = reaper_out(&["kill", r["short_id"].as_str().unwrap_or("?")]);
        assert_eq!(code, 0, "{err}");
        common::wait_with_deadline(&mut owner, Duration::from_secs(10));
        tree.assert_all_dead(backend);
    }
}

/// Every backend: `reaper stop` asks the owner, which runs its stop sequence (the
/// grandchild ignores SIGTERM: SIGKILL after the grace) and reports `stopped`; `reaper kill`
/// is reported `killed`. `reaper stop` prints what the owner said.
#[test]
fn stop_and_kill_through_the_owner_are_reported_by_it() {
    for backend in backends() {
        for (verb, reason) in [("stop", "stopped"), ("kill", "killed")] {
            let tree = Tree::new();
            let mut owner = start(&tree, backend, None, &[], &["setsid-grandchild"]);
            tree.wait_ready(Duration::from_secs(10));
            let r = run_of(owner.id(), false);
            let id = r["short_id"].as_str().unwrap_or("?").to_owned();
            assert!(!tree.all_dead(), "the tree runs before the {verb}");
            let (code, _, err) = reaper_out(&[verb, &id]);
            assert_eq!(code, 0, "{backend} {verb}: {err}");
            assert!(
                err.contains("by its owner") && err.contains(&format!("stop_reason {reason}")),
                "{backend} {verb}: {err}"
            );
            common::wait_with_deadline(&mut owner, Duration::from_secs(10));
            let report = common::read_report(&tree.report());
            assert_eq!(report["stop_reason"], reason, "{backend}: {report}");
            common::assert_clean_report(&report);
            tree.assert_all_dead(&format!("{backend} {verb}"));
        }
    }
}

/// Every backend: with its owner SIGSTOPped (and no guardian to continue it), `reaper stop`
/// and `reaper kill` end the tree directly while the owner is still stopped; continued, the
/// owner reports the run `stopped` or `killed`.
#[test]
fn a_stopped_owner_is_done_without_and_reports_it_once_continued() {
    let parent = have(Need::Cgroup).then(|| TestCgroup::new("ps-stopped"));
    for backend in backends() {
        for (verb, reason) in [("stop", "stopped"), ("kill", "killed")] {
            let tree = Tree::new();
            let parent = parent
                .as_ref()
                .map(|p| p.0.as_path())
                .filter(|_| backend == "cgroup");
            let mut owner = start(
                &tree,
                backend,
                parent,
                &["--no-guardian"],
                &["setsid-grandchild"],
            );
            tree.wait_ready(Duration::from_secs(10));
            let id = run_of(owner.id(), false)["short_id"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            common::signal_child(&owner, rustix::process::Signal::STOP);
            assert!(
                common::wait_until(Duration::from_secs(5), || common::state(owner.id() as i32)
                    == Some('T')),
                "the owner did not stop"
            );
            let r = run_of(owner.id(), false);
            assert_eq!(r["state"], "owner-stopped", "{r}");
            let (code, _, err) = reaper_out(&[verb, "--answer-within", "200ms", &id]);
            assert_eq!(code, 0, "{backend} {verb}: {err}");
            assert!(err.contains("is stopped"), "{backend} {verb}: {err}");
            tree.assert_all_dead(&format!("{backend} {verb}, owner stopped"));
            assert_eq!(
                common::state(owner.id() as i32),
                Some('T'),
                "the owner was still stopped when the tree died"
            );
            common::signal_child(&owner, rustix::process::Signal::CONT);
            common::wait_with_deadline(&mut owner, Duration::from_secs(10));
            let report = common::read_report(&tree.report());
            assert_eq!(report["stop_reason"], reason, "{backend} {verb}: {report}");
            common::assert_clean_report(&report);
        }
    }
}

/// Every backend: with its owner SIGKILLed (no guardian), the run is listed `stale`;
/// `reaper kill` kills what is left of it — through its cgroup, or by its leader and its
/// REAPER_RUN_ID — and removes the cgroup and the record.
#[test]
fn a_run_whose_owner_was_killed_is_stale_and_killed_directly() {
    let parent = have(Need::Cgroup).then(|| TestCgroup::new("ps-killed"));
    for backend in backends() {
        let tree = Tree::new();
        let parent = parent
            .as_ref()
            .map(|p| p.0.as_path())
            .filter(|_| backend == "cgroup");
        let mut owner = start(
            &tree,
            backend,
            parent,
            &["--no-guardian"],
            &["setsid-grandchild"],
        );
        tree.wait_ready(Duration::from_secs(10));
        let before = run_of(owner.id(), false);
        let id = before["short_id"].as_str().unwrap_or("?").to_owned();
        owner.kill().expect("SIGKILL the owner");
        owner.wait().expect("reap the owner");
        let r = run_of(owner.id(), false);
        assert_eq!(r["state"], "stale", "{backend}: {r}");
        // Something of the tree outlived its owner: what the kill below must end.
        assert!(!tree.all_dead(), "{backend}: nothing outlived the owner");
        let (code, _, err) = reaper_out(&["kill", &id]);
        assert_eq!(code, 0, "{backend}: {err}");
        assert!(err.contains("is gone"), "{backend}: {err}");
        tree.assert_all_dead(&format!("{backend}, owner killed"));
        assert!(
            runs_of(owner.id(), false).is_empty(),
            "{backend}: the record is gone"
        );
        if let Some(cg) = before["record"]["cgroup"].as_str() {
            assert!(!Path::new(cg).exists(), "{cg} left behind");
        }
    }
}

/// Only the run's user and root may end it; runs of root are not listed for another user.
#[test]
fn another_user_neither_sees_nor_ends_roots_runs() {
    if !have(Need::Root) || !have(Need::Program("setpriv")) {
        return;
    }
    let tree = Tree::new();
    let mut owner = start(&tree, "pgid", None, &[], &["sleep", "600"]);
    tree.wait_ready(Duration::from_secs(10));
    let id = run_of(owner.id(), false)["short_id"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    let as_nobody = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .arg(env!("CARGO_BIN_EXE_reaper"))
            .args(args)
            .env_remove(reaper::runs::RUNTIME_DIR_ENV)
            .stdin(Stdio::null())
            .output()
            .expect("setpriv runs")
    };
    let ps = as_nobody(&["ps", "--json"]);
    let listed: Vec<Value> = serde_json::from_slice(&ps.stdout).expect("JSON");
    assert!(
        listed.iter().all(|r| r["short_id"] != id.as_str()),
        "uid 65534 sees root's run: {listed:?}"
    );
    let kill = as_nobody(&["kill", &id]);
    assert_ne!(kill.status.code(), Some(0));
    assert!(!tree.all_dead(), "uid 65534 ended root's run");
    let (code, _, err) = reaper_out(&["kill", &id]);
    assert_eq!(code, 0, "{err}");
    common::wait_with_deadline(&mut owner, Duration::from_secs(10));
    tree.assert_all_dead("root's run");
}

/// A run kept alive (`reaper check --keep`) stays listed, `kept`, after its owner exits;
/// audit does not take its processes for leaks; `reaper kill` ends it and removes its cgroup
/// and record.
#[test]
fn a_kept_run_is_listed_until_it_is_killed() {
    if !have(Need::Cgroup) {
        return;
    }
    let tree = Tree::new();
    let out = reaper()
        .args(["check", "--keep", "--json", "--settle", "100ms", "--"])
        .args(tree.fixture(&["setsid-grandchild", "--leader-exits"]))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("reaper check runs");
    assert_eq!(common::code(&out), 1, "the check found the leak it kept");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kept = v["runs"][0]["cgroup"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(kept.contains("/reaper-kept-"), "{v}");
    assert!(!tree.survivors().is_empty(), "--keep kept them");
    let (_, json, _) = reaper_out(&["ps", "--json"]);
    let all: Vec<Value> = serde_json::from_str(&json).expect("JSON");
    let run = all
        .iter()
        .find(|r| r["record"]["cgroup"] == kept.as_str())
        .unwrap_or_else(|| panic!("the kept run is not listed: {all:?}"));
    assert_eq!(run["state"], "kept");
    assert_eq!(
        run["process_count"].as_u64(),
        Some(tree.survivors().len() as u64)
    );
    let (_, audit, _) = reaper_out(&["audit", "--json"]);
    let kept_pids: Vec<String> = tree
        .recorded()
        .iter()
        .map(|(p, _, _)| format!("\"pid\":{p},"))
        .collect();
    let compact = audit.replace([' ', '\n'], "");
    assert!(
        kept_pids.iter().all(|p| !compact.contains(p.as_str())),
        "audit lists a kept process: {audit}"
    );
    let (code, _, err) = reaper_out(&["kill", run["id"].as_str().unwrap_or("?")]);
    assert_eq!(code, 0, "{err}");
    tree.assert_all_dead("the kept run");
    assert!(!Path::new(&kept).exists(), "{kept} left behind");
}

/// A reaper SIGKILLed with its guardian: the guardian kills and removes the run's cgroup and
/// its record goes too — the run is no longer listed, stale or otherwise.
#[test]
fn the_guardian_removes_the_record_of_its_killed_reaper() {
    if !have(Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("ps-guardian");
    let tree = Tree::new();
    let mut owner = start(
        &tree,
        "cgroup",
        Some(&parent.0),
        &[],
        &["setsid-grandchild"],
    );
    tree.wait_ready(Duration::from_secs(10));
    assert_eq!(runs_of(owner.id(), false).len(), 1, "listed while it runs");
    owner.kill().expect("SIGKILL the owner");
    owner.wait().expect("reap it");
    // The guardian removes the record after the cgroup, once the tree is dead.
    assert!(
        common::wait_until(Duration::from_secs(10), || runs_of(owner.id(), false)
            .is_empty()),
        "the record outlived the guardian's takeover: {:?}",
        runs_of(owner.id(), false)
    );
    tree.assert_all_dead("the guardian's takeover");
}
