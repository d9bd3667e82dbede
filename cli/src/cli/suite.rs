//! `reaper check --suite -- WRAPPER ARGS… {} …`: the leak conformance suite. For each case (a
//! hostile tree of `reaper fixture`) and each end (the way the wrapper is told to stop), runs
//! WRAPPER with `{}` replaced by the case's command, drives the end, and scores what outlived the
//! wrapper: survivors, how long the tree took to die, zombies, the wrapper's exit status, and
//! wrong kills (a sentinel in the group the wrapper was started in must survive).
//!
//! Survivors are found without the wrapper's help: every process of a case's tree writes its
//! `PID STARTTIME ROLE PGID SID` line, and holds a shared lock on the case's oracle file while it lives
//! (see `crate::fixture`). The suite is a child subreaper (as every face of reaper), so an
//! orphan of the case comes back to it. Afterwards it kills only what is proven the tree's: its
//! own orphans, and the recorded processes that hold the oracle file open (the pid file, which
//! the wrapper can write, only names the candidates).

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use reaper_platform::linux::cgroupfs;
use reaper_platform::{process, signal, Signal};
use serde::Serialize;

use super::check::{describe, truncate, CheckArgs, Survivor};
use crate::coreutils as parse;

/// One hostile tree: the fixture's scenario with its leader staying, and with its leader
/// exiting once the tree is built (for the `exit` end).
struct Case {
    name: &'static str,
    what: &'static str,
    stays: &'static [&'static str],
    exits: Option<&'static [&'static str]>,
    /// How many processes the tree records at least once it is ready: fewer and it did not run.
    at_least: usize,
    /// The tree moves a process into a cgroup the suite creates for it (under `--cgroup-parent`),
    /// whose path ends its command.
    away: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "orphan",
        what: "a child in the leader's group and session: a kill of the leader alone orphans it",
        stays: &["tree", "2"],
        exits: Some(&["tree", "2", "--leader-exits"]),
        at_least: 2,
        away: false,
    },
    Case {
        name: "setsid",
        what: "a grandchild in a session of its own that ignores SIGTERM, SIGINT and SIGHUP",
        stays: &["setsid-grandchild"],
        exits: Some(&["setsid-grandchild", "--leader-exits"]),
        at_least: 3,
        away: false,
    },
    Case {
        name: "daemon",
        what: "a double-forked daemon: a session of its own, reparented, ignores SIGTERM, no stdio",
        stays: &["daemon"],
        exits: Some(&["daemon", "--leader-exits"]),
        at_least: 3,
        away: false,
    },
    Case {
        name: "cgroup",
        what: "a child that moves itself into another cgroup (the suite's, under --cgroup-parent) \
               and a session of its own, and ignores SIGTERM, SIGINT and SIGHUP",
        stays: &["leave-cgroup"],
        exits: Some(&["leave-cgroup", "--leader-exits"]),
        at_least: 2,
        away: true,
    },
    Case {
        name: "pipe",
        what: "a child that ignores SIGTERM and holds the wrapper's stdout and stderr open",
        stays: &["hold-stdout", "--leader-stays"],
        exits: Some(&["hold-stdout"]),
        at_least: 2,
        away: false,
    },
    Case {
        name: "storm",
        what: "a fork storm still forking when the end comes (64 processes, 8 at the start)",
        stays: &["fork-storm", "64", "--ready-at", "8"],
        exits: Some(&["fork-storm", "64", "--ready-at", "8", "--leader-exits"]),
        at_least: 8,
        away: false,
    },
    Case {
        name: "stopped",
        what: "a child stopped by SIGSTOP: a SIGTERM waits until it is continued",
        stays: &["stopped-child"],
        exits: None,
        at_least: 2,
        away: false,
    },
];

/// How the wrapper is told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum End {
    /// Its own timeout (`{timeout}` in its arguments) expires.
    Timeout,
    /// SIGTERM to the wrapper.
    Term,
    /// SIGINT to the wrapper.
    Int,
    /// SIGKILL to the wrapper.
    Kill,
    /// The wrapper's parent is SIGKILLed.
    Parent,
    /// The wrapper's stdin is closed (an MCP client's end of a stdio server).
    Stdin,
    /// The tree's leader exits by itself; its children linger.
    Exit,
}

const ENDS: &[End] = &[
    End::Timeout,
    End::Term,
    End::Int,
    End::Kill,
    End::Parent,
    End::Stdin,
    End::Exit,
];

impl End {
    fn name(self) -> &'static str {
        match self {
            End::Timeout => "timeout",
            End::Term => "term",
            End::Int => "int",
            End::Kill => "kill",
            End::Parent => "parent",
            End::Stdin => "stdin",
            End::Exit => "exit",
        }
    }

    /// Whether the wrapper's exit status must say that it did not succeed (`None`: any status
    /// says what happened).
    fn wants_failure(self) -> Option<bool> {
        match self {
            End::Timeout | End::Term | End::Int | End::Parent => Some(true),
            End::Exit => Some(false),
            End::Kill | End::Stdin => None,
        }
    }
}

