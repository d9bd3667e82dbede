//! `reaper run`: like timeout(1), for the whole tree.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use reaper_platform::{ExitStatus, Signal};

use super::parse::{self, SigSpec};
use reaper::containment::select::{ContainOpts, DelegateMode, Requested, SandboxMode};
use reaper::guardian::Guardian;
use reaper::run::supervise::{CutShort, Escalation};
use reaper::run::{
    EventSink, Io, LeaderCommand, Outcome, Plan, Request, Requests, Run, Step, StopReason,
    StopSpec, Supervisor, Target,
};
use std::process::ChildStdin;
use std::sync::Arc;

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

    /// Set by `reaper timeout` (never a flag): timeout(1)'s semantics on this run.
    #[arg(skip)]
    pub face: Option<TimeoutFace>,
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

/// What `reaper timeout` changes in a run, to behave as timeout(1): the signal (on timeout,
/// or the one reaper received) goes to the tree, then reaper waits for COMMAND itself — for
/// ever, as timeout(1) does, unless `-k` was given — and only then stops what is left of the
/// tree; exit statuses and messages are timeout's.
#[derive(Debug, Clone, Default)]
pub struct TimeoutFace {
    /// The program name for messages (`timeout`, argv[0], as coreutils prints it).
    pub name: String,
    pub verbose: bool,
    /// The signal goes to COMMAND alone, not to its descendants.
    pub foreground: bool,
    /// `-k`: SIGKILL for the whole tree this long after the first signal. `None`: never.
    pub kill_after: Option<Duration>,
}

impl TimeoutFace {
    fn sending(&self, sig: SigSpec, command: &std::ffi::OsStr) {
        if self.verbose {
            say!(
                "{}: sending signal {} to command {}",
                self.name,
                sig.name(),
                super::timeout::quote(command)
            );
        }
    }
}

/// Containment flags shared by `run` and `check`.
#[derive(Debug, Clone, clap::Args)]
pub struct ContainArgs {
    /// How to contain the tree: a cgroup v2 of its own (preferred), reaper as child subreaper,
    /// or pgid (the leader's process group plus process-table tracking, for macOS); `auto` uses
    /// cgroup when it can and says so when it cannot.
    #[arg(long, value_enum, default_value = "auto", value_name = "BACKEND")]
    pub containment: Requested,

    /// Create run cgroups under this cgroup (a directory under the cgroup2 mount, or a path
    /// relative to it) instead of reaper's own.
    #[arg(long, env = "REAPER_CGROUP_PARENT", value_name = "DIR")]
    pub cgroup_parent: Option<PathBuf>,

    /// pgid backend: read the process table at least this often (faster right after the start
    /// and while the tree forks). A process that double-forks and calls setsid() between two
    /// reads can escape, so shorter is safer and costs more CPU.
    #[arg(long, value_parser = parse::duration, default_value = "50ms", value_name = "DUR")]
    pub poll: Duration,

    /// Under systemd, ask the service manager (the user's, or the system's for root) for a scope
    /// with Delegate=yes and create run cgroups there; `never` creates them where reaper is.
    #[arg(
        long,
        value_enum,
        env = "REAPER_DELEGATE",
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub delegate: DelegateMode,

    #[command(flatten)]
    pub limits: LimitArgs,

    /// Start the command in a sandbox it cannot undo, even as root: its own mount and cgroup
    /// namespaces (the cgroup namespace rooted at the run's cgroup), the cgroup file system,
    /// /sys and /proc/sys read-only, no new privileges, and CAP_SYS_ADMIN, CAP_SYS_PTRACE and
    /// the other capabilities that could undo it dropped. `--sandbox=pid` adds a PID namespace
    /// with its own /proc (the command is its PID 1). Needs the cgroup backend, and root or
    /// unprivileged user namespaces (a non-root user's sandbox starts with a user namespace
    /// mapping only the user's own ids); where a part is impossible, reaper exits 125 naming it
    /// (`reaper doctor` says what works here).
    #[arg(
        long,
        value_enum,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on",
        value_name = "MODE"
    )]
    pub sandbox: Option<SandboxMode>,
}

/// Resource limits (cgroup backend only), as systemd-run's `-p MemoryMax= -p TasksMax=
/// -p CPUQuota=`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitArgs {
    /// Memory limit for the whole tree (memory.max, no swap): 512M, 2G, 1.5G (K/M/G/T are
    /// powers of 1024, plain numbers bytes). When the tree exceeds it, the kernel's OOM killer
    /// ends the whole run (stop reason `oom`, exit 137).
    #[arg(long, value_parser = parse::size, value_name = "SIZE")]
    pub memory_max: Option<u64>,

    /// Most processes (and threads) the tree may have at once (pids.max): a fork past it fails.
    #[arg(long, value_parser = parse::pids, value_name = "N")]
    pub pids_max: Option<u64>,

    /// CPU time for the whole tree, in cores (cpu.max): 0.5 is half of one core.
    #[arg(long, value_parser = parse::cpus, value_name = "N.N")]
    pub cpus: Option<f64>,
}

