//! `--sandbox`: as root, a contained command cannot leave its cgroup, nor make the kernel or a
//! host service run code outside it (its root is an unprivileged host user), and everything else
//! a command needs keeps working in the directories declared for it.
//!
//! The escapes are root's: each test that attempts them needs root and the cgroup backend, and
//! says `skipped:` otherwise. Every attempt is a separate line `NAME rc=N` on the command's
//! stdout, asserted one by one, so a regression names the escape that worked. The sandboxed
//! root reaches the test's own (0700) directories only because each test declares them
//! (`--sandbox-rw`).

mod common;
mod mcp_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{code, have, reaper, stderr, Need, Tree};

fn cg2() -> PathBuf {
    common::cgroup2_mount().expect("a cgroup2 mount (Need::Cgroup said so)")
}

/// `reaper run [--sandbox…] -- sh -c SCRIPT` with `$CG2` (the cgroup2 mount), `$ORACLE` (the
/// tree's lock file) and `$SCRATCH` (a directory of the test) in its environment.
fn run_sh(tree: &Tree, sandbox: &[&str], script: &str) -> Output {
    run_sh_env(tree, sandbox, script, &[])
}

fn run_sh_env(tree: &Tree, sandbox: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    let scratch = tree.dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    std::fs::write(tree.oracle(), b"").expect("oracle file");
    let mut cmd = reaper();
    cmd.args(["run", "--containment", "cgroup", "-t", "60"])
        .args(sandbox);
    if !sandbox.is_empty() {
        cmd.arg("--sandbox-rw").arg(tree.dir.path());
    }
    cmd.args(["--", "sh", "-c", script])
        .env("CG2", cg2())
        .env("ORACLE", tree.oracle())
        .env("SCRATCH", &scratch)
        .env("TESTPID", std::process::id().to_string())
        .env("HOSTMNT", ns_link("mnt"))
        .env("HOSTCGNS", ns_link("cgroup"))
        .env("ESCAPE", reaper_testkit::escape())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run reaper")
}

