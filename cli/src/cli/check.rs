//! `reaper check`: run CMD contained, optionally interrupt it the way the real world does, and
//! report every process that outlived it. A regression harness for leaked-process bugs.

use std::ffi::OsString;
use std::time::Duration;

use reaper_platform::{process, signal};
use reaper_platform::{Pid, Signal};
use serde::Serialize;
use tokio::time::Instant;

use reaper::supervise::{Plan, Requests, Step, StopSpec};
use reaper::{Child, Outcome, StopReason};

use super::contain::{ContainArgs, GuardArgs};
use crate::coreutils as parse;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Send the interrupt signal to CMD this long after it started (if it is still running).
    #[arg(long, value_parser = parse::duration, value_name = "DUR")]
    pub interrupt_after: Option<Duration>,

    /// The interrupt: INT (Ctrl-C), TERM, HUP, KILL (a crash or an OOM kill)…
    #[arg(long, value_parser = parse::signal, default_value = "INT", value_name = "SIG")]
    pub interrupt_signal: Signal,

    /// Send the interrupt to CMD's process group (CMD gets a group of its own), like a
    /// terminal's Ctrl-C, instead of to CMD alone.
    #[arg(long)]
    pub interrupt_group: bool,

    /// Give up on CMD after this long (reported as a timeout, exit 2, not as a leak).
    #[arg(long, value_parser = parse::duration, value_name = "DUR")]
    pub timeout: Option<Duration>,

    /// After CMD exited, how long its tree may take to wind down before what is left counts
    /// as leaked.
    #[arg(long, value_parser = parse::duration, default_value = "1s", value_name = "DUR")]
    pub settle: Duration,

    /// Leave the survivors running (and say where they are) instead of killing them.
    #[arg(long)]
    pub keep: bool,

    /// Exit 0 when something leaked and 1 when nothing did: pins a known leak in a test. With
    /// --suite: the cell CASE or CASE:END (repeatable) may leak, and fails if it no longer does.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "CASE[:END]")]
    pub expect_leak: Vec<String>,

    /// The leak conformance suite: CMD is a wrapper under test (a timeout, an init, a tool
    /// runner), `{}` in its arguments each case's hostile command, `{timeout}` its own timeout
    /// (--timeout, default 2s); every case is run with every end and scored (docs/check.md).
    #[arg(long, conflicts_with_all = ["interrupt_after", "keep"])]
    pub suite: bool,

    /// With --suite: only these cells, comma-separated: CASE or CASE:END.
    #[arg(long, value_delimiter = ',', value_name = "CASES", requires = "suite")]
    pub only: Vec<String>,

    /// Run the whole check N times (races show up on the 7th try, not the 1st).
    #[arg(long, default_value = "1", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,

    /// CMD's stdin: `null` (default) or `inherit`.
    #[arg(long, value_enum, default_value = "null", value_name = "MODE")]
    pub stdin: StdinMode,

    /// Print the report as JSON on stdout (CMD's own stdout then goes to stderr).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub contain: ContainArgs,

    #[command(flatten)]
    pub guard: GuardArgs,

    /// The command to check, and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StdinMode {
    Null,
    Inherit,
}

/// A process that outlived its leader.
#[derive(Debug, Clone, Serialize)]
pub struct Survivor {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    pub state: String,
    pub exe: Option<String>,
    pub cmdline: String,
    pub age_s: f64,
    /// How it got away from the leader: `leader-group` (still in the leader's process group),
    /// `own-group`, `own-session`, `reparented` (its parent exited), `left-cgroup` (it moved
    /// out of the run's cgroup: root, or a user owning the parent cgroup, can).
    pub escaped_by: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct Interrupt {
    pub signal: String,
    /// `leader` or `group`.
    pub target: &'static str,
    pub after_ms: u64,
    /// Whether it was sent (CMD may have exited before).
    pub sent: bool,
}

#[derive(Debug, Serialize)]
pub struct LeaderEnd {
    pub pid: i32,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub ran_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct RunReport {
    /// `clean`, `leaked` or `timeout`.
    pub result: &'static str,
    pub backend: &'static str,
    pub cgroup: Option<String>,
    pub leader: LeaderEnd,
    pub interrupt: Option<Interrupt>,
    pub settle_ms: u64,
    pub survivors: Vec<Survivor>,
    /// Whether the survivors were killed afterwards (not with `--keep`).
    pub killed: bool,
    /// The limits set on the run (`--memory-max`, `--pids-max`, `--cpus`), if any.
    pub limits: Option<reaper::Limits>,
    /// What the limits did and the run's CPU time (cgroup backend; not with `--keep`).
    pub usage: Option<crate::report::UsageJson>,
    /// Whether the memory limit ended the run (the OOM killer; stop reason `oom`).
    pub out_of_memory: bool,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub command: Vec<String>,
    /// `clean`, `leaked`, `timeout` or `error`.
    pub result: &'static str,
    pub runs: Vec<RunReport>,
    pub leaked_runs: usize,
    pub error: Option<String>,
}

pub fn main(args: CheckArgs) -> u8 {
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            say!("reaper: cannot start the async runtime: {e}");
            return 2;
        }
    };
    rt.block_on(check(args))
}

