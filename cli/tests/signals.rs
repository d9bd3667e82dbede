//! Every signal that would end reaper stops the tree first, with the grace, on every backend;
//! the job-control stops are passed on to a tree in a process group of its own; timeout(1)'s
//! face ignores SIGTTIN and SIGTTOU as GNU timeout does.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{have, reaper, stat, Need, Tree};

/// Every signal whose default action ends a process (signal(7)), SIGKILL aside: the
/// asynchronous ones, three real-time ones, and the fault signals as `kill(1)` sends them.
fn ending() -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = [
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("ALRM", libc::SIGALRM),
        ("TERM", libc::SIGTERM),
        ("STKFLT", libc::SIGSTKFLT),
        ("XCPU", libc::SIGXCPU),
        ("XFSZ", libc::SIGXFSZ),
        ("VTALRM", libc::SIGVTALRM),
        ("PROF", libc::SIGPROF),
        ("IO", libc::SIGIO),
        ("PWR", libc::SIGPWR),
        ("SEGV", libc::SIGSEGV),
        ("BUS", libc::SIGBUS),
        ("ILL", libc::SIGILL),
        ("FPE", libc::SIGFPE),
        ("TRAP", libc::SIGTRAP),
        ("SYS", libc::SIGSYS),
        ("ABRT", libc::SIGABRT),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_owned(), s))
    .collect();
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    v.extend([
        ("RTMIN".to_owned(), min),
        ("RTMIN+5".to_owned(), min + 5),
        ("RTMAX".to_owned(), max),
    ]);
    v
}

fn backends() -> Vec<&'static str> {
    let mut b = vec!["subreaper", "pgid"];
    if have(Need::Cgroup) {
        b.push("cgroup");
    }
    b
}

/// reaper running the setsid'd, TERM-ignoring grandchild, its tree ready.
fn start(t: &Tree, backend: &str) -> Child {
    let child = reaper()
        .args([
            "run",
            "-q",
            "--no-guardian",
            "--grace",
            "200ms",
            "--containment",
            backend,
            "--report",
        ])
        .arg(t.report())
        .arg("--")
        .args(t.fixture(&["setsid-grandchild"]))
        .stdin(Stdio::null())
        .spawn()
        .expect("start reaper");
    t.wait_ready(Duration::from_secs(10));
    child
}

/// Each ending signal, sent to reaper (by `kill(2)`, as a user or a parent does), makes it
/// stop the whole tree — the setsid'd grandchild that ignores SIGTERM included — and report
/// the signal; without the guardian, so that nothing but reaper itself can have done it.
#[test]
fn every_ending_signal_stops_the_tree_on_every_backend() {
    let backends = backends();
    std::thread::scope(|s| {
        for backend in backends {
            s.spawn(move || {
                for (name, sig) in ending() {
                    let t = Tree::new();
                    let mut child = start(&t, backend);
                    // SAFETY: kill(2) of our own unreaped child.
                    unsafe {
                        libc::kill(child.id() as i32, sig);
                    }
                    let st = child.wait().expect("wait for reaper");
                    t.assert_all_dead(&format!("SIG{name} to reaper ({backend})"));
                    let report: serde_json::Value = serde_json::from_str(
                        &std::fs::read_to_string(t.report()).unwrap_or_default(),
                    )
                    .unwrap_or_else(|e| {
                        panic!("SIG{name} ({backend}): no report ({e}); reaper ended {st:?}")
                    });
                    assert_eq!(
                        report["stop_reason"], "signal",
                        "SIG{name} ({backend}): {report}"
                    );
                    let got = report["received_signal"].as_str().unwrap_or("");
                    let same = got == name || got == sig.to_string();
                    assert!(same, "SIG{name} ({backend}): received {got:?}: {report}");
                    assert!(
                        report["killed"].as_u64().unwrap_or(0) >= 2,
                        "SIG{name} ({backend}): {report}"
                    );
                }
            });
        }
    });
}

/// The process's state letter now (`T`: stopped).
fn state(pid: i32) -> char {
    stat(pid).map_or('?', |(s, _)| s)
}

fn wait_state(pid: i32, want: char, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while state(pid) != want {
        assert!(
            Instant::now() < deadline,
            "{what}: pid {pid} is {} not {want}",
            state(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A Ctrl-Z that reaches reaper (its job's group, which is no longer the leader's) stops the
/// leader's group too, then reaper's own job; continuing reaper continues the leader. Before,
/// the tree shared reaper's group and so the stop; with a group of its own it would run on
/// while the shell reports the job stopped.
#[test]
fn a_job_control_stop_of_reaper_stops_the_tree_with_it() {
    for backend in backends() {
        for sig in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            let dir = tempfile::tempdir().expect("tempdir");
            let pidfile = dir.path().join("leader");
            // Its own group, in the test's session: not orphaned, so job control applies.
            let mut child = reaper()
                .args(["run", "-q", "--no-guardian", "--containment", backend, "--"])
                .args([
                    "sh",
                    "-c",
                    &format!("echo $$ > '{}'; exec sleep 30", pidfile.display()),
                ])
                .stdin(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("start reaper");
            let deadline = Instant::now() + Duration::from_secs(10);
            let leader = loop {
                if let Some(p) = std::fs::read_to_string(&pidfile)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                {
                    break p;
                }
                assert!(Instant::now() < deadline, "the leader never ran");
                std::thread::sleep(Duration::from_millis(10));
            };
            wait_state(leader, 'S', "the leader runs");
            let reaper_pid = child.id() as i32;
            // SAFETY: kill(2) of our own unreaped child.
            unsafe {
                libc::kill(reaper_pid, sig);
            }
            wait_state(leader, 'T', &format!("signal {sig}: the leader stops"));
            wait_state(
                reaper_pid,
                'T',
                &format!("signal {sig}: reaper stops its own job"),
            );
            // SAFETY: kill(2) of the process group this test created for reaper.
            unsafe {
                libc::kill(-reaper_pid, libc::SIGCONT);
            }
            wait_state(leader, 'S', &format!("signal {sig}: the leader continues"));
            // SAFETY: as above.
            unsafe {
                libc::kill(reaper_pid, libc::SIGTERM);
            }
            let st = child.wait().expect("wait for reaper");
            assert_eq!(st.code(), Some(143), "{backend}: {st:?}");
        }
    }
}

/// timeout(1)'s face ignores SIGTTIN and SIGTTOU, as GNU timeout does (so that it is not
/// stopped when a background job touches the terminal, and its timer keeps running); it used to
/// stop, and its timeout then never fired.
#[test]
fn the_timeout_face_ignores_ttin_and_ttou() {
    for sig in [libc::SIGTTIN, libc::SIGTTOU] {
        let start = Instant::now();
        let mut child = reaper()
            .args(["timeout", "1", "sleep", "30"])
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start reaper timeout");
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: kill(2) of our own unreaped child.
        unsafe {
            libc::kill(child.id() as i32, sig);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let st = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = Command::new("kill")
                    .args(["-CONT", &child.id().to_string()])
                    .status();
                let _ = child.wait();
                panic!("signal {sig}: reaper timeout was stopped and never timed out");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(code_of(st), 124, "signal {sig}");
        assert!(start.elapsed() < Duration::from_secs(8), "signal {sig}");
    }
}

fn code_of(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}
