//! What root inside `--sandbox` cannot reach on the host: a file of host root's (the programs
//! the kernel runs as root outside every cgroup: `/sbin/request-key`, `kernel.modprobe`'s, a
//! `|pipe` `core_pattern`'s), a block device, the kernel's files in `/proc`, a process of host
//! root's (reaper, the caller), another run's sandbox, a mount the host makes later, the run
//! records' control sockets. The sandbox's root is an unprivileged host user there, with ids of
//! the run's own; the directories a test declares (`--sandbox-rw`, `--sandbox-ro`) are root's.
//!
//! Every attempt prints `NAME rc=N`; each test proves its hostile shell ran (its lines are
//! there) and, where the route is this machine's, has a control without the sandbox. The
//! kernel-helper routes that need a stock kernel with modules and sysrq run in the VM lane
//! (`ci/vm/scenarios/sandbox.sh`).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{code, have, reaper, stderr, Need, Tree};

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

fn ready() -> bool {
    have(Need::Root) && have(Need::Cgroup)
}

/// `reaper run --containment cgroup MODE… -- sh -c SCRIPT`, the tree's directory declared
/// writable when sandboxed.
fn run_sh(tree: &Tree, mode: &[&str], script: &str, env: &[(&str, String)]) -> Output {
    let mut cmd = reaper();
    cmd.args(["run", "--containment", "cgroup", "-t", "60"])
        .args(mode);
    if !mode.is_empty() {
        cmd.arg("--sandbox-rw").arg(tree.dir.path());
    }
    std::fs::write(tree.oracle(), b"").expect("oracle");
    cmd.args(["--", "sh", "-c", script])
        .current_dir(tree.dir.path())
        .env("ORACLE", tree.oracle())
        .env("TESTPID", std::process::id().to_string())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .output()
        .expect("run reaper")
}

/// A file of host root's the tree is to leave alone: mode 0644 in a 0755 directory, as the
/// programs in /sbin and /usr/bin are. Removed on drop.
struct Victim {
    dir: PathBuf,
}

impl Victim {
    const TEXT: &'static str = "original\n";

    fn new() -> Victim {
        let dir = std::env::temp_dir().join(format!(
            "reaper-test-victim-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("victim dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let v = Victim { dir };
        std::fs::write(v.file(), Self::TEXT).expect("victim file");
        std::fs::set_permissions(v.file(), std::fs::Permissions::from_mode(0o644)).expect("chmod");
        v
    }

    fn file(&self) -> PathBuf {
        self.dir.join("helper")
    }

    fn untouched(&self) -> bool {
        std::fs::read_to_string(self.file()).is_ok_and(|t| t == Self::TEXT)
            && std::fs::read_dir(&self.dir).map_or(0, |d| d.count()) == 1
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The block device the root file system is on, if it has a node in /dev.
fn root_device() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .and_then(|l| l.split(" - ").nth(1))
        .and_then(|r| r.split(' ').nth(1))
        .filter(|d| d.starts_with("/dev/") && Path::new(d).exists())
        .map(str::to_owned)
}

/// What the hostile shell tries: nothing that worked harms the machine beyond what the test
/// undoes (the victim is the test's; a `/sbin/request-key` or `/etc` file that appeared is
/// removed by the test, which then fails), and the block device is opened for writing, never
/// written.
const HOSTILE: &str = r#"
exec 9<>"$ORACLE"; flock -s 9 || exit 90
echo "uid $(id -u) rc=0"
( echo hostile > "$VICTIM" ); echo "victim rc=$?"
( : > "$VICTIM_DIR/new" ); echo "victim-dir rc=$?"
( : > /sbin/request-key ); echo "request-key rc=$?"
( : > "/etc/reaper-test-$TESTPID" ); echo "etc rc=$?"
if [ -n "$ROOTDEV" ]; then
    python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_WRONLY))' "$ROOTDEV" 2>/dev/null
    echo "block-device rc=$?"
fi
kill -0 "$TESTPID" 2>/dev/null; echo "signal-caller rc=$?"
if [ -e /proc/sysrq-trigger ]; then [ -w /proc/sysrq-trigger ]; echo "sysrq rc=$?"; fi
for f in /proc/keys /proc/timer_list; do
    [ -e "$f" ] && echo "read-$(basename "$f") bytes=$(cat "$f" 2>/dev/null | wc -c) rc=0"
done
setsid sleep 300 &
echo "started rc=0"
"#;

fn hostile_env(victim: &Victim) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("VICTIM", victim.file().display().to_string()),
        ("VICTIM_DIR", victim.dir.display().to_string()),
    ];
    if let Some(dev) = root_device() {
        env.push(("ROOTDEV", dev));
    }
    env
}

