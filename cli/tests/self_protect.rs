//! The tree cannot stop, trace or block reaper, nor type into the caller's terminal:
//! - a job-control stop (SIGTSTP) sent to reaper by a process of its own tree is not taken for
//!   the user's Ctrl-Z: reaper does not stop, its timeout fires (`run`, `timeout`, a link named
//!   `timeout`, `check`), also when reaper leads a session and the tree moved into its group;
//! - `PTRACE_ATTACH` of reaper from the tree is refused to a user (reaper is not dumpable) and,
//!   for root, undone by the guardian (the tracer is killed); a debugger from outside stays;
//! - a command that fills a stderr pipe nobody reads until reaper exits does not hang reaper,
//!   with or without `--events`;
//! - a run that holds no terminal cannot inject input into the caller's (TIOCSTI).
//!
//! Each hostile step leaves a marker, so that no test passes because its attack never ran.
//! As root and as uid 65534 (`setpriv`), where the user matters.

mod common;

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const NOBODY: u32 = 65534;

/// How long a run with a 2-3 s timeout may take on a loaded machine before the test calls it
/// hung.
const DEADLINE: Duration = Duration::from_secs(30);

/// A test directory everyone may write (the tree may run as 65534): the oracle, the pid file,
/// the markers, reaper's log.
fn open_tree() -> Tree {
    let tree = Tree::new();
    std::fs::set_permissions(tree.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for f in [tree.oracle(), tree.pids(), log(&tree)] {
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    tree
}

fn mark(tree: &Tree) -> PathBuf {
    tree.dir.path().join("mark")
}

fn log(tree: &Tree) -> PathBuf {
    tree.dir.path().join("log")
}

/// `program args…`, as root or (`nobody`) through `setpriv` as 65534 with no group.
fn command_as(nobody: bool, program: &Path, args: &[&str]) -> Command {
    if !nobody {
        let mut c = Command::new(program);
        c.args(args);
        return c;
    }
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "--",
    ])
    .arg(program)
    .args(args);
    c
}

fn users() -> Vec<bool> {
    let mut v = vec![false];
    if have(Need::Root) {
        v.push(true);
    }
    v
}

fn who(nobody: bool) -> &'static str {
    if nobody {
        "as 65534"
    } else {
        "as the test's user"
    }
}

/// The start of every hostile shell tree: it holds the oracle lock, records itself, and starts
/// a process in a session of its own that ignores SIGTERM (what must not outlive the run).
const TREE: &str = r#"
exec 9>>"$ORACLE"; flock -s 9 || exit 99
record() { echo "$1 $(cut -d' ' -f22 /proc/$1/stat) $2" >> "$PIDS"; }
record $$ leader
setsid sh -c 'trap "" TERM INT HUP; exec sleep 600' </dev/null >/dev/null 2>&1 &
record $! holdout
"#;

fn with_tree(cmd: &mut Command, tree: &Tree) {
    cmd.env("ORACLE", tree.oracle())
        .env("PIDS", tree.pids())
        .env("MARK", mark(tree))
        .env("RUST_LOG", "warn");
}

