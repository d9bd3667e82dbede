//! Teardown: a hostile tree (or a fork storm) is built and ready, then the stop is requested with
//! no grace, and the clock runs until every process of it is dead and reaped.
//!
//! - `reaper run --grace 0`: the stop request is a SIGTERM to reaper (through a pidfd); done is
//!   reaper's exit, which comes only after the tree is empty, reaped and its cgroup removed.
//! - `killpg`: the fixture leads a process group of its own under this process (a child
//!   subreaper, so orphans reparent here); the stop is `kill(-pgid, SIGKILL)`; done is when every
//!   member of the group is reaped. The setsid'd ones are not in the group and survive: they are
//!   counted, then killed by pidfd.
//! - `cgroup.kill` floor: the fixture is born in a cgroup of this process's own; the stop is
//!   `cgroup.kill`; done is `populated 0` (poll on `cgroup.events`), every zombie reaped and the
//!   cgroup removed. What the kernel needs, for comparison with what reaper needs.
//!
//! "All dead" is measured independently of the tool: a thread blocks on `flock(LOCK_EX)` of the
//! fixture's oracle file, whose shared lock every process of the tree holds until it exits.
//! Survivors are counted from the fixture's pid file (pid + start time; zombies are dead) and
//! the oracle.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use libc::pid_t;

use crate::stats::Summary;
use crate::sys::{self, BenchCgroup, Cmd, Join, Stdio, TempDir};
use crate::{Setup, ALT};

/// What the fixture builds.
#[derive(Clone, Copy)]
pub enum Scenario {
    /// `tree N --setsid-every 10`.
    Tree(u32),
    /// `fork-storm N --ready-at K`.
    Storm(u32, u32),
}

impl Scenario {
    fn args(self) -> Vec<String> {
        match self {
            Scenario::Tree(n) => vec![
                "tree".into(),
                n.to_string(),
                "--setsid-every".into(),
                "10".into(),
            ],
            Scenario::Storm(n, k) => vec![
                "fork-storm".into(),
                n.to_string(),
                "--ready-at".into(),
                k.to_string(),
            ],
        }
    }
}

