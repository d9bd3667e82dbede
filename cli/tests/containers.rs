//! reaper in a container-shaped place: a new PID namespace whose PID 1 is reaper, and a mount
//! namespace where the cgroup file system is read-only (Docker's and Kubernetes' default). The
//! cgroup backend cannot work there: `auto` falls back with one line (none with `-q`), the tree is
//! still stopped, and `reaper doctor` names what it sees. (Issue 12: containers are a host.)

mod common;

use std::process::{Command, Output, Stdio};

use common::*;

/// Runs `reaper ARGS…` as PID 1 of a new PID namespace, in a new mount namespace where the
/// cgroup2 mount is read-only (a remount of this namespace's copy only: the host's mount is not
/// touched).
fn in_a_container(args: &[&str]) -> Output {
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let script = r#"
        mount --make-rprivate / &&
        mount -o remount,bind,ro "$MNT" &&
        exec "$@"
    "#;
    Command::new("unshare")
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .args(args)
        .env("MNT", mount)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare")
}

/// `reaper doctor` as a container's PID 1 with a read-only cgroupfs: it says so, and what that
/// leaves (the PID namespace contains the tree).
#[test]
fn doctor_names_a_container() {
    if !have(Need::PidNamespace) {
        return;
    }
    let out = in_a_container(&["doctor", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", stderr(&out)));
    assert_eq!(doc["container"]["pid1"], true, "{doc}");
    assert_eq!(doc["container"]["pid_namespace"], true, "{doc}");
    assert_eq!(doc["container"]["cgroupfs_read_only"], true, "{doc}");
    assert_eq!(doc["cgroup_writable"], false, "{doc}");
    assert_eq!(doc["auto_backend"], "subreaper", "{doc}");
    let hints = doc["hints"].to_string();
    assert!(hints.contains("read-only"), "{hints}");
    assert!(hints.contains("PID 1 of its PID namespace"), "{hints}");
    let out = in_a_container(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "container          PID 1 of its PID namespace (the namespace contains the tree); \
             cgroup file system read-only"
        ),
        "{text}"
    );
}

/// The README's leaking shape as a container's PID 1: `auto` falls back with exactly one line,
/// the setsid'd TERM-ignoring grandchild is stopped by reaper itself (the report says so, before
/// the namespace's end could hide a survivor), and `-q` silences the line.
#[test]
fn a_container_run_falls_back_with_one_line_and_stops_the_tree() {
    if !have(Need::PidNamespace) {
        return;
    }
    let t = Tree::new();
    let report = t.report().display().to_string();
    let mut args = vec!["run", "--grace", "300ms", "--report", &report, "--"];
    let fixture = t.fixture(&["setsid-grandchild", "--leader-exits"]);
    args.extend(fixture.iter().map(String::as_str));
    let out = in_a_container(&args);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("subreaper"), "{err}");
    let rep = read_report(&t.report());
    assert_eq!(rep["backend"], "subreaper", "{rep}");
    assert_eq!(rep["survivors"], serde_json::json!([]), "{rep}");
    assert!(rep["killed"].as_u64().unwrap_or(0) >= 2, "{rep}");
    t.assert_all_dead("a container's run");

    let t = Tree::new();
    let mut args = vec!["run", "-q", "--grace", "300ms", "--"];
    let fixture = t.fixture(&["setsid-grandchild", "--leader-exits"]);
    args.extend(fixture.iter().map(String::as_str));
    let out = in_a_container(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "-q says nothing");
    t.assert_all_dead("a quiet container's run");
}

/// A root without /dev/null (an empty container's): doctor's clone3 probe still answers, for
/// what it is, instead of blaming clone3 for the missing device.
#[test]
fn doctor_without_dev_null_still_probes_clone3() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let out = Command::new("unshare")
        .args(["--mount", "--", "sh", "-c"])
        .arg(r#"mount --make-rprivate / && mount -t tmpfs none /dev && [ ! -e /dev/null ] && exec "$@""#)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .args(["doctor", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json without /dev/null: {e}: {}", stderr(&out)));
    assert_eq!(doc["clone_into_cgroup"], true, "{doc}");
}