impl LimitArgs {
    pub fn limits(&self) -> reaper::containment::limits::Limits {
        reaper::containment::limits::Limits {
            memory_max: self.memory_max,
            pids_max: self.pids_max,
            cpus: self.cpus,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct GuardArgs {
    /// Do not start the guardian process that kills the tree if reaper itself is SIGKILLed.
    #[arg(long)]
    pub no_guardian: bool,
}

impl ContainArgs {
    /// The run options, with a guardian when one is wanted and can help (cgroup backends).
    pub fn opts(&self, guard: &GuardArgs) -> ContainOpts {
        // The guardian cleans up cgroups; the subreaper and pgid backends (and so macOS) have
        // none to name.
        let guardian = if !self.wants_guardian(guard) {
            None
        } else {
            match Guardian::spawn() {
                Ok(g) => Some(Arc::new(g)),
                Err(e) => {
                    say!("reaper: warning: {e}; if reaper is SIGKILLed its tree may outlive it");
                    None
                }
            }
        };
        ContainOpts {
            requested: self.containment,
            cgroup_parent: self.cgroup_parent.clone(),
            poll: self.poll,
            guardian,
            delegate: self.delegate,
            limits: self.limits.limits(),
            sandbox: self.sandbox,
        }
    }
}

impl ContainArgs {
    /// Whether [`ContainArgs::opts`] starts a guardian (`main` forks it early when so).
    pub fn wants_guardian(&self, guard: &GuardArgs) -> bool {
        !(guard.no_guardian
            || matches!(self.containment, Requested::Subreaper | Requested::Pgid)
            || !cfg!(target_os = "linux"))
    }
}

/// Grace when reaper's parent died: nobody waits for a clean exit, the tree must be gone fast.
const PARENT_DEATH_GRACE: Duration = Duration::from_millis(300);

/// A container's init: asked for, or PID 1 (of a PID namespace). timeout(1)'s face keeps its
/// own semantics everywhere.
fn is_init(args: &RunArgs) -> bool {
    args.face.is_none() && (args.init || args.forward_to.is_some() || std::process::id() == 1)
}

/// How `run` (and `timeout`) supervise: the `-s` signal to the whole tree on every stop, the
/// leftovers' stop too; a second signal that is not passed on cuts the grace short.
pub fn plan(args: &RunArgs) -> Plan {
    let stop = StopSpec {
        first: args.signal.signal(),
        to: Target::Tree,
        grace: args.grace,
    };
    let escalation = match &args.face {
        None => Escalation::Grace,
        Some(face) => {
            let (face, command, spec) = (face.clone(), args.command[0].clone(), args.signal);
            Escalation::AfterLeader {
                kill_after: face.kill_after,
                foreground: face.foreground,
                // `None` is signal 0, which only `-s` can name.
                announce: Some(Arc::new(move |sig: Option<Signal>| {
                    face.sending(sig.map_or(spec, SigSpec::from_signal), &command)
                })),
            }
        }
    };
    Plan {
        // timeout(1): 0 means no timeout.
        timeout: args.timeout.filter(|d| !d.is_zero()),
        timeout_ends_linger: true,
        stop,
        leftovers: stop,
        linger: args.linger,
        stdin_eof: args.on_stdin_eof,
        parent_death_grace: PARENT_DEATH_GRACE,
        shutdown_grace: args.grace,
        forward: if is_init(args) {
            forwarded()
        } else {
            Vec::new()
        },
        forward_to: match args.forward_to {
            Some(ForwardTo::Tree) => Target::Tree,
            _ => Target::Leader,
        },
        cut_short: CutShort::BySignal,
        escalation,
    }
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
    let face = args.face.clone();
    if face.is_some() {
        // timeout(1) says nothing on stderr but its errors (and -v).
        args.quiet = true;
    }
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
        super::JobStops::new()
    };
    if face.is_some() {
        // timeout(1) also stops COMMAND on SIGQUIT and on its own `-s` signal, and takes a
        // SIGALRM from outside for its timeout (`timeout -s ALRM 30 timeout 25 CMD` cascades).
        sigs.also(Signal::ALARM);
        sigs.also(Signal::QUIT);
        if let Some(s) = args.signal.signal() {
            sigs.also(s);
        }
    }
    let parent = if args.die_with_parent {
        match super::ParentWatch::start() {
            Ok(w) => Some(w),
            Err(e) => {
                say!("reaper: {e}");
                return 125;
            }
        }
    } else {
        None
    };
    let sink = if args.events {
        EventSink::json_lines_to_stderr()
    } else {
        EventSink::none()
    };
    let mut cmd = LeaderCommand::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    if args.on_stdin_eof.is_some() {
        cmd.stdin(Io::Piped);
    } else {
        cmd.use_terminal();
    }
    let opts = args.contain.opts(&args.guard);
    let guardian = opts.guardian.clone();
    let (run, pipes) = match Run::start(cmd, &opts, sink).await {
        Ok(r) => r,
        Err(e) => {
            match (&face, e.exec_error()) {
                (Some(f), Some(os)) => say!(
                    "{}: failed to run command {}: {}",
                    f.name,
                    super::timeout::quote(&args.command[0]),
                    super::timeout::strerror(&os)
                ),
                (Some(f), None) => say!("{}: {e}", f.name),
                (None, _) => say!("reaper: {e}"),
            }
            if let Some(g) = &guardian {
                g.done();
            }
            return e.exit_code();
        }
    };
    // One line, once per run; `-q` silences it too (a container's entrypoint starts reaper on
    // every container start, and the timeout face is as quiet as timeout(1)).
    if let Some(w) = run.warning.as_ref().filter(|_| !args.quiet) {
        if std::process::id() == 1 {
            // The kernel SIGKILLs every process left in a PID namespace when its PID 1 exits:
            // nothing outlives reaper there, whatever the backend.
            say!("{w}; as PID 1, the PID namespace contains the tree");
        } else {
            say!("{w}");
        }
    }
    let mut requests = requests(sigs, parent, pipes.stdin);
    if let Some(stops) = job_stops {
        // timeout(1) ignores SIGTTIN and SIGTTOU (it may write to the terminal from the
        // background), and is stopped by SIGTSTP.
        let relayed: &[Signal] = if face.is_some() {
            &[Signal::TSTP]
        } else {
            &[Signal::TSTP, Signal::TTIN, Signal::TTOU]
        };
        job_stop_requests(stops, relayed, &mut requests);
    }
    let mut sup = Supervisor::new(run, plan(&args), &mut requests);
    let reason = loop {
        if let Step::Stop(r) = sup.step().await {
            break r;
        }
    };
    let leftovers = if reason == StopReason::Exited {
        sup.run().members().len()
    } else {
        0
    };
    let outcome = sup.finish().await;
    if let Some(g) = &guardian {
        g.done();
    }

    if let Some(path) = &args.report {
        if let Err(e) = write_report(path, &outcome) {
            say!("reaper: cannot write the report to {}: {e}", path.display());
        }
    }
    let mut code = outcome.exit_code(args.preserve_status);
    // timeout(1) 9.1: COMMAND killed by SIGKILL after a timeout is 137 even without
    // --preserve-status (-s KILL, or -k), so that a forced kill can be told apart.
    if face.is_some()
        && outcome.stop_reason == StopReason::Timeout
        && outcome.leader_status == Some(ExitStatus::Signal(libc::SIGKILL))
        && code == 124
    {
        code = 128 + libc::SIGKILL as u8;
    }
    if let Some(err) = &outcome.error {
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
                say!("reaper: got SIG{}; stopped {n} process(es){moved}", outcome.received_signal.as_deref().unwrap_or("?"))
            }
            StopReason::ParentDied => say!("reaper: parent died; stopped {n} process(es){moved}"),
            StopReason::Oom => say!(
                "reaper: killed: out of memory (limit {})",
                outcome.limits.and_then(|l| l.memory_max).map(parse::show_size).unwrap_or_default()
            ),
            StopReason::StdinEof => say!(
                "reaper: stdin closed and the command did not exit within {}; stopped {n} process(es){moved}",
                parse::show(args.on_stdin_eof.unwrap_or_default())
            ),
            _ if leftovers > 0 => say!("reaper: the leader exited; stopped {n} leftover process(es){moved}"),
            _ => {}
        }
    }
    // timeout(1): COMMAND killed by a signal without a timeout (Ctrl-C passed on, a crash) makes
    // timeout die of the same signal, so that its parent sees a death by signal (a shell
    // loop stops on SIGINT; Python's returncode is -N), not exit 128+N.
    if let (Some(_), Some(ExitStatus::Signal(sig))) = (&face, outcome.leader_status) {
        if outcome.stop_reason != StopReason::Timeout && i32::from(code) == 128 + sig {
            super::timeout::die_of(sig);
        }
    }
    code
}