/// Who stops the tree.
#[derive(Clone, Debug)]
pub enum Stopper {
    /// `reaper run --containment BACKEND --grace 0`, of the alternative build when `true`.
    Reaper(&'static str, bool),
    Killpg,
    CgroupKill,
}

impl Stopper {
    pub fn label(&self) -> String {
        match self {
            Stopper::Reaper(b, alt) => {
                format!("`reaper run` {b} backend{}", if *alt { ALT } else { "" })
            }
            Stopper::Killpg => "`killpg(SIGKILL)` of the leader's group".into(),
            Stopper::CgroupKill => {
                "floor: `cgroup.kill` + wait for `populated 0` + reap + rmdir".into()
            }
        }
    }
}

/// One stop, measured.
#[derive(Debug, Default)]
struct Sample {
    /// Stop request → the oracle says every process has exited (none when some survived).
    dead_ms: Option<f64>,
    /// Stop request → every process dead and reaped (and the tool returned / cgroup removed).
    done_ms: f64,
    /// Processes recorded when the stop came, and in all.
    at_stop: usize,
    created: usize,
    survivors: usize,
}

pub struct TeardownRow {
    pub stopper: String,
    pub scenario: String,
    pub dead_ms: Option<Summary>,
    pub done_ms: Option<Summary>,
    pub at_stop: Option<Summary>,
    pub created: Option<Summary>,
    /// Survivors of every repetition (max over them, and whether any run had one).
    pub survivors_max: usize,
    pub survivors_median: Option<Summary>,
    pub vs_floor: Option<Summary>,
    pub note: Option<String>,
}

const READY_LIMIT: Duration = Duration::from_secs(120);
const STOP_LIMIT: Duration = Duration::from_secs(30);

fn fixture_argv(s: &Setup, dir: &TempDir, sc: Scenario) -> Vec<String> {
    let mut v = vec![
        s.fixture.to_string_lossy().into_owned(),
        "--oracle".into(),
        dir.join("oracle").to_string_lossy().into_owned(),
        "--pids".into(),
        dir.join("pids").to_string_lossy().into_owned(),
        "--ready".into(),
        dir.join("ready").to_string_lossy().into_owned(),
    ];
    v.extend(sc.args());
    v
}

/// Counts (and then kills) what outlived the stop; returns the count. Nothing that this run
/// started is left afterwards, or the benchmark says so.
fn survivors_then_cleanup(dir: &TempDir, recorded: &[(pid_t, u64)]) -> usize {
    let all = sys::read_pids(&dir.join("pids"));
    let alive: Vec<(pid_t, u64)> = all
        .iter()
        .chain(recorded)
        .copied()
        .filter(|&(p, st)| sys::alive(p, st))
        .collect::<std::collections::HashSet<_>>()
        .into_iter()
        .collect();
    let mut n = alive.len();
    if n == 0 && !sys::oracle_free(&dir.join("oracle")) {
        // A process nobody recorded holds the oracle: at least one survivor.
        n = 1;
    }
    for _ in 0..50 {
        if sys::oracle_free(&dir.join("oracle")) {
            break;
        }
        for &(p, st) in &all {
            sys::kill_checked(p, st);
        }
        sys::reap_strays();
        std::thread::sleep(Duration::from_millis(20));
    }
    sys::reap_strays();
    if !sys::oracle_free(&dir.join("oracle")) {
        eprintln!(
            "reaper-bench: processes of {} may still be alive",
            dir.0.display()
        );
    }
    n
}

fn once(s: &Setup, stopper: &Stopper, sc: Scenario) -> Result<Sample, String> {
    let dir = TempDir::new("td").map_err(|e| e.to_string())?;
    let stderr = std::fs::File::create(dir.join("stderr")).map_err(|e| e.to_string())?;
    let io = Stdio {
        stdin: s.null.as_raw_fd(),
        stdout: s.null.as_raw_fd(),
        stderr: stderr.as_raw_fd(),
    };
    let fixture = fixture_argv(s, &dir, sc);
    let mut cgroup = None;
    let (argv, join) = match stopper {
        Stopper::Reaper(backend, alt) => {
            let reaper = match (alt, &s.alt_reaper) {
                (true, Some(a)) => a,
                _ => &s.reaper,
            };
            let mut v: Vec<String> = [
                reaper.to_string_lossy().as_ref(),
                "run",
                "--quiet",
                "--grace",
                "0",
                "--containment",
                backend,
                "--report",
                dir.join("report.json").to_string_lossy().as_ref(),
                "--",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            v.extend(fixture);
            (v, Join::Nothing)
        }
        Stopper::Killpg => (fixture, Join::Pgroup),
        Stopper::CgroupKill => {
            let parent = &s.cgroup.as_ref().ok_or("no cgroup2 mount")?.own_dir;
            cgroup = Some(BenchCgroup::create(parent).map_err(|e| e.to_string())?);
            let dirfd = cgroup.as_ref().map(|c| c.dir.as_raw_fd()).unwrap_or(-1);
            (fixture, Join::Clone3(dirfd))
        }
    };
    // Nobody else may be our child: the floor reaps "every child" as the tree's members.
    if !sys::settle_children(Duration::from_secs(5)) {
        return Err("children of an earlier run are still alive".into());
    }
    let cmd = Cmd::new(&argv);
    let pid = sys::spawn(&cmd, join, &io).map_err(|e| format!("spawn: {e}"))?;
    let pidfd = sys::pidfd_open(pid).map_err(|e| format!("pidfd_open: {e}"))?;
    let result = stop_and_measure(stopper, sc, &dir, pid, &pidfd, cgroup.as_ref());
    if result.is_err() {
        // Whatever happened, leave nothing behind: the tool, then the tree.
        let _ = sys::pidfd_signal(&pidfd, libc::SIGKILL);
        let _ = sys::wait(pid);
    }
    let recorded = sys::read_pids(&dir.join("pids"));
    let survivors = survivors_then_cleanup(&dir, &recorded);
    if let Some(cg) = &cgroup {
        let _ = cg.kill();
        if let Ok(mut ev) = cg.events() {
            let _ = ev.wait_empty(Duration::from_secs(5));
        }
        sys::reap_strays();
    }
    drop(cgroup);
    let mut sample = result.map_err(|e| {
        let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        format!("{e}; stderr: {}", log.trim())
    })?;
    sample.survivors = survivors;
    sample.created = recorded.len();
    if survivors > 0 {
        sample.dead_ms = None;
    }
    Ok(sample)
}

fn stop_and_measure(
    stopper: &Stopper,
    sc: Scenario,
    dir: &TempDir,
    pid: pid_t,
    pidfd: &std::os::fd::OwnedFd,
    cgroup: Option<&BenchCgroup>,
) -> Result<Sample, String> {
    // The leader takes the oracle's shared lock before it records itself: from then on the
    // waiter thread can block on it (started earlier, it would take the lock first).
    let deadline = Instant::now() + READY_LIMIT;
    while sys::read_pids(&dir.join("pids")).is_empty() {
        if Instant::now() > deadline || sys::stat(pid).is_none_or(|s| s.is_dead()) {
            return Err("the fixture never recorded its leader".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let oracle = sys::oracle_waiter(&dir.join("oracle"));
    let mut events = match cgroup {
        Some(cg) => Some(cg.events().map_err(|e| e.to_string())?),
        None => None,
    };
    sys::wait_for_file(&dir.join("ready"), pid, READY_LIMIT)?;
    // Who is in the leader's group (killpg reaches them) and who escaped it (setsid); a storm
    // never leaves the group, and is stopped at once, still forking.
    let mut in_group = std::collections::HashSet::new();
    let mut escaped = 0;
    if let Scenario::Tree(_) = sc {
        let built = sys::read_pids(&dir.join("pids"));
        let leader = match stopper {
            Stopper::Reaper(..) => built.first().map(|p| p.0).unwrap_or(pid),
            _ => pid,
        };
        in_group = built
            .iter()
            .filter(|(p, _)| sys::stat(*p).is_some_and(|st| st.pgid == leader))
            .map(|(p, _)| *p)
            .collect();
        escaped = built.len() - in_group.len();
        // Keep the stop more than 10 ms away from the tree's birth: the kernel sends at most
        // one `cgroup.events` notification per 10 ms (CGROUP_FILE_NOTIFY_MIN_INTV) and defers
        // the next, which would delay "populated 0" for a tree stopped at once.
        std::thread::sleep(Duration::from_millis(20));
    }
    let at_stop = sys::read_pids(&dir.join("pids"));

    let t0 = Instant::now();
    let done = match stopper {
        Stopper::Reaper(..) => {
            sys::pidfd_signal(pidfd, libc::SIGTERM).map_err(|e| format!("SIGTERM: {e}"))?;
            let st = sys::wait(pid).map_err(|e| e.to_string())?;
            let t = t0.elapsed();
            // 125: reaper failed or reports survivors; anything else is the leader's fate.
            if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 125 {
                return Err(format!("reaper: {}", sys::describe_status(st)));
            }
            t
        }
        Stopper::Killpg => {
            sys::killpg(pid, libc::SIGKILL).map_err(|e| format!("killpg: {e}"))?;
            // Reap the group (setsid'd escapees are not in it and live on).
            let mut left = in_group.len();
            while let Some(p) = sys::wait_group(pid) {
                if escaped > 0 && in_group.contains(&p) {
                    left -= 1;
                    if left == 0 {
                        break;
                    }
                }
            }
            t0.elapsed()
        }
        Stopper::CgroupKill => {
            let cg = cgroup.ok_or("no cgroup")?;
            cg.kill().map_err(|e| format!("cgroup.kill: {e}"))?;
            let ev = events.as_mut().ok_or("no events")?;
            if !ev.wait_empty(STOP_LIMIT).map_err(|e| e.to_string())? {
                return Err("cgroup still populated 30 s after cgroup.kill".into());
            }
            while sys::wait_any().is_some() {}
            cg.remove().map_err(|e| format!("rmdir: {e}"))?;
            t0.elapsed()
        }
    };
    let dead_ms = oracle
        .recv_timeout(Duration::from_millis(500))
        .ok()
        .map(|t| t.saturating_duration_since(t0).as_secs_f64() * 1e3);
    Ok(Sample {
        dead_ms,
        done_ms: done.as_secs_f64() * 1e3,
        at_stop: at_stop.len(),
        created: 0,
        survivors: 0,
    })
}

pub fn bench(s: &Setup, stoppers: &[Stopper], sc: Scenario, reps: usize) -> Vec<TeardownRow> {
    let scenario = match sc {
        Scenario::Tree(n) => format!("tree of {n}"),
        Scenario::Storm(n, k) => format!("storm ≤{n}, stop at ≥{k}"),
    };
    let mut samples: Vec<Vec<Sample>> = stoppers.iter().map(|_| Vec::new()).collect();
    let mut notes: Vec<Option<String>> = vec![None; stoppers.len()];
    // Interleaved, so the stoppers share the machine's good and bad moments.
    for _ in 0..reps {
        for (i, st) in stoppers.iter().enumerate() {
            if notes[i].is_some() {
                continue;
            }
            match once(s, st, sc) {
                Ok(x) => samples[i].push(x),
                Err(e) => notes[i] = Some(e),
            }
        }
    }
    let floor = stoppers
        .iter()
        .position(|s| matches!(s, Stopper::CgroupKill))
        .map(|i| samples[i].iter().map(|x| x.done_ms).collect::<Vec<_>>());
    stoppers
        .iter()
        .zip(samples)
        .zip(notes)
        .map(|((st, xs), note)| {
            let col = |f: fn(&Sample) -> Option<f64>| {
                Summary::of(&xs.iter().filter_map(f).collect::<Vec<_>>())
            };
            let vs_floor = floor.as_ref().and_then(|fl| {
                (fl.len() == xs.len() && !matches!(st, Stopper::CgroupKill)).then(|| {
                    Summary::of(
                        &xs.iter()
                            .zip(fl)
                            .map(|(x, f)| x.done_ms / f)
                            .collect::<Vec<_>>(),
                    )
                })?
            });
            TeardownRow {
                stopper: st.label(),
                scenario: scenario.clone(),
                dead_ms: col(|x| x.dead_ms),
                done_ms: col(|x| Some(x.done_ms)),
                at_stop: col(|x| Some(x.at_stop as f64)),
                created: col(|x| Some(x.created as f64)),
                survivors_max: xs.iter().map(|x| x.survivors).max().unwrap_or(0),
                survivors_median: col(|x| Some(x.survivors as f64)),
                vs_floor,
                note: note.or_else(|| xs.is_empty().then(|| "no run".into())),
            }
        })
        .collect()
}