/// `readlink /proc/self/ns/KIND`, e.g. `mnt:[4026531841]`.
fn ns_link(kind: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/self/ns/{kind}")).expect("read /proc/self/ns")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
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

/// Every escape root has, tried in turn; then a `setsid` grandchild holding the oracle lock, to
/// show the tree still dies with the run.
///
/// A test that fails must harm nothing it does not own: cgroups found are only *checked* for
/// writability (`test -w` asks access(2), which says no on a read-only mount), never written,
/// since a broken sandbox would move the shell into other users' cgroups (and v1 ones). The
/// only writes go to the cgroup2 root's `cgroup.procs`, as in the issue's own measurement, and
/// a shell that got out exits at once (exit 3) without starting anything. The mount attempts
/// come only after the shell has checked it is in a mount namespace other than the test's
/// (`$HOSTMNT`): without one, `umount` and `mount` would change the machine's own mounts.
const ESCAPES: &str = r#"
exec 9<>"$ORACLE"; flock -s 9 || exit 90
[ "$(readlink /proc/self/ns/mnt)" = "$HOSTMNT" ]; r=$?; echo "host-mntns rc=$r"; [ $r -eq 0 ] && exit 3
[ "$(readlink /proc/self/ns/cgroup)" = "$HOSTCGNS" ]; r=$?; echo "host-cgroupns rc=$r"; [ $r -eq 0 ] && exit 3
n=0; w=0
for f in $(find /sys/fs/cgroup "$CG2" /proc/1/root/sys/fs/cgroup -name cgroup.procs 2>/dev/null); do
    n=$((n+1))
    if [ -w "$f" ]; then w=$((w+1)); echo "writable: $f"; fi
done
# rc=0 only if one is writable, like the other lines.
echo "procs-writable tried=$n writable=$w rc=$([ "$w" -eq 0 ] && echo 1 || echo 0)"
( echo $$ > "$CG2/cgroup.procs" ); r=$?; echo "root-procs rc=$r"; [ $r -eq 0 ] && exit 3
( echo $$ > "/proc/1/root$CG2/cgroup.procs" ); r=$?; echo "proc1-root rc=$r"; [ $r -eq 0 ] && exit 3
mount -o remount,rw "$CG2"; echo "remount rc=$?"
mount -o remount,rw /sys; echo "remount-sys rc=$?"
umount -l "$CG2"; echo "umount rc=$?"
mkdir -p "$SCRATCH/cg"; mount -t cgroup2 none "$SCRATCH/cg"; echo "fresh-cgroup2 rc=$?"
unshare -C -m true; echo "unshare rc=$?"
unshare -U -r -C true; echo "userns-cgroupns rc=$?"
"$ESCAPE" unshare-cgroupns
"$ESCAPE" clone3 "$CG2"
[ -n "$OUTSIDE" ] && "$ESCAPE" setuid-proc-root "$OUTSIDE_UID" "$OUTSIDE" "$CG2/cgroup.procs"
unshare -U -r -C -m sh -c 'mount -o remount,rw "$CG2"'; echo "userns-remount rc=$?"
unshare -U -r -m sh -c 'umount -l "$CG2"'; echo "userns-umount rc=$?"
nsenter --cgroup=/proc/1/ns/cgroup true; echo "setns-cgroup rc=$?"
nsenter -t 1 -a true; echo "nsenter-all rc=$?"
# Checked, not written: a write that worked would change the machine's core dumps.
[ -w /proc/sys/kernel/core_pattern ]; echo "core-pattern rc=$?"
setsid sleep 300 &
echo "started rc=0"
"#;

const ESCAPE_NAMES: &[&str] = &[
    "host-mntns",
    "host-cgroupns",
    "procs-writable",
    "root-procs",
    "proc1-root",
    "remount",
    "remount-sys",
    "umount",
    "fresh-cgroup2",
    "unshare",
    "userns-cgroupns",
    "unshare-cgroupns",
    "clone3",
    "setuid-proc-root",
    "userns-remount",
    "userns-umount",
    "setns-cgroup",
    "nsenter-all",
    "core-pattern",
];

/// A `sleep` of uid 65534 outside the run (a service user's process): `setuid` to its uid
/// passes the ptrace check for its `/proc/PID/root`, its mount namespace, where the cgroup file
/// system is writable. Killed and reaped on drop.
struct Outside(std::process::Child);

impl Outside {
    fn start() -> Outside {
        let child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sleep",
                "600",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start a sleep as 65534");
        // setpriv execs sleep: once /proc says so, its uid is 65534.
        let pid = child.id();
        for _ in 0..500 {
            let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            if st.lines().any(|l| l.starts_with("Uid:\t65534")) {
                return Outside(child);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        panic!("the outside sleep never ran as 65534");
    }

    fn env(&self) -> [(&'static str, String); 2] {
        [
            ("OUTSIDE", self.0.id().to_string()),
            ("OUTSIDE_UID", "65534".into()),
        ]
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn assert_every_escape_fails(mode: &[&str]) {
    if !have(Need::Root) || !have(Need::Cgroup) || !have(Need::Program("setpriv")) {
        return;
    }
    let tree = Tree::new();
    let outside = Outside::start();
    let env = outside.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = run_sh_env(&tree, mode, ESCAPES, &env);
    let out = stdout(&o);
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{mode:?}: stdout:\n{out}\nstderr:\n{err}");
    for name in ESCAPE_NAMES {
        assert_ne!(
            rc(&out, name),
            0,
            "{mode:?}: the `{name}` escape worked:\n{out}\nstderr:\n{err}"
        );
    }
    // The hostile helper really ran each attempt, and no child of its clone3 ever started.
    for name in ["clone3", "setuid-proc-root", "unshare-cgroupns"] {
        assert!(
            out.contains(&format!("ran {name}\n")),
            "{name} did not run: {out}"
        );
    }
    assert!(!out.contains("clone3-child"), "{out}");
    // clone3 is not there for it (glibc falls back to clone); the other process's mount
    // namespace is closed by the user namespace (EACCES), or not visible with =pid (ENOENT).
    assert_eq!(rc(&out, "clone3"), libc::ENOSYS, "{out}");
    assert!(
        [libc::EACCES, libc::ENOENT].contains(&rc(&out, "setuid-proc-root")),
        "{out}"
    );
    assert!(
        !out.contains("procs-writable tried=0 "),
        "no cgroup.procs was found to try: {out}"
    );
    // The kernel's own words: the cgroup file system is read-only, mount and setns need a
    // capability the command no longer has.
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(
        err.contains("permission denied") || err.contains("Operation not permitted"),
        "{err}"
    );
    rc(&out, "started");
    tree.assert_all_dead(&format!("the sandboxed tree after the run ({mode:?})"));
}

/// Issue 14 point 3: as root under `--sandbox`, every way out of the run's cgroup fails —
/// every `cgroup.procs` in sight read-only (v1 and v2, and through `/proc/1/root`), writing the
/// pid into the cgroup2 root's (directly and through `/proc/1/root`),
/// remounting the cgroup file system or `/sys` writable, unmounting it, mounting a fresh
/// cgroup2, a new cgroup and mount namespace (with and without a user namespace), `setns` into
/// PID 1's cgroup namespace, `nsenter`, a `core_pattern` helper — and the tree dies with the run.
/// Without `--sandbox` the first of these succeeds (see `root_leaves_without_the_sandbox`).
#[test]
fn sandboxed_root_cannot_leave_its_cgroup() {
    assert_every_escape_fails(&["--sandbox"]);
}

/// The same under `--sandbox=pid`, where PID 1 is the command itself.
#[test]
fn sandboxed_root_cannot_leave_its_cgroup_with_a_pid_namespace() {
    assert_every_escape_fails(&["--sandbox=pid"]);
}

/// The sandbox's user namespace needs its maps written by reaper between the clone and the
/// leader's next step, which only the clone3 spawn waits for: without clone3
/// (`REAPER_CLONE3=0`, a seccomp filter) `--sandbox` refuses to start, naming it, rather than
/// start weaker.
#[test]
fn sandbox_without_clone3_is_refused() {
    if !have(Need::Cgroup) {
        return;
    }
    for mode in ["--sandbox", "--sandbox=pid"] {
        let o = reaper()
            .args(["run", "--containment", "cgroup", mode, "--", "true"])
            .env("REAPER_CLONE3", "0")
            .output()
            .expect("run reaper");
        assert_eq!(code(&o), 125, "{mode}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--sandbox needs clone3(CLONE_INTO_CGROUP)"),
            "{mode}: {}",
            stderr(&o)
        );
    }
}

/// The negative control: without `--sandbox`, root leaves its run's cgroup with one write to the
/// cgroup2 root's `cgroup.procs` (issue 14, "Measured on main"). The shell that moved exits at
/// once and starts nothing, so nothing is left behind.
#[test]
fn root_leaves_without_the_sandbox() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let tree = Tree::new();
    let o = run_sh(
        &tree,
        &[],
        r#"( echo $$ > "$CG2/cgroup.procs" ); echo "moved rc=$?"; grep '^0::' /proc/self/cgroup"#,
    );
    let out = stdout(&o);
    assert_eq!(rc(&out, "moved"), 0, "{out}\n{}", stderr(&o));
    assert!(out.contains("\n0::/\n"), "not in the root cgroup: {out}");
}

/// The negative control of the sandbox's two new routes, as root without `--sandbox`:
/// `clone3(CLONE_INTO_CGROUP)` with a read-only fd of the cgroup2 root creates the child in the
/// root cgroup, and `setuid` to a service user's uid opens that user's process's
/// `/proc/PID/root` and writes into the root's `cgroup.procs`. Each process that got out exits
/// at once.
#[test]
fn root_leaves_by_clone3_and_proc_root_without_the_sandbox() {
    if !have(Need::Root) || !have(Need::Cgroup) || !have(Need::Program("setpriv")) {
        return;
    }
    let tree = Tree::new();
    let outside = Outside::start();
    let env = outside.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = run_sh_env(
        &tree,
        &[],
        r#""$ESCAPE" clone3 "$CG2"
"$ESCAPE" setuid-proc-root "$OUTSIDE_UID" "$OUTSIDE" "$CG2/cgroup.procs""#,
        &env,
    );
    let out = stdout(&o);
    assert_eq!(rc(&out, "clone3"), 0, "{out}\n{}", stderr(&o));
    assert!(out.contains("clone3-child 0::/\n"), "{out}");
    assert_eq!(rc(&out, "setuid-proc-root"), 0, "{out}\n{}", stderr(&o));
}

/// `--sandbox=pid`: the command is PID 1 of its own PID namespace, sees only its tree in
/// `/proc`, and cannot signal the test (outside) by pid.
#[test]
fn pid_sandbox_sees_and_signals_only_its_tree() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let tree = Tree::new();
    let o = run_sh(
        &tree,
        &["--sandbox=pid"],
        r#"echo "pid $$ rc=0"; echo "procs $(ls /proc | grep -c '^[0-9]') rc=0"
kill -0 "$TESTPID"; echo "signal-outside rc=$?""#,
    );
    let out = stdout(&o);
    assert!(out.contains("pid 1 rc=0"), "{out}");
    // sh itself, and the subshell, `ls` and `grep` of the count.
    let procs: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("procs "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    assert!(procs <= 5, "/proc shows {procs} processes: {out}");
    assert_ne!(rc(&out, "signal-outside"), 0, "{out}");
    assert!(stderr(&o).contains("No such process"), "{}", stderr(&o));
}

/// Issue 14 point 5: `--sandbox` where a part is impossible fails with 125 naming it, never a
/// weaker sandbox: without the cgroup backend there is no cgroup to root the namespace at
/// (without clone3: `sandbox_without_clone3_is_refused`).
#[test]
fn impossible_sandbox_is_exit_125_naming_the_part() {
    let o = reaper()
        .args([
            "run",
            "--containment",
            "subreaper",
            "--sandbox",
            "--",
            "true",
        ])
        .output()
        .expect("run reaper");
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--sandbox needs the cgroup backend"),
        "{}",
        stderr(&o)
    );
}

/// A non-root user without a cgroup of their own gets no sandbox (no cgroup backend here; one
/// with a delegated cgroup does: tests/sandbox_user.rs): 125 naming what is missing, not a run
/// without the sandbox.
#[test]
fn sandbox_as_nobody_is_exit_125() {
    if !have(Need::Root) || !have(Need::Program("setpriv")) {
        return;
    }
    for mode in ["--sandbox", "--sandbox=pid"] {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_reaper"))
            .args(["run", mode, "--no-guardian", "--", "true"])
            .output()
            .expect("setpriv");
        let err = stderr(&o);
        assert_eq!(code(&o), 125, "{mode}: {err}");
        assert!(
            err.contains("--sandbox needs the cgroup backend")
                || err.contains("--sandbox: cannot create"),
            "{mode}: {err}"
        );
    }
}

/// The Rust toolchain's directories (rustup's proxies and toolchains, under root's 0700 home
/// here) as `CARGO_HOME` and `RUSTUP_HOME`, for `--sandbox-ro`.
fn toolchain_dirs() -> Vec<(&'static str, PathBuf)> {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")]
        .into_iter()
        .map(|(var, dir)| {
            let d = std::env::var_os(var).map_or_else(|| home.join(dir), PathBuf::from);
            (var, d)
        })
        .filter(|(_, d)| d.is_dir())
        .collect()
}

/// `--sandbox-ro` for each of `dirs`.
fn read_only(dirs: &[PathBuf]) -> Vec<String> {
    dirs.iter()
        .flat_map(|d| ["--sandbox-ro".to_owned(), d.display().to_string()])
        .collect()
}

/// `reaper run --sandbox --sandbox-rw DIR -- PROGRAM ARGS…` with `dir` as working directory and
/// `HOME` (root's own is closed to the sandbox's root); must exit 0.
fn sandboxed_ok(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> String {
    sandboxed_ok_with(args, dir, env, &[])
}

fn sandboxed_ok_with(args: &[&str], dir: &Path, env: &[(&str, &str)], ro: &[PathBuf]) -> String {
    let o = reaper()
        .args([
            "run",
            "--containment",
            "cgroup",
            "--sandbox",
            "-t",
            "120",
            "--sandbox-rw",
        ])
        .arg(dir)
        .args(read_only(ro))
        .arg("--")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run reaper");
    assert_eq!(
        code(&o),
        0,
        "{args:?} under --sandbox:\nstdout:\n{}\nstderr:\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn everyday_ready() -> bool {
    have(Need::Root) && have(Need::Cgroup)
}

/// Issue 14 point 4: files and the network (a loopback TCP round trip) work under `--sandbox`.
#[test]
fn files_and_network_work_in_the_sandbox() {
    if !everyday_ready() || !have(Need::Python3) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = sandboxed_ok(
        &[
            "sh",
            "-c",
            "echo data > f && cat f && mkdir d && mv f d/g && ls d && rm -r d && echo files-ok",
        ],
        dir.path(),
        &[],
    );
    assert_eq!(out, "data\ng\nfiles-ok\n");
    let out = sandboxed_ok(
        &[
            "python3",
            "-c",
            "import socket\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(1)\n\
             c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.sendall(b'ping')\n\
             print(a.recv(4).decode())",
        ],
        dir.path(),
        &[],
    );
    assert_eq!(out, "ping\n");
}

/// `git` works: init, commit, log.
#[test]
fn git_works_in_the_sandbox() {
    if !everyday_ready() || !have(Need::Program("git")) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = sandboxed_ok(
        &[
            "sh",
            "-c",
            "git init -q . && echo x > x && git add x && \
             git -c user.name=t -c user.email=t@t commit -qm one && git log --format=%s",
        ],
        dir.path(),
        &[],
    );
    assert_eq!(out, "one\n");
}

#[test]
fn cargo_python_node_work_in_the_sandbox() {
    if !everyday_ready() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    if have(Need::Program("cargo")) {
        let toolchain = toolchain_dirs();
        let env: Vec<(&str, &str)> = toolchain
            .iter()
            .map(|(var, d)| (*var, d.to_str().expect("utf-8 path")))
            .collect();
        let dirs: Vec<PathBuf> = toolchain.iter().map(|(_, d)| d.clone()).collect();
        let out = sandboxed_ok_with(&["cargo", "--version"], dir.path(), &env, &dirs);
        assert!(out.starts_with("cargo "), "{out}");
    }
    if have(Need::Python3) {
        assert_eq!(
            sandboxed_ok(&["python3", "-c", "print(6*7)"], dir.path(), &[]),
            "42\n"
        );
    }
    if have(Need::Program("node")) {
        assert!(sandboxed_ok(&["node", "--version"], dir.path(), &[]).starts_with('v'));
    }
}

/// The real Codex CLI, as a string for argv.
fn codex() -> Option<String> {
    if !have(Need::Codex) {
        return None;
    }
    common::real_codex().to_str().map(str::to_owned)
}

/// Where the real Codex CLI is installed (`…/codex/node_modules/.bin/codex` and the package
/// beside it), for `--sandbox-ro`.
fn codex_dir(codex: &str) -> PathBuf {
    let real = std::fs::canonicalize(codex).unwrap_or_else(|_| PathBuf::from(codex));
    real.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .and_then(Path::parent)
        .map_or_else(|| real.parent().unwrap_or(&real).to_owned(), Path::to_owned)
}

/// The real Codex CLI under `--sandbox`: `--version`; `codex exec` down its fail-fast path (a
/// provider on a closed loopback port, no retries: `turn.failed`, exit 1, see the codex spec);
/// and `codex sandbox -- true`, codex's own Linux sandbox (no new privileges, no capabilities)
/// inside reaper's.
#[test]
fn real_codex_works_in_the_sandbox() {
    if !everyday_ready() {
        return;
    }
    let Some(codex) = codex() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).expect("codex home");
    let env = [("CODEX_HOME", home.to_str().expect("utf-8 temp path"))];
    let ro = [codex_dir(&codex)];
    assert!(
        sandboxed_ok_with(&[&codex, "--version"], dir.path(), &env, &ro).starts_with("codex-cli ")
    );
    sandboxed_ok_with(&[&codex, "sandbox", "--", "true"], dir.path(), &env, &ro);

    let o = reaper()
        .args([
            "run",
            "--containment",
            "cgroup",
            "--sandbox",
            "-t",
            "120",
            "--sandbox-rw",
        ])
        .arg(dir.path())
        .args(read_only(&ro))
        .arg("--")
        .args([
            &codex,
            "exec",
            "--disable",
            "unbounded_connection_retries",
            "-c",
            "model_provider=dead",
            "-c",
            "model_providers.dead={name=\"dead\",base_url=\"http://127.0.0.1:9/v1\",\
             request_max_retries=0,stream_max_retries=0}",
            "--skip-git-repo-check",
            "--json",
            "hello",
        ])
        .current_dir(dir.path())
        .envs(env)
        .stdin(Stdio::null())
        .output()
        .expect("run reaper");
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}\n{}", stderr(&o));
    assert!(out.contains("\"type\":\"thread.started\""), "{out}");
    assert!(out.contains("\"type\":\"turn.failed\""), "{out}");
}

/// Issue 14 point 4: `reaper mcp --sandbox` puts every call in the sandbox. The real codex runs
/// down its fail-fast path (see `real_codex_works_in_the_sandbox`) behind a wrapper that first
/// records, from inside the call, its no-new-privileges flag, bounding set and mount namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sandbox_applies_to_every_call() {
    if !everyday_ready() {
        return;
    }
    let Some(codex) = codex() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).expect("codex home");
    let probe = dir.path().join("probe");
    let wrapper = dir.path().join("codex-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ngrep -E '^(NoNewPrivs|CapBnd)' /proc/self/status >> '{p}'\n\
             readlink /proc/self/ns/mnt >> '{p}'\nexec '{codex}' \"$@\"\n",
            p = probe.display()
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod wrapper");
    let provider = "model_providers.dead={name=\"dead\",base_url=\"http://127.0.0.1:9/v1\",\
                    request_max_retries=0,stream_max_retries=0}";
    let rw = dir.path().to_str().expect("utf-8 path").to_owned();
    let ro = codex_dir(&codex).to_str().expect("utf-8 path").to_owned();
    let s = mcp_support::start(mcp_support::Options {
        args: &[
            "--sandbox",
            "--containment",
            "cgroup",
            "--sandbox-rw",
            &rw,
            "--sandbox-ro",
            &ro,
            "--",
            "--disable",
            "unbounded_connection_retries",
            "-c",
            "model_provider=dead",
            "-c",
            provider,
            "--skip-git-repo-check",
        ],
        env: &[
            ("CODEX_CMD", wrapper.to_str().expect("utf-8 path")),
            ("CODEX_HOME", home.to_str().expect("utf-8 path")),
        ],
    })
    .await;
    for _ in 0..2 {
        let r = s
            .call(
                "codex",
                serde_json::json!({"prompt": "hello", "cd": dir.path()}),
            )
            .await;
        let text = mcp_support::text(&r);
        assert_eq!(r.is_error, Some(true), "{text}");
        assert!(text.contains("Connection failed"), "{text}");
    }
    let seen = std::fs::read_to_string(&probe).expect("the wrapper ran");
    let host_mnt = ns_link("mnt").display().to_string();
    let mut calls = 0;
    for l in seen.lines() {
        if let Some(v) = l.strip_prefix("NoNewPrivs:") {
            assert_eq!(v.trim(), "1", "{seen}");
            calls += 1;
        } else if let Some(v) = l.strip_prefix("CapBnd:") {
            let bnd = u64::from_str_radix(v.trim(), 16).expect("hex");
            assert_eq!(
                bnd & (1 << 21),
                0,
                "CAP_SYS_ADMIN in the bounding set: {seen}"
            );
        } else {
            assert_ne!(
                l, host_mnt,
                "a call in the machine's mount namespace: {seen}"
            );
        }
    }
    assert_eq!(calls, 2, "{seen}");
}

/// Issue 14 point 5: `reaper doctor` says which parts of the sandbox work here: all of them as
/// root with the cgroup backend; none, with the reason, for a user without a cgroup.
#[test]
fn doctor_names_the_parts_of_the_sandbox() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let o = reaper()
        .args(["doctor", "--json"])
        .output()
        .expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    let sb = &v["sandbox"];
    assert_eq!(sb["available"], true, "{sb}");
    assert_eq!(sb["pid_available"], true, "{sb}");
    let parts: Vec<(&str, &str)> = sb["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|p| {
            (
                p["part"].as_str().unwrap_or("?"),
                p["status"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    for want in [
        "user namespace",
        "mount namespace",
        "cgroup namespace",
        "read-only cgroup fs",
        "masked kernel files",
        "unprivileged root",
        "no new privileges",
        "capability dropping",
        "seccomp filter",
        "PID namespace",
    ] {
        assert!(parts.contains(&(want, "yes")), "{want}: {parts:?}");
    }
    // Each route out was tried from inside a sandbox, and each is closed.
    let routes = sb["routes"].as_array().expect("routes");
    assert_eq!(routes.len(), 6, "{sb}");
    for r in routes {
        assert_eq!(r["closed"], true, "{r}");
    }
    let status = |route: &str| {
        routes
            .iter()
            .find(|r| r["route"].as_str().is_some_and(|n| n.starts_with(route)))
            .and_then(|r| r["status"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    assert!(
        status("clone3").contains("Function not implemented"),
        "{sb}"
    );
    assert!(
        status("a write to the cgroup2").contains("Permission denied"),
        "the sandbox's root is a stranger to the cgroup file system: {sb}"
    );
    assert!(
        status("a write to a host directory").contains("unprivileged root: Permission denied"),
        "{sb}"
    );
    assert!(
        status("/proc/PID/root").contains("a user namespace of its own"),
        "{sb}"
    );
    assert!(sb["nsdelegate"].is_boolean(), "{sb}");
    assert!(sb["unprivileged_user_namespaces"].is_boolean(), "{sb}");

    if !have(Need::Program("setpriv")) {
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .args(["doctor", "--json"])
        .output()
        .expect("setpriv");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    assert_eq!(v["sandbox"]["available"], false, "{}", v["sandbox"]);
    let first = v["sandbox"]["parts"][0]["status"].as_str().unwrap_or("");
    assert!(first.starts_with("no: "), "{}", v["sandbox"]);
}
