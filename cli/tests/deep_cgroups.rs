//! Hostile cgroup layouts: a run whose processes build a sub-cgroup tree deeper than PATH_MAX
//! (issue 10 item 4), and `--cgroup-parent` paths that try to leave the cgroup2 mount (item 2).
//!
//! Every cgroup these tests create lives under a parent of their own (`reaper-test-deep-…`),
//! which a guard kills and removes however the test ends, relative to directory fds (the same
//! removal reaper uses), so a failing test leaves no tree behind.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::*;
use reaper_platform::linux::cgroup::Cgroup;

/// Levels and name length of the hostile subtree: 25 × 201 bytes is past PATH_MAX (4096).
const LEVELS: usize = 25;
const NAME_LEN: usize = 200;

/// A cgroup parent owned by one test, emptied and removed on drop.
struct TestParent(PathBuf);

impl TestParent {
    fn new(mount: &Path, what: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = mount.join(format!(
            "reaper-test-deep-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).unwrap();
        TestParent(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// The run cgroups (`reaper-…`) reaper created under this parent.
    fn run_cgroups(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.0)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TestParent {
    fn drop(&mut self) {
        // Everything below is this test's: kill it all, wait for the kernel to agree it is
        // empty, then remove the subtree however deep it is.
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && std::fs::read_to_string(self.0.join("cgroup.events"))
                .is_ok_and(|e| e.contains("populated 1"))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(e) = Cgroup::at(&self.0).remove_subtree() {
            eprintln!("could not remove test cgroup {}: {e}", self.0.display());
        }
    }
}

/// `bash -c SCRIPT bash START ARGV…`: from the cgroup directory START (a shell expression), make
/// LEVELS nested sub-cgroups with NAME_LEN-byte names, one relative `mkdir`/`cd` at a time (no
/// path ever exceeds a name), join the deepest one, and exec ARGV there. bash, not dash: dash's
/// `cd` builds an absolute path and fails past PATH_MAX.
fn deep_then_exec(start: &str, argv: &[String]) -> Vec<String> {
    let script = format!(
        "set -e; cd \"{start}\"; n=$(printf '%{NAME_LEN}s' '' | tr ' ' d); i=0; \
         while [ $i -lt {LEVELS} ]; do mkdir \"$n\"; cd \"$n\"; i=$((i+1)); done; \
         echo $$ > cgroup.procs; exec \"$@\""
    );
    let mut v = vec!["bash".to_string(), "-c".into(), script, "bash".into()];
    v.extend(argv.iter().cloned());
    v
}

/// The shell's own run cgroup on disk: the mount plus the `0::` line of /proc/self/cgroup.
fn own_cgroup_dir(mount: &Path) -> String {
    format!("{}$(sed -n 's/^0:://p' /proc/self/cgroup)", mount.display())
}

fn setup() -> Option<PathBuf> {
    if !have(Need::Cgroup) {
        return None;
    }
    cgroup2_mount()
}

/// Issue 10 item 4: a run whose tree lives 25 levels × 200 bytes deep (past PATH_MAX) in its
/// own sub-cgroups is still killed on timeout, counted, and its whole cgroup subtree removed:
/// exit 124, not 125 "File name too long".
#[test]
fn timeout_kills_and_removes_a_subtree_deeper_than_path_max() {
    let Some(mount) = setup() else { return };
    let parent = TestParent::new(&mount, "timeout");
    let t = Tree::new();
    let argv = deep_then_exec(&own_cgroup_dir(&mount), &t.fixture(&["setsid-grandchild"]));
    let out = reaper()
        .args(["run", "--containment", "cgroup", "--timeout", "1s"])
        .args(["--grace", "200ms", "--report"])
        .arg(t.report())
        .arg("--cgroup-parent")
        .arg(parent.path())
        .arg("--")
        .args(&argv)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        t.ready().exists(),
        "the deep tree never started: {}",
        stderr(&out)
    );
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    t.assert_all_dead("deep subtree on timeout");
    let rep = read_report(&t.report());
    assert_clean_report(&rep);
    // Every process of the tree was found 25 levels down, and counted.
    assert_eq!(rep["killed"], t.recorded().len(), "{rep}");
    assert_eq!(
        parent.run_cgroups(),
        Vec::<PathBuf>::new(),
        "run cgroup left behind"
    );
}

/// Issue 10 item 4: reaper SIGKILLed mid-run; its guardian kills and removes a run cgroup whose
/// subtree is deeper than PATH_MAX.
#[test]
fn the_guardian_removes_a_subtree_deeper_than_path_max() {
    let Some(mount) = setup() else { return };
    let parent = TestParent::new(&mount, "guardian");
    let t = Tree::new();
    let argv = deep_then_exec(&own_cgroup_dir(&mount), &t.fixture(&["setsid-grandchild"]));
    let mut child = reaper()
        .args(["run", "--containment", "cgroup", "--cgroup-parent"])
        .arg(parent.path())
        .arg("--")
        .args(&argv)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    t.wait_ready(Duration::from_secs(10));
    let run_cgroups = parent.run_cgroups();
    assert_eq!(run_cgroups.len(), 1, "{run_cgroups:?}");
    signal_child(&child, rustix::process::Signal::KILL);
    let _ = child.wait();
    assert!(
        wait_until(Duration::from_secs(5), || t.all_dead()),
        "survivors: {:?}",
        t.survivors()
    );
    t.assert_all_dead("guardian takeover of a deep subtree");
    let gone = wait_until(Duration::from_secs(5), || !run_cgroups[0].exists());
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        gone,
        "the guardian left {} behind: {err}",
        run_cgroups[0].display()
    );
}

/// Issue 10 item 4: a stale run cgroup (its reaper is gone) whose orphaned tree lives deeper
/// than PATH_MAX below it is killed and removed by the next reaper's sweep.
#[test]
fn the_stale_sweep_removes_a_subtree_deeper_than_path_max() {
    let Some(mount) = setup() else { return };
    let parent = TestParent::new(&mount, "sweep");
    // Named like a run cgroup of reaper pid 999999999 (above any pid_max): its owner is gone.
    let stale = parent
        .path()
        .join(format!("reaper-999999999-{}-0", std::process::id()));
    std::fs::create_dir(&stale).unwrap();
    let t = Tree::new();
    let argv = deep_then_exec(
        stale.to_str().unwrap(),
        &t.fixture(&["setsid-grandchild", "--leader-exits"]),
    );
    let st = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    t.wait_ready(Duration::from_secs(10));
    // Only a reaper placed under this test's parent sweeps it.
    let out = reaper()
        .args(["run", "--containment", "cgroup", "--cgroup-parent"])
        .arg(parent.path())
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    t.assert_all_dead("stale sweep of a deep subtree");
    assert!(
        !stale.exists(),
        "stale cgroup {} not removed: {}",
        stale.display(),
        stderr(&out)
    );
}