/// How long the wrapper may take to return once its end came, and the case's tree to build.
const GRACE: Duration = Duration::from_secs(5);
/// How long a tree may take to be ready after the wrapper started.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long the suite's own cleanup may take to kill what a case left.
const CLEANUP_WITHIN: Duration = Duration::from_secs(10);
/// What `{timeout}` is for the ends that are not the wrapper's timeout: beyond the grace time.
const FAR_OFF: Duration = Duration::from_secs(300);
/// The polling period of the suite's waits.
const TICK: Duration = Duration::from_millis(5);

/// Set by SIGINT, SIGTERM or SIGHUP to the suite: the case at hand is cleaned up, then the suite
/// stops.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// One run of one case with one end.
#[derive(Debug, Serialize)]
struct Trial {
    /// `clean`, `leaked`, `wrong-kill`, `did-not-run`, `hung` (the wrapper did not return after
    /// its own timeout, or after its leader's exit) or `ignored` (it did not return after
    /// SIGTERM, SIGINT or its stdin's end).
    result: &'static str,
    /// Whether the wrapper returned within the grace time after the end came.
    returned: bool,
    /// When it returned, after the end came.
    returned_ms: Option<u64>,
    /// When the last process of the tree died, after the end came (`None`: it survived).
    died_ms: Option<u64>,
    /// The wrapper's exit: `exit N` or `signal NAME` (`None`: it did not return).
    status: Option<String>,
    /// Whether that status says what happened (a failure after a timeout or a signal, success
    /// when the leader exited 0); `None` where any status does.
    status_ok: Option<bool>,
    survivors: Vec<Leaked>,
    /// The wrapper itself still ran (`parent`: its parent died and it did not notice).
    wrapper_survived: bool,
    /// Processes of the tree left as zombies by a live parent that does not reap them.
    zombies: usize,
    /// How the sentinel died (`signal KILL`), if the wrapper killed it.
    wrong_kill: Option<String>,
    /// Why the case did not run, with the wrapper's last words.
    note: Option<String>,
}

/// A process of the case's tree that outlived the wrapper.
#[derive(Debug, Serialize)]
struct Leaked {
    /// Its role in the tree (`leader`, `child`, `grandchild`, `daemon`, `holder`, `storm`…).
    role: String,
    #[serde(flatten)]
    process: Survivor,
}

#[derive(Debug, Serialize)]
struct Cell {
    case: &'static str,
    end: End,
    /// `clean`, `leaked`, `wrong-kill`, `did-not-run`, `hung`, `ignored`, `not-applicable`,
    /// `expected-leak` (leaked, as `--expect-leak` said) or `fixed` (expected to leak, did not).
    result: &'static str,
    runs: usize,
    leaked: usize,
    wrong_kills: usize,
    did_not_run: usize,
    hung: usize,
    ignored: usize,
    expected_leak: bool,
    trials: Vec<Trial>,
}

impl Cell {
    fn fails(&self) -> bool {
        matches!(
            self.result,
            "leaked" | "wrong-kill" | "did-not-run" | "hung" | "fixed"
        )
    }
}

#[derive(Debug, Serialize)]
struct Report {
    wrapper: Vec<String>,
    /// `clean`, `failed` or `error`.
    result: &'static str,
    /// What `{timeout}` was replaced by, in seconds.
    timeout_s: f64,
    settle_ms: u64,
    repeat: u32,
    cells: Vec<Cell>,
    failed_cells: usize,
    error: Option<String>,
}

/// Why the suite could not run.
#[derive(Debug)]
enum SuiteError {
    /// The command line is not a suite's.
    Usage(String),
    /// A case could not be set up or cleaned up.
    Case(String),
    /// SIGINT, SIGTERM or SIGHUP to the suite.
    Stopped,
}

impl std::fmt::Display for SuiteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SuiteError::Usage(m) | SuiteError::Case(m) => f.write_str(m),
            SuiteError::Stopped => {
                f.write_str("stopped by a signal; the case at hand was cleaned up")
            }
        }
    }
}

/// What every trial shares.
struct Suite {
    exe: PathBuf,
    template: Vec<OsString>,
    timeout: Duration,
    settle: Duration,
    me: i32,
    /// `--cgroup-parent`: where a case's `away` cgroup is created (`None`: those cases do not run).
    away_parent: Option<PathBuf>,
}

pub fn main(args: CheckArgs) -> u8 {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let handler: extern "C" fn(libc::c_int) = on_stop;
        // SAFETY: `on_stop` only stores to an atomic, which is async-signal-safe; a handler (unlike
        // SIG_IGN) is reset to the default in the children the suite execs.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
    let timeout = args.timeout.unwrap_or(Duration::from_secs(2));
    let mut report = Report {
        wrapper: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        result: "clean",
        timeout_s: timeout.as_secs_f64(),
        settle_ms: args.settle.as_millis() as u64,
        repeat: args.repeat,
        cells: Vec::new(),
        failed_cells: 0,
        error: None,
    };
    if let Err(e) = run(&args, timeout, &mut report) {
        report.error = Some(e.to_string());
        report.result = "error";
        if matches!(e, SuiteError::Usage(_)) {
            say!("reaper: {e}");
            return 2;
        }
    }
    report.failed_cells = report.cells.iter().filter(|c| c.fails()).count();
    if report.error.is_none() && report.failed_cells > 0 {
        report.result = "failed";
    }
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => out!("{s}"),
            Err(e) => say!("reaper: {e}"),
        }
    } else {
        print_table(&report, timeout, args.settle);
        let away_cases = CASES.iter().filter(|k| k.away).map(|k| k.name);
        for name in away_cases.filter(|n| report.cells.iter().any(|c| c.case == *n)) {
            if args.contain.cgroup_parent.is_none() {
                out!(
                    "\n{name}: not run: it needs --cgroup-parent DIR, a cgroup2 directory of \
                     yours, where the suite creates the cgroup the tree moves into"
                );
            }
        }
    }
    if let Some(e) = &report.error {
        say!("reaper: the suite could not run to its end: {e}");
        return 2;
    }
    u8::from(report.failed_cells > 0)
}

