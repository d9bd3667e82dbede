//! The pgid backend never claims a process group or session the run did not create (issue 10
//! item 1). A contained process may `setpgid()` into any process group of reaper's session; the
//! tracker follows that process, but the group's other members are not the run's and the group
//! is never signalled.
//!
//! The contained processes run as `nobody` (uid 65534, through `setpriv`), so they cannot signal
//! the root-owned victims themselves: whatever kills a victim here is reaper.
//!
//! reaper's stdin is a terminal here (a pseudo-terminal of the test's): a run that holds no
//! terminal leads a session of its own, where `setpgid()` into reaper's session is refused; one
//! that holds a terminal shares reaper's session, and so can still join its groups.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// The contained program: forks a child that moves into process group `argv[1]` and stays
/// there (holding the oracle lock and recorded in the pid file, so the harness can tell whether
/// it died and kill it if not); the parent exits once the child has moved. With `alone`, the
/// program itself moves and exits 0.3 s later (the issue's exact example).
const JOINER: &str = r#"
import fcntl, os, signal, sys, time
group, oracle, pids, how = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
lock = open(oracle)
fcntl.flock(lock, fcntl.LOCK_SH)
def record(role):
    st = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
    with open(pids, "a") as f:
        f.write(f"{os.getpid()} {st} {role}\n")
if how == "alone":
    record("joiner")
    os.setpgid(0, group)
    time.sleep(0.3)
    sys.exit(0)
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    os.setpgid(0, group)
    record("joiner")
    os.write(w, b"x")
    while True:
        signal.pause()
os.close(w)
os.read(r, 1)
"#;

/// Why this test cannot run here, if it cannot.
fn unavailable() -> Option<&'static str> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (setpriv --reuid)");
    }
    let have = |p: &str| {
        Command::new(p)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("setpriv") || !have("/usr/bin/python3") {
        return Some("needs setpriv and /usr/bin/python3");
    }
    None
}

/// A pseudo-terminal: (its master, its slave), neither the controlling terminal of anyone.
fn a_terminal() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt(3) and friends on the new master fd; ptsname_r writes into a local
    // buffer; every fd opened is owned once.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::os::fd::OwnedFd::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(
            s >= 0,
            "open the slave: {}",
            std::io::Error::last_os_error()
        );
        (master, std::os::fd::OwnedFd::from_raw_fd(s))
    }
}

/// reaper with `args`, its stdin a terminal (see the module docs), to completion.
fn run_reaper_on_a_terminal(args: &[String]) -> std::process::Output {
    let (_master, slave) = a_terminal();
    reaper()
        .args(args)
        .stdin(Stdio::from(slave))
        .output()
        .expect("run reaper")
}

/// A tree directory the `nobody` user can use: the oracle readable, the pid file writable.
fn tree_for_nobody() -> Tree {
    let t = Tree::new();
    let set = |p: &std::path::Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    set(t.dir.path(), 0o755);
    std::fs::write(t.oracle(), "").expect("oracle");
    set(&t.oracle(), 0o644);
    std::fs::write(t.pids(), "").expect("pid file");
    set(&t.pids(), 0o666);
    t
}

/// `setpriv … python3 -c JOINER GROUP ORACLE PIDS HOW` as argv.
fn joiner_argv(t: &Tree, group: &str, how: &str) -> Vec<String> {
    let mut v: Vec<String> = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "/usr/bin/python3",
        "-c",
        JOINER,
    ]
    .map(String::from)
    .to_vec();
    v.push(group.to_owned());
    v.push(t.oracle().display().to_string());
    v.push(t.pids().display().to_string());
    v.push(how.to_owned());
    v
}

/// A victim of the test's own: `sleep 302` in a process group of its own, in the test's session
/// (which reaper, our child too, shares).
struct Victim(Child);

impl Victim {
    fn start() -> Self {
        let child = Command::new("sleep")
            .arg("302")
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the victim");
        Victim(child)
    }

    fn pgid(&self) -> String {
        self.0.id().to_string()
    }

