//! `--sandbox` for a non-root user (issue 14, the delegated-user escape): reaper runs as uid
//! 65534 inside a cgroup of the test's own that 65534 owns (systemd `Delegate=yes`), with it as
//! `--cgroup-parent`. Without the sandbox the command moves itself into that parent (the
//! escape the issue measured; reaper then kills and reports it); under `--sandbox` (a user
//! namespace of the command's own, then the same mount and cgroup namespaces as root's) every
//! attempt fails and the tree dies with the run.
//!
//! Safety: every attempt runs as uid 65534, which can write only what 65534 owns (the test's
//! chowned cgroup), and the mount attempts run only once the script has seen it is in mount
//! and cgroup namespaces other than the test's.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::*;

const NOBODY: u32 = 65534;

/// A cgroup of this test's own under the mount (`reaper-test-usersb-…`), owned by 65534,
/// removed on drop with whatever is left in it (killed first through its own `cgroup.kill`).
struct DelegatedCgroup(PathBuf);

impl DelegatedCgroup {
    fn new(mount: &Path, what: &str) -> DelegatedCgroup {
        let dir = mount.join(format!("reaper-test-usersb-{what}-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let cg = DelegatedCgroup(dir);
        for f in [
            "",
            "cgroup.procs",
            "cgroup.subtree_control",
            "cgroup.threads",
        ] {
            let p = cg.0.join(f);
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY))
                .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
        }
        cg
    }
}

impl Drop for DelegatedCgroup {
    fn drop(&mut self) {
        remove_test_cgroup(&self.0);
    }
}

/// A `sleep` of uid 65534 outside every sandbox (in the test's own cgroup and namespaces):
/// its `/proc/PID/root` is the host's mount namespace, where the cgroup file system is
/// writable. Killed and reaped on drop.
struct Outside(Child);