/// `--only` and `--expect-leak` name cells: `CASE` (every end) or `CASE:END`.
fn cells_named(
    flag: &str,
    names: &[String],
) -> Result<Vec<(&'static str, Option<End>)>, SuiteError> {
    let mut out = Vec::new();
    for name in names
        .iter()
        .flat_map(|n| n.split(','))
        .filter(|n| !n.is_empty())
    {
        let (case, end) = match name.split_once(':') {
            Some((c, e)) => (c, Some(e)),
            None => (name, None),
        };
        let Some(case) = CASES.iter().find(|c| c.name == case) else {
            return Err(SuiteError::Usage(format!(
                "{flag}: no case {case:?} (the cases: {})",
                CASES.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
            )));
        };
        let end = match end {
            None => None,
            Some(e) => Some(*ENDS.iter().find(|x| x.name() == e).ok_or_else(|| {
                SuiteError::Usage(format!(
                    "{flag}: no end {e:?} (the ends: {})",
                    ENDS.iter().map(|x| x.name()).collect::<Vec<_>>().join(", ")
                ))
            })?),
        };
        out.push((case.name, end));
    }
    Ok(out)
}

fn matches(cells: &[(&'static str, Option<End>)], case: &str, end: End) -> bool {
    cells
        .iter()
        .any(|(c, e)| *c == case && e.is_none_or(|e| e == end))
}

fn run(args: &CheckArgs, timeout: Duration, report: &mut Report) -> Result<(), SuiteError> {
    let has = |pat: &str| {
        args.command
            .iter()
            .any(|a| a.to_string_lossy().contains(pat))
    };
    if !args
        .command
        .iter()
        .any(|a| a.to_string_lossy().contains("{}"))
    {
        return Err(SuiteError::Usage(
            "--suite: the wrapper's arguments must hold `{}`, where each case's command goes \
             (reaper check --suite -- timeout {timeout} {})"
                .into(),
        ));
    }
    let only = cells_named("--only", &args.only)?;
    let expected: Vec<String> = args
        .expect_leak
        .iter()
        .filter(|e| !e.is_empty())
        .cloned()
        .collect();
    if args.expect_leak.iter().any(String::is_empty) {
        return Err(SuiteError::Usage(
            "--suite: --expect-leak takes the cell whose leak is expected: CASE or CASE:END".into(),
        ));
    }
    let expected = cells_named("--expect-leak", &expected)?;
    let exe = std::env::current_exe().map_err(|e| {
        SuiteError::Case(format!(
            "cannot tell where the reaper binary is, which the cases run as `reaper fixture`: {e}"
        ))
    })?;
    let away_parent = args.contain.cgroup_parent.clone();
    if let Some(dir) = &away_parent {
        // Never a cgroup v1 hierarchy: it has a cgroup.procs too.
        if !cgroupfs::is_cgroup2(dir).unwrap_or(false) {
            return Err(SuiteError::Usage(format!(
                "--cgroup-parent {}: not a cgroup2 directory (the suite creates the cgroup \
                 case's cgroup there: a cgroup of yours)",
                dir.display()
            )));
        }
    }
    let suite = Suite {
        exe,
        template: args.command.clone(),
        timeout,
        settle: args.settle,
        me: rustix::process::getpid().as_raw_nonzero().get(),
        away_parent,
    };
    for case in CASES {
        for &end in ENDS {
            if !only.is_empty() && !matches(&only, case.name, end) {
                continue;
            }
            let expected_leak = matches(&expected, case.name, end);
            let applicable = match end {
                End::Timeout => has("{timeout}"),
                End::Exit => case.exits.is_some(),
                _ => true,
            } && (!case.away || suite.away_parent.is_some());
            let mut cell = Cell {
                case: case.name,
                end,
                result: "not-applicable",
                runs: 0,
                leaked: 0,
                wrong_kills: 0,
                did_not_run: 0,
                hung: 0,
                ignored: 0,
                expected_leak,
                trials: Vec::new(),
            };
            if applicable {
                for _ in 0..args.repeat {
                    let t = trial(&suite, case, end)?;
                    cell.runs += 1;
                    cell.leaked += usize::from(t.result == "leaked");
                    cell.wrong_kills += usize::from(t.wrong_kill.is_some());
                    cell.did_not_run += usize::from(t.result == "did-not-run");
                    cell.hung += usize::from(t.result == "hung");
                    cell.ignored += usize::from(t.result == "ignored");
                    cell.trials.push(t);
                }
                cell.result = if cell.wrong_kills > 0 {
                    "wrong-kill"
                } else if cell.did_not_run > 0 {
                    "did-not-run"
                } else if cell.leaked > 0 && expected_leak {
                    "expected-leak"
                } else if cell.leaked > 0 {
                    "leaked"
                } else if cell.hung > 0 {
                    "hung"
                } else if expected_leak {
                    "fixed"
                } else if cell.ignored > 0 {
                    "ignored"
                } else {
                    "clean"
                };
            }
            report.cells.push(cell);
        }
    }
    Ok(())
}

/// A scratch directory of the suite's own (0700) for one trial's files.
fn scratch() -> Result<PathBuf, SuiteError> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "reaper-suite-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            SuiteError::Case(format!(
                "cannot create {} (set TMPDIR to a writable directory): {e}",
                dir.display()
            ))
        })?;
    Ok(dir)
}