    /// Alive: not exited (it is our unreaped child, so its pid is still its own).
    fn alive(&mut self) -> bool {
        self.0.try_wait().expect("try_wait on the victim").is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 10 item 1, deterministic form: a contained `nobody` process joins the test's victim
/// group and stays there after the leader exits. Before the fix reaper remembered the victim's
/// group, claimed the root-owned `sleep 302` and killed it ("stopped 2 leftover process(es)").
#[test]
fn a_joined_foreign_group_is_never_signalled_nor_counted() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let t = tree_for_nobody();
    let mut victim = Victim::start();
    let mut args: Vec<String> = ["run", "--containment", "pgid", "--report"]
        .map(String::from)
        .to_vec();
    args.push(t.report().display().to_string());
    args.push("--".into());
    args.extend(joiner_argv(&t, &victim.pgid(), "child"));
    let out = run_reaper_on_a_terminal(&args);
    let err = stderr(&out);
    assert!(victim.alive(), "reaper killed the victim: {err}");
    assert_eq!(code(&out), 0, "{err}");
    assert!(
        err.contains("stopped 1 leftover process(es)"),
        "the joiner alone is the leftover: {err}"
    );
    let report = read_report(&t.report());
    assert_eq!(report["killed"], 1, "{report}");
    assert_clean_report(&report);
    t.assert_all_dead("the joiner");
    assert!(victim.alive(), "the victim died after reaper");
}

/// Issue 10 item 1, the issue's exact example: the leader itself joins the victim's group for
/// 0.3 s and exits. Before the fix reaper printed "stopped 1 leftover process(es)" and that
/// process was the victim.
#[test]
fn the_issues_example_leaves_the_victim_alone() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let t = tree_for_nobody();
    let mut victim = Victim::start();
    let mut args: Vec<String> = ["run", "--containment", "pgid", "--report"]
        .map(String::from)
        .to_vec();
    args.push(t.report().display().to_string());
    args.push("--".into());
    args.extend(joiner_argv(&t, &victim.pgid(), "alone"));
    let out = run_reaper_on_a_terminal(&args);
    let err = stderr(&out);
    assert!(victim.alive(), "reaper killed the victim: {err}");
    assert_eq!(code(&out), 0, "{err}");
    assert!(!err.contains("leftover"), "nothing was left over: {err}");
    let report = read_report(&t.report());
    assert_eq!(report["killed"], 0, "{report}");
    assert_clean_report(&report);
    t.assert_all_dead("the leader");
}

/// Issue 10 item 1, the login shell's group: a job-control shell leads its session and its own
/// group, reaper runs as a job of it (a group of its own), and a contained process joins the
/// shell's group. Before the fix reaper remembered that group (it excluded only its own),
/// claimed the shell and, through it, reaper itself (the shell's child): the shell died of
/// reaper's SIGTERM and reaper SIGSTOPped itself.
#[test]
fn the_login_shells_group_is_never_signalled() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let t = tree_for_nobody();
    let (out_path, err_path, reaper_pid) = (
        t.dir.path().join("stdout"),
        t.dir.path().join("stderr"),
        t.dir.path().join("reaper.pid"),
    );
    // `$$` is the shell: session leader and leader of its own group; `set -m` gives reaper a
    // group of its own, as an interactive shell does for a job. `$0` is where reaper's pid goes,
    // so that the test can kill a reaper that went wrong.
    let script = r#"set -m; "$@" & echo $! > "$0"; wait $!; echo "shell alive rc=$?""#;
    let mut args: Vec<String> = vec!["-w".into(), "bash".into(), "-c".into(), script.into()];
    args.push(reaper_pid.display().to_string());
    args.extend(
        [
            env!("CARGO_BIN_EXE_reaper"),
            "run",
            "--containment",
            "pgid",
            "--report",
        ]
        .map(String::from),
    );
    args.push(t.report().display().to_string());
    args.push("--".into());
    // The shell's pid is only known inside it: the contained program takes its session id
    // (the shell leads the session, so its pid is the session's and its group's number).
    let mut joiner = joiner_argv(&t, "0", "child");
    joiner[6] = JOINER.replace("int(sys.argv[1])", "(int(sys.argv[1]) or os.getsid(0))");
    args.extend(joiner);
    let file = |p: &std::path::Path| std::fs::File::create(p).expect("output file");
    let (_master, slave) = a_terminal();
    let mut child = Command::new("setsid")
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::from(slave))
        .stdout(file(&out_path))
        .stderr(file(&err_path))
        .spawn()
        .expect("start setsid bash");
    let status = wait_with_deadline(&mut child, Duration::from_secs(60));
    // A reaper that claimed the shell also claimed itself (the shell's child) and may be
    // stopped: kill it, through a pidfd opened while its command line proves it is ours.
    let leftover_reaper = std::fs::read_to_string(&reaper_pid)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        .and_then(|pid| {
            let fd = rustix::process::pidfd_open(
                rustix::process::Pid::from_raw(pid)?,
                rustix::process::PidfdFlags::empty(),
            )
            .ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let ours = String::from_utf8_lossy(&cmdline).contains(&*t.dir.path().to_string_lossy());
            (ours && state(pid).is_some_and(|s| s != 'Z')).then_some((pid, fd))
        });
    if let Some((pid, fd)) = &leftover_reaper {
        let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        eprintln!("killed reaper (pid {pid}), still alive after its shell");
    }
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        stdout.contains("shell alive rc=0") && leftover_reaper.is_none(),
        "reaper killed the shell (status {status}): stdout {stdout:?}, stderr {err}"
    );
    assert!(
        err.contains("stopped 1 leftover process(es)"),
        "the joiner alone is the leftover: {err}"
    );
    let report = read_report(&t.report());
    assert_eq!(report["killed"], 1, "{report}");
    t.assert_all_dead("the joiner");
}