/// Waits for `child` to exit; past `within`, kills it (its guardian cleans up) and fails.
fn exits_within(child: &mut Child, within: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() >= deadline {
            let state = state(child.id() as i32);
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: reaper did not exit within {within:?} (state {state:?})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn marker(tree: &Tree) -> String {
    std::fs::read_to_string(mark(tree)).unwrap_or_default()
}

fn code_of(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// The faces that pass a Ctrl-Z on to the tree, each with its timeout of 2 s and the status it
/// exits with when it fires.
fn faces(tree: &Tree) -> Vec<(&'static str, PathBuf, Vec<String>, i32)> {
    let script = format!("{TREE}\nkill -TSTP $PPID && echo sent > \"$MARK\"\nsleep 600");
    let sh = |v: &[&str]| -> Vec<String> {
        v.iter()
            .map(|s| s.to_string())
            .chain(["sh".into(), "-c".into(), script.clone()])
            .collect()
    };
    // A link named `timeout` in the test's directory.
    let link = tree.dir.path().join("timeout");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_reaper"), &link).expect("the link");
    }
    let reaper = PathBuf::from(env!("CARGO_BIN_EXE_reaper"));
    vec![
        (
            "run",
            reaper.clone(),
            sh(&["run", "--timeout", "2s", "--grace", "200ms", "--"]),
            124,
        ),
        ("timeout", reaper.clone(), sh(&["timeout", "2"]), 124),
        ("a link named timeout", link, sh(&["2"]), 124),
        ("check", reaper, sh(&["check", "--timeout", "2s", "--"]), 2),
    ]
}

/// `kill -TSTP $PPID` from the tree, reaper in a process group of its own in the test's session
/// (so job control applies: the group is not orphaned). reaper used to pass the stop on to the
/// tree's group and stop itself, its guardian leaving it stopped: the timeout never fired and
/// the setsid'd process lived on. Now the stop is seen to come from the run and is ignored.
#[test]
fn a_stop_sent_by_the_tree_never_stops_reaper() {
    for nobody in users() {
        for i in 0..4 {
            let tree = open_tree();
            let (face, program, args, want) = faces(&tree).swap_remove(i);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut cmd = command_as(nobody, &program, &args);
            with_tree(&mut cmd, &tree);
            let logf = std::fs::File::create(log(&tree)).unwrap();
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(logf.try_clone().unwrap())
                .stderr(logf)
                .process_group(0)
                .spawn()
                .expect("start reaper");
            let what = format!("{face} {}", who(nobody));
            let st = exits_within(&mut child, DEADLINE, &what);
            let text = std::fs::read_to_string(log(&tree)).unwrap_or_default();
            assert_eq!(
                marker(&tree),
                "sent\n",
                "{what}: the tree's kill ran: {text}"
            );
            assert_eq!(code_of(st), want, "{what}: {text}");
            tree.assert_all_dead(&what);
        }
    }
}

/// reaper leading a session of its own (an MCP client's front `reaper run --die-with-parent
/// --on-stdin-eof`, a daemon): its group is orphaned, so a stop reaches it only once a process
/// of the tree has moved into its group. The tree tries that, then sends the stop. reaper stays
/// running, and the timeout fires.
#[test]
fn a_tree_that_joins_reapers_group_cannot_stop_it() {
    if !have(Need::Python3) {
        return;
    }
    const JOIN: &str = r#"
import os, signal, sys, time
reaper, mark = int(sys.argv[1]), sys.argv[2]
try:
    os.setpgid(0, os.getpgid(reaper))
    joined = "joined"
except OSError as e:
    joined = "refused %d" % e.errno
os.kill(reaper, signal.SIGTSTP)
open(mark, "w").write(joined + " sent\n")
time.sleep(600)
"#;
    for nobody in users() {
        let tree = open_tree();
        let script = format!("{TREE}\npython3 -c '{JOIN}' $PPID \"$MARK\" &\nwait");
        let mut cmd = command_as(
            nobody,
            Path::new(env!("CARGO_BIN_EXE_reaper")),
            &[
                "run",
                "--die-with-parent",
                "--on-stdin-eof",
                "1s",
                "--timeout",
                "3s",
                "--grace",
                "200ms",
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        with_tree(&mut cmd, &tree);
        let logf = std::fs::File::create(log(&tree)).unwrap();
        // SAFETY: setsid(2) between fork and exec: async-signal-safe, allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("start reaper");
        let what = format!("setpgid into reaper's group {}", who(nobody));
        let st = exits_within(&mut child, DEADLINE, &what);
        let text = std::fs::read_to_string(log(&tree)).unwrap_or_default();
        let m = marker(&tree);
        assert!(
            m.ends_with(" sent\n"),
            "{what}: the tree's kill ran: {m:?} {text}"
        );
        assert_eq!(code_of(st), 124, "{what} ({m}): {text}");
        tree.assert_all_dead(&what);
        drop(child.stdin.take());
    }
}

/// The tree `PTRACE_ATTACH`es reaper, and holds it in its stop. As a user: refused, reaper is
/// not dumpable. As root (CAP_SYS_PTRACE): the guardian sees a tracer of its run, kills it and
/// continues reaper — also when the tracer is a second thread of its process (the kernel names
/// the thread). Either way the timeout holds.
#[test]
fn the_tree_cannot_hold_reaper_with_ptrace() {
    let mut cases = vec![(false, false), (false, true)];
    cases.extend(users().into_iter().filter(|&n| n).map(|n| (n, false)));
    for (nobody, from_thread) in cases {
        let tree = open_tree();
        let markp = mark(&tree);
        let mut args = vec![
            "run".to_owned(),
            "--timeout".into(),
            "2s".into(),
            "--grace".into(),
            "200ms".into(),
            "--".into(),
        ];
        let mut scenario = vec!["ptrace-parent", markp.to_str().unwrap()];
        if from_thread {
            scenario.push("--from-thread");
        }
        args.extend(tree.fixture(&scenario));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = command_as(nobody, Path::new(env!("CARGO_BIN_EXE_reaper")), &args);
        let logf = std::fs::File::create(log(&tree)).unwrap();
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("start reaper");
        let what = format!(
            "ptrace {}{}",
            who(nobody),
            if from_thread { " from a thread" } else { "" }
        );
        let st = exits_within(&mut child, DEADLINE, &what);
        let text = std::fs::read_to_string(log(&tree)).unwrap_or_default();
        let m = marker(&tree);
        if nobody || !have(Need::Root) {
            assert_eq!(
                m,
                format!("refused {}\n", libc::EPERM),
                "{what}: the attach was tried and refused: {text}"
            );
        } else {
            assert_eq!(
                m,
                format!("attached {}\n", child.id()),
                "{what}: root's attach works (so the guardian had to act): {text}"
            );
        }
        assert_eq!(code_of(st), 124, "{what}: {text}");
        tree.assert_all_dead(&what);
    }
}

/// A debugger from outside the run (here the test, reaper's parent) may still trace reaper: the
/// guardian leaves a tracer that is not of the run alone.
#[test]
fn a_tracer_from_outside_is_left_alone() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let child = reaper()
        .args(["run", "--timeout", "60s", "--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start reaper");
    let pid = child.id() as i32;
    assert!(
        wait_until(Duration::from_secs(10), || guardian_of(pid).is_some()),
        "reaper has a guardian"
    );
    // SAFETY: ptrace(2) on our own child, no pointers (PTRACE_SEIZE: no stop).
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    assert_eq!(r, 0, "seize: {}", std::io::Error::last_os_error());
    let tracer = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim().to_owned()))
    };
    let me = rustix::thread::gettid().as_raw_nonzero().get().to_string();
    assert_eq!(tracer().as_deref(), Some(me.as_str()));
    // Several of the guardian's looks (every 250 ms).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        tracer().as_deref(),
        Some(me.as_str()),
        "the outside tracer is still attached"
    );
    // A detach needs the tracee in a ptrace stop: interrupt it, wait for the stop (or for one
    // a signal caused meanwhile), detach.
    // SAFETY: ptrace(2) and waitpid(2) on our own traced child, no pointers but a local status.
    unsafe {
        let none = std::ptr::null_mut::<libc::c_void>();
        libc::ptrace(libc::PTRACE_INTERRUPT, pid, none, none);
        let mut status = 0;
        libc::waitpid(pid, &mut status, libc::__WALL);
        assert!(libc::WIFSTOPPED(status), "reaper stopped for its tracer");
        assert_eq!(libc::ptrace(libc::PTRACE_DETACH, pid, none, none), 0);
        libc::kill(pid, libc::SIGTERM);
    }
    // Its exit, past the ptrace stops a tracer's wait reports (std's would return them).
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        let mut status = 0;
        // SAFETY: waitpid(2) of our own child, into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) };
        if r == pid && (libc::WIFEXITED(status) || libc::WIFSIGNALED(status)) {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "reaper did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(libc::WEXITSTATUS(status), 143);
    drop(child);
}

/// A command that fills reaper's stderr (a pipe whose reader drains it only once reaper has
/// exited, as `subprocess.run(capture_output=True)` does with a child that is not done):
/// reaper's own lines there (the summary, `--events`) never block it. It used to hang for ever
/// on its summary line; with `--events` the timeout's event came before the stop and blocked
/// it, so the tree outlived the timeout. GNU timeout, on the same command, is the control.
#[test]
fn a_full_stderr_never_blocks_reaper() {
    // `head` never gets its megabyte out (nobody reads): the marker stays empty.
    let script =
        format!("{TREE}\nhead -c 1000000 /dev/zero >&2 && echo drained > \"$MARK\"\nsleep 600");
    let reaper_bin = env!("CARGO_BIN_EXE_reaper");
    let mut cases: Vec<(&str, Vec<&str>, i32)> = vec![
        (
            "run",
            vec![
                reaper_bin,
                "run",
                "--timeout",
                "2s",
                "--grace",
                "200ms",
                "--",
            ],
            124,
        ),
        (
            "run --events",
            vec![
                reaper_bin,
                "run",
                "--events",
                "--timeout",
                "2s",
                "--grace",
                "200ms",
                "--",
            ],
            124,
        ),
        (
            "check",
            vec![reaper_bin, "check", "--timeout", "2s", "--"],
            2,
        ),
        ("timeout", vec![reaper_bin, "timeout", "-k", "1", "2"], 124),
    ];
    if have(Need::Program(GNU_TIMEOUT)) {
        cases.push((
            "GNU timeout (control)",
            vec![GNU_TIMEOUT, "-k", "1", "2"],
            124,
        ));
    }
    for (what, argv, want) in cases {
        let tree = open_tree();
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]).args(["sh", "-c", &script]);
        with_tree(&mut cmd, &tree);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start");
        let mut err = child.stderr.take().expect("piped stderr");
        let st = exits_within(&mut child, DEADLINE, what);
        // Only now is the pipe read (its writers are all gone: the read reaches EOF).
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = err.read_to_end(&mut all);
            all.len()
        });
        assert_eq!(code_of(st), want, "{what}");
        if argv[0] == GNU_TIMEOUT {
            // Its signal goes to one process group: the setsid'd process lives on.
            tree.kill_leftovers();
        } else {
            tree.assert_all_dead(what);
        }
        let read = reader.join().expect("the reader");
        // A pipe holds 64 KiB: what reaper said before it filled shares it.
        assert!(
            read >= 60_000 && marker(&tree).is_empty(),
            "{what}: the command filled the pipe ({read} bytes read after; marker {:?})",
            marker(&tree)
        );
    }
}

