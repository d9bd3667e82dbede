//! [`Child`]: a spawned, contained command, and everything it started.

use std::path::PathBuf;

use crate::run::Run;
use crate::supervise::{Request, Sender, Step};
use crate::supervisor::Supervisor;
use crate::{BackendKind, Command, Error, Escapee, Limits, Outcome, Process, Signal};

/// A running command and its whole tree, contained.
///
/// - [`Child::wait`] waits for the leader to exit, stops what it left (or stops the tree on
///   the command's timeout, or on a request), and returns the [`Outcome`]; calling it again
///   returns the same outcome.
/// - [`Child::stop`] stops the whole tree now, as a timeout would: the first signal, the
///   grace, then SIGKILL for everything left. [`Child::kill`] SIGKILLs it at once.
/// - **Dropping a `Child` kills its whole tree**: one SIGKILL of every process it started,
///   wherever it went (`cgroup.kill` for the cgroup backend), then its containment is removed
///   and the leader reaped in the background. Dropping it inside a panicking task does the
///   same.
///
/// Use it from the tokio runtime that spawned it (its descriptors are registered with that
/// runtime's reactor); many children may run at once, in any runtime, multi-thread or
/// current-thread, with IO and time enabled.
pub struct Child {
    sup: Option<Supervisor>,
    outcome: Option<Outcome>,
    requests: Sender,
    leader: i32,
    /// The leader's stdin, when it was [`crate::Stdio::Piped`].
    pub stdin: Option<tokio::process::ChildStdin>,
    /// The leader's stdout, when it was [`crate::Stdio::Piped`].
    pub stdout: Option<tokio::process::ChildStdout>,
    /// The leader's stderr, when it was [`crate::Stdio::Piped`].
    pub stderr: Option<tokio::process::ChildStderr>,
    warning: Option<crate::ContainError>,
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child")
            .field("leader", &self.leader)
            .field("finished", &self.outcome.is_some())
            .finish_non_exhaustive()
    }
}

impl Command {
    /// Starts the command in fresh containment: the leader runs no code of its own outside it.
    /// The standard streams set to [`Stdio::Piped`](crate::Stdio::Piped) are taken from this
    /// command (set them again to spawn it once more); the rest can be spawned again as it is.
    pub async fn spawn(&mut self) -> Result<Child, Error> {
        spawn(self).await
    }
}

async fn spawn(cmd: &mut Command) -> Result<Child, Error> {
    let mut requests = cmd.requests.clone().unwrap_or_default();
    let program = || cmd.program.to_string_lossy().into_owned();
    // Before the spawn: a parent already gone stops the run from starting.
    let parent = match cmd.end_on_parent_death {
        true => Some(crate::watch::Parent::start().map_err(|e| Error::Spawn {
            program: program(),
            source: std::io::Error::other(e),
        })?),
        false => None,
    };
    let mut spec = cmd.spec();
    let started = Run::start(&mut spec).await;
    cmd.take_back(spec);
    let (run, pipes) = started?;
    let leader = run.leader_pid();
    let warning = run.warning.clone();
    let io = |e: std::io::Error| Error::Spawn {
        program: cmd.program.to_string_lossy().into_owned(),
        source: e,
    };
    if let Some(mut parent) = parent {
        let died = async move {
            if let Err(e) = parent.died().await {
                tracing::warn!("cannot watch this process's parent any more ({e}): the run no longer ends with it");
                std::future::pending::<()>().await;
            }
        };
        requests.on(died, Request::ParentDied);
    }
    let mut pipes = pipes;
    if cmd.relay_stdin {
        if let Some(to_child) = pipes.stdin.take() {
            let unwatched = |e| {
                tracing::warn!("cannot watch stdin for a hang-up ({e}): only its EOF ends the run")
            };
            match crate::watch::relay_stdin(to_child.into(), unwatched) {
                Ok(eof) => requests.on(eof, Request::StdinEof),
                Err(e) => tracing::warn!("cannot relay stdin ({e}): the leader's stdin is closed"),
            }
        }
    }
    let stdin = pipes
        .stdin
        .map(tokio::process::ChildStdin::from_std)
        .transpose()
        .map_err(io)?;
    let stdout = pipes
        .stdout
        .map(tokio::process::ChildStdout::from_std)
        .transpose()
        .map_err(io)?;
    let stderr = pipes
        .stderr
        .map(tokio::process::ChildStderr::from_std)
        .transpose()
        .map_err(io)?;
    let sender = requests.sender();
    Ok(Child {
        sup: Some(Supervisor::new(run, cmd.plan.clone(), requests)),
        outcome: None,
        requests: sender,
        leader,
        stdin,
        stdout,
        stderr,
        warning,
    })
}

impl Child {
    /// The leader's pid.
    pub fn id(&self) -> u32 {
        self.leader.unsigned_abs()
    }

    /// Waits for what matters next: the leader's own exit ([`Step::LeaderExited`]), or the run's
    /// decision to stop ([`Step::Stop`]: its timeout, a request), without stopping anything
    /// yet. Cancel-safe: a caller may put it in a `select!` beside the leader's pipes and act
    /// between steps. After a [`Step::Stop`], and once the run is over, it returns the same at
    /// once.
    pub async fn step(&mut self) -> Step {
        match (&mut self.sup, &self.outcome) {
            (Some(sup), _) => sup.step().await,
            (None, Some(o)) => Step::Stop(o.stop_reason),
            // `sup` is taken only when the outcome is stored.
            (None, None) => std::future::pending().await,
        }
    }