impl Outside {
    fn start() -> Outside {
        let child = as_nobody(Command::new("sleep").arg("600"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the outside sleep");
        Outside(child)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cmd`, started by `setpriv` as 65534 with no supplementary group.
fn as_nobody(cmd: &Command) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// A test directory 65534 may write: the oracle, the pid file, the output and a scratch dir.
fn nobody_tree() -> Tree {
    let tree = Tree::new();
    std::fs::set_permissions(tree.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for f in [tree.oracle(), tree.pids(), out_file(&tree)] {
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let scratch = tree.dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::os::unix::fs::chown(&scratch, Some(NOBODY), Some(NOBODY)).unwrap();
    tree
}

fn out_file(tree: &Tree) -> PathBuf {
    tree.dir.path().join("out")
}

/// `readlink /proc/self/ns/KIND`, e.g. `mnt:[4026531841]`.
fn ns_link(kind: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/self/ns/{kind}")).expect("read /proc/self/ns")
}

/// reaper as 65534, started inside `deleg` (a user may move a process only between cgroups
/// below one whose `cgroup.procs` it owns), with `deleg` as `--cgroup-parent`, running
/// `sh -c SCRIPT` with `$ORACLE`, `$PIDS`, `$OUT`, `$SCRATCH`, `$DELEG`, `$CG2`, `$OUTSIDE`,
/// `$HOSTMNT` and `$HOSTCGNS` in its environment.
fn run_as_nobody(
    tree: &Tree,
    deleg: &DelegatedCgroup,
    outside: Option<&Outside>,
    sandbox: &[&str],
    script: &str,
    env: &[(&str, &str)],
) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(
            "echo $$ > \"$1/cgroup.procs\" || exit 97; shift; \
             exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$@\"",
        )
        .arg("-")
        .arg(&deleg.0)
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .args([
            "run",
            "-t",
            "60",
            "--containment",
            "cgroup",
            "--no-guardian",
        ])
        .arg("--cgroup-parent")
        .arg(&deleg.0)
        .arg("--report")
        .arg(tree.report())
        .args(sandbox)
        .args(["--", "sh", "-c", script])
        .env("ORACLE", tree.oracle())
        .env("PIDS", tree.pids())
        .env("OUT", out_file(tree))
        .env("SCRATCH", tree.dir.path().join("scratch"))
        .env("DELEG", &deleg.0)
        .env("CG2", cgroup2_mount().expect("cgroup2 mount"))
        .env("OUTSIDE", outside.map_or(0, |o| o.0.id()).to_string())
        .env("HOSTMNT", ns_link("mnt"))
        .env("HOSTCGNS", ns_link("cgroup"))
        .env("RUST_LOG", "warn")
        .env("ESCAPE", reaper_testkit::escape())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run reaper")
}

/// The `rc=N` of the line starting with `name `.
fn rc(out: &str, name: &str) -> i32 {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{out}"));
    line.rsplit_once("rc=")
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rc in {line:?}"))
}

/// The delegated user's escapes, each a line `NAME rc=N` in `$OUT` (rc=0: it worked). The
/// output goes to a file, not reaper's stdout: an escapee holding the pipe would keep the
/// test's read of it open. The shell writes its own pid (`$$`) into the parent's
/// `cgroup.procs`, directly and through `/proc/$OUTSIDE/root` (an outside process's mount
/// namespace). The mount attempts run only in a mount and cgroup namespace of their own (the
/// sandbox's): as 65534 they could change nothing anyway, but nothing here tries a mount in
/// the test's namespaces. Last, a `setsid sleep` holding the oracle lock (recorded when no
/// PID namespace renumbers it), and the leader exits: the tree must die with the run.
const ESCAPES: &str = r#"
exec 9>>"$ORACLE" </dev/null >>"$OUT" 2>&1
flock -s 9 || exit 99
record() { [ "$RECORD" = 1 ] && echo "$1 $(cut -d' ' -f22 /proc/$1/stat) $2" >> "$PIDS"; }
echo "uid=$(id -u) gid=$(id -g)"
[ "$(readlink /proc/self/ns/mnt)" = "$HOSTMNT" ]; hostmnt=$?; echo "host-mntns rc=$hostmnt"
[ "$(readlink /proc/self/ns/cgroup)" = "$HOSTCGNS" ]; hostcg=$?; echo "host-cgroupns rc=$hostcg"
ls "/proc/$OUTSIDE/root/" >/dev/null; echo "outside-root-ls rc=$?"
( echo $$ > "/proc/$OUTSIDE/root$DELEG/cgroup.procs" ); echo "outside-root-procs rc=$?"
( echo $$ > "$DELEG/cgroup.procs" ); echo "parent-procs rc=$?"
"$ESCAPE" clone3 "$DELEG"
if [ $hostmnt -ne 0 ] && [ $hostcg -ne 0 ]; then
    mount -o remount,rw "$CG2"; echo "remount rc=$?"
    unshare -U -r -m sh -c 'mount -o remount,rw "$CG2"'; echo "userns-remount rc=$?"
    unshare -U -r -m sh -c 'mount -o remount,rw /sys'; echo "userns-remount-sys rc=$?"
    unshare -U -r -m sh -c 'umount -l "$CG2"'; echo "userns-umount rc=$?"
    nsenter -t "$OUTSIDE" -U -m --preserve-credentials true; echo "nsenter-outside rc=$?"
    nsenter -t "$OUTSIDE" -m true; echo "nsenter-outside-mnt rc=$?"
fi
setsid sleep 4329 &
record $! sleeper
echo "started rc=0"
"#;

/// What must fail under `--sandbox`.
const ESCAPE_NAMES: &[&str] = &[
    "host-mntns",
    "host-cgroupns",
    "outside-root-ls",
    "outside-root-procs",
    "parent-procs",
    "clone3",
    "remount",
    "userns-remount",
    "userns-remount-sys",
    "userns-umount",
    "nsenter-outside",
    "nsenter-outside-mnt",
];

fn attempt_under(mode: &str, env: &[(&str, &str)]) {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let what = format!("{}{}", mode.trim_start_matches("--"), env.len());
    let deleg = DelegatedCgroup::new(&mount, &what);
    let outside = Outside::start();
    let tree = nobody_tree();
    let record = if mode.ends_with("=pid") { "0" } else { "1" };
    let o = run_as_nobody(
        &tree,
        &deleg,
        Some(&outside),
        &[mode],
        &format!("RECORD={record}; {ESCAPES}"),
        env,
    );
    let err = stderr(&o);
    let out = std::fs::read_to_string(out_file(&tree)).unwrap_or_default();
    eprintln!("{mode} as 65534:\n{out}");
    tree.assert_all_dead(&format!("{mode} as 65534"));
    assert_eq!(code(&o), 0, "{mode}: out:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains(&format!("uid={NOBODY} gid={NOBODY}")),
        "{mode}: the command keeps its ids: {out}"
    );
    for name in ESCAPE_NAMES {
        assert_ne!(
            rc(&out, name),
            0,
            "{mode}: the `{name}` escape worked:\n{out}\nstderr:\n{err}"
        );
    }
    assert_eq!(rc(&out, "started"), 0, "{out}");
    assert!(
        out.contains("ran clone3\n"),
        "the clone3 attempt did not run: {out}"
    );
    assert_eq!(rc(&out, "clone3"), libc::ENOSYS, "{out}");
    let report = read_report(&tree.report());
    assert_clean_report(&report);
    assert_eq!(
        report["escapees"].as_array().map(Vec::len),
        Some(0),
        "{mode}: nobody got out: {report}"
    );
}

/// Issue 14, the delegated-user escape under `--sandbox`: before this change a non-root
/// `--sandbox` refused to start (exit 125); now it runs in a user namespace of its own, and
/// the parent's `cgroup.procs` (read-only mount, outside the cgroup namespace), a remount
/// (no capability; in a nested user namespace the mount is locked read-only), and the host's
/// mount namespace through `/proc/PID/root` or `setns` of an outside process of the same uid
/// (ptrace across user namespaces needs `CAP_SYS_PTRACE` in the target's) all fail.
#[test]
fn as_a_delegated_user_every_escape_fails_under_sandbox() {
    attempt_under("--sandbox", &[]);
}

/// Without clone3 (`REAPER_CLONE3=0`) reaper cannot write the user namespace's maps before the
/// leader goes on: the sandbox refuses to start, naming clone3.
#[test]
fn as_a_delegated_user_sandbox_without_clone3_is_refused() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let deleg = DelegatedCgroup::new(&mount, "noclone3");
    let tree = nobody_tree();
    let o = run_as_nobody(
        &tree,
        &deleg,
        None,
        &["--sandbox"],
        "true",
        &[("REAPER_CLONE3", "0")],
    );
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--sandbox needs clone3(CLONE_INTO_CGROUP)"),
        "{}",
        stderr(&o)
    );
}

/// As above with the PID namespace: the outside process is not even visible.
#[test]
fn as_a_delegated_user_every_escape_fails_under_sandbox_pid() {
    attempt_under("--sandbox=pid", &[]);
}

/// The negative control: the same script as 65534 without `--sandbox` escapes, directly and
/// through `/proc/PID/root` of an outside process of its own uid (so the attempts above are
/// real), and reaper kills the escapee and reports it.
#[test]
fn as_a_delegated_user_without_sandbox_the_escape_works_and_is_caught() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let deleg = DelegatedCgroup::new(&mount, "control");
    let outside = Outside::start();
    let tree = nobody_tree();
    let o = run_as_nobody(
        &tree,
        &deleg,
        Some(&outside),
        &[],
        &format!("RECORD=1; {ESCAPES}"),
        &[],
    );
    let err = stderr(&o);
    let out = std::fs::read_to_string(out_file(&tree)).unwrap_or_default();
    eprintln!("without --sandbox as 65534:\n{out}\nstderr: {err}");
    tree.assert_all_dead("the control's escapee");
    for name in [
        "outside-root-ls",
        "outside-root-procs",
        "parent-procs",
        "clone3",
    ] {
        assert_eq!(
            rc(&out, name),
            0,
            "without --sandbox `{name}` works:\n{out}"
        );
    }
    assert!(
        !out.contains("remount rc="),
        "no mount attempt in the test's namespaces: {out}"
    );
    let report = read_report(&tree.report());
    let escapees = report["escapees"].as_array().cloned().unwrap_or_default();
    assert!(
        !escapees.is_empty(),
        "the escapee is reported: {report}\nstderr: {err}"
    );
}

/// Everyday work as the user under `--sandbox`: files in a directory the user owns, `python3`,
/// `git`, all with the user's own ids.
#[test]
fn as_a_delegated_user_everyday_commands_work_under_sandbox() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let mount = cgroup2_mount().expect("cgroup2 mount");
    let deleg = DelegatedCgroup::new(&mount, "everyday");
    let tree = nobody_tree();
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let script = format!(
        "exec >>\"$OUT\" 2>&1\n\
         cd \"$SCRATCH\" && echo hello > f && cat f && stat -c 'owner=%u:%g' f\n\
         echo \"id=$(id -u):$(id -g)\"\n\
         {}\n\
         git --version && echo git-ok\n",
        match python {
            Some(p) => format!("{p} -c 'import os; print(\"python-uid\", os.getuid())'"),
            None => "echo 'python-uid 65534'".into(),
        }
    );
    if python.is_none() {
        eprintln!("skipped (python part): no python3 readable by 65534");
    }
    let o = run_as_nobody(&tree, &deleg, None, &["--sandbox"], &script, &[]);
    let out = std::fs::read_to_string(out_file(&tree)).unwrap_or_default();
    assert_eq!(code(&o), 0, "out:\n{out}\nstderr:\n{}", stderr(&o));
    for want in [
        "hello",
        "owner=65534:65534",
        "id=65534:65534",
        "python-uid 65534",
        "git-ok",
    ] {
        assert!(out.contains(want), "no `{want}` in:\n{out}");
    }
}
