//! A program that embeds the library without `reaper::own_every_child()` keeps children of its
//! own (a `git status`, a language server) beside its runs: reaper never touches them. Nothing
//! proves such a child is a run's — not that it started after a run's leader, nor that it is
//! outside every run cgroup — so it is never taken for one, on any backend, however the runs
//! end, and `reaper::host::diagnose()` does not make this process a child subreaper either.
//!
//! Each test runs alone in a copy of this test binary ([`alone`]): what is tested is
//! process-wide (which children this process has, whether it is a subreaper), and a test that
//! starts children is exactly what would disturb another one in the same process.

mod common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command as StdCommand, Stdio as StdStdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{have, Need};
use reaper::{Command, Containment, Delegation, Stdio, StopReason};
use reaper_platform::linux::{procfs, subreaper};

/// Set in the copy of this binary that runs one test alone.
const ALONE: &str = "REAPER_HOST_CHILDREN_ALONE";

/// Whether this is the copy that runs `name` alone; if not, runs that copy, shows its output
/// and checks it passed.
fn alone(name: &str) -> bool {
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = StdCommand::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} alone: {}\n{stdout}",
        out.status
    );
    false
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, …), `None` once the pid is gone.
fn state(pid: u32) -> Option<char> {
    procfs::stat(pid as i32).ok().map(|s| s.state)
}

fn stopped(pid: u32) -> bool {
    matches!(state(pid), Some('T' | 't'))
}

/// The program: one contained `sleep 1`, and 100 ms later a plain child of its own
/// (`sleep 30`); when the run has ended, that child is alive, running, not named an escapee,
/// and this process reaps it with the status its own SIGKILL gave it.
fn a_plain_child_outlives_a_run(containment: Containment, diagnose_first: bool) {
    if containment == Containment::Cgroup && !have(Need::Cgroup) {
        return;
    }
    // Whether diagnose left this process a child subreaper (checked after the run, so a
    // failure shows what the run did too).
    let mut left_subreaper = false;
    if diagnose_first {
        let report = reaper::host::diagnose(Delegation::Never, None);
        assert!(report.subreaper, "this machine allows a child subreaper");
        left_subreaper = subreaper::is_subreaper();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let mut run = Command::new("sleep")
            .arg("1")
            .stdin(Stdio::Null)
            .containment(containment)
            .delegation(Delegation::Never)
            .spawn()
            .await
            .expect("the contained sleep starts");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut own = StdCommand::new("sleep")
            .arg("30")
            .stdin(StdStdio::null())
            .spawn()
            .expect("this process's own sleep starts");
        let outcome = run.wait().await;
        let pid = own.id();
        let after = (own.try_wait(), state(pid));
        let _ = own.kill();
        let status = own.wait().expect("this process reaps its own child");
        assert_eq!(outcome.stop_reason, StopReason::Exited, "{outcome:?}");
        assert!(
            matches!(after, (Ok(None), Some(s)) if s != 'T' && s != 't' && s != 'Z'),
            "{containment:?}: this process's own child {pid} was touched by the run: \
             try_wait {:?}, state {:?}; outcome {outcome:?}",
            after.0,
            after.1
        );
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "killed by this process's own kill"
        );
        assert!(
            outcome.escapees.is_empty(),
            "{containment:?}: escapees {:?}",
            outcome.escapees
        );
        assert_eq!(outcome.killed, 0, "{containment:?}: {outcome:?}");
        assert!(outcome.survivors.is_empty(), "{outcome:?}");
    });
    assert!(
        !left_subreaper,
        "diagnose left this process a child subreaper: every orphan of its own children now \
         comes back to it"
    );
}

#[test]
fn a_plain_child_outlives_a_cgroup_run() {
    if alone("a_plain_child_outlives_a_cgroup_run") {
        a_plain_child_outlives_a_run(Containment::Cgroup, false);
    }
}

#[test]
fn a_plain_child_outlives_a_pgid_run() {
    if alone("a_plain_child_outlives_a_pgid_run") {
        a_plain_child_outlives_a_run(Containment::Pgid, false);
    }
}

#[test]
fn a_plain_child_outlives_a_cgroup_run_after_diagnose() {
    if alone("a_plain_child_outlives_a_cgroup_run_after_diagnose") {
        a_plain_child_outlives_a_run(Containment::Cgroup, true);
    }
}

#[test]
fn a_plain_child_outlives_a_pgid_run_after_diagnose() {
    if alone("a_plain_child_outlives_a_pgid_run_after_diagnose") {
        a_plain_child_outlives_a_run(Containment::Pgid, true);
    }
}