/// What the hostile shell may have left in the host's directories: removed, and named.
fn undo_host_writes() -> Vec<String> {
    let mut left = Vec::new();
    // Created by the test's own shell only if the sandbox failed: the file was not there (the
    // test checks before it runs).
    let rk = Path::new("/sbin/request-key");
    if rk.exists() && std::fs::metadata(rk).is_ok_and(|m| m.len() == 0) {
        let _ = std::fs::remove_file(rk);
        left.push(rk.display().to_string());
    }
    let etc = PathBuf::from(format!("/etc/reaper-test-{}", std::process::id()));
    if etc.exists() {
        let _ = std::fs::remove_file(&etc);
        left.push(etc.display().to_string());
    }
    left
}

fn assert_root_writes_nothing_of_the_hosts(mode: &str) {
    if !ready() || !have(Need::Python3) {
        return;
    }
    assert!(
        !Path::new("/sbin/request-key").exists(),
        "this test assumes no /sbin/request-key here (it tries to create one)"
    );
    let tree = Tree::new();
    let victim = Victim::new();
    let o = run_sh(&tree, &[mode], HOSTILE, &hostile_env(&victim));
    let left = undo_host_writes();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "{mode}: {out}\n{err}");
    assert!(
        left.is_empty(),
        "{mode}: the sandbox wrote {left:?}:\n{out}"
    );
    assert_eq!(rc(&out, "uid"), 0, "{out}");
    assert!(out.contains("uid 0 "), "the shell is root inside: {out}");
    for name in [
        "victim",
        "victim-dir",
        "request-key",
        "etc",
        "signal-caller",
    ] {
        assert_ne!(rc(&out, name), 0, "{mode}: `{name}` worked:\n{out}\n{err}");
    }
    if root_device().is_some() {
        assert_ne!(rc(&out, "block-device"), 0, "{mode}: {out}");
    }
    if Path::new("/proc/sysrq-trigger").exists() {
        assert_ne!(rc(&out, "sysrq"), 0, "{mode}: {out}");
    }
    for f in ["keys", "timer_list"] {
        if Path::new("/proc").join(f).exists() {
            assert!(
                out.contains(&format!("read-{f} bytes=0 ")),
                "{mode}: /proc/{f} is not masked: {out}"
            );
        }
    }
    assert!(victim.untouched(), "{mode}: the victim changed");
    assert!(err.contains("Permission denied"), "{mode}: {err}");
    rc(&out, "started");
    tree.assert_all_dead(&format!("the sandboxed tree ({mode})"));
}

/// As root under `--sandbox`: no file of host root's is written (a program in a root-owned
/// directory, `/sbin/request-key` — which the kernel runs as root for `request_key(2)` on this
/// machine —, a file in /etc, the root file system's block device), the caller is not
/// signalled, and `/proc/keys` and `/proc/timer_list` read empty.
#[test]
fn sandboxed_root_writes_no_file_of_host_roots() {
    assert_root_writes_nothing_of_the_hosts("--sandbox");
}

/// The same with the PID namespace.
#[test]
fn sandboxed_root_writes_no_file_of_host_roots_with_a_pid_namespace() {
    assert_root_writes_nothing_of_the_hosts("--sandbox=pid");
}