    /// Runs the run to its end and returns its outcome: waits for the leader (or a stop
    /// request, or the timeout), stops what is left as planned, reaps, removes the containment.
    /// Idempotent: every later call returns the same outcome at once. Cancel-safe until the run
    /// decides to stop; a stop sequence cancelled midway starts again at the next call.
    pub async fn wait(&mut self) -> Outcome {
        if let Some(o) = &self.outcome {
            return o.clone();
        }
        let Some(sup) = self.sup.as_mut() else {
            // Unreachable: `sup` is taken only when the outcome is stored.
            return std::future::pending().await;
        };
        sup.stop().await;
        let sup = self.sup.take();
        let outcome = match sup {
            Some(sup) => sup.finish().await,
            None => return std::future::pending().await,
        };
        self.outcome = Some(outcome.clone());
        outcome
    }

    /// Stops the whole tree now, gracefully, as the command's plan says (by default SIGTERM to
    /// every process, the grace, then SIGKILL), and returns the outcome
    /// ([`crate::StopReason::Cancel`], unless the run had ended already).
    pub async fn stop(&mut self) -> Outcome {
        self.requests.send(Request::Cancel);
        self.wait().await
    }

    /// Kills the whole tree now (SIGKILL, no grace) and returns the outcome.
    pub async fn kill(&mut self) -> Outcome {
        self.requests.send(Request::Kill);
        self.wait().await
    }

    /// A sender of requests to this run, usable from anywhere (another task, a signal handler's
    /// task): [`Request::Cancel`] stops it, [`Request::Kill`] kills it.
    pub fn sender(&self) -> Sender {
        self.requests.clone()
    }

    /// The outcome, once [`Child::wait`] has returned it.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    fn run(&self) -> Option<&Run> {
        self.sup.as_ref().map(|s| &s.run)
    }

    /// The run's id ([`crate::runs::RunId`]): every process of the run carries it in its
    /// environment as `REAPER_RUN_ID`, and `reaper ps` shows the run under it. `None` when this
    /// process cannot read its own identity, or once the run is over.
    #[cfg(target_os = "linux")]
    pub fn run_id(&self) -> Option<crate::runs::RunId> {
        self.run().and_then(Run::id)
    }

    /// The containment the run got.
    pub fn backend(&self) -> Option<BackendKind> {
        self.run().map(Run::backend_kind)
    }

    /// The run's cgroup, with the cgroup backend.
    pub fn cgroup(&self) -> Option<PathBuf> {
        self.run().and_then(Run::cgroup_path).map(PathBuf::from)
    }

    /// The systemd unit delegated to reaper that holds the run's cgroup, if any.
    pub fn scope(&self) -> Option<String> {
        self.run().and_then(Run::scope)
    }

    /// Why `auto` fell back from the cgroup backend, when it did: the cgroup backend's error
    /// ([`Child::backend`] is the one the run got).
    pub fn warning(&self) -> Option<&crate::ContainError> {
        self.warning.as_ref()
    }

    /// The run's live processes now (empty once it is over).
    pub fn members(&self) -> Vec<Process> {
        self.run().map(Run::members).unwrap_or_default()
    }

    /// How many processes the run has, as cheaply as the backend can tell (may count one that
    /// is exiting).
    pub fn process_count(&self) -> usize {
        self.run().map_or(0, Run::process_count)
    }

    /// The run's processes seen outside its cgroup so far.
    pub fn escapees(&self) -> Vec<Escapee> {
        self.run().map(Run::escapees).unwrap_or_default()
    }

    /// The run's memory now (`memory.current`), when it has a memory limit.
    pub fn memory_now(&self) -> Option<u64> {
        self.run().and_then(Run::memory_now)
    }

    /// The limits set on the run.
    pub fn limits(&self) -> Limits {
        self.run().map(Run::limits).unwrap_or_default()
    }

    /// Sends `sig` to the leader alone; false if it is gone.
    pub fn signal_leader(&self, sig: Signal) -> bool {
        self.run().is_some_and(|r| r.signal_leader(sig))
    }

    /// Whether the leader has exited, looked at now (reaped if so: the next [`Child::step`]
    /// says [`Step::LeaderExited`]).
    pub fn leader_exited(&mut self) -> bool {
        match self.sup.as_mut() {
            Some(s) => s.leader_exited(),
            None => true,
        }
    }

    /// How the leader ended, once it has been reaped.
    pub fn leader_status(&self) -> Option<crate::ExitStatus> {
        match (&self.sup, &self.outcome) {
            (Some(s), _) => s.run.leader.status,
            (None, Some(o)) => o.leader_status,
            (None, None) => None,
        }
    }

    /// The caller is about to stop the leader itself (a check's interrupt): such a stop is not
    /// the user's Ctrl-Z, so it is not passed on to this process's job.
    pub fn end_job_control(&mut self) {
        if let Some(s) = self.sup.as_mut() {
            s.run.end_job_control();
        }
    }

    /// Ends containment without stopping anyone: whatever is alive keeps running with the
    /// run's limits. Returns where it lives now (a cgroup named out of every sweep's reach), or
    /// `None` where the processes simply stay this process's descendants.
    pub fn keep(mut self) -> Result<Option<PathBuf>, crate::ContainError> {
        match self.sup.take() {
            Some(sup) => sup.into_run().keep(),
            None => Ok(None),
        }
    }
}
