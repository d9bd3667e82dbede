//! [`Command`]: what to run and how to contain it, built like `std::process::Command`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::containment::{Containment, Delegation, Sandbox, SandboxAccess};
use crate::options::{ContainOptions, Options};
use crate::run::{Spec, Stdio};
use crate::supervise::{Plan, Requests, StopSpec, Target};
use crate::{EventSink, Guardian, Limits, Signal};

/// A command to run contained: the program, its arguments, environment, working directory and
/// standard streams (as [`std::process::Command`] has them), how to contain its tree
/// ([`Containment`], [`Limits`], [`Sandbox`]), and how to stop it (the stop signal, the grace,
/// a timeout: a [`Plan`]).
///
/// ```no_run
/// # async fn example() -> Result<(), reaper::Error> {
/// let mut child = reaper::Command::new("sh")
///     .arg("-c")
///     .arg("setsid sleep 600 & exec sleep 600")
///     .timeout(std::time::Duration::from_secs(2))
///     .spawn()
///     .await?;
/// let outcome = child.wait().await;
/// assert_eq!(outcome.stop_reason, reaper::StopReason::Timeout);
/// assert!(outcome.survivors.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    /// Changes to this process's environment, in order: `Some` sets, `None` removes.
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) stdio: [Stdio; 3],
    pub(crate) terminal: bool,
    pub(crate) options: Options,
    pub(crate) plan: Plan,
    pub(crate) requests: Option<Requests>,
    pub(crate) events: EventSink,
    pub(crate) request_id: Option<String>,
    /// Stop the run when this process's parent exits ([`Command::end_on_parent_death`]).
    pub(crate) end_on_parent_death: bool,
    /// Relay this process's stdin to the leader's ([`Command::end_on_stdin_eof`]).
    pub(crate) relay_stdin: bool,
}

/// The grace a [`Command`] gets unless told otherwise, as `reaper run`'s `--grace`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