/// The control: without the sandbox the same shell rewrites the victim and signals its caller
/// (the routes above are real). It tries nothing outside the test's own files.
#[test]
fn root_without_the_sandbox_writes_the_victim() {
    if !ready() {
        return;
    }
    let tree = Tree::new();
    let victim = Victim::new();
    let o = run_sh(
        &tree,
        &[],
        r#"( echo hostile > "$VICTIM" ); echo "victim rc=$?"
kill -0 "$TESTPID"; echo "signal-caller rc=$?""#,
        &hostile_env(&victim),
    );
    let out = stdout(&o);
    assert_eq!(rc(&out, "victim"), 0, "{out}\n{}", stderr(&o));
    assert_eq!(rc(&out, "signal-caller"), 0, "{out}");
    assert!(!victim.untouched());
}

/// Starts `reaper run --sandbox --sandbox-rw DIR -- sh -c SCRIPT` in the background.
fn background(dir: &Path, script: &str) -> std::process::Child {
    reaper()
        .args([
            "run",
            "--containment",
            "cgroup",
            "-q",
            "--sandbox",
            "-t",
            "60",
        ])
        .arg("--sandbox-rw")
        .arg(dir)
        .args(["--", "sh", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start reaper")
}

/// Waits for `path` to hold a line.
fn wait_for_line(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(t) = std::fs::read_to_string(path) {
            if t.ends_with('\n') {
                return t.trim().to_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two sandboxed runs get host ids of their own: one's root cannot signal the other's
/// processes, nor read their environment, though both are root inside.
#[test]
fn two_sandboxes_cannot_reach_each_other() {
    if !ready() {
        return;
    }
    let tree = Tree::new();
    let dir = tree.dir.path();
    let mut a = background(
        dir,
        r#"sed -n 1p /proc/self/uid_map > a.map; echo $$ > a.pid.tmp; mv a.pid.tmp a.pid; exec sleep 60"#,
    );
    let a_pid = wait_for_line(&dir.join("a.pid"));
    let o = Command::new(env!("CARGO_BIN_EXE_reaper"))
        .args(["run", "--containment", "cgroup", "--sandbox", "-t", "60"])
        .arg("--sandbox-rw")
        .arg(dir)
        .args([
            "--",
            "sh",
            "-c",
            r#"sed -n 1p /proc/self/uid_map > b.map
kill -0 "$A"; echo "signal rc=$?"
cat /proc/"$A"/environ > /dev/null; echo "environ rc=$?""#,
        ])
        .env("A", &a_pid)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run reaper");
    let _ = a.kill();
    let _ = a.wait();
    let out = stdout(&o);
    assert_ne!(rc(&out, "signal"), 0, "{out}\n{}", stderr(&o));
    assert_ne!(rc(&out, "environ"), 0, "{out}");
    let outside = |f: &str| {
        let m = std::fs::read_to_string(dir.join(f)).expect("map written");
        m.split_whitespace().nth(1).map(str::to_owned)
    };
    let (ma, mb) = (outside("a.map"), outside("b.map"));
    assert!(ma.is_some() && ma != mb, "{ma:?} {mb:?}");
    assert_ne!(ma.as_deref(), Some("0"), "the sandbox's root is host root");
}

/// A mount the host makes after the run started does not appear in its sandbox (private mount
/// propagation); the control, a mount namespace that is the host's slave, shows it. Under
/// systemd every mount is shared; here the test makes its own directory a shared mount.
#[test]
fn a_mount_the_host_makes_later_stays_outside() {
    if !ready() || !have(Need::Program("unshare")) {
        return;
    }
    let tree = Tree::new();
    // Open to others: the sandbox's root looks at it as a stranger, undeclared (and not in /tmp,
    // which is the sandbox's own).
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("reaper-test-prop-{}", std::process::id()));
    let m = d.join("m");
    std::fs::create_dir_all(&m).expect("mount point");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sh = |args: &[&str]| {
        let ok = Command::new("mount").args(args).arg(&d).status();
        assert!(ok.is_ok_and(|s| s.success()), "mount {args:?}");
    };
    sh(&["--bind", d.to_str().expect("utf-8")]);
    sh(&["--make-shared"]);
    let script = r#"echo ready; while [ ! -e "$D/go" ]; do sleep 0.02; done
[ -e "$D/m/seen" ]; echo "seen rc=$?""#;
    let look = |mut child: std::process::Child| -> String {
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert_eq!(first, "ready");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "size=64k",
                "reaper-test",
                m.to_str().unwrap(),
            ])
            .status()
            .expect("mount");
        assert!(mounted.success());
        std::fs::write(m.join("seen"), b"").expect("marker");
        std::fs::write(d.join("go"), b"").expect("go");
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        let _ = child.wait();
        let _ = Command::new("umount").arg(&m).status();
        let _ = std::fs::remove_file(d.join("go"));
        rest.join("\n")
    };
    let sandboxed = reaper()
        .args([
            "run",
            "--containment",
            "cgroup",
            "-q",
            "--sandbox",
            "-t",
            "60",
        ])
        .arg("--sandbox-rw")
        .arg(tree.dir.path())
        .args(["--", "sh", "-c", script])
        .env("D", &d)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start reaper");
    let out = look(sandboxed);
    let control = Command::new("unshare")
        .args(["-m", "--propagation", "slave", "sh", "-c", script])
        .env("D", &d)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let control_out = look(control);
    let _ = Command::new("umount").arg("-l").arg(&d).status();
    let _ = std::fs::remove_dir_all(&d);
    assert_ne!(
        rc(&out, "seen"),
        0,
        "the host's later mount is inside: {out}"
    );
    assert_eq!(
        rc(&control_out, "seen"),
        0,
        "the control did not see the mount: {control_out}"
    );
}

/// The run records' directory (here `$REAPER_RUNTIME_DIR`, inside a declared directory, where
/// the sandbox's root would be its owner) is empty inside: no record to rewrite, no control
/// socket to send orders to. The control: a run without the sandbox lists the other run's
/// record and socket.
#[test]
fn the_run_records_are_hidden_from_the_sandbox() {
    if !ready() || !have(Need::Python3) {
        return;
    }
    let tree = Tree::new();
    let dir = tree.dir.path();
    let records = dir.join("records");
    let other = reaper()
        .args(["run", "--containment", "cgroup", "-q", "-t", "60", "--"])
        .args(["sh", "-c", "echo up; exec sleep 60"])
        .env("REAPER_RUNTIME_DIR", &records)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start reaper");
    let mut other = other;
    let mut first = String::new();
    BufReader::new(other.stdout.as_mut().expect("stdout"))
        .read_line(&mut first)
        .expect("read");
    assert_eq!(first, "up\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(&records).map_or(0, |d| d.count()) < 2 {
        assert!(Instant::now() < deadline, "no record of the other run");
        std::thread::sleep(Duration::from_millis(10));
    }
    let script = r#"echo "entries $(ls -A "$RECORDS" 2>/dev/null | grep -c -e json -e sock) rc=0"
python3 - <<'EOF'
import glob, os, socket
n = 0
for p in glob.glob(os.environ["RECORDS"] + "/*.sock"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p); n += 1
    except OSError:
        pass
print(f"connected {n} rc=0")
EOF"#;
    let env = [
        ("RECORDS", records.display().to_string()),
        ("REAPER_RUNTIME_DIR", records.display().to_string()),
    ];
    let sandboxed = run_sh(&tree, &["--sandbox"], script, &env);
    let plain = run_sh(&tree, &[], script, &env);
    let _ = other.kill();
    let _ = other.wait();
    let (s, p) = (stdout(&sandboxed), stdout(&plain));
    assert!(s.contains("entries 0 rc=0"), "{s}\n{}", stderr(&sandboxed));
    assert!(s.contains("connected 0 rc=0"), "{s}");
    assert!(!p.contains("entries 0 "), "the control sees no record: {p}");
}

/// Declared directories are root's inside: `--sandbox-rw` writes and `chown`s as host root
/// (the files are host root's, and uid 1000's after a `chown 1000`), `--sandbox-ro` reads a
/// file only root may read under a directory only root may enter (the way there is made for
/// it) and writes nothing; an undeclared directory of root's stays closed, and a working
/// directory only root may enter is refused with 125, naming the flag.
#[test]
fn declared_directories_are_roots_and_nothing_else_is() {
    if !ready() {
        return;
    }
    let tree = Tree::new();
    let base = tree.dir.path(); // 0700, root's
    let rw = base.join("rw");
    let ro = base.join("closed/ro");
    let hidden = base.join("closed/other");
    for d in [&rw, &ro, &hidden] {
        std::fs::create_dir_all(d).expect("dirs");
    }
    std::fs::set_permissions(base.join("closed"), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    std::fs::write(ro.join("secret"), "s3cret\n").expect("secret");
    std::fs::set_permissions(ro.join("secret"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    std::fs::write(hidden.join("x"), "x\n").expect("x");
    let o = reaper()
        .args(["run", "--containment", "cgroup", "--sandbox", "-t", "60"])
        .arg("--sandbox-rw")
        .arg(&rw)
        .arg("--sandbox-ro")
        .arg(&ro)
        .args([
            "--",
            "sh",
            "-c",
            r#"touch made; echo "made rc=$?"
mkdir sub && chown 1000:1000 sub; echo "chown rc=$?"
cat "$RO/secret"; echo "read-ro rc=$?"
( : > "$RO/new" ); echo "write-ro rc=$?"
cat "$HIDDEN/x"; echo "undeclared rc=$?""#,
        ])
        .current_dir(&rw)
        .env("RO", &ro)
        .env("HIDDEN", &hidden)
        .stdin(Stdio::null())
        .output()
        .expect("run reaper");
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert_eq!(rc(&out, "made"), 0, "{out}\n{}", stderr(&o));
    assert_eq!(rc(&out, "chown"), 0, "{out}");
    assert_eq!(rc(&out, "read-ro"), 0, "{out}");
    assert!(out.contains("s3cret\n"), "{out}");
    assert_ne!(rc(&out, "write-ro"), 0, "{out}");
    assert_ne!(rc(&out, "undeclared"), 0, "{out}");
    let made = std::fs::metadata(rw.join("made")).expect("made");
    assert_eq!((made.uid(), made.gid()), (0, 0));
    let sub = std::fs::metadata(rw.join("sub")).expect("sub");
    assert_eq!((sub.uid(), sub.gid()), (1000, 1000));
    assert!(!ro.join("new").exists());

    let o = reaper()
        .args(["run", "--containment", "cgroup", "--sandbox", "--", "true"])
        .current_dir(&hidden)
        .output()
        .expect("run reaper");
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    assert!(stderr(&o).contains("--sandbox-rw"), "{}", stderr(&o));
}

/// Root's sandbox has a `/tmp` (and `/var/tmp`, `/dev/shm`) of its own: what it leaves there
/// under a name programs key by uid (`/tmp/tmux-0`) never meets host root's programs, and a
/// declared directory under `/tmp` is there all the same.
#[test]
fn roots_sandbox_has_a_tmp_of_its_own() {
    if !ready() {
        return;
    }
    let tree = Tree::new();
    let name = format!("reaper-test-tmux-{}", std::process::id());
    let o = run_sh(
        &tree,
        &["--sandbox"],
        r#"mkdir "/tmp/$NAME"; echo "mkdir rc=$?"
: > /dev/shm/"$NAME"; echo "shm rc=$?"
[ -d "$PWD" ]; echo "declared rc=$?""#,
        &[("NAME", name.clone())],
    );
    let out = stdout(&o);
    assert_eq!(rc(&out, "mkdir"), 0, "{out}\n{}", stderr(&o));
    assert_eq!(rc(&out, "shm"), 0, "{out}");
    assert_eq!(rc(&out, "declared"), 0, "{out}");
    assert!(
        !Path::new("/tmp").join(&name).exists(),
        "the sandbox's /tmp is the host's"
    );
    assert!(!Path::new("/dev/shm").join(&name).exists());
}
