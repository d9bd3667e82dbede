//! The client goes away while the command does not cooperate: its stdin hangs up while the
//! command is not reading (issue 10 item 7), or its parent process dies although the thread
//! that started reaper exited long before (issue 10 item 8).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// A helper process of the test (a writer, a parent), SIGKILLed and reaped when the test ends
/// however it ends.
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python3() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some("python3")
}

/// A pidfd (exit oracle) on a process that is not ours to wait for.
fn pidfd(pid: i32) -> OwnedFd {
    rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).expect("pid"),
        rustix::process::PidfdFlags::empty(),
    )
    .expect("pidfd_open")
}

fn has_exited(fd: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let now = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
}

/// A writer for the fifo at `path`: writes 300 KB (or four pipe capacities, if pipes are
/// larger here) and never exits by itself. Its writes are non-blocking so it can tell when the
/// chain is provably stuck: the fifo is full (EAGAIN) and more than two pipe capacities went
/// in, so reaper's relay has taken more than a pipe's worth for a command that reads nothing —
/// it is blocked writing to the command. Then it creates `stuck` and keeps trying.
fn stuck_writer(fifo: &Path, stuck: &Path) -> Child {
    let script = r#"
import fcntl, os, select, sys
fifo, stuck = sys.argv[1], sys.argv[2]
fd = os.open(fifo, os.O_WRONLY)
cap = fcntl.fcntl(fd, 1032)  # F_GETPIPE_SZ
os.set_blocking(fd, False)
data = b"\x5a" * max(300000, 4 * cap)
off = 0
told = False
while off < len(data):
    try:
        off += os.write(fd, data[off:off + 65536])
    except BlockingIOError:
        if off > 2 * cap and not told:
            open(stuck, "w").write(str(off))
            told = True
        select.select([], [fd], [], 0.05)
select.select([], [], [])
"#;
    Command::new("python3")
        .args(["-c", script])
        .arg(fifo)
        .arg(stuck)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the writer")
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

/// Issue 10 item 7: `--on-stdin-eof` never fired when the command was not reading its stdin.
/// The relay was blocked in `write_all` to the command and never read the EOF: a fifo writer
/// that wrote 300 KB and was SIGKILLed left reaper and its tree running for good. Now the
/// hang-up is seen whatever the command does with its stdin, and the run stops within the
/// allowance plus the teardown. Also the negative control: while the writer lives, stuck or
/// not, nothing happens, however long past the allowance.
#[test]
fn a_fifo_writer_killed_while_the_command_is_not_reading_stops_the_run() {
    if !have(Need::Python3) {
        return;
    }
    let t = Tree::new();
    let fifo = t.dir.path().join("fifo");
    let stuck = t.dir.path().join("stuck");
    mkfifo(&fifo);
    let mut writer = Helper(stuck_writer(&fifo, &stuck));
    // Opening the read end waits for the writer's open; reaper gets the only reader.
    let stdin = std::fs::File::open(&fifo).expect("open the fifo");
    let mut reaper = reaper()
        .args([
            "run",
            "--on-stdin-eof",
            "500ms",
            "--grace",
            "200ms",
            "--report",
        ])
        .arg(t.report())
        .arg("--")
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(stdin)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start reaper");
    t.wait_ready(Duration::from_secs(10));
    assert!(
        wait_until(Duration::from_secs(20), || stuck.exists()),
        "the writer never filled the pipes"
    );
    // Negative control: a live writer that no longer gets anything through is no hang-up.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        reaper.try_wait().unwrap().is_none(),
        "reaper stopped while the writer was alive"
    );
    assert!(
        !t.all_dead(),
        "the tree was stopped while the writer was alive"
    );

    signal_child(&writer.0, Signal::KILL);
    let _ = writer.0.wait();
    let died = Instant::now();
    let st = wait_with_deadline(&mut reaper, Duration::from_secs(10));
    let took = died.elapsed();
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut reaper.stderr.take().unwrap(), &mut err);
    eprintln!("reaper exited {took:?} after the writer's death");
    assert_eq!(st.code(), Some(143), "{err}");
    let rep = read_report(&t.report());
    assert_eq!(rep["stop_reason"], "stdin-eof", "{rep}");
    assert_clean_report(&rep);
    t.assert_all_dead("fifo writer killed");
    assert!(
        took >= Duration::from_millis(500),
        "the 500ms allowance was not given: {took:?}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "reaper took {took:?} after the writer's death (allowance 500ms)"
    );
}