/// The processes a trial started and must end.
struct Started {
    sentinel: Option<i32>,
    /// The wrapper's parent (`parent` end only).
    parent: Option<i32>,
    /// The wrapper: pid and starttime, once known, and its wait status once reaped.
    wrapper: Option<(i32, u64)>,
    wrapper_status: Option<Option<i32>>,
    stdin: Option<OwnedFd>,
    /// The cgroup the suite created for the tree to move into, removed once the tree is dead.
    away: Option<PathBuf>,
}

/// The file every process of a case's tree holds open (and a shared lock on): created and
/// opened by the suite before the wrapper starts, so the wrapper cannot swap in another. Having
/// it open is what proves a process is the tree's; the pid file, in a directory the wrapper can
/// write, is only the tree's claim.
struct Oracle {
    file: File,
    dev: u64,
    ino: u64,
}

impl Oracle {
    fn create(path: &Path) -> Result<Oracle, SuiteError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| case_error("cannot create the case's oracle file", e))?;
        let st =
            rustix::fs::fstat(&file).map_err(|e| case_error("cannot stat the oracle file", e))?;
        Ok(Oracle {
            file,
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// Whether every process of the tree is dead: none holds the oracle's shared lock any more.
    fn tree_dead(&self) -> bool {
        use rustix::fs::{flock, FlockOperation};
        let free = flock(&self.file, FlockOperation::NonBlockingLockExclusive).is_ok();
        if free {
            let _ = flock(&self.file, FlockOperation::Unlock);
        }
        free
    }

    /// Whether the process PID has this very file open (one of its fds names its device and
    /// inode). False where its fds cannot be read (another user's process).
    fn held_by(&self, pid: i32) -> bool {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.filter_map(|e| e.ok())
            .filter_map(|e| rustix::fs::stat(e.path()).ok())
            .any(|st| st.st_dev == self.dev && st.st_ino == self.ino)
    }

    /// SIGKILL to the process (pid, starttime) through a pidfd, only if that process holds the
    /// oracle: opened first, so a pid reused after the check names no other process.
    fn kill_holder(&self, pid: i32, start: u64) {
        if let Some(h) = process::Handle::open_checked(pid, start) {
            if self.held_by(pid) {
                let _ = signal::to_handle(&h, Signal::KILL);
            }
        }
    }
}

fn trial(suite: &Suite, case: &Case, end: End) -> Result<Trial, SuiteError> {
    let dir = scratch()?;
    let mut started = Started {
        sentinel: None,
        parent: None,
        wrapper: None,
        wrapper_status: None,
        stdin: None,
        away: None,
    };
    let (result, cleaned) = match Oracle::create(&dir.join("oracle")) {
        Ok(oracle) => {
            let t = trial_in(suite, case, end, &dir, &oracle, &mut started);
            (t, clean_up(&dir, &oracle, &mut started, suite.me))
        }
        Err(e) => (Err(e), Ok(())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let t = result?;
    cleaned?;
    if STOP.load(Ordering::Relaxed) {
        return Err(SuiteError::Stopped);
    }
    Ok(t)
}

fn case_error(what: &str, e: impl std::fmt::Display) -> SuiteError {
    SuiteError::Case(format!("{what}: {e}"))
}

fn trial_in(
    suite: &Suite,
    case: &Case,
    end: End,
    dir: &Path,
    held: &Oracle,
    started: &mut Started,
) -> Result<Trial, SuiteError> {
    let oracle = dir.join("oracle");
    let pids = dir.join("pids");
    let ready = dir.join("ready");
    let parent_pid = dir.join("wrapper.pid");
    let log = dir.join("wrapper.log");

    // The sentinel leads the group the wrapper is started in, as a caller's own process would.
    let sentinel = Command::new(&suite.exe)
        .args(["fixture", "sleep", "600"])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| case_error("cannot start the sentinel (reaper fixture)", e))?;
    let sentinel = sentinel.id() as i32;
    started.sentinel = Some(sentinel);

    let scenario = match end {
        End::Exit => case.exits.unwrap_or(case.stays),
        _ => case.stays,
    };
    let mut hostile: Vec<OsString> = vec![
        suite.exe.clone().into(),
        "fixture".into(),
        "--oracle".into(),
        oracle.clone().into(),
        "--pids".into(),
        pids.clone().into(),
        "--ready".into(),
        ready.clone().into(),
    ];
    hostile.extend(scenario.iter().map(OsString::from));
    if let (true, Some(parent)) = (case.away, &suite.away_parent) {
        let away = parent.join(
            dir.file_name()
                .map_or_else(|| "reaper-suite-away".into(), |n| n.to_os_string()),
        );
        cgroupfs::mkdir(&away).map_err(|e| {
            SuiteError::Case(format!(
                "{e} (the cgroup case's cgroup, under --cgroup-parent: a cgroup of yours)"
            ))
        })?;
        started.away = Some(away.clone());
        hostile.push(away.into());
    }
    // Only the end under test may end the wrapper: its own timeout is far off for the others.
    let timeout = if end == End::Timeout {
        suite.timeout
    } else {
        FAR_OFF
    };
    let mut argv = substitute(&suite.template, &hostile, &seconds(timeout));
    if end == End::Parent {
        let mut parent: Vec<OsString> = vec![
            suite.exe.clone().into(),
            "fixture".into(),
            "parent".into(),
            parent_pid.clone().into(),
        ];
        parent.append(&mut argv);
        argv = parent;
    }
    let (stdin_r, stdin_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| case_error("cannot create the wrapper's stdin", e))?;
    started.stdin = Some(stdin_w);
    let out = File::create(&log).map_err(|e| case_error("cannot create the wrapper's log", e))?;
    let err = out
        .try_clone()
        .map_err(|e| case_error("cannot create the wrapper's log", e))?;
    let spawned = Command::new(&argv[0])
        .args(&argv[1..])
        .process_group(sentinel)
        .stdin(Stdio::from(stdin_r))
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| {
            SuiteError::Usage(format!(
                "cannot run the wrapper {}: {e}",
                argv[0].to_string_lossy()
            ))
        })?;
    let spawned_at = Instant::now();
    let direct = spawned.id() as i32;
    if end == End::Parent {
        started.parent = Some(direct);
    } else {
        started.wrapper = process::stat(direct).ok().map(|s| (direct, s.starttime));
        if started.wrapper.is_none() {
            // Exited already, and not reaped yet: still its pid.
            started.wrapper = Some((direct, 0));
        }
    }

    // Until the tree is ready, or the wrapper gave up on it.
    loop {
        if STOP.load(Ordering::Relaxed) {
            return Err(SuiteError::Stopped);
        }
        if started.wrapper.is_none() {
            // A claim in a file the wrapper can write: believed for a child of the parent the
            // suite started.
            started.wrapper = read_pid_line(&parent_pid).filter(|&(pid, start)| {
                process::stat(pid)
                    .is_ok_and(|s| s.starttime == start && Some(s.ppid) == started.parent)
            });
        }
        if ready.exists() && started.wrapper.is_some() {
            break;
        }
        if wrapper_returned(started) || spawned_at.elapsed() > READY_WITHIN {
            break;
        }
        std::thread::sleep(TICK);
    }
    let built = recorded(&pids);
    let ran = ready.exists() && built.len() >= case.at_least;
    if !ran {
        let why = match started.wrapper_status {
            Some(status) => format!("the wrapper ended ({}) first", show_status(status)),
            None => format!("it was not ready within {}s", READY_WITHIN.as_secs()),
        };
        return Ok(did_not_run(format!(
            "the case's tree was not built ({} of {} processes recorded): {why}; the wrapper said: {}",
            built.len(),
            case.at_least,
            last_words(&log)
        )));
    }
    let (leader_pgid, leader_sid) = built
        .iter()
        .find(|r| r.role == "leader")
        .map_or((sentinel, 0), |r| (r.pgid, r.sid));

    // The end.
    let mut came = Instant::now();
    match end {
        End::Timeout => came = came.max(spawned_at + suite.timeout),
        End::Term | End::Int | End::Kill => {
            let sig = match end {
                End::Term => Signal::TERM,
                End::Int => Signal::INT,
                _ => Signal::KILL,
            };
            if let Some((pid, _)) = started.wrapper.filter(|_| started.wrapper_status.is_none()) {
                // The wrapper is the suite's child, not reaped: its pid is still its own.
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid).ok_or_else(|| case_error("pid", pid))?,
                    sig,
                );
            }
        }
        End::Parent => {
            if let Some(p) = started.parent.take() {
                kill_child(p);
            }
        }
        End::Stdin => drop(started.stdin.take()),
        End::Exit => {}
    }

    // Until the wrapper returns, then the settle.
    let mut died_at = None;
    let mut returned_at = None;
    let give_up = came + GRACE;
    loop {
        if STOP.load(Ordering::Relaxed) {
            return Err(SuiteError::Stopped);
        }
        if died_at.is_none() && held.tree_dead() {
            died_at = Some(Instant::now());
        }
        if returned_at.is_none() && wrapper_returned(started) {
            returned_at = Some(Instant::now());
        }
        let now = Instant::now();
        match returned_at {
            Some(at) if died_at.is_some() || now >= at + suite.settle => break,
            None if now >= give_up => break,
            _ => {}
        }
        std::thread::sleep(TICK);
    }
    let ms = |at: Instant| at.saturating_duration_since(came).as_millis() as u64;

    // The score, before anything is cleaned up.
    let mut survivors = Vec::new();
    let mut zombies = 0;
    // Read again: a fork storm may have grown.
    for r in recorded(&pids) {
        // A line alone is the tree's claim: a survivor is a process that holds the oracle (one
        // the suite cannot look into counts as unseen, below).
        let proven = held.held_by(r.pid);
        if let Some(mut process) =
            describe(r.pid, r.start, leader_pgid, leader_sid, suite.me).filter(|_| proven)
        {
            // The mover records itself once in the suite's cgroup.
            if r.role == "mover" {
                process.escaped_by.push("left-cgroup");
            }
            survivors.push(Leaked {
                role: r.role,
                process,
            });
        } else if process::stat(r.pid)
            .is_ok_and(|s| s.starttime == r.start && s.state == 'Z' && s.ppid != suite.me)
        {
            zombies += 1;
        }
    }
    let wrong_kill = match reap(sentinel) {
        Reaped::Exited(status) => {
            started.sentinel = None;
            Some(show_status(Some(status)))
        }
        _ => None,
    };
    let returned = returned_at.is_some();
    // A wrapper still running still holds its tree: what is alive is not a leak of this end
    // (but of the wrapper's parent's death, which the wrapper had to notice).
    if !returned && end != End::Parent {
        survivors.clear();
    }
    // Alive, yet none of its recorded pids names a live process here: the tree runs in a PID
    // namespace of its own (a sandbox), whose pids mean other processes here.
    let unseen = (returned || end == End::Parent) && survivors.is_empty() && !held.tree_dead();
    let status = started.wrapper_status.map(show_status);
    let status_ok = match (end.wants_failure(), &status) {
        (Some(fail), Some(s)) => Some((s != "exit 0") == fail),
        _ => None,
    };
    let wrapper_survived = !returned && end == End::Parent;
    let result = if wrong_kill.is_some() {
        "wrong-kill"
    } else if !survivors.is_empty() || wrapper_survived || unseen {
        "leaked"
    } else if returned {
        "clean"
    } else if matches!(end, End::Timeout | End::Exit) {
        "hung"
    } else {
        "ignored"
    };
    Ok(Trial {
        result,
        returned,
        returned_ms: returned_at.map(ms),
        died_ms: died_at.map(ms),
        status,
        status_ok,
        survivors,
        wrapper_survived,
        zombies,
        wrong_kill,
        note: unseen.then(|| {
            "the tree outlived the wrapper in processes the suite cannot name (their recorded \
             pids are another PID namespace's)"
                .to_owned()
        }),
    })
}