/// The run's stop requests: reaper's signals, its parent's death, its stdin's EOF or hang-up.
fn requests(
    sigs: super::Signals,
    parent: Option<super::ParentWatch>,
    stdin: Option<ChildStdin>,
) -> Requests {
    let mut requests = Requests::new();
    signal_requests(sigs, &mut requests);
    if let Some(mut p) = parent {
        requests.on(async move { p.died().await }, Request::ParentDied);
    }
    let stdin_eof = stdin.and_then(relay_stdin);
    // Only with a relay: without one there is no EOF to act on (see `relay_stdin`).
    let stdin_hangup = stdin_eof.as_ref().and_then(|_| watch_stdin_hangup());
    if let Some(read) = stdin_eof {
        // The EOF: the relay read it, or the client hung up first (the relay may be stuck
        // writing to a command that does not read, and would never get to read it).
        let hung_up = async {
            // A watcher that gave up (its sender dropped unsent) saw no hang-up.
            let seen = match stdin_hangup {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            if !seen {
                std::future::pending::<()>().await;
            }
        };
        requests.on(
            async move {
                tokio::select! {
                    _ = read => {}
                    _ = hung_up => {}
                }
            },
            Request::StdinEof,
        );
    }
    requests
}

/// Every signal reaper listens to becomes a request, in the order they come.
pub(super) fn signal_requests(mut sigs: super::Signals, requests: &mut Requests) {
    requests.feed(|tx| async move {
        loop {
            let sig = sigs.recv().await;
            if tx.send(Request::Signal(sig)).is_err() {
                break;
            }
        }
    });
}

/// reaper's job-control stops become requests to pass them on (see `Request::JobStop`); those
/// not in `relayed` are ignored.
pub(super) fn job_stop_requests(
    mut stops: super::JobStops,
    relayed: &'static [Signal],
    requests: &mut Requests,
) {
    requests.feed(|tx| async move {
        loop {
            let sig = stops.recv().await;
            if relayed.contains(&sig) && tx.send(Request::JobStop(sig)).is_err() {
                break;
            }
        }
    });
}

/// Copies reaper's stdin to CMD's on a thread of its own (blocking reads and writes keep
/// back-pressure and add no latency; fd 0 is shared with others, so it is never made
/// non-blocking). Resolves when reaper's stdin reaches EOF, after CMD's stdin was closed.
/// `None` when no thread could be started: then there is no EOF to act on (the closed relay is
/// not the client going away), and CMD's stdin is closed.
fn relay_stdin(mut to_child: ChildStdin) -> Option<tokio::sync::oneshot::Receiver<()>> {
    use std::io::{Read, Write};
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("stdin-relay".into())
        .spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = vec![0u8; 64 * 1024];
            let mut child = Some(&mut to_child);
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        // CMD closed its stdin: keep draining ours, only to notice EOF.
                        if child
                            .as_mut()
                            .is_some_and(|c| c.write_all(&buf[..n]).is_err())
                        {
                            child = None;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            drop(to_child);
            let _ = tx.send(());
        });
    match spawned {
        Ok(_) => Some(rx),
        Err(e) => {
            say!("reaper: warning: cannot start the stdin relay ({e}); CMD's stdin is closed and --on-stdin-eof is not in effect");
            None
        }
    }
}

