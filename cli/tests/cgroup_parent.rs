//! `--cgroup-parent` accepts only a directory on the cgroup2 mount (issue 10 item 2): a path
//! that leaves the mount through `..` is a usage error that creates nothing, and one whose `..`
//! stays inside is used, and reported, in its resolved form.
//!
//! Never pointed at a real cgroup v1 hierarchy: a plain directory holding an empty
//! `cgroup.procs` is what such a path looks like to a check that only tests for that file.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;

/// A cgroup of this test's own under the mount, removed (with whatever reaper left in it) on
/// drop.
struct OwnCgroup(PathBuf);

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        if let Err(e) = reaper_platform::linux::cgroup::Cgroup::at(&self.0).remove_subtree() {
            eprintln!("could not remove test cgroup {}: {e}", self.0.display());
        }
    }
}

/// `MOUNT/../../…/DIR`: as many `..` as the mount point has components, then `dir`, so the
/// path starts with the mount point but resolves to `dir`.
fn through_the_mount(mount: &Path, dir: &Path) -> PathBuf {
    let mut p = mount.to_owned();
    for _ in mount.components().skip(1) {
        p.push("..");
    }
    p.join(dir.strip_prefix("/").unwrap())
}

/// Issue 10 item 2: `--cgroup-parent MOUNT/../../../../tmp/DIR`, a plain directory with an empty
/// `cgroup.procs`, made reaper create its run cgroup in that plain directory. It is a usage error
/// (125) naming the path, whatever the containment asked for, and nothing is created there.
#[test]
fn a_cgroup_parent_that_leaves_the_mount_is_refused_and_nothing_is_created() {
    if !have(Need::Cgroup) {
        return;
    }
    let Some(mount) = cgroup2_mount() else {
        panic!("the cgroup backend is usable but no cgroup2 mount was found");
    };
    let plain = tempfile::Builder::new()
        .prefix("reaper-test-plain-")
        .tempdir()
        .unwrap();
    std::fs::write(plain.path().join("cgroup.procs"), "").unwrap();
    let given = through_the_mount(&mount, plain.path());
    assert!(given.starts_with(&mount), "{}", given.display());
    for containment in ["cgroup", "auto"] {
        let out = reaper()
            .args(["run", "--containment", containment, "--cgroup-parent"])
            .arg(&given)
            .args(["--", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "--containment {containment}: {err}");
        assert!(
            err.contains(&format!("{} is not a cgroup2 directory", given.display())),
            "--containment {containment}: {err}"
        );
        assert!(err.contains("mkdir"), "says what to do: {err}");
        let entries: Vec<_> = std::fs::read_dir(plain.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(entries, vec!["cgroup.procs"], "something was created");
    }
}

/// Issue 10 item 2: a `..` that stays inside the mount is accepted, and the run cgroup's path,
/// in `--report` and in the hierarchy, is the resolved one (no `..` kept).
#[test]
fn a_cgroup_parent_with_dots_inside_the_mount_is_used_resolved() {
    if !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().unwrap();
    let name = format!("reaper-test-dots-{}", std::process::id());
    let own = OwnCgroup(mount.join(&name));
    std::fs::create_dir(&own.0).unwrap();
    std::fs::create_dir(own.0.join("sub")).unwrap();
    let t = Tree::new();
    for given in [
        own.0.join("sub/.."),
        PathBuf::from(format!("{name}/sub/../../{name}")),
    ] {
        let out = reaper()
            .args(["run", "--containment", "cgroup", "--report"])
            .arg(t.report())
            .arg("--cgroup-parent")
            .arg(&given)
            .args(["--", "cat", "/proc/self/cgroup"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}: {}", given.display(), stderr(&out));
        let rep = read_report(&t.report());
        let cg = rep["cgroup"].as_str().unwrap();
        assert!(
            cg.starts_with(&format!("{}/reaper-", own.0.display())) && !cg.contains(".."),
            "{}: reported {cg}",
            given.display()
        );
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            shown.contains(&format!("0::/{name}/reaper-")),
            "{}: {shown}",
            given.display()
        );
        assert_clean_report(&rep);
    }
}
