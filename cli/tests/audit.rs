//! `reaper audit`: the leaks of a process-group-only tool (GNU timeout on the README's leaking
//! example: a setsid'd grandchild that ignores SIGTERM) are found among the suspects, and the
//! leaks of a killed harness (a reaper SIGKILLed without its guardian, on every backend) are
//! certain; nothing else on this machine is certain; `--kill` ends exactly what is certain, or
//! the processes named by pid and start time. One test: `--kill` acts host-wide, so the cases
//! must not overlap.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::{have, reaper, Need, Tree};
use serde_json::Value;

fn audit() -> Value {
    let o = common::run_reaper(["audit", "--json"]);
    let code = common::code(&o);
    assert!(
        code == 0 || code == 1,
        "reaper audit: {}",
        common::stderr(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("audit --json is JSON");
    assert_eq!(
        code,
        i32::from(!v["certain"].as_array().is_none_or(Vec::is_empty)),
        "exit 1 exactly when something is certain"
    );
    v
}

/// Every process of a section's trees: (pid, starttime, run id).
fn listed(section: &Value) -> Vec<(i32, u64, Option<String>)> {
    let mut out = Vec::new();
    for leak in section.as_array().into_iter().flatten() {
        let run = leak["run"].as_str().map(str::to_owned);
        for p in std::iter::once(&leak["root"])
            .chain(leak["descendants"].as_array().into_iter().flatten())
        {
            out.push((
                p["pid"].as_i64().unwrap_or(0) as i32,
                p["starttime"].as_u64().unwrap_or(0),
                run.clone(),
            ));
        }
    }
    out
}

/// The fixture's processes still alive: (pid, starttime).
fn alive(tree: &Tree) -> Vec<(i32, u64)> {
    tree.recorded()
        .into_iter()
        .filter(|(p, s, _)| common::alive(*p, *s))
        .map(|(p, s, _)| (p, s))
        .collect()
}

struct TestCgroup(PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        common::remove_test_cgroup(&self.0);
    }
}

#[test]
fn audit_finds_what_a_group_kill_and_a_killed_harness_leave() {
    // A process-group-only tool: GNU timeout stops its group; the grandchild left its session
    // and ignores SIGTERM, so it lives on, reparented to PID 1.
    if have(Need::Program(common::GNU_TIMEOUT)) {
        let tree = Tree::new();
        let mut argv = vec!["0.3".to_owned()];
        argv.extend(tree.fixture(&["setsid-grandchild"]));
        let status = std::process::Command::new(common::GNU_TIMEOUT)
            .args(&argv)
            .stdin(Stdio::null())
            .status()
            .expect("timeout runs");
        assert_eq!(status.code(), Some(124), "GNU timeout timed out");
        // timeout waits for its command alone; the child dies of the same SIGTERM a moment
        // later, and only then is the grandchild an orphan.
        assert!(
            common::wait_until(Duration::from_secs(5), || alive(&tree).len() == 1),
            "GNU timeout leaves the grandchild alone: {:?}",
            alive(&tree)
        );
        let left = alive(&tree);
        let v = audit();
        let suspects = listed(&v["suspect"]);
        let (pid, start) = left[0];
        assert!(
            suspects.iter().any(|(p, s, _)| (*p, *s) == (pid, start)),
            "the grandchild {pid} is not among the suspects: {}",
            v["suspect"]
        );
        assert!(
            !listed(&v["certain"]).iter().any(|(p, _, _)| *p == pid),
            "it carries no run id: not certain"
        );
        // Killed by pid and start time, as the report prints it.
        let o = common::run_reaper(["audit", "--kill", &format!("{pid}@{start}")]);
        assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("{pid}@{start}: killed")));
        tree.assert_all_dead("the grandchild GNU timeout left");
    }

    // A killed harness: reaper SIGKILLed without its guardian, on every backend. The cgroup
    // runs go into a cgroup of this test's, out of every other reaper's stale sweep.
    let parent = have(Need::Cgroup).then(|| {
        let mount = common::cgroup2_mount().expect("a cgroup2 mount");
        let dir = mount.join(format!("reaper-test-audit-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create the test cgroup");
        TestCgroup(dir)
    });
    let mut backends = vec!["subreaper", "pgid"];
    if parent.is_some() {
        backends.insert(0, "cgroup");
    }
    let mut planted: Vec<(Tree, String)> = Vec::new();
    for backend in backends {
        let tree = Tree::new();
        let mut cmd = reaper();
        cmd.args(["run", "--no-guardian", "--containment", backend]);
        if let (Some(p), "cgroup") = (&parent, backend) {
            cmd.arg("--cgroup-parent").arg(&p.0);
        }
        let mut owner = cmd
            .arg("--")
            .args(tree.fixture(&["setsid-grandchild"]))
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("reaper starts");
        tree.wait_ready(Duration::from_secs(10));
        let leader = tree.recorded().into_iter().find(|p| p.2 == "leader");
        owner.kill().expect("SIGKILL the harness");
        owner.wait().expect("reap it");
        // The leader dies with its reaper (PR_SET_PDEATHSIG); what it leaves is orphaned then.
        assert!(
            common::wait_until(Duration::from_secs(5), || leader
                .as_ref()
                .is_none_or(|(p, s, _)| !common::alive(*p, *s))),
            "{backend}: the leader outlived its reaper"
        );
        assert!(
            !alive(&tree).is_empty(),
            "{backend}: nothing outlived the harness"
        );
        planted.push((tree, backend.to_owned()));
    }
    let v = audit();
    let certain = listed(&v["certain"]);
    let mut ours = Vec::new();
    for (tree, backend) in &planted {
        for (pid, start) in alive(tree) {
            let hit = certain.iter().find(|(p, s, _)| (*p, *s) == (pid, start));
            let Some((_, _, run)) = hit else {
                panic!("{backend}: {pid} is not certain: {}", v["certain"]);
            };
            assert!(run.is_some(), "{backend}: {pid} is listed without its run");
            ours.push((pid, start));
        }
    }
    // Zero false positives on this machine: every certain process is one the test planted.
    let others: Vec<_> = certain
        .iter()
        .filter(|(p, s, _)| !ours.contains(&(*p, *s)))
        .collect();
    assert!(
        others.is_empty(),
        "certain, yet not planted here: {others:?}"
    );
    let o = common::run_reaper(["audit", "--kill"]);
    assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
    for (tree, backend) in &planted {
        tree.assert_all_dead(&format!("{backend}: after audit --kill"));
    }
    assert!(
        listed(&audit()["certain"]).is_empty(),
        "nothing certain is left"
    );
    // The runs' records and cgroups are the stale runs' to remove: `reaper kill` does.
    let runs: Vec<Value> =
        serde_json::from_slice(&common::run_reaper(["ps", "--json"]).stdout).unwrap_or_default();
    for r in runs.iter().filter(|r| r["state"] == "stale") {
        let id = r["id"].as_str().unwrap_or("?");
        if planted.iter().any(|(t, _)| {
            r["record"]["argv"]
                .to_string()
                .contains(&t.dir.path().display().to_string())
        }) {
            let o = common::run_reaper(["kill", id]);
            assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
        }
    }
}
