//! Spawn cost: sequential runs of `/bin/true`, each started and waited for by this process, under
//! every way of containing it. Variants take turns batch by batch (the order rotates each round),
//! so a noisy neighbour slows them all alike, and each ratio is taken within one round.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Instant;

use crate::stats::Summary;
use crate::sys::{self, BenchCgroup, Cmd, Join, Stdio};
use crate::{Setup, ALT, STATIC};

/// One way of running `/bin/true`.
struct Variant {
    name: String,
    /// Runs `/bin/true` once, this variant's way, and waits for it (and cleans up after it).
    run: Box<dyn FnMut() -> Result<(), String>>,
    /// µs per run, one figure per round.
    per_run: Vec<f64>,
    /// µs of single runs, each after an idle pause, one per round.
    alone: Vec<f64>,
    unavailable: Option<String>,
}

pub struct SpawnRow {
    pub name: String,
    pub us: Option<Summary>,
    pub vs_bare: Option<Summary>,
    pub vs_timeout: Option<Summary>,
    /// One run alone after an idle pause, and its ratio to `timeout 60` alone.
    pub alone_us: Option<Summary>,
    pub alone_vs_timeout: Option<Summary>,
    pub vs_cgroup_floor: Option<Summary>,
    pub note: Option<String>,
}

pub struct SpawnResult {
    pub rows: Vec<SpawnRow>,
    pub runs_per_variant: usize,
    pub rounds: usize,
    pub batch: usize,
    pub alone: usize,
}

/// Indices of the rows the ratios refer to.
const BARE: usize = 0;
const TIMEOUT: usize = 2;
const CGROUP_FLOOR: usize = 3;

fn run_plain(cmd: &Cmd, join: Join, io: &Stdio) -> Result<(), String> {
    let pid = sys::spawn(cmd, join, io).map_err(|e| format!("spawn: {e}"))?;
    let st = sys::wait(pid).map_err(|e| format!("wait: {e}"))?;
    if sys::exited_ok(st) {
        Ok(())
    } else {
        Err(format!("`{}`: {}", cmd.label, sys::describe_status(st)))
    }
}

pub fn stdio(s: &Setup) -> Stdio {
    let null = s.null.as_raw_fd();
    Stdio {
        stdin: null,
        stdout: null,
        stderr: null,
    }
}

