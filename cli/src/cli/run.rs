//! `reaper run`: like timeout(1), for the whole tree.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use reaper::supervise::{CutShort, Plan, Request, Requests, Step, StopSpec, Target};
use reaper::{Outcome, Signal, StopReason};

use super::contain::{ContainArgs, GuardArgs};
use crate::coreutils::{self as parse, SigSpec};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Stop the whole tree after this long and exit 124. Durations read as timeout(1) reads
    /// them: a floating-point number with an optional suffix s, m, h or d (30, 2.5m, 1e3),
    /// plus ms, a reaper extension (500ms); 0 means no timeout, huge values never time out.
    #[arg(short = 't', long, value_parser = parse::duration, value_name = "DUR")]
    pub timeout: Option<Duration>,

    /// First signal sent to every process when stopping (name or number; 0 sends nothing,
    /// then everything is SIGKILLed after the grace).
    #[arg(short = 's', long, value_parser = parse::sig_spec, default_value = "TERM", value_name = "SIG")]
    pub signal: SigSpec,

    /// How long processes get after the first signal before everything is SIGKILLed.
    #[arg(short = 'k', long, visible_alias = "kill-after", value_parser = parse::duration, default_value = "2s", value_name = "DUR")]
    pub grace: Duration,

    /// When the leader exits, let the rest of the tree run this much longer before stopping it.
    #[arg(long, value_parser = parse::duration, default_value = "0", value_name = "DUR")]
    pub linger: Duration,

    /// On timeout, exit with the leader's status instead of 124.
    #[arg(long)]
    pub preserve_status: bool,

    /// Write the run's outcome as JSON to FILE (`-` for stderr).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Print one JSON object per lifecycle event on stderr, as it happens.
    #[arg(long)]
    pub events: bool,

    /// When reaper's parent dies, stop the tree at once (grace capped at 300ms).
    #[arg(long)]
    pub die_with_parent: bool,

    /// Relay reaper's stdin to CMD through a pipe; when it reaches EOF, or its writer hangs up
    /// (even while CMD is not reading what it sent), close CMD's stdin, give CMD this long to
    /// exit by itself, then stop the tree. For stdio servers whose client may vanish.
    #[arg(long, value_parser = parse::duration, value_name = "DUR")]
    pub on_stdin_eof: Option<Duration>,

    /// Be the init of a container (on by itself when reaper is PID 1; not in `reaper timeout`):
    /// SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH are passed on to the leader, as
    /// tini does, instead of stopping the tree; SIGTERM (`docker stop`) still stops the whole
    /// tree with the grace. Every orphan is reaped at once, the tree is stopped when the leader
    /// exits, and reaper exits with the leader's status.
    #[arg(long)]
    pub init: bool,

    /// Init mode: pass signals on to the leader alone (as tini), or to every process of the
    /// tree, setsid'd ones included. Implies --init.
    #[arg(long, value_enum, value_name = "TO")]
    pub forward_to: Option<ForwardTo>,

    #[command(flatten)]
    pub guard: GuardArgs,

    /// Say nothing on stderr about timeouts, killed leftovers and a containment fallback (errors
    /// are still printed).
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub contain: ContainArgs,

    /// The command to run, and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// Where an init passes a signal on (`--forward-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ForwardTo {
    /// The leader alone, through its pidfd (tini's default).
    Leader,
    /// Every process of the run, wherever it moved its process group or session.
    Tree,
}

/// The signals an init passes on instead of stopping the tree, as tini does: SIGWINCH and every
/// signal that would end a process (SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPWR, the
/// real-time ones, …) but SIGTERM, which stops the whole tree with the grace (tini passes it to
/// its child alone, and the kernel SIGKILLs the rest of the namespace when tini exits). PID 1
/// gets no signal it has no handler for (the kernel drops it: signal(7), "init"), so each has
/// one.
fn forwarded() -> Vec<Signal> {
    let mut sigs: Vec<Signal> = super::ending_signals()
        .into_iter()
        .filter(|&s| s != Signal::TERM)
        .collect();
    sigs.push(Signal::WINCH);
    sigs
}