/// The command types into the caller's terminal (TIOCSTI on `/dev/tty`): what it types is run
/// by the caller's shell after reaper returns. A run that holds no terminal (here: stdin from
/// /dev/null, output to a pipe) now leads a session of its own, without a controlling terminal:
/// `/dev/tty` cannot be opened there.
#[test]
fn a_run_without_the_terminal_cannot_type_into_it() {
    if !have(Need::Script) || !have(Need::Python3) {
        return;
    }
    const TYPE: &str = r#"
import fcntl, os, sys, termios
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    for c in "echo INJECTED\n":
        fcntl.ioctl(fd, termios.TIOCSTI, c.encode())
    said = "typed"
except OSError as e:
    said = "refused %d" % e.errno
open(sys.argv[1], "w").write(said + "\n")
"#;
    let tree = open_tree();
    let dir = tree.dir.path();
    std::fs::write(dir.join("type.py"), TYPE).unwrap();
    std::fs::write(
        dir.join("term.sh"),
        "\"$REAPER\" run -q -- python3 \"$DIR/type.py\" \"$MARK\" </dev/null 2>&1 | cat\n\
         read -t 3 x; echo \"got[$x]\"\n",
    )
    .unwrap();
    let mut child = Command::new("sh")
        .args([
            "-c",
            "sleep 6 | script -qec \"bash --norc --noprofile $DIR/term.sh\" /dev/null",
        ])
        .env("REAPER", env!("CARGO_BIN_EXE_reaper"))
        .env("DIR", dir)
        .env("MARK", mark(&tree))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let g = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
            let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
            let _ = child.wait();
            panic!("hung on the terminal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let m = marker(&tree);
    assert!(!m.is_empty(), "the command tried to type: {out}");
    assert!(out.contains("got["), "the shell read on: {out}");
    assert!(
        !out.contains("got[echo INJECTED]"),
        "the run typed into the caller's terminal ({m}): {out}"
    );
    assert!(m.starts_with("refused"), "{m} {out}");
}

/// The command sets TOSTOP on the terminal it was handed, then reaper, in the background while
/// the leader holds the terminal, writes an event: the terminal answers with SIGTTOU and a
/// restart of the write, which with reaper's job-control handler looped for ever (reaper at
/// full CPU, its timeout never acted on). reaper's own terminal writes block SIGTTOU now, as
/// GNU timeout ignores it: the event goes out and the timeout fires.
#[test]
fn tostop_on_the_terminal_cannot_hold_reaper() {
    if !have(Need::Script) {
        return;
    }
    let tree = open_tree();
    let feed = "sleep 1; echo \"\\$REAPER run --events --timeout 1s --grace 200ms -- sh -c \
                'stty tostop && echo set > \\\"\\$MARK\\\"; sleep 30'; echo rc=\\$?; stty -tostop; \
                exit\"; sleep 20";
    let pipeline = format!("({feed}) | script -qec 'bash --norc --noprofile -i' /dev/null");
    let mut child = Command::new("sh")
        .args(["-c", &pipeline])
        .env("REAPER", env!("CARGO_BIN_EXE_reaper"))
        .env("MARK", mark(&tree))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let mut out = child.stdout.take().expect("piped stdout");
    // The shell's `rc=` line is the oracle: read until it comes (or the pipe ends).
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
            let seen = String::from_utf8_lossy(&text).replace('\r', "");
            if seen.lines().any(|l| l.starts_with("rc=")) {
                break;
            }
        }
        String::from_utf8_lossy(&text).replace('\r', "")
    });
    let deadline = Instant::now() + DEADLINE;
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Our own group (process_group(0) above): sh, script and what runs on the terminal.
    let g = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
    let _ = child.wait();
    let out = reader.join().expect("the reader");
    assert_eq!(marker(&tree), "set\n", "the command set TOSTOP: {out}");
    assert!(
        out.lines().any(|l| l == "rc=124"),
        "reaper timed out as asked: {out}"
    );
}
