//! reaper: run a command so that nothing it starts outlives it.

/// One line to stderr that can neither abort nor block reaper: `eprintln!` panics when stderr is
/// a closed pipe (Rust ignores SIGPIPE), which is exactly when a client has gone away and the
/// tree must still be torn down; and a write to a stderr the command filled would wait for a
/// reader that may wait for reaper (`reaper_platform::stderr`).
macro_rules! say {
    ($($arg:tt)*) => {
        reaper_platform::stderr::line(format_args!($($arg)*))
    };
}

/// The same for stdout (`reaper doctor | head -1` must not panic).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod advice;
mod cli;
mod coreutils;
#[cfg(target_os = "linux")]
mod fixture;
mod mcp;
#[cfg(test)]
mod plans_tests;
mod report;
mod timeout;
mod units;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "reaper",
    version,
    about = "Run a command so that nothing it starts outlives it",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run CMD contained: on timeout, signal, or the leader's exit, the whole tree dies.
    Run(cli::run::RunArgs),
    /// GNU timeout(1)'s command line, for the whole tree (also as a link named `timeout`).
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Timeout {
        /// [OPTION] DURATION COMMAND [ARG]... (see `reaper timeout --help`)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run CMD contained and report every process that outlived it (exit 1 on a leak).
    Check(cli::check::CheckArgs),
    /// Say which containment works on this machine, and why.
    Doctor(cli::doctor::DoctorArgs),
    /// Serve the MCP tools `codex` and `codex-reply` on stdio, each call contained.
    Mcp(cli::mcp::McpArgs),
    /// List the live runs (every user's, for root): owner, state, processes, memory, CPU.
    #[cfg(target_os = "linux")]
    Ps(cli::ps::PsArgs),
    /// Stop runs as their timeout would: their owners run the stop sequence (done directly
    /// when an owner is stopped or gone).
    #[cfg(target_os = "linux")]
    Stop(cli::stop::StopArgs),
    /// Kill runs' whole trees at once (SIGKILL), through their owners or directly.
    #[cfg(target_os = "linux")]
    Kill(cli::stop::StopArgs),
    /// List the processes of this machine that look leaked: certain ones (their reaper is
    /// gone) and suspects (reparented, in no live run). Read-only unless --kill.
    #[cfg(target_os = "linux")]
    Audit(cli::audit::AuditArgs),
    /// Internal: the guardian of the reaper process PID (see `reaper::Guardian::exec`).
    #[command(hide = true)]
    Guardian { pid: i32, starttime: u64 },
}

fn main() -> std::process::ExitCode {
    // `reaper fixture …` (hidden): a hostile tree for `reaper check --suite`, before anything of
    // reaper's own (a subreaper, a guardian, threads) exists, which the tree must not inherit.
    #[cfg(target_os = "linux")]
    if std::env::args_os().nth(1).as_deref() == Some("fixture".as_ref()) {
        fixture::main(std::env::args_os().skip(2).collect())
    }
    cli::record_parent();
    // Before anything of a run exists, and inherited by the forked guardian: no process of a
    // run without CAP_SYS_PTRACE can trace reaper (and hold it stopped).
    #[cfg(target_os = "linux")]
    let untraceable = reaper::deny_tracing();
    let cli = parse();
    // Before tracing and before any runtime or thread: the guardian is forked.
    let wants_guardian = match &cli {
        Some(Ok(c)) => match &c.command {
            Cmd::Run(a) => a.contain.wants_guardian(&a.guard),
            // The suite contains nothing itself: the wrappers it scores do.
            Cmd::Check(a) => !a.suite && a.contain.wants_guardian(&a.guard),
            Cmd::Mcp(a) => a.contain.wants_guardian(&a.guard),
            // Its probe creates a run cgroup and starts leaders in it.
            Cmd::Doctor(_) => cfg!(target_os = "linux"),
            _ => false,
        },
        Some(Err(_)) => false,
        None => timeout_args().is_some_and(|args| timeout::wants_guardian(&args)),
    };
    if wants_guardian {
        cli::contain::fork_guardian();
    }
    // Every child of reaper is a run's (or its guardian): reaper reaps them all, and orphans of
    // a run come back to it (a child subreaper).
    if let Err(e) = reaper::own_every_child() {
        say!("reaper: warning: cannot become a child subreaper ({e}); orphans of the tree go to PID 1");
    }
    #[cfg(target_os = "linux")]
    if let Err(e) = untraceable {
        say!("reaper: warning: cannot refuse ptrace to the tree (PR_SET_DUMPABLE: {e}); a process of the run could trace and hold reaper");
    }
    dispatch(cli)
}

