//! `reaper timeout` (and reaper invoked through a link named `timeout`): GNU timeout(1)'s
//! command line, exactly — options before DURATION as getopt_long(3) reads them (`getopt`), its
//! messages, its exit statuses — for COMMAND's whole tree: the signal on timeout (or the one
//! reaper received) goes to every process, reaper waits for COMMAND itself as timeout(1) does,
//! then stops what is left.

mod getopt;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use reaper::supervise::{CutShort, Escalation, Plan, Requests, Step, StopSpec, Target};
use reaper::{ExitStatus, Signal, StopReason};

use crate::cli;
use crate::coreutils::{self, quote, SigSpec};
use getopt::Parsed;

/// 125: timeout(1)'s status for its own failures (bad usage included).
const CANCELED: u8 = 125;
/// How long what is left of the tree gets after the signal when `-k` is absent.
const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// What timeout(1)'s command line asks for.
#[derive(Debug)]
pub struct Args {
    /// The program name for messages (`timeout`, argv[0], as coreutils prints it).
    pub name: String,
    /// 0: no timeout.
    pub duration: Duration,
    pub signal: SigSpec,
    /// `-k`: SIGKILL for the whole tree this long after the first signal. `None`: never.
    pub kill_after: Option<Duration>,
    pub verbose: bool,
    /// The signal goes to COMMAND alone, not to its descendants.
    pub foreground: bool,
    pub preserve_status: bool,
    pub command: Vec<OsString>,
}

/// `name` is how the messages name the program: argv[0] for the link (as coreutils does),
/// `reaper timeout` for the subcommand. `args` are the arguments after it.
pub fn main(name: &str, args: Vec<OsString>) -> u8 {
    match getopt::parse_args(name, &args, coreutils::radix()) {
        Ok(Parsed::Run(a)) => match cli::runtime() {
            Ok(rt) => rt.block_on(run(a)),
            Err(e) => {
                say!("{name}: cannot start the async runtime: {e}");
                CANCELED
            }
        },
        Ok(Parsed::Help) => {
            out!("{}", help(name));
            0
        }
        Ok(Parsed::Version) => {
            out!(
                "timeout (reaper) {}\nreaper's timeout(1): GNU timeout's command line, for the whole process tree.",
                env!("CARGO_PKG_VERSION")
            );
            0
        }
        Err(msg) => {
            if let Some(m) = msg {
                say!("{name}: {m}");
            }
            say!("Try '{name} --help' for more information.");
            CANCELED
        }
    }
}

/// Whether `args` (after the program's name) run a command: `main` forks the guardian before
/// anything else when so.
pub fn wants_guardian(args: &[OsString]) -> bool {
    cfg!(target_os = "linux")
        && matches!(
            getopt::parse_args("timeout", args, coreutils::radix()),
            Ok(Parsed::Run(_))
        )
}

/// timeout(1)'s supervision: the `-s` signal to the tree (to COMMAND alone with
/// `--foreground`), then a wait for COMMAND itself (for `-k` at most, else for ever, as GNU's);
/// only then what is left of the tree gets the rest of the grace, then SIGKILL.
fn plan(a: &Args) -> Plan {
    let stop = StopSpec {
        first: a.signal.signal(),
        to: Target::Tree,
        grace: a.kill_after.unwrap_or(DEFAULT_GRACE),
    };
    let (name, verbose, spec, command) =
        (a.name.clone(), a.verbose, a.signal, a.command[0].clone());
    let announce = move |sig: Option<Signal>| {
        if verbose {
            // `None` is signal 0, which only `-s` can name.
            let sig = sig.map_or(spec, SigSpec::from_signal);
            say!(
                "{name}: sending signal {} to command {}",
                sig.name(),
                quote(&command)
            );
        }
    };
    let mut plan = Plan::new(stop);
    plan.timeout = Some(a.duration).filter(|d| !d.is_zero());
    plan.leftovers = stop;
    plan.cut_short = CutShort::BySignal;
    plan.escalation = Escalation::AfterLeader {
        kill_after: a.kill_after,
        foreground: a.foreground,
        announce: Some(Arc::new(announce)),
    };
    plan
}