/// What the host's children did: how many ran, and every one that did not end as it meant to.
#[derive(Default)]
struct Tally {
    ran: AtomicUsize,
    setsid: AtomicUsize,
    touched: Mutex<Vec<String>>,
}

impl Tally {
    fn touched(&self, what: String) {
        self.touched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }
}

/// One of the host's own children: its argv, whether it leaves for a session of its own, a
/// process group of its own, and the exit code it ends with by itself.
struct Job {
    argv: &'static [&'static str],
    setsid: bool,
    group: bool,
    code: i32,
}

const JOBS: &[Job] = &[
    Job {
        argv: &["sleep", "0.02"],
        setsid: false,
        group: false,
        code: 0,
    },
    Job {
        argv: &["sh", "-c", "sleep 0.03; exit 3"],
        setsid: false,
        group: false,
        code: 3,
    },
    // `setsid` execs the program in a session of its own (the child is no group leader).
    Job {
        argv: &["setsid", "sleep", "0.04"],
        setsid: true,
        group: false,
        code: 0,
    },
    Job {
        argv: &["sh", "-c", "exit 5"],
        setsid: false,
        group: true,
        code: 5,
    },
    Job {
        argv: &["setsid", "sh", "-c", "sleep 0.01; exit 7"],
        setsid: true,
        group: false,
        code: 7,
    },
];

fn std_command(job: &Job) -> StdCommand {
    let mut c = StdCommand::new(job.argv[0]);
    c.args(&job.argv[1..]).stdin(StdStdio::null());
    if job.group {
        c.process_group(0);
    }
    c
}

/// Checks one ended child's status against what it meant to end with.
fn check(tally: &Tally, job: &Job, pid: u32, status: std::io::Result<std::process::ExitStatus>) {
    match status {
        Ok(st) if st.code() == Some(job.code) => {}
        Ok(st) => tally.touched(format!("{:?} ({pid}) ended with {st}", job.argv)),
        Err(e) => tally.touched(format!(
            "{:?} ({pid}) could not be waited for: {e}",
            job.argv
        )),
    }
    tally.ran.fetch_add(1, Ordering::Relaxed);
    if job.setsid {
        tally.setsid.fetch_add(1, Ordering::Relaxed);
    }
}