/// Grace when reaper's parent died: nobody waits for a clean exit, the tree must be gone fast.
const PARENT_DEATH_GRACE: Duration = Duration::from_millis(300);

/// A container's init: asked for, or PID 1 (of a PID namespace).
fn is_init(args: &RunArgs) -> bool {
    args.init || args.forward_to.is_some() || std::process::id() == 1
}

/// How `run` supervises: the `-s` signal to the whole tree on every stop, the leftovers' stop
/// too; a second signal that is not passed on cuts the grace short.
pub fn plan(args: &RunArgs) -> Plan {
    let stop = StopSpec {
        first: args.signal.signal(),
        to: Target::Tree,
        grace: args.grace,
    };
    let mut plan = Plan::new(stop);
    // timeout(1): 0 means no timeout.
    plan.timeout = args.timeout.filter(|d| !d.is_zero());
    plan.timeout_ends_linger = true;
    plan.leftovers = stop;
    plan.linger = args.linger;
    plan.stdin_eof = args.on_stdin_eof;
    plan.parent_death_grace = PARENT_DEATH_GRACE;
    plan.shutdown_grace = args.grace;
    if is_init(args) {
        plan.forward = forwarded();
    }
    plan.forward_to = match args.forward_to {
        Some(ForwardTo::Tree) => Target::Tree,
        _ => Target::Leader,
    };
    plan.cut_short = CutShort::BySignal;
    plan
}

pub fn main(args: RunArgs) -> u8 {
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            say!("reaper: cannot start the async runtime: {e}");
            return 125;
        }
    };
    rt.block_on(run(args))
}