async fn check(args: CheckArgs) -> u8 {
    if args.suite {
        say!("reaper: check --suite runs on Linux only (its cases are Linux process trees)");
        return 2;
    }
    if args.expect_leak.iter().any(|e| !e.is_empty()) {
        say!("reaper: --expect-leak takes a cell (CASE[:END]) only with --suite");
        return 2;
    }
    let command: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut report = CheckReport {
        command,
        result: "clean",
        runs: Vec::new(),
        leaked_runs: 0,
        error: None,
    };
    let Some(sigs) = super::Signals::new() else {
        say!("reaper: cannot install signal handlers");
        return 2;
    };
    // One stream for every repeat: a signal between two runs stops the next one.
    let mut requests = Requests::new();
    super::signal_requests(sigs, &mut requests);
    if let Some(stops) = super::job_stops() {
        use reaper::Signal as S;
        super::job_stop_requests(stops, &[S::TSTP, S::TTIN, S::TTOU], &mut requests);
    }
    for i in 0..args.repeat {
        match check_once(&args, &requests).await {
            Ok(r) => {
                if !args.json {
                    print_run(&args, &r, i);
                }
                report.runs.push(r);
            }
            Err(e) => {
                report.error = Some(e.to_string());
                break;
            }
        }
    }
    super::guardian_done();
    report.leaked_runs = report.runs.iter().filter(|r| r.result == "leaked").count();
    report.result = if report.error.is_some() {
        "error"
    } else if report.leaked_runs > 0 {
        "leaked"
    } else if report.runs.iter().any(|r| r.result == "timeout") {
        "timeout"
    } else {
        "clean"
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => out!("{s}"),
            Err(e) => say!("reaper: {e}"),
        }
    }
    if let Some(e) = &report.error {
        say!("reaper: check could not run: {e}");
    } else if args.repeat > 1 {
        say!("{} of {} runs leaked", report.leaked_runs, args.repeat);
    }
    match (report.result, !args.expect_leak.is_empty()) {
        ("error" | "timeout", _) => 2,
        ("leaked", false) | ("clean", true) => 1,
        _ => 0,
    }
}

/// Why one check could not run to its report.
#[derive(Debug)]
pub enum CheckError {
    /// CMD did not start.
    Start(reaper::Error),
    /// `--json`: stderr could not be duplicated for CMD's stdout.
    DupStderr(std::io::Error),
    /// reaper got a signal: CMD's tree was stopped; `survivors` what outlived the stop.
    Signalled {
        signal: String,
        survivors: Vec<String>,
    },
    /// The run's end failed (the cgroup could not be removed, survivors of SIGKILL).
    Finish(String),
    /// `--keep`: the survivors could not be kept where they are.
    Keep(reaper::ContainError),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Start(e) => f.write_str(&crate::advice::start_error(e)),
            CheckError::Finish(m) => f.write_str(m),
            CheckError::Keep(e) => write!(f, "{e}"),
            CheckError::DupStderr(e) => write!(f, "cannot dup stderr: {e}"),
            CheckError::Signalled { signal, survivors } => {
                let left = if survivors.is_empty() {
                    String::new()
                } else {
                    format!(" (survivors: {})", survivors.join(", "))
                };
                write!(
                    f,
                    "reaper got SIG{signal}; stopped CMD and everything it started{left}"
                )
            }
        }
    }
}

/// How `check` supervises: SIGKILL for the whole tree on every stop (the program had its
/// chance to clean up during the settle time, or it timed out); the settle is the leader's
/// linger, which the timeout (the leader's) does not cut. A signal to reaper stops the run.
/// The interrupt comes first: a timeout before it is only looked at once it was sent.
pub fn plan(args: &CheckArgs) -> Plan {
    let mut plan = Plan::new(StopSpec::KILL);
    plan.timeout = args
        .timeout
        .map(|t| t.max(args.interrupt_after.unwrap_or_default()));
    plan.timeout_ends_linger = false;
    plan.linger = args.settle;
    plan
}