/// The arguments of timeout(1)'s command line (`reaper timeout …`, or reaper called through a
/// link named `timeout`), which `cli::timeout` parses itself; `None` for clap's.
fn timeout_args() -> Option<Vec<std::ffi::OsString>> {
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some("timeout".as_ref()) {
        return Some(argv.collect());
    }
    (argv.next().as_deref() == Some("timeout".as_ref())).then(|| argv.collect())
}

/// The command line, or `None` for timeout(1)'s.
fn parse() -> Option<Result<Cli, clap::Error>> {
    timeout_args()
        .is_none()
        .then(|| Cli::try_parse_from(init_command_line(std::env::args_os().collect())))
}

/// `reaper -- CMD…` is `reaper run --init -q -- CMD…`: the command line container runtimes give
/// their init (tini's and catatonit's: podman's `--init-path`, Docker's `--init`), so reaper
/// can be that init as it is. Quiet, as those inits are: the runtime's user cannot add `-q`, and
/// the fallback line would open every container's log (errors still print). Any other command
/// line is left as it is.
fn init_command_line(argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    if argv.get(1).is_none_or(|a| a != "--") {
        return argv;
    }
    let mut argv = argv.into_iter();
    let argv0 = argv.next().unwrap_or_default();
    [argv0, "run".into(), "--init".into(), "-q".into()]
        .into_iter()
        .chain(argv)
        .collect()
}

fn dispatch(cli: Option<Result<Cli, clap::Error>>) -> std::process::ExitCode {
    tracing_subscriber::fmt()
        // Never blocks on a stderr the command filled (see `say!`).
        .with_writer(|| reaper_platform::stderr::Writer)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_target(false)
        .init();
    // timeout(1)'s command line is not clap's (getopt_long, options before DURATION only):
    // `reaper timeout …`, or reaper called through a link named `timeout`.
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some("timeout".as_ref()) {
        return std::process::ExitCode::from(timeout::main(
            &argv0.to_string_lossy(),
            argv.collect(),
        ));
    }
    let first = argv.next();
    if first.as_deref() == Some("timeout".as_ref()) {
        return std::process::ExitCode::from(timeout::main("reaper timeout", argv.collect()));
    }
    let cli = match cli {
        Some(Ok(c)) => c,
        // Only timeout(1)'s command line is not parsed here, and it returned above.
        None => return std::process::ExitCode::from(125),
        Some(Err(e)) => {
            let _ = e.print();
            // Usage errors are reaper's own failure (125), like timeout(1); --help/--version are 0.
            return std::process::ExitCode::from(if e.use_stderr() { 125 } else { 0 });
        }
    };
    let code = match cli.command {
        Cmd::Run(a) => cli::run::main(a),
        Cmd::Timeout { args } => timeout::main("reaper timeout", args),
        #[cfg(target_os = "linux")]
        Cmd::Check(a) if a.suite => cli::suite::main(a),
        Cmd::Check(a) => cli::check::main(a),
        Cmd::Doctor(a) => cli::doctor::main(a),
        Cmd::Mcp(a) => cli::mcp::main(a),
        #[cfg(target_os = "linux")]
        Cmd::Ps(a) => cli::ps::main(a),
        #[cfg(target_os = "linux")]
        Cmd::Stop(a) => cli::stop::main(a, reaper::runs::How::Stop),
        #[cfg(target_os = "linux")]
        Cmd::Kill(a) => cli::stop::main(a, reaper::runs::How::Kill),
        #[cfg(target_os = "linux")]
        Cmd::Audit(a) => cli::audit::main(a),
        Cmd::Guardian { pid, starttime } => reaper::Guardian::serve(pid, starttime),
    };
    std::process::ExitCode::from(code)
}