async fn run(mut args: RunArgs) -> u8 {
    // timeout(1): 0 means no timeout.
    args.timeout = args.timeout.filter(|d| !d.is_zero());
    // Listen before spawning, so a signal in between stops the tree instead of killing reaper.
    let Some(mut sigs) = super::Signals::new() else {
        say!("reaper: cannot install signal handlers");
        return 125;
    };
    if is_init(&args) {
        sigs.also(Signal::WINCH);
    }
    // An init's job-control stops are the leader's own business (PID 1 drops them anyway).
    let job_stops = if is_init(&args) {
        None
    } else {
        super::job_stops()
    };
    let parent = if args.die_with_parent {
        match super::watch_parent() {
            Ok(w) => Some(w),
            Err(e) => {
                say!("reaper: {e}");
                return 125;
            }
        }
    } else {
        None
    };
    let mut cmd = reaper::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]).plan(plan(&args));
    if args.events {
        cmd.events(super::json_lines_to_stderr());
    }
    if args.on_stdin_eof.is_some() {
        cmd.stdin(reaper::Stdio::Piped);
    } else {
        cmd.foreground(true);
    }
    args.contain.apply(&mut cmd, &args.guard);
    let mut requests = Requests::new();
    super::signal_requests(sigs, &mut requests);
    if let Some(stops) = job_stops {
        super::job_stop_requests(
            stops,
            &[Signal::TSTP, Signal::TTIN, Signal::TTOU],
            &mut requests,
        );
    }
    if let Some(p) = parent {
        requests.on(super::parent_died(p), Request::ParentDied);
    }
    cmd.requests(requests.clone());
    let mut child = match cmd.spawn().await {
        Ok(c) => c,
        Err(e) => {
            say!("reaper: {}", crate::advice::start_error(&e));
            super::guardian_done();
            return e.exit_code();
        }
    };
    // One line, once per run; `-q` silences it too (a container's entrypoint starts reaper on
    // every container start).
    let warning = child
        .warning()
        .map(|w| crate::advice::fallback(w, child.backend()));
    if let Some(w) = warning.filter(|_| !args.quiet) {
        if std::process::id() == 1 {
            // The kernel SIGKILLs every process left in a PID namespace when its PID 1 exits:
            // nothing outlives reaper there, whatever the backend.
            say!("{w}; as PID 1, the PID namespace contains the tree");
        } else {
            say!("{w}");
        }
    }
    let stdin = child.stdin.take().and_then(|s| s.into_owned_fd().ok());
    stdin_requests(stdin, &mut requests);
    let reason = loop {
        if let Step::Stop(r) = child.step().await {
            break r;
        }
    };
    let leftovers = if reason == StopReason::Exited {
        child.members().len()
    } else {
        0
    };
    let outcome = child.wait().await;
    super::guardian_done();

    if let Some(path) = &args.report {
        if let Err(e) = write_report(path, &outcome) {
            say!("reaper: cannot write the report to {}: {e}", path.display());
        }
    }
    let code = outcome.exit_code(args.preserve_status);
    if let Some(err) = crate::report::error_text(&outcome) {
        say!("reaper: {err}");
    } else if !args.quiet {
        let n = outcome.killed;
        // "stopped 2 process(es), 1 of them had moved out of the run's cgroup".
        let moved = match outcome.escapees.len() {
            0 => String::new(),
            e => format!(", {e} of them had moved out of the run's cgroup"),
        };
        // The outcome's reason: the run layer tells an OOM kill from the leader's own exit.
        match outcome.stop_reason {
            StopReason::Timeout => {
                say!("reaper: timed out after {}; stopped {n} process(es){moved}", parse::show(args.timeout.unwrap_or_default()))
            }
            StopReason::Signal => {
                say!("reaper: got SIG{}; stopped {n} process(es){moved}", outcome.received_signal.map_or("?".into(), crate::report::signal_name))
            }
            StopReason::ParentDied => say!("reaper: parent died; stopped {n} process(es){moved}"),
            StopReason::Oom => say!(
                "reaper: killed: out of memory (limit {})",
                outcome.limits.and_then(|l| l.memory_max).map(super::parse::show_size).unwrap_or_default()
            ),
            StopReason::StdinEof => say!(
                "reaper: stdin closed and the command did not exit within {}; stopped {n} process(es){moved}",
                parse::show(args.on_stdin_eof.unwrap_or_default())
            ),
            StopReason::Stopped => say!("reaper: stopped from outside (reaper stop); stopped {n} process(es){moved}"),
            StopReason::Killed => say!("reaper: killed from outside (reaper kill); killed {n} process(es){moved}"),
            _ if leftovers > 0 => say!("reaper: the leader exited; stopped {n} leftover process(es){moved}"),
            _ => {}
        }
    }
    code
}

/// `--on-stdin-eof`: reaper's stdin relayed to CMD's ([`reaper::watch::relay_stdin`]), and its
/// EOF or hang-up as a request. Without a relay there is no EOF to act on, and CMD's stdin is
/// closed.
fn stdin_requests(stdin: Option<OwnedFd>, requests: &mut Requests) {
    let Some(to_child) = stdin else {
        return;
    };
    match reaper::watch::relay_stdin(to_child, no_hangup_watch) {
        Ok(eof) => requests.on(eof, Request::StdinEof),
        Err(e) => say!("reaper: warning: cannot relay stdin ({e}); CMD's stdin is closed and --on-stdin-eof is not in effect"),
    }
}

fn no_hangup_watch(e: std::io::Error) {
    say!("reaper: warning: cannot watch stdin for a hang-up ({e}); --on-stdin-eof acts on its EOF only, which a command that does not read its stdin may keep reaper from reading");
}

pub(super) fn write_report(path: &std::path::Path, outcome: &Outcome) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(&crate::report::Report::of(outcome))
        .map_err(std::io::Error::other)?;
    if path.as_os_str() == "-" {
        say!("{json}");
        Ok(())
    } else {
        std::fs::write(path, json + "\n")
    }
}