async fn check_once(args: &CheckArgs, requests: &Requests) -> Result<RunReport, CheckError> {
    let mut cmd = reaper::Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .plan(plan(args))
        .requests(requests.clone());
    args.contain.apply(&mut cmd, &args.guard);
    cmd.stdin(match args.stdin {
        StdinMode::Null => reaper::Stdio::Null,
        StdinMode::Inherit => reaper::Stdio::Inherit,
    });
    if args.stdin == StdinMode::Inherit {
        cmd.foreground(true);
    }
    if args.json {
        // stdout carries the report: CMD's output goes to stderr.
        let err = std::io::stderr();
        let fd = std::os::fd::AsFd::as_fd(&err)
            .try_clone_to_owned()
            .map_err(CheckError::DupStderr)?;
        cmd.stdout(fd);
    }
    let mut child = cmd.spawn().await.map_err(CheckError::Start)?;
    if let Some(w) = child.warning() {
        say!("{}", crate::advice::fallback(w, child.backend()));
    }
    let started = Instant::now();
    let leader_pid = child.id() as i32;
    let leader_stat = process::stat(leader_pid).ok();
    let (leader_pgid, leader_sid) = leader_stat
        .map(|s| (s.pgid, s.sid))
        .unwrap_or((leader_pid, 0));
    let reaper_pid = rustix::process::getpid().as_raw_nonzero().get();

    // The interrupt is the check's own action on the leader, not a stop: the run goes on (and
    // is not a cancel). Sent at its time if the leader still runs, else recorded as not sent.
    let mut interrupt = None;
    let interrupt_at = args.interrupt_after.map(|d| started + d);
    let mut step = loop {
        let at = interrupt_at.filter(|_| interrupt.is_none());
        tokio::select! {
            // The interrupt before a timeout due at the same time (see `plan`).
            biased;
            _ = tokio::time::sleep_until(at.unwrap_or(started)), if at.is_some() => {
                let running = !child.leader_exited();
                interrupt = send_interrupt(args, &mut child, leader_pid, running);
            }
            s = child.step() => break s,
        }
    };
    // A signal to reaper while CMD runs (or settles): stop the tree, report an error (exit 2).
    let reason = loop {
        match step {
            Step::Stop(r) => break r,
            Step::LeaderExited => {
                if interrupt.is_none() {
                    interrupt = send_interrupt(args, &mut child, leader_pid, false);
                }
                step = child.step().await;
            }
        }
    };
    if reason == StopReason::Signal {
        let out = child.wait().await;
        return Err(CheckError::Signalled {
            signal: out
                .received_signal
                .map(crate::report::signal_name)
                .unwrap_or_default(),
            survivors: crate::report::process_labels(&out.survivors),
        });
    }
    let timed_out = reason == StopReason::Timeout;
    let survivors = if timed_out {
        Vec::new()
    } else {
        survivors(&child, leader_pgid, leader_sid, reaper_pid)
    };
    let kill = !args.keep || survivors.is_empty();
    let result = if timed_out {
        "timeout"
    } else if survivors.is_empty() {
        "clean"
    } else {
        "leaked"
    };
    let backend = child.backend().map_or("?", reaper::BackendKind::as_str);
    let mut cgroup = child.cgroup().map(|p| p.display().to_string());
    let limits = child.limits();
    let mut usage = None;
    let mut out_of_memory = false;
    let leader = if kill {
        let out: Outcome = child.wait().await;
        if let Some(e) = crate::report::error_text(&out) {
            return Err(CheckError::Finish(e));
        }
        let (exit_code, signal) = crate::report::status_parts(out.leader_status);
        usage = out.usage.as_ref().map(crate::report::UsageJson::of);
        out_of_memory = out.stop_reason == StopReason::Oom;
        LeaderEnd {
            pid: leader_pid,
            exit_code,
            signal,
            timed_out,
            ran_ms: out.leader_ran.map(|d| d.as_millis() as u64),
        }
    } else {
        let (exit_code, sig) = crate::report::status_parts(child.leader_status());
        let ran_ms = Some(started.elapsed().as_millis() as u64);
        cgroup = child
            .keep()
            .map_err(CheckError::Keep)?
            .map(|p| p.display().to_string());
        LeaderEnd {
            pid: leader_pid,
            exit_code,
            signal: sig,
            timed_out,
            ran_ms,
        }
    };
    Ok(RunReport {
        result,
        backend,
        cgroup,
        leader,
        interrupt,
        settle_ms: args.settle.as_millis() as u64,
        survivors,
        killed: kill,
        limits: (!limits.is_empty()).then_some(limits),
        usage,
        out_of_memory,
    })
}