/// Issue 10 item 7, over a socket (what some clients give a stdio server): the command reads
/// nothing, the client fills the socket, then closes its end. The hang-up (POLLHUP) ends the
/// run as an EOF would.
#[test]
fn a_socket_client_closing_while_the_command_is_not_reading_stops_the_run() {
    let t = Tree::new();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let mut reaper = reaper()
        .args([
            "run",
            "--on-stdin-eof",
            "300ms",
            "--grace",
            "200ms",
            "--report",
        ])
        .arg(t.report())
        .arg("--")
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(OwnedFd::from(theirs))
        .stderr(Stdio::null())
        .spawn()
        .expect("start reaper");
    t.wait_ready(Duration::from_secs(10));
    // Fill everything between us and the command: write until a write has made no progress
    // for a while (the command never reads, so nothing drains).
    ours.set_nonblocking(true).unwrap();
    let chunk = vec![0xa5u8; 65536];
    let mut sent = 0usize;
    let mut w = &ours;
    let mut idle_since = Instant::now();
    while idle_since.elapsed() < Duration::from_millis(300) {
        match w.write(&chunk) {
            Ok(n) => {
                sent += n;
                idle_since = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("write to reaper's stdin: {e}"),
        }
    }
    assert!(sent > 65536, "only {sent} bytes went in");
    // Still nothing while the client is there.
    assert!(reaper.try_wait().unwrap().is_none(), "stopped too early");
    drop(ours);
    let closed = Instant::now();
    let st = wait_with_deadline(&mut reaper, Duration::from_secs(10));
    let took = closed.elapsed();
    eprintln!("reaper exited {took:?} after the client closed ({sent} bytes queued)");
    assert_eq!(st.code(), Some(143));
    let rep = read_report(&t.report());
    assert_eq!(rep["stop_reason"], "stdin-eof", "{rep}");
    assert_clean_report(&rep);
    t.assert_all_dead("socket closed");
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

/// Negative control for item 7: a writer that sent a little and then pauses, alive, while the
/// command reads (`cat`), is not a hang-up; the data arrives at once and the run goes on.
/// When the writer then exits, `cat` gets EOF and exits by itself.
#[test]
fn a_live_writer_that_pauses_is_not_a_hang_up() {
    let t = Tree::new();
    let fifo = t.dir.path().join("fifo");
    mkfifo(&fifo);
    // The shell opens the write end itself (fd 3, inherited by `sleep`), says hello, sleeps.
    let mut writer = Helper(
        Command::new("sh")
            .arg("-c")
            .arg("exec 3>\"$1\"; printf 'hello\\n' >&3; exec sleep 600")
            .arg("sh")
            .arg(&fifo)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the writer"),
    );
    let stdin = std::fs::File::open(&fifo).expect("open the fifo");
    let mut reaper = reaper()
        .args(["run", "--on-stdin-eof", "200ms", "--report"])
        .arg(t.report())
        .args(["--", "cat"])
        .stdin(stdin)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start reaper");
    let mut out = BufReader::new(reaper.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "hello\n");
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        reaper.try_wait().unwrap().is_none(),
        "a pausing writer was taken for a hang-up"
    );
    signal_child(&writer.0, Signal::KILL);
    let _ = writer.0.wait();
    let st = wait_with_deadline(&mut reaper, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0), "cat exits by itself on EOF");
    assert_eq!(read_report(&t.report())["stop_reason"], "exited");
}

/// Issue 10 item 8: `--die-with-parent` used PR_SET_PDEATHSIG, which follows the *thread*
/// that forked reaper: a Python parent that starts reaper with `subprocess.Popen` from a
/// worker thread, which then exits, made reaper stop the tree ("got SIGTERM") while the parent
/// lived on. Now the parent *process* is watched: its thread's exit changes nothing, and its
/// death stops the tree within the capped grace, reported as `parent-died`.
#[test]
fn die_with_parent_follows_the_parent_process_not_the_spawning_thread() {
    if !have(Need::Python3) {
        return;
    }
    let Some(py) = python3() else {
        panic!("python3 ran but cannot be found again");
    };
    let t = Tree::new();
    let events = t.dir.path().join("events");
    let mut argv = vec![
        env!("CARGO_BIN_EXE_reaper").to_string(),
        "run".into(),
        "--die-with-parent".into(),
        "--events".into(),
        "--grace".into(),
        "30s".into(),
        "--report".into(),
        t.report().display().to_string(),
        "--".into(),
    ];
    argv.extend(t.fixture(&["setsid-grandchild"]));
    // The worker thread starts reaper, waits until the tree is up (reaper set up its parent
    // watch before spawning it), then exits; the main thread says so and lives on.
    let script = r#"
import os, subprocess, sys, threading, time
ready, events, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
procs = []
def start():
    procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=open(events, "w")))
    while not os.path.exists(ready):
        time.sleep(0.01)