fn did_not_run(note: String) -> Trial {
    Trial {
        result: "did-not-run",
        returned: false,
        returned_ms: None,
        died_ms: None,
        status: None,
        status_ok: None,
        survivors: Vec::new(),
        wrapper_survived: false,
        zombies: 0,
        wrong_kill: None,
        note: Some(note),
    }
}

/// The wrapper's arguments with `{timeout}` and `{}` replaced: an argument that is exactly `{}`
/// becomes the case's whole command, one argument each; `{}` inside an argument becomes the
/// command quoted for a shell (`sh -c 'exec {}'`).
fn substitute(template: &[OsString], hostile: &[OsString], timeout: &str) -> Vec<OsString> {
    let mut out = Vec::new();
    for arg in template {
        if arg == "{}" {
            out.extend(hostile.iter().cloned());
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg.clone());
            continue;
        };
        let quoted = hostile
            .iter()
            .map(|a| shell_quote(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        out.push(
            text.replace("{timeout}", timeout)
                .replace("{}", &quoted)
                .into(),
        );
    }
    out
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@%{}".contains(c))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `2`, `1.5`: seconds as timeout(1) and every wrapper reads them.
fn seconds(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A process of the tree, as it recorded itself.
struct Recorded {
    pid: i32,
    start: u64,
    role: String,
    pgid: i32,
    sid: i32,
}

/// The `PID STARTTIME ROLE PGID SID` lines the tree wrote.
fn recorded(path: &Path) -> Vec<Recorded> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(Recorded {
                pid: f.next()?.parse().ok()?,
                start: f.next()?.parse().ok()?,
                role: f.next()?.to_owned(),
                pgid: f.next()?.parse().ok()?,
                sid: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// `PID STARTTIME` written by `reaper fixture parent`.
fn read_pid_line(path: &Path) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut f = text.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

enum Reaped {
    Running,
    /// The raw wait status.
    Exited(i32),
    /// Not a child of the suite (or reaped already).
    NotMine,
}

/// `waitpid(pid, WNOHANG)`: only for the suite's own children (direct, or orphans reparented
/// to it).
fn reap(pid: i32) -> Reaped {
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes the status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Reaped::Exited(status);
        }
        if r == 0 {
            return Reaped::Running;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Reaped::NotMine;
        }
    }
}

/// Whether the wrapper has returned; records its status once reaped. A wrapper that is not the
/// suite's child (its parent died and the suite is no subreaper) is looked at in /proc.
fn wrapper_returned(started: &mut Started) -> bool {
    if started.wrapper_status.is_some() {
        return true;
    }
    let Some((pid, start)) = started.wrapper else {
        // `parent`: the wrapper is not known yet; its parent is.
        return started.parent.is_some_and(|p| {
            matches!(reap(p), Reaped::Exited(_)) && {
                started.parent = None;
                true
            }
        });
    };
    match reap(pid) {
        Reaped::Running => false,
        Reaped::Exited(status) => {
            started.wrapper_status = Some(Some(status));
            true
        }
        Reaped::NotMine => {
            let gone = process::stat(pid).map_or(true, |s| {
                (start != 0 && s.starttime != start) || s.is_dead()
            });
            if gone {
                started.wrapper_status = Some(None);
            }
            gone
        }
    }
}

/// SIGKILL to a child of the suite, and reaps it.
fn kill_child(pid: i32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, Signal::KILL);
    }
    let mut status = 0;
    // SAFETY: waitpid(2) writes the status into a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

/// SIGKILL to a process proven to be (pid, starttime), through a pidfd.
fn kill_checked(pid: i32, start: u64) {
    if let Some(h) = process::Handle::open_checked(pid, start) {
        let _ = signal::to_handle(&h, Signal::KILL);
    }
}

/// Ends everything the trial started: the wrapper and its parent, the tree (only the processes
/// it recorded), the sentinel; reaps the suite's children.
fn clean_up(dir: &Path, oracle: &Oracle, started: &mut Started, me: i32) -> Result<(), SuiteError> {
    drop(started.stdin.take());
    if let Some(p) = started.parent.take() {
        kill_child(p);
    }
    if let Some((pid, start)) = started.wrapper.filter(|_| started.wrapper_status.is_none()) {
        match reap(pid) {
            Reaped::Running => kill_child(pid),
            Reaped::Exited(_) => {}
            Reaped::NotMine => kill_checked(pid, start),
        }
        started.wrapper_status = Some(None);
    }
    let pids = dir.join("pids");
    let deadline = Instant::now() + CLEANUP_WITHIN;
    while !oracle.tree_dead() {
        // The pid file is a claim: a line kills only a process that holds the oracle.
        for r in recorded(&pids) {
            oracle.kill_holder(r.pid, r.start);
        }
        // A tree in a PID namespace of its own is not found by its pids; the processes holding
        // it came back to the suite as orphans of the wrapper (the suite starts nothing else).
        for (pid, start) in orphans(me, started.sentinel) {
            kill_checked(pid, start);
        }
        if Instant::now() >= deadline {
            let left: Vec<String> = recorded(&pids)
                .into_iter()
                .filter(|r| {
                    process::stat(r.pid).is_ok_and(|s| s.starttime == r.start && !s.is_dead())
                })
                .map(|r| format!("{} ({})", r.pid, r.role))
                .collect();
            return Err(SuiteError::Case(format!(
                "a case's tree outlived the suite's SIGKILL for {}s: {}",
                CLEANUP_WITHIN.as_secs(),
                left.join(", ")
            )));
        }
        std::thread::sleep(TICK);
    }
    if let Some(s) = started.sentinel.take() {
        kill_child(s);
    }
    if let Some(away) = started.away.take() {
        remove_away(&away, deadline)?;
    }
    // The tree's orphans came back to the suite (a subreaper): their zombies.
    // SAFETY: waitpid(2) with WNOHANG writes the status into a local; every child the suite still
    // cares about was reaped above.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
    Ok(())
}

/// Removes the cgroup the suite created for a tree to move into, once its processes (the
/// tree's, killed) have left it: a process only just dead may still be counted in it.
fn remove_away(away: &Path, deadline: Instant) -> Result<(), SuiteError> {
    loop {
        match cgroupfs::rmdir(away) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) if e.is_busy() && Instant::now() < deadline => std::thread::sleep(TICK),
            Err(e) => {
                return Err(SuiteError::Case(format!(
                    "{e}: the cgroup the suite created for the cgroup case is left (processes \
                     the suite did not start moved into it?)"
                )))
            }
        }
    }
}