fn variants(s: &Setup) -> Vec<Variant> {
    let t = "/bin/true";
    let mut v: Vec<Variant> = Vec::new();
    let mut add = |name: &str, run: Box<dyn FnMut() -> Result<(), String>>| {
        v.push(Variant {
            name: name.into(),
            run,
            per_run: Vec::new(),
            alone: Vec::new(),
            unavailable: None,
        })
    };

    let io = stdio(s);
    let bare = Cmd::new(&[t]);
    add(
        "fork + exec + wait (floor)",
        Box::new(move || run_plain(&bare, Join::Nothing, &io)),
    );

    let io = stdio(s);
    let pg = Cmd::new(&[t]);
    add(
        "process group: fork + setpgid + exec + wait + killpg",
        Box::new(move || {
            let pid = sys::spawn(&pg, Join::Pgroup, &io).map_err(|e| format!("spawn: {e}"))?;
            let st = sys::wait(pid).map_err(|e| format!("wait: {e}"))?;
            // What a process-group wrapper does last: kill the group (nobody is left: ESRCH).
            let _ = sys::killpg(pid, libc::SIGKILL);
            sys::exited_ok(st)
                .then_some(())
                .ok_or_else(|| sys::describe_status(st))
        }),
    );

    let io = stdio(s);
    let timeout = Cmd::new(&[s.timeout_bin.as_str(), "60", t]);
    add(
        "`timeout 60 /bin/true`",
        Box::new(move || run_plain(&timeout, Join::Nothing, &io)),
    );

    for how in ["procs", "clone3"] {
        let name = match how {
            "procs" => "cgroup floor: mkdir + join (`cgroup.procs` write) + exec + wait + rmdir",
            _ => "cgroup floor: mkdir + `clone3(CLONE_INTO_CGROUP)` + exec + wait + rmdir",
        };
        let io = stdio(s);
        let cmd = Cmd::new(&[t]);
        let parent = s.cgroup.as_ref().map(|c| c.own_dir.clone());
        add(
            name,
            Box::new(move || {
                let parent = parent.as_deref().ok_or("no cgroup2 mount")?;
                cgroup_floor(parent, &cmd, &io, how)
            }),
        );
    }

    let mut builds = vec![(s.reaper.to_string_lossy().into_owned(), "")];
    if let Some(alt) = &s.alt_reaper {
        builds.push((alt.to_string_lossy().into_owned(), ALT));
    }
    if let Some(st) = &s.static_reaper {
        builds.push((st.to_string_lossy().into_owned(), STATIC));
    }
    for (reaper, suffix) in &builds {
        // The binary's own start and exit, nothing run: the share of every row below that no
        // containment choice changes.
        let io = stdio(s);
        let version = Cmd::new(&[reaper.as_str(), "--version"]);
        add(
            &format!("`reaper --version` (the binary's start alone){suffix}"),
            Box::new(move || run_plain(&version, Join::Nothing, &io)),
        );
        for (name, flags) in [
            (
                "`reaper run` cgroup backend",
                &["--containment", "cgroup"][..],
            ),
            (
                "`reaper run` cgroup backend, `REAPER_CLONE3=0` (joins by a `cgroup.procs` write)",
                &["--containment", "cgroup", CLONE3_OFF][..],
            ),
            (
                "`reaper run` cgroup backend, `--no-guardian`",
                &["--containment", "cgroup", "--no-guardian"][..],
            ),
            (
                // The cost of limits: controllers enabled once per reaper, three file writes
                // per run cgroup, their statistics read at the end. n/a where cgroup v2 lacks
                // the controllers (hybrid hosts: reaper refuses, exit 125).
                "`reaper run` cgroup backend, `--memory-max 1G --pids-max 10000 --cpus 2`",
                &[
                    "--containment",
                    "cgroup",
                    "--memory-max",
                    "1G",
                    "--pids-max",
                    "10000",
                    "--cpus",
                    "2",
                ][..],
            ),
            (
                "`reaper run` subreaper backend",
                &["--containment", "subreaper"][..],
            ),
            ("`reaper run` pgid backend", &["--containment", "pgid"][..]),
        ] {
            let clone3_off = flags.contains(&CLONE3_OFF);
            // The static build's rows are its start's cost: the plain backends and the guardian's
            // share; the mechanisms behind the other variants are the same code.
            if *suffix == STATIC && (clone3_off || flags.contains(&"--memory-max")) {
                continue;
            }
            let mut argv = vec![reaper.as_str(), "run", "--quiet"];
            argv.extend(flags.iter().filter(|f| **f != CLONE3_OFF));
            argv.extend_from_slice(&["--", t]);
            let io = stdio(s);
            let cmd = Cmd::new(&argv);
            add(
                &format!("{name}{suffix}"),
                Box::new(move || {
                    // The bench is single-threaded while it spawns: nobody reads the
                    // environment concurrently.
                    if clone3_off {
                        std::env::set_var("REAPER_CLONE3", "0");
                    }
                    let r = run_plain(&cmd, Join::Nothing, &io);
                    std::env::remove_var("REAPER_CLONE3");
                    // The guardian may outlive reaper by a moment and reparent to us.
                    sys::reap_strays();
                    r
                }),
            );
        }
    }
    v
}

/// Not a flag: marks the variant that runs with `REAPER_CLONE3=0` in its environment.
const CLONE3_OFF: &str = "REAPER_CLONE3=0";