async fn run(a: Args) -> u8 {
    // Listen before spawning, so a signal in between stops the tree instead of killing reaper.
    let Some(mut sigs) = cli::Signals::new() else {
        say!("{}: cannot install signal handlers", a.name);
        return CANCELED;
    };
    // timeout(1) stops COMMAND on its own `-s` signal too.
    if let Some(s) = a.signal.signal() {
        sigs.also(s);
    }
    let mut requests = Requests::new();
    cli::signal_requests(sigs, &mut requests);
    // timeout(1) ignores SIGTTIN and SIGTTOU (it may write to the terminal from the background),
    // and is stopped by SIGTSTP, which reaches COMMAND's group too.
    if let Some(stops) = cli::job_stops() {
        cli::job_stop_requests(stops, &[Signal::TSTP], &mut requests);
    }
    let mut cmd = reaper::Command::new(&a.command[0]);
    cmd.args(&a.command[1..])
        .plan(plan(&a))
        .requests(requests)
        .foreground(true);
    // As `reaper run`'s `--cgroup-parent` and `--delegate`: REAPER_CGROUP_PARENT, and
    // REAPER_DELEGATE=never, else auto.
    if let Some(p) = std::env::var_os("REAPER_CGROUP_PARENT").filter(|v| !v.is_empty()) {
        cmd.cgroup_parent(p);
    }
    if std::env::var("REAPER_DELEGATE").as_deref() == Ok("never") {
        cmd.delegation(reaper::Delegation::Never);
    }
    if let Some(g) = cli::contain::any_guardian() {
        cmd.guardian(g);
    }
    let mut child = match cmd.spawn().await {
        Ok(c) => c,
        Err(e) => {
            match e.exec_error() {
                Some(os) => say!(
                    "{}: failed to run command {}: {}",
                    a.name,
                    quote(&a.command[0]),
                    reaper_platform::errno::strerror(&os)
                ),
                None => say!("{}: {}", a.name, crate::advice::start_error(&e)),
            }
            cli::guardian_done();
            return e.exit_code();
        }
    };
    while child.step().await == Step::LeaderExited {}
    let outcome = child.wait().await;
    cli::guardian_done();
    if let Some(err) = &outcome.error {
        say!("{}: {err}", a.name);
    }
    let mut code = outcome.exit_code(a.preserve_status);
    // timeout(1) 9.1: COMMAND killed by SIGKILL after a timeout is 137 even without
    // --preserve-status (-s KILL, or -k), so that a forced kill can be told apart.
    if outcome.stop_reason == StopReason::Timeout
        && outcome.leader_status == Some(ExitStatus::Signal(libc::SIGKILL))
        && code == 124
    {
        code = 128 + libc::SIGKILL as u8;
    }
    // COMMAND killed by a signal without a timeout (Ctrl-C passed on, a crash) makes timeout
    // die of the same signal, so that its parent sees a death by signal (a shell loop stops on
    // SIGINT; Python's returncode is -N), not exit 128+N.
    if let Some(ExitStatus::Signal(sig)) = outcome.leader_status {
        if outcome.stop_reason != StopReason::Timeout && i32::from(code) == 128 + sig {
            die_of(sig);
        }
    }
    code
}

fn help(name: &str) -> String {
    format!(
        "\
Usage: {name} [OPTION] DURATION COMMAND [ARG]...
  or:  {name} [OPTION]
Start COMMAND, and kill it if still running after DURATION.
reaper's timeout(1): the same command line, for COMMAND's whole process tree.

Mandatory arguments to long options are mandatory for short options too.
      --preserve-status
                 exit with the same status as COMMAND, even when the
                   command times out
      --foreground
                 when not running timeout directly from a shell prompt,
                   allow COMMAND to read from the TTY and get TTY signals;
                   in this mode, the signal goes to COMMAND alone (the rest
                   of its tree is still stopped when COMMAND exits)
  -k, --kill-after=DURATION
                 also send a KILL signal if COMMAND is still running
                   this long after the initial signal was sent; reaper
                   sends it to COMMAND's whole tree
  -s, --signal=SIGNAL
                 specify the signal to be sent on timeout;
                   SIGNAL may be a name like 'HUP' or a number;
                   see 'kill -l' for a list of signals
  -v, --verbose  diagnose to stderr any signal sent upon timeout
      --help        display this help and exit
      --version     output version information and exit

DURATION is a floating point number with an optional suffix:
's' for seconds (the default), 'm' for minutes, 'h' for hours or 'd' for days.
A duration of 0 disables the associated timeout.

Upon timeout, send the TERM signal to COMMAND, if no other SIGNAL specified.
The TERM signal kills any process that does not block or catch that signal.
It may be necessary to use the KILL signal, since this signal can't be caught.

Where reaper differs from GNU timeout, on purpose:
  - The signal goes to every process COMMAND started, wherever it went (setsid,
    double fork): reaper contains the tree (a cgroup of its own, or reaper as
    subreaper), not one process group.
  - Nothing COMMAND started outlives it: once COMMAND has exited (on its own or
    after the signal), whatever is left of its tree gets the rest of the -k
    time, or 2 seconds without -k, after the signal, then SIGKILL.
  - Without -k, reaper, like GNU timeout, waits for COMMAND itself for as long
    as it runs, even if it ignores the signal.
  - COMMAND may always use the terminal as with --foreground: it leads a
    process group of its own, which reaper makes the terminal's foreground
    group while it runs (so kill 0 in COMMAND cannot reach reaper).

Exit status:
  124  if COMMAND times out, and --preserve-status is not specified
  125  if the timeout command itself fails (or a process survived SIGKILL)
  126  if COMMAND is found but cannot be invoked
  127  if COMMAND cannot be found
  137  if COMMAND (or timeout itself) is sent the KILL (9) signal (128+9)
  -    the exit status of COMMAND otherwise

Installed as a link named 'timeout' (ln -s \"$(command -v reaper)\" ~/bin/timeout),
reaper behaves as 'reaper timeout'."
    )
}

/// Dies of `sig`, as timeout(1) does when COMMAND did: without a core dump of reaper's own,
/// the signal's default action restored and unblocked. Returns when that is not possible, or
/// when the default action does not terminate (CHLD, WINCH, CONT…): the caller exits 128+N.
pub fn die_of(sig: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) only changes this process's dumpable flag.
    let no_core = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0;
    #[cfg(not(target_os = "linux"))]
    // SAFETY: setrlimit with a valid, initialised struct.
    let no_core = unsafe {
        libc::setrlimit(
            libc::RLIMIT_CORE,
            &libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            },
        )
    } == 0;
    if !no_core {
        return;
    }
    // A death by signal runs no exit hook: what reaper said goes out first (bounded).
    reaper_platform::stderr::flush(std::time::Duration::from_millis(500));
    // SAFETY: plain libc calls on a local, initialised sigset; the run is over (tree reaped,
    // cgroup removed, guardian told), so nothing is lost when the signal ends reaper.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}