/// A host thread: keeps a few std children of its own running, each waited for by polling, so
/// that one a run stopped (SIGSTOP, which no wait reports) is seen too and ends the test.
fn std_host(tally: Arc<Tally>, done: Arc<AtomicBool>, seed: usize) {
    let mut running: Vec<(usize, std::process::Child)> = Vec::new();
    let mut n = seed;
    while !done.load(Ordering::Relaxed) || !running.is_empty() {
        while !done.load(Ordering::Relaxed) && running.len() < 3 {
            let job = &JOBS[n % JOBS.len()];
            match std_command(job).spawn() {
                Ok(c) => running.push((n % JOBS.len(), c)),
                Err(e) => tally.touched(format!("{:?} did not start: {e}", job.argv)),
            }
            n += 1;
        }
        running.retain_mut(|(j, c)| {
            let job = &JOBS[*j];
            match c.try_wait() {
                Ok(None) if stopped(c.id()) => {
                    tally.touched(format!("{:?} ({}) was stopped", job.argv, c.id()));
                    let _ = c.kill();
                    let _ = c.wait();
                    false
                }
                Ok(None) => true,
                Ok(Some(st)) => {
                    check(&tally, job, c.id(), Ok(st));
                    false
                }
                Err(e) => {
                    check(&tally, job, c.id(), Err(e));
                    false
                }
            }
        });
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A host task: the same with `tokio::process`, each child awaited beside a look for a stop.
async fn tokio_host(tally: Arc<Tally>, done: Arc<AtomicBool>, seed: usize) {
    let mut n = seed;
    while !done.load(Ordering::Relaxed) {
        let job = &JOBS[n % JOBS.len()];
        n += 1;
        let mut c = tokio::process::Command::from(std_command(job));
        let mut child = match c.spawn() {
            Ok(c) => c,
            Err(e) => {
                tally.touched(format!("{:?} did not start: {e}", job.argv));
                continue;
            }
        };
        let pid = child.id().unwrap_or(0);
        let status = loop {
            tokio::select! {
                st = child.wait() => break st,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {
                    if stopped(pid) {
                        tally.touched(format!("{:?} ({pid}) was stopped", job.argv));
                        let _ = child.kill().await;
                    }
                }
            }
        };
        check(&tally, job, pid, status);
    }
}

/// How a run of the stress test ends.
#[derive(Clone, Copy, Debug)]
enum End {
    ByItself,
    Dropped,
    Killed,
    Stopped,
    TimedOut,
}

/// One run of the stress test: a tree with a session of its own beside the leader, ended as
/// `end` says; returns what went wrong, if anything.
async fn one_run(containment: Containment, end: End, n: usize) -> Option<String> {
    let script = match end {
        End::ByItself => "setsid sleep 0.005 & sleep 0.01",
        _ => "setsid sleep 10 & exec sleep 10",
    };
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .stdin(Stdio::Null)
        .containment(containment)
        .delegation(Delegation::Never)
        .grace(Duration::from_millis(20));
    if let End::TimedOut = end {
        cmd.timeout(Duration::from_millis(10));
    }
    let mut child = match cmd.spawn().await {
        Ok(c) => c,
        Err(e) => {
            return Some(format!(
                "run {n} ({containment:?}, {end:?}) did not start: {e}"
            ))
        }
    };
    let outcome = match end {
        End::ByItself | End::TimedOut => child.wait().await,
        End::Killed => child.kill().await,
        End::Stopped => child.stop().await,
        End::Dropped => {
            tokio::time::sleep(Duration::from_millis((n % 5) as u64)).await;
            drop(child);
            return None;
        }
    };
    let bad =
        outcome.error.is_some() || !outcome.survivors.is_empty() || !outcome.escapees.is_empty();
    bad.then(|| format!("run {n} ({containment:?}, {end:?}): {outcome:?}"))
}

/// The stress test: a host program that keeps starting and reaping children of its
/// own (std and tokio, some in sessions or process groups of their own) while runs of every
/// backend usable without `own_every_child` (cgroup, and one in ten pgid) start, end by
/// themselves, are dropped, killed, stopped and time out, three at a time: every child of the
/// host ends with its own status. `REAPER_STRESS_RUNS` runs in all (default 1000).
#[test]
fn a_hosts_own_children_outlive_thousands_of_runs_untouched() {
    if !alone("a_hosts_own_children_outlive_thousands_of_runs_untouched") || !have(Need::Cgroup) {
        return;
    }
    let runs: usize = std::env::var("REAPER_STRESS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let began = Instant::now();
    let tally = Arc::new(Tally::default());
    let done = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let (t, d) = (tally.clone(), done.clone());
            std::thread::spawn(move || std_host(t, d, i * 2))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let failures: Vec<String> = rt.block_on(async {
        let hosts: Vec<_> = (0..2)
            .map(|i| tokio::spawn(tokio_host(tally.clone(), done.clone(), i * 3 + 1)))
            .collect();
        let next = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let next = next.clone();
                tokio::spawn(async move {
                    let mut failures = Vec::new();
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= runs {
                            return failures;
                        }
                        // One run in ten is pgid's: each of its looks reads the whole
                        // process table, so a pgid run costs several cgroup runs.
                        let containment = if n.is_multiple_of(10) {
                            Containment::Pgid
                        } else {
                            Containment::Cgroup
                        };
                        // Every ending, on both backends.
                        let end = [
                            End::ByItself,
                            End::Dropped,
                            End::Killed,
                            End::Stopped,
                            End::TimedOut,
                        ][(n + n / 10) % 5];
                        failures.extend(one_run(containment, end, n).await);
                    }
                })
            })
            .collect();
        let mut failures = Vec::new();
        for w in workers {
            failures.extend(w.await.expect("a run worker"));
        }
        done.store(true, Ordering::Relaxed);
        for h in hosts {
            h.await.expect("a host task");
        }
        failures
    });
    for t in threads {
        t.join().expect("a host thread");
    }
    // Dropped runs are cleaned up in the background: `exit` would wait for them.
    drop(rt);
    let touched = tally.touched.lock().unwrap_or_else(|e| e.into_inner());
    let ran = tally.ran.load(Ordering::Relaxed);
    eprintln!(
        "{runs} runs, {ran} children of the host ({} in sessions of their own), {} touched, \
         {:.1} s",
        tally.setsid.load(Ordering::Relaxed),
        touched.len(),
        began.elapsed().as_secs_f64()
    );
    assert!(
        touched.is_empty(),
        "{} of the host's {ran} children touched:\n{}",
        touched.len(),
        touched.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The host really ran beside the runs: far more than one child per run worker.
    assert!(ran >= runs / 4, "only {ran} children of the host ran");
}