impl Command {
    /// A command running `program` (looked up in `PATH` as `execvp(3)` does), with this
    /// process's environment, working directory and standard streams, contained by
    /// [`Containment::Auto`]; stopped by SIGTERM to every process of its tree, then SIGKILL after
    /// [`DEFAULT_GRACE`]; no timeout.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        let stop = StopSpec {
            first: Some(Signal::TERM),
            to: Target::Tree,
            grace: DEFAULT_GRACE,
        };
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            env_clear: false,
            cwd: None,
            stdio: Default::default(),
            terminal: false,
            options: Options::default(),
            plan: Plan {
                leftovers: stop,
                ..Plan::new(stop)
            },
            requests: None,
            events: EventSink::none(),
            request_id: None,
            end_on_parent_death: false,
            relay_stdin: false,
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the command.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Sets environment variables for the command.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Removes an environment variable from the command's environment.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Starts the command's environment empty instead of with this process's.
    pub fn env_clear(&mut self) -> &mut Self {
        self.env_clear = true;
        self.env.clear();
        self
    }

    /// Runs the command in `dir`.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The command's standard input.
    pub fn stdin(&mut self, io: impl Into<Stdio>) -> &mut Self {
        self.stdio[0] = io.into();
        self
    }

    /// The command's standard output.
    pub fn stdout(&mut self, io: impl Into<Stdio>) -> &mut Self {
        self.stdio[1] = io.into();
        self
    }

    /// The command's standard error.
    pub fn stderr(&mut self, io: impl Into<Stdio>) -> &mut Self {
        self.stdio[2] = io.into();
        self
    }

    /// Lets the command use this process's controlling terminal as a foreground job does: when
    /// this process is in the terminal's foreground and its stdout is not a pipe, the leader's
    /// process group gets the terminal (reads work, Ctrl-C goes to the command), and gets it
    /// back when the leader exits. Off by default: a program that reads the terminal itself
    /// would be stopped by SIGTTIN while the leader holds it. Not under a [`Sandbox`], whose
    /// leader has a session of its own.
    pub fn foreground(&mut self, on: bool) -> &mut Self {
        self.terminal = on;
        self
    }

    /// How to contain the tree, all of it (replaces what the setters below set).
    pub fn contain(&mut self, options: ContainOptions) -> &mut Self {
        self.options = options;
        self
    }

    /// How the tree is contained now, to share with other commands.
    pub fn get_contain(&self) -> &ContainOptions {
        &self.options
    }

    /// How to contain the tree ([`ContainOptions::containment`]).
    pub fn containment(&mut self, c: Containment) -> &mut Self {
        self.options.containment(c);
        self
    }

    /// Where the run's cgroup is made ([`ContainOptions::cgroup_parent`]).
    pub fn cgroup_parent(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.options.cgroup_parent(dir);
        self
    }

    /// [`Containment::Pgid`]'s poll interval ([`ContainOptions::poll`]).
    pub fn poll(&mut self, every: Duration) -> &mut Self {
        self.options.poll(every);
        self
    }

    /// Under systemd, a delegated scope first ([`ContainOptions::delegation`]).
    pub fn delegation(&mut self, d: Delegation) -> &mut Self {
        self.options.delegation(d);
        self
    }

    /// Resource limits for the whole tree ([`ContainOptions::limits`]).
    pub fn limits(&mut self, limits: Limits) -> &mut Self {
        self.options.limits(limits);
        self
    }

    /// A sandbox the command cannot undo ([`ContainOptions::sandbox`]).
    pub fn sandbox(&mut self, sandbox: Option<Sandbox>) -> &mut Self {
        self.options.sandbox(sandbox);
        self
    }

    /// A directory the sandbox reaches as this process does ([`ContainOptions::sandbox_path`]).
    pub fn sandbox_path(&mut self, dir: impl AsRef<Path>, access: SandboxAccess) -> &mut Self {
        self.options.sandbox_path(dir, access);
        self
    }

    /// This process's guardian ([`ContainOptions::guardian`]).
    pub fn guardian(&mut self, guardian: Arc<Guardian>) -> &mut Self {
        self.options.guardian(guardian);
        self
    }

    /// Raises the thread that starts the run above the tree where permitted
    /// ([`ContainOptions::raise_priority`]).
    pub fn raise_priority(&mut self, yes: bool) -> &mut Self {
        self.options.raise_priority(yes);
        self
    }

    /// Stops the whole tree after `timeout` from the spawn ([`crate::StopReason::Timeout`]).
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.plan.timeout = Some(timeout);
        self
    }

    /// How long the tree gets after the first stop signal before everything left is
    /// SIGKILLed ([`DEFAULT_GRACE`] unless set).
    pub fn grace(&mut self, grace: Duration) -> &mut Self {
        self.plan.stop.grace = grace;
        self.plan.leftovers.grace = grace;
        self.plan.parent_death_grace = self.plan.parent_death_grace.min(grace);
        self.plan.shutdown_grace = grace;
        self
    }

    /// The first signal of a stop (SIGTERM unless set); `None` sends nothing, then SIGKILL
    /// after the grace.
    pub fn stop_signal(&mut self, sig: Option<Signal>) -> &mut Self {
        self.plan.stop.first = sig;
        self.plan.leftovers.first = sig;
        self
    }

    /// How the run is supervised, all of it (replaces what [`Command::timeout`],
    /// [`Command::grace`] and [`Command::stop_signal`] set).
    pub fn plan(&mut self, plan: Plan) -> &mut Self {
        self.plan = plan;
        self
    }

    /// Stops the run ([`crate::StopReason::ParentDied`]) when this process's parent *process*
    /// exits, with the plan's `parent_death_grace` at most (see [`crate::watch::Parent`]: the
    /// parent [`crate::watch::remember_parent`] saw, else the one at the spawn). The spawn
    /// fails ([`crate::Error::Spawn`]) when the parent cannot be watched, or is already gone.
    pub fn end_on_parent_death(&mut self) -> &mut Self {
        self.end_on_parent_death = true;
        self
    }

    /// Relays this process's stdin to the leader's (which becomes a pipe), and when it reaches
    /// EOF or its writer hangs up, closes the leader's stdin and gives the leader `grace` to
    /// exit by itself before the run stops ([`crate::StopReason::StdinEof`]); see
    /// [`crate::watch::relay_stdin`]. For a command whose client going away must end it. When
    /// no relay can be started, the leader's stdin is closed and there is no EOF to act on. The
    /// leader's stdin is the relay's (a later [`Command::stdin`] replaces it: nothing is relayed
    /// then), so [`Child::stdin`](crate::Child) is `None`.
    pub fn end_on_stdin_eof(&mut self, grace: Duration) -> &mut Self {
        self.plan.stdin_eof = Some(grace);
        self.stdio[0] = Stdio::Piped;
        self.relay_stdin = true;
        self
    }

    /// Where stop requests come from besides the [`Child`](crate::Child)'s own methods (signals to this
    /// process, a client's cancel, …).
    pub fn requests(&mut self, requests: Requests) -> &mut Self {
        self.requests = Some(requests);
        self
    }

    /// Where the run's lifecycle events go: `f` gets each [`Event`](crate::Event), with the
    /// milliseconds since this call.
    pub fn events(&mut self, f: impl Fn(u64, &crate::Event) + Send + Sync + 'static) -> &mut Self {
        self.events = EventSink::new(f);
        self
    }

    /// The request this run serves (an MCP request's id), kept in the run's record for
    /// `reaper ps` and [`crate::runs::list`].
    pub fn request_id(&mut self, id: impl Into<String>) -> &mut Self {
        self.request_id = Some(id.into());
        self
    }

    /// What the run layer starts: this command's own input to it. The standard streams are
    /// moved in; [`Command::take_back`] returns what the start left of them.
    pub(crate) fn spec(&mut self) -> Spec {
        Spec {
            program: self.program.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            env_clear: self.env_clear,
            cwd: self.cwd.clone(),
            stdio: std::mem::take(&mut self.stdio),
            terminal: self.terminal,
            options: self.options.clone(),
            events: self.events.clone(),
            timeout: self.plan.timeout,
            stop_signal: self.plan.stop.first,
            grace: self.plan.stop.grace,
            request_id: self.request_id.clone(),
        }
    }

    /// The standard streams a start did not take (a pipe or a descriptor it used is gone).
    pub(crate) fn take_back(&mut self, spec: Spec) {
        self.stdio = spec.stdio;
    }

    /// The program, as given.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// argv as text, for reports and messages.
    pub fn argv_lossy(&self) -> Vec<String> {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }
}