/// What is left of the run, described.
fn survivors(child: &Child, leader_pgid: i32, leader_sid: i32, reaper_pid: i32) -> Vec<Survivor> {
    let members = child.members();
    // Looked for by `members()`: an escapee is seen by then.
    let escaped: Vec<reaper::Identity> = child
        .escapees()
        .into_iter()
        .map(|e| e.process.identity())
        .collect();
    members
        .into_iter()
        .filter_map(|m| {
            let mut s = describe(m.pid, m.starttime, leader_pgid, leader_sid, reaper_pid)?;
            if escaped.contains(&m.identity()) {
                s.escaped_by.push("left-cgroup");
            }
            Some(s)
        })
        .collect()
}

/// `--interrupt-signal` to the leader (or the group reaper made for it) if `running`; `None`
/// without `--interrupt-after`.
fn send_interrupt(
    args: &CheckArgs,
    child: &mut Child,
    leader_pid: i32,
    running: bool,
) -> Option<Interrupt> {
    let after = args.interrupt_after?;
    let target = if args.interrupt_group {
        "group"
    } else {
        "leader"
    };
    // A TSTP interrupt is the check's own, not the user's Ctrl-Z.
    child.end_job_control();
    let sent = running
        && if args.interrupt_group {
            // The group reaper created for CMD (process_group(0): pgid = leader pid), never
            // whatever group the leader may have moved to.
            Pid::from_raw(leader_pid).is_some_and(|g| {
                matches!(
                    signal::to_process_group(g, args.interrupt_signal),
                    Ok(signal::Delivery::Sent)
                )
            })
        } else {
            child.signal_leader(args.interrupt_signal)
        };
    Some(Interrupt {
        signal: signal::name(args.interrupt_signal),
        target,
        after_ms: after.as_millis() as u64,
        sent,
    })
}

/// Everything a user needs to find a leaked process and see how it got away.
pub(super) fn describe(
    pid: i32,
    starttime: u64,
    leader_pgid: i32,
    leader_sid: i32,
    reaper_pid: i32,
) -> Option<Survivor> {
    let s = process::stat(pid)
        .ok()
        .filter(|s| s.starttime == starttime && !s.is_dead())?;
    let mut escaped_by = Vec::new();
    if s.sid != leader_sid {
        escaped_by.push("own-session");
    } else if s.pgid != leader_pgid {
        escaped_by.push("own-group");
    } else {
        escaped_by.push("leader-group");
    }
    // On Linux reaper is a child subreaper: an orphan of the tree is reparented to it (on
    // macOS to launchd, pid 1).
    if s.ppid == reaper_pid || s.ppid == 1 {
        escaped_by.push("reparented");
    }
    Some(Survivor {
        pid,
        ppid: s.ppid,
        pgid: s.pgid,
        sid: s.sid,
        state: s.state.to_string(),
        exe: process::exe(pid).map(|p| p.display().to_string()),
        cmdline: {
            let c = process::cmdline(pid);
            if c.is_empty() {
                format!("[{}]", s.comm)
            } else {
                c
            }
        },
        age_s: (process::age_secs(starttime).unwrap_or(0.0) * 10.0).round() / 10.0,
        escaped_by,
    })
}

fn print_run(args: &CheckArgs, r: &RunReport, i: u32) {
    let prefix = if args.repeat > 1 {
        format!("run {}: ", i + 1)
    } else {
        String::new()
    };
    let settle = parse::show(args.settle);
    if r.out_of_memory {
        let limit = r
            .limits
            .and_then(|l| l.memory_max)
            .map(super::parse::show_size);
        say!(
            "{prefix}killed: out of memory (limit {})",
            limit.unwrap_or_default()
        );
    }
    match r.result {
        "timeout" => say!(
            "{prefix}timeout: CMD was still running after {}; stopped it (not counted as a leak)",
            parse::show(args.timeout.unwrap_or_default())
        ),
        "clean" => say!("{prefix}clean: nothing survived {settle} after the leader exited"),
        _ => {
            say!(
                "{prefix}leaked: {} process(es) survived {settle} after the leader exited",
                r.survivors.len()
            );
            say!(
                "  {:>7} {:>7} {:>7} {:>7} {:>2} {:>7}  {:<26} COMMAND",
                "PID",
                "PPID",
                "PGID",
                "SID",
                "S",
                "AGE",
                "ESCAPED BY"
            );
            for s in &r.survivors {
                say!(
                    "  {:>7} {:>7} {:>7} {:>7} {:>2} {:>6.1}s  {:<26} {}",
                    s.pid,
                    s.ppid,
                    s.pgid,
                    s.sid,
                    s.state,
                    s.age_s,
                    s.escaped_by.join(","),
                    truncate(&s.cmdline, 80)
                );
            }
            if r.killed {
                say!("  (killed them all)");
            } else {
                say!(
                    "  left running (--keep) in {}",
                    r.cgroup.as_deref().unwrap_or("reaper's subtree")
                );
            }
        }
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}