/// Resolves when reaper's stdin hangs up: its writer is gone (the last writer of a pipe or
/// fifo, a socket's peer, a terminal's hang-up), even while data it sent is still queued. A
/// thread of its own polls fd 0 for that, independently of the relay, which may be stuck
/// writing to a command that never reads and so never read the EOF. The relay still delivers
/// what was queued, and closes CMD's stdin after it; the run treats the hang-up as the EOF
/// (CMD's allowance starts). `None` when stdin has no other end to hang up (a regular file:
/// only its EOF, read by the relay, counts) or no thread could be started. Neither thread
/// keeps reaper from exiting: `main` returning ends the process, whatever they block in.
fn watch_stdin_hangup() -> Option<tokio::sync::oneshot::Receiver<()>> {
    use std::os::fd::AsFd;
    if !reaper_platform::hangup::can_hang_up(std::io::stdin().as_fd()) {
        return None;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("stdin-hangup".into())
        .spawn(
            move || match reaper_platform::hangup::wait_for_hangup(std::io::stdin().as_fd()) {
                Ok(()) => {
                    let _ = tx.send(());
                }
                Err(e) => no_hangup_watch(e),
            },
        );
    match spawned {
        Ok(_) => Some(rx),
        Err(e) => {
            no_hangup_watch(e);
            None
        }
    }
}

fn no_hangup_watch(e: impl std::fmt::Display) {
    say!("reaper: warning: cannot watch stdin for a hang-up ({e}); --on-stdin-eof acts on its EOF only, which a command that does not read its stdin may keep reaper from reading");
}

fn write_report(path: &std::path::Path, outcome: &Outcome) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(outcome).map_err(std::io::Error::other)?;
    if path.as_os_str() == "-" {
        say!("{json}");
        Ok(())
    } else {
        std::fs::write(path, json + "\n")
    }
}