/// The suite's live children but the sentinel: (pid, starttime).
fn orphans(me: i32, sentinel: Option<i32>) -> Vec<(i32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| Some(*pid) != sentinel)
        .filter_map(|pid| {
            let s = process::stat(pid).ok()?;
            (s.ppid == me && !s.is_dead()).then_some((pid, s.starttime))
        })
        .collect()
}

fn show_status(status: Option<i32>) -> String {
    match status {
        None => "unknown".into(),
        Some(s) if libc::WIFEXITED(s) => format!("exit {}", libc::WEXITSTATUS(s)),
        Some(s) if libc::WIFSIGNALED(s) => format!(
            "signal {}",
            signal::from_raw(libc::WTERMSIG(s))
                .map(signal::name)
                .unwrap_or_else(|| libc::WTERMSIG(s).to_string())
        ),
        Some(s) => format!("status {s}"),
    }
}

/// The wrapper's last line of output, for a case that did not run.
fn last_words(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(log) {
        let _ = f.read_to_string(&mut text);
    }
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => truncate(l.trim(), 160),
        None => "nothing".into(),
    }
}

/// The words of one cell of the table.
fn cell_words(c: &Cell) -> String {
    let rate = |n: usize| {
        if c.runs > 1 {
            format!(" {n}/{}", c.runs)
        } else {
            String::new()
        }
    };
    let escapes = || {
        let mut words: Vec<&str> = Vec::new();
        for t in &c.trials {
            if t.wrapper_survived && !words.contains(&"wrapper-lives") {
                words.push("wrapper-lives");
            }
            let unseen = t.result == "leaked" && t.survivors.is_empty() && !t.wrapper_survived;
            if unseen && !words.contains(&"unseen") {
                words.push("unseen");
            }
            for s in &t.survivors {
                for w in &s.process.escaped_by {
                    if !words.contains(w) {
                        words.push(w);
                    }
                }
            }
        }
        words.join(",")
    };
    let unsaid = c
        .trials
        .iter()
        .find(|t| t.status_ok == Some(false))
        .and_then(|t| t.status.as_deref());
    match c.result {
        "clean" => match unsaid {
            Some(status) => format!("✓ ({status})"),
            None => "✓".into(),
        },
        "not-applicable" => "–".into(),
        "leaked" => format!("✗{} {}", rate(c.leaked), escapes()),
        "expected-leak" => format!("expected{} {}", rate(c.leaked), escapes()),
        "fixed" => "✓ fixed (a leak was expected)".into(),
        "wrong-kill" => format!("✗{} wrong kill", rate(c.wrong_kills)),
        "did-not-run" => format!("✗{} did not run", rate(c.did_not_run)),
        "hung" => format!("✗{} hung", rate(c.hung)),
        "ignored" => format!("ignored{}", rate(c.ignored)),
        other => other.into(),
    }
}

