//! `reaper ps` and `reaper audit` on a busy host: live runs (each a `reaper run` of its own,
//! with its guardian) and a few thousand more processes of the benchmark's own (one fixture
//! tree, sleeping), then the wall time of each command, from its spawn to its exit. Everything
//! started here is ended here: the runs by a SIGTERM to their reapers (through pidfds), the
//! tree by `killpg`, and every child reaped.

use std::time::{Duration, Instant};

use libc::pid_t;

use crate::stats::Summary;
use crate::sys::{self, Cmd, Join, Stdio, TempDir};
use crate::Setup;

pub struct ObservePlan {
    pub runs: usize,
    /// Processes on the host while measuring, at least (the fixture tree fills up to it).
    pub host: usize,
    pub reps: usize,
}

pub struct ObserveResult {
    pub runs_listed: usize,
    pub host_processes: usize,
    /// `reaper ps`, `reaper ps --tree`, `reaper ps --json`, `reaper audit`: ms per command.
    pub rows: Vec<(String, Option<Summary>)>,
    pub note: Option<String>,
}

pub fn bench(s: &Setup, plan: &ObservePlan) -> ObserveResult {
    let mut out = ObserveResult {
        runs_listed: 0,
        host_processes: 0,
        rows: Vec::new(),
        note: None,
    };
    let dir = match TempDir::new("observe") {
        Ok(d) => d,
        Err(e) => {
            out.note = Some(format!("no temporary directory: {e}"));
            return out;
        }
    };
    let io = Stdio {
        stdin: s.null.as_raw_fd(),
        stdout: s.null.as_raw_fd(),
        stderr: s.null.as_raw_fd(),
    };
    let mut reapers: Vec<pid_t> = Vec::new();
    let mut tree: Option<pid_t> = None;
    let result = (|| -> Result<(), String> {
        // The runs first: each is three processes (reaper, its guardian, the fixture).
        let sleeper = Cmd::new(&[
            s.reaper.to_string_lossy().as_ref(),
            "run",
            "--quiet",
            "--grace",
            "0",
            "--",
            s.fixture.to_string_lossy().as_ref(),
            "sleep",
            "600",
        ]);
        for _ in 0..plan.runs {
            reapers.push(sys::spawn(&sleeper, Join::Nothing, &io).map_err(|e| e.to_string())?);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            out.runs_listed = listed(s);
            if out.runs_listed >= plan.runs {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "only {} of {} runs listed after 60 s",
                    out.runs_listed, plan.runs
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Then the rest of the host: one tree of sleeping forks.
        let missing = plan.host.saturating_sub(host_processes());
        if missing > 1 {
            let ready = dir.join("ready");
            let fixture = Cmd::new(&[
                s.fixture.to_string_lossy().as_ref(),
                "--ready",
                ready.to_string_lossy().as_ref(),
                "tree",
                &missing.to_string(),
            ]);
            let pid = sys::spawn(&fixture, Join::Pgroup, &io).map_err(|e| e.to_string())?;
            tree = Some(pid);
            sys::wait_for_file(&ready, pid, Duration::from_secs(300))?;
        }
        out.host_processes = host_processes();
        for (label, args) in [
            ("`reaper ps`", vec!["ps"]),
            ("`reaper ps --tree`", vec!["ps", "--tree"]),
            ("`reaper ps --json`", vec!["ps", "--json"]),
            ("`reaper audit`", vec!["audit"]),
        ] {
            let mut argv = vec![s.reaper.to_string_lossy().into_owned()];
            argv.extend(args.iter().map(|a| (*a).to_owned()));
            let cmd = Cmd::new(&argv);
            let mut samples = Vec::new();
            for _ in 0..plan.reps {
                let t0 = Instant::now();
                let pid = sys::spawn(&cmd, Join::Nothing, &io).map_err(|e| e.to_string())?;
                let st = sys::wait(pid).map_err(|e| e.to_string())?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                // `audit` exits 1 when it finds something certain; anything else is a failure.
                if !(sys::exited_ok(st) || (args[0] == "audit" && libc::WEXITSTATUS(st) == 1)) {
                    return Err(format!("{label}: {}", sys::describe_status(st)));
                }
                samples.push(ms);
            }
            out.rows.push((label.to_owned(), Summary::of(&samples)));
        }
        Ok(())
    })();
    if let Err(e) = result {
        out.note = Some(e);
    }
    // Every run stops its tree on SIGTERM (grace 0); the fixture tree is one process group.
    for &pid in &reapers {
        if let Ok(fd) = sys::pidfd_open(pid) {
            let _ = sys::pidfd_signal(&fd, libc::SIGTERM);
        }
    }
    for &pid in &reapers {
        let _ = sys::wait(pid);
    }
    if let Some(pgid) = tree {
        let _ = sys::killpg(pgid, libc::SIGKILL);
        while sys::wait_group(pgid).is_some() {}
    }
    if !sys::settle_children(Duration::from_secs(10)) && out.note.is_none() {
        out.note = Some("children of the benchmark still alive after 10 s".into());
    }
    out
}

use std::os::fd::AsRawFd;

/// How many runs `reaper ps --json` lists.
fn listed(s: &Setup) -> usize {
    std::process::Command::new(&s.reaper)
        .args(["ps", "--json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0)
}

/// Processes on the host now (entries of `/proc`).
fn host_processes() -> usize {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0)
}