/// A fresh cgroup per run, as `reaper run` makes one: the platform's share of its cost.
fn cgroup_floor(parent: &Path, cmd: &Cmd, io: &Stdio, how: &str) -> Result<(), String> {
    let cg = BenchCgroup::create(parent).map_err(|e| format!("mkdir under {parent:?}: {e}"))?;
    let join = match how {
        "clone3" => Join::Clone3(cg.dir.as_raw_fd()),
        _ => Join::CgroupProcs(cg.procs.as_raw_fd()),
    };
    let r = run_plain(cmd, join, io);
    cg.remove().map_err(|e| format!("rmdir: {e}"))?;
    r
}

pub fn inotify_watch(path: &Path) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain syscalls; the fd is owned at once.
    unsafe {
        let fd = libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK);
        if fd < 0 {
            return Err(format!(
                "inotify_init1: {}",
                std::io::Error::last_os_error()
            ));
        }
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        if libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), libc::IN_MODIFY) < 0 {
            return Err(format!(
                "inotify_add_watch: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(fd)
    }
}

/// Before each single run: long enough for the RCU state a previous run left to settle, as
/// between two commands a person or a CI script runs.
const ALONE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

pub fn bench(s: &Setup, rounds: usize, batch: usize, alone: usize) -> SpawnResult {
    let mut vs = variants(s);
    // One warm-up run each: page cache, and whether the variant works here at all.
    for v in vs.iter_mut() {
        if let Err(e) = (v.run)() {
            v.unavailable = Some(e);
        }
    }
    for round in 0..rounds {
        let n = vs.len();
        for k in 0..n {
            let v = &mut vs[(k + round) % n];
            if v.unavailable.is_some() {
                continue;
            }
            let t0 = Instant::now();
            let mut failed = None;
            for _ in 0..batch {
                if let Err(e) = (v.run)() {
                    failed = Some(e);
                    break;
                }
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / batch as f64;
            match failed {
                Some(e) => v.unavailable = Some(format!("failed in round {round}: {e}")),
                None => v.per_run.push(us),
            }
        }
        sys::reap_strays();
    }
    for round in 0..alone {
        let n = vs.len();
        for k in 0..n {
            let v = &mut vs[(k + round) % n];
            if v.unavailable.is_some() {
                continue;
            }
            std::thread::sleep(ALONE_PAUSE);
            let t0 = Instant::now();
            match (v.run)() {
                Ok(()) => v.alone.push(t0.elapsed().as_secs_f64() * 1e6),
                Err(e) => v.unavailable = Some(format!("failed alone: {e}")),
            }
        }
        sys::reap_strays();
    }
    let paired = |a: &[f64], b: &[f64]| -> Option<Summary> {
        if a.len() != b.len() {
            return None;
        }
        Summary::of(&a.iter().zip(b).map(|(x, y)| x / y).collect::<Vec<_>>())
    };
    let ratio_to = |v: &Variant, base: &Variant| paired(&v.per_run, &base.per_run);
    let rows = vs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let ok = v.unavailable.is_none();
            let is_cgroup = v.name.contains("cgroup");
            SpawnRow {
                name: v.name.clone(),
                us: ok.then(|| Summary::of(&v.per_run)).flatten(),
                vs_bare: ok.then(|| ratio_to(v, &vs[BARE])).flatten(),
                vs_timeout: ok.then(|| ratio_to(v, &vs[TIMEOUT])).flatten(),
                alone_us: ok.then(|| Summary::of(&v.alone)).flatten(),
                alone_vs_timeout: ok.then(|| paired(&v.alone, &vs[TIMEOUT].alone)).flatten(),
                vs_cgroup_floor: (ok && is_cgroup && i > CGROUP_FLOOR)
                    .then(|| ratio_to(v, &vs[CGROUP_FLOOR]))
                    .flatten(),
                note: v.unavailable.clone(),
            }
        })
        .collect();
    SpawnResult {
        rows,
        runs_per_variant: rounds * batch,
        rounds,
        batch,
        alone,
    }
}