fn print_table(r: &Report, timeout: Duration, settle: Duration) {
    let width = |s: &str| s.chars().count();
    let ends: Vec<End> = ENDS
        .iter()
        .copied()
        .filter(|e| r.cells.iter().any(|c| c.end == *e))
        .collect();
    let mut cases: Vec<&str> = Vec::new();
    for c in &r.cells {
        if !cases.contains(&c.case) {
            cases.push(c.case);
        }
    }
    let mut rows: Vec<Vec<String>> = vec![std::iter::once("case".to_owned())
        .chain(ends.iter().map(|e| e.name().to_owned()))
        .collect()];
    for case in &cases {
        let mut row = vec![(*case).to_owned()];
        for end in &ends {
            row.push(
                r.cells
                    .iter()
                    .find(|c| c.case == *case && c.end == *end)
                    .map_or_else(|| "".into(), cell_words),
            );
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..=ends.len())
        .map(|i| rows.iter().map(|row| width(&row[i])).max().unwrap_or(0))
        .collect();
    out!(
        "reaper check --suite -- {}   ({{timeout}} = {}, settle {})",
        r.wrapper
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        seconds(timeout),
        parse::show(settle)
    );
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell}{}", " ".repeat(w - width(cell))))
            .collect();
        out!("  {}", line.join("  ").trim_end());
    }
    for c in &r.cells {
        let Some(t) = c
            .trials
            .iter()
            .find(|t| t.result != "clean" && t.result != "ignored")
        else {
            continue;
        };
        if !c.fails() && c.result != "expected-leak" {
            continue;
        }
        out!("");
        let head = format!("{} × {}", c.case, c.end.name());
        match t.result {
            "did-not-run" => out!("{head}: did not run: {}", t.note.as_deref().unwrap_or("")),
            "hung" => out!(
                "{head}: hung: the wrapper was still running {}s after {}",
                GRACE.as_secs(),
                if c.end == End::Timeout {
                    "its timeout"
                } else {
                    "its leader exited"
                }
            ),
            "wrong-kill" => out!(
                "{head}: wrong kill: the sentinel beside the wrapper (in the process group it was \
                 started in) died: {}",
                t.wrong_kill.as_deref().unwrap_or("")
            ),
            _ => {}
        }
        if t.wrapper_survived {
            out!(
                "{head}: the wrapper was still running {}s after its parent died",
                GRACE.as_secs()
            );
        }
        if t.result == "leaked" && t.survivors.is_empty() && !t.wrapper_survived {
            out!("{head}: leaked: {}", t.note.as_deref().unwrap_or(""));
        }
        if !t.survivors.is_empty() {
            out!(
                "{head}: leaked: {} process(es) survived {} after the wrapper {}",
                t.survivors.len(),
                parse::show(settle),
                if t.returned {
                    "returned"
                } else {
                    "was given up on"
                }
            );
            out!(
                "  {:>7} {:>7} {:>7} {:>7} {:>2} {:<11} {:<26} COMMAND",
                "PID",
                "PPID",
                "PGID",
                "SID",
                "S",
                "ROLE",
                "ESCAPED BY"
            );
            for s in &t.survivors {
                let p = &s.process;
                out!(
                    "  {:>7} {:>7} {:>7} {:>7} {:>2} {:<11} {:<26} {}",
                    p.pid,
                    p.ppid,
                    p.pgid,
                    p.sid,
                    p.state,
                    s.role,
                    p.escaped_by.join(","),
                    truncate(&p.cmdline, 60)
                );
            }
        }
    }
    out!("");
    for case in &cases {
        if let Some(c) = CASES.iter().find(|c| c.name == *case) {
            out!("  {:<8} {}", c.name, c.what);
        }
    }
    let failed = r.cells.iter().filter(|c| c.fails()).count();
    let run = r.cells.iter().filter(|c| c.runs > 0).count();
    if failed == 0 {
        out!("clean: {run} of {run} cells held (– : not applicable to this wrapper)");
    } else {
        out!("failed: {failed} of {run} cells leaked, wrong-killed, hung or did not run");
    }
}