t = threading.Thread(target=start)
t.start()
t.join()
print(procs[0].pid, flush=True)
sys.stdin.read()
"#;
    let mut parent = Helper(
        Command::new(py)
            .args(["-c", script])
            .arg(t.ready())
            .arg(&events)
            .args(&argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the python parent"),
    );
    let mut line = String::new();
    BufReader::new(parent.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let reaper_pid: i32 = line.trim().parse().expect("reaper's pid from the parent");
    // The parent never waits for reaper, so the pid stays reaper's while the parent lives.
    let reaper_fd = pidfd(reaper_pid);
    // Negative control for the old bug: the spawning thread has exited, the parent lives.
    std::thread::sleep(Duration::from_secs(2));
    let ev = std::fs::read_to_string(&events).unwrap_or_default();
    assert!(
        !has_exited(&reaper_fd),
        "reaper stopped while its parent process lives: {ev}"
    );
    let recorded = t.recorded().len();
    let alive = t.survivors().len();
    assert!(
        recorded > 0 && alive == recorded,
        "the tree was stopped while reaper's parent lives ({alive} of {recorded} alive): {ev}"
    );

    signal_child(&parent.0, Signal::KILL);
    let _ = parent.0.wait();
    let died = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || has_exited(&reaper_fd)),
        "reaper outlived its parent by 10s"
    );
    let took = died.elapsed();
    eprintln!("reaper exited {took:?} after its parent's death");
    t.assert_all_dead("parent process killed");
    let rep = read_report(&t.report());
    let ev = std::fs::read_to_string(&events).unwrap_or_default();
    assert_eq!(rep["stop_reason"], "parent-died", "{rep}\n{ev}");
    assert!(rep["received_signal"].is_null(), "{rep}");
    assert_clean_report(&rep);
    assert!(
        ev.lines().any(|l| l.contains(r#""event":"parent-died""#)),
        "no parent-died event: {ev}"
    );
    assert!(
        !ev.contains("reaper-signalled"),
        "parent death reported as a signal: {ev}"
    );
    // The 30s grace is capped at 300ms on parent death: well within a second.
    assert!(
        took < Duration::from_secs(2),
        "reaper took {took:?} after its parent's death"
    );
}

/// Issue 10 item 8, the fallback: a parent outside reaper's PID namespace (`getppid()` is 0;
/// here reaper is PID 1 of a new namespace under `unshare`) has no pid to open a pidfd on, so
/// the parent-death signal is the only news of its death; it is reported as `parent-died`,
/// never as a signal, with the grace capped.
#[test]
fn die_with_parent_outside_the_pid_namespace_is_still_parent_died() {
    let t = Tree::new();
    if !have(Need::PidNamespace) {
        return;
    }
    // The fixture's pid file would hold pids of the new namespace: the run's own report and
    // cgroup are the oracle here, and the namespace dies with reaper, its PID 1, anyway.
    let mut parent = Helper(
        Command::new("unshare")
            .args(["--pid", "--fork", env!("CARGO_BIN_EXE_reaper")])
            .args(["run", "--die-with-parent", "--grace", "30s", "--report"])
            .arg(t.report())
            .args(["--", "sh", "-c", "trap '' TERM; echo up; exec sleep 600"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start unshare"),
    );
    let mut line = String::new();
    BufReader::new(parent.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "up\n");
    signal_child(&parent.0, Signal::KILL);
    let _ = parent.0.wait();
    assert!(
        wait_until(Duration::from_secs(10), || t.report().exists()
            && std::fs::read_to_string(t.report())
                .is_ok_and(|r| r.ends_with("}\n"))),
        "no report 10s after the parent's death"
    );
    let rep = read_report(&t.report());
    assert_eq!(rep["stop_reason"], "parent-died", "{rep}");
    assert!(rep["received_signal"].is_null(), "{rep}");
    assert!(
        rep["teardown_ms"].as_u64().unwrap_or(u64::MAX) < 5_000,
        "the 30s grace was not capped: {rep}"
    );
    assert_clean_report(&rep);
}
