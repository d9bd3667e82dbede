//! A run's life (DESIGN.md): spawn into containment, watch the leader through its pidfd, stop
//! the tree (first signal to every member, grace, kill), report an [`Outcome`].
//!
//! ```text
//! spawn ─► Running ──leader exits──► Draining (--linger) ─► Stopping ─► Reaped
//!             └── timeout / cancel / reaper signalled ──────► Stopping ─► Reaped
//! ```
//! This module owns the policy (which signal, how long to wait, when to escalate); the
//! containment backends only provide the mechanisms.

pub mod command;
pub mod event;
pub mod outcome;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdin, ChildStdout};
use std::time::Duration;

use crate::containment::pgid::Schedule;
#[cfg(target_os = "linux")]
use reaper_platform::linux::subreaper;
use reaper_platform::process::Handle;
use reaper_platform::terminal::Foreground;
use reaper_platform::{reap, signal, ExitStatus, Signal};
use tokio::signal::unix::{signal as unix_signal, Signal as SignalStream, SignalKind};
use tokio::time::Instant;

use crate::containment::{self, Backend, BackendKind, Containment, Member};
#[cfg(target_os = "linux")]
use crate::containment::{limits, setup};
use crate::guardian::Guardian;
pub use command::{Io, LeaderCommand};
pub use event::{Event, EventSink};
pub use outcome::{Outcome, StopReason};
use std::sync::Arc;

/// Which containment a run asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Requested {
    /// cgroup when a run cgroup can be created, else subreaper (with a warning); pgid on macOS.
    Auto,
    Cgroup,
    Subreaper,
    /// The leader's process group plus process-table tracking (macOS; portable).
    Pgid,
}

#[derive(Debug, Clone)]
pub struct ContainOpts {
    pub requested: Requested,
    /// cgroup backend only (accepted and ignored on macOS).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub cgroup_parent: Option<PathBuf>,
    /// pgid backend: the slowest interval between two looks at the process table.
    pub poll: Duration,
    /// Cleans up the run's cgroup if reaper itself is killed.
    pub guardian: Option<Arc<Guardian>>,
    /// Under systemd: whether to ask for a delegated scope first (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub delegate: DelegateMode,
    /// Resource limits (cgroup backend only: anything else refuses them).
    pub limits: containment::limits::Limits,
    /// `--sandbox`: the leader starts in a sandbox it cannot undo (see command.rs).
    pub sandbox: Option<SandboxMode>,
}

/// `--sandbox[=pid]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxMode {
    /// Mount and cgroup namespaces, a read-only cgroup file system, capabilities dropped.
    On,
    /// The same, and a PID namespace with its own /proc, the leader its PID 1.
    Pid,
}

/// `--delegate` (see `containment::delegate`); only Linux has systemd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DelegateMode {
    /// Under systemd, move reaper into a delegated scope of its own unless it is in one already.
    Auto,
    /// Never ask systemd; create run cgroups where reaper is.
    Never,
}

/// After the final SIGKILL, how long the kernel gets to empty the tree before reaper reports
/// survivors (a process in uninterruptible sleep dies only when its I/O returns).
const KILL_DEADLINE: Duration = Duration::from_secs(5);
/// Subreaper and pgid backends: how long one SIGSTOP/SIGKILL sweep waits before sweeping again.
const KILL_ROUND: Duration = Duration::from_millis(200);
/// pgid backend: how often the process table is read right after the spawn and while the tree
/// is changing (backing off to `--poll` when it is quiet), and the fastest `--poll` allowed.
const POLL_FAST: Duration = Duration::from_millis(5);
const POLL_MIN: Duration = Duration::from_millis(1);
/// How long the stale-cgroup sweep waits for a stale cgroup to empty.
#[cfg(target_os = "linux")]
const SWEEP_DEADLINE: Duration = Duration::from_secs(1);

/// Creates the run's containment as requested; for `auto`, falls back from cgroup to subreaper
/// and says why in the returned warning.
pub async fn contain(opts: &ContainOpts) -> Result<(Backend, Option<String>), String> {
    #[cfg(target_os = "linux")]
    let cgroup = || async {
        if opts.cgroup_parent.is_none() {
            use containment::delegate::{self, Delegation};
            if let Delegation::Failed { why } = delegate::ensure(opts.delegate).await {
                return Err(format!(
                    "{why}; reaper does not create run cgroups in a cgroup systemd manages for \
                     another unit (--delegate never does it anyway; --cgroup-parent names a \
                     cgroup of yours)"
                ));
            }
        }
        let env = setup::discover()?;
        let placement = env.placement(opts.cgroup_parent.as_deref())?;
        // Before any cgroup is created there (the supervisor leaf included), so a reaper killed
        // right after the mkdir still has its guardian looking in the right place.
        if let Some(g) = &opts.guardian {
            g.watch_dir(&placement.dir);
        }
        let enable = limits::check(
            &opts.limits,
            &env,
            &placement,
            limits::ownership(opts.cgroup_parent.is_some()),
        )?;
        setup::ensure_leaf(&env, &placement, !enable.is_empty())?;
        if !enable.is_empty() {
            limits::enable(&placement, &enable)?;
        }
        sweep_once(&placement.dir).await;
        let mut backend = setup::create_run_cgroup(&placement)?;
        // reaper's own helper is its child outside every run cgroup, like an orphan of the run.
        if let Some(g) = &opts.guardian {
            backend.exclude(g.pid(), g.starttime());
        }
        if let Err(e) = limits::apply(backend.cgroup(), &opts.limits) {
            let _ = backend.release();
            return Err(e);
        }
        Ok(backend)
    };
    // A limit needs the cgroup backend: never a silent run without it.
    let no_limits = |backend: &str| {
        if opts.limits.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} needs the cgroup backend (cgroup v2); --containment {backend} cannot \
                 enforce it; a limit is never dropped, so the run did not start",
                opts.limits.flags()
            ))
        }
    };
    #[cfg(target_os = "linux")]
    let subreaper = || {
        foreign_proc("subreaper")?;
        containment::subreaper::SubreaperBackend::new()
            .map(|mut b| {
                if let Some(g) = &opts.guardian {
                    b.exclude(g.pid(), g.starttime());
                }
                Backend::Subreaper(b)
            })
            .map_err(|e| {
                format!("cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): {e}")
            })
    };
    let pgid = || {
        #[cfg(target_os = "linux")]
        foreign_proc("pgid")?;
        let schedule = Schedule::new(POLL_FAST, opts.poll.max(POLL_MIN));
        containment::pgid::PgidBackend::new(schedule)
            .map(Backend::Pgid)
            .map_err(|e| format!("cannot read the process table for the pgid backend: {e}"))
    };
    match opts.requested {
        #[cfg(target_os = "linux")]
        Requested::Cgroup => cgroup().await.map(|b| (Backend::Cgroup(b), None)),
        #[cfg(target_os = "linux")]
        Requested::Subreaper => {
            no_limits("subreaper")?;
            subreaper().map(|b| (b, None))
        }
        #[cfg(not(target_os = "linux"))]
        Requested::Cgroup => Err("--containment cgroup is Linux-only (cgroup v2); on macOS use \
                                  pgid, which auto picks"
            .into()),
        #[cfg(not(target_os = "linux"))]
        Requested::Subreaper => Err("--containment subreaper is Linux-only \
                                     (PR_SET_CHILD_SUBREAPER); on macOS use pgid, which auto picks"
            .into()),
        Requested::Pgid => {
            no_limits("pgid")?;
            pgid().map(|b| (b, None))
        }
        // No cgroups and no subreaper on macOS: the process table is all there is.
        #[cfg(not(target_os = "linux"))]
        Requested::Auto => {
            no_limits("auto (pgid on macOS)")?;
            pgid().map(|b| (b, None))
        }
        #[cfg(target_os = "linux")]
        Requested::Auto => match cgroup().await {
            // A `--cgroup-parent` that is not a cgroup2 directory is the caller's mistake, not
            // a host without cgroups: refused (and nothing created) rather than a fallback.
            Err(why) if opts.cgroup_parent.is_some() && placement_refused(opts) => Err(why),
            Ok(b) => Ok((Backend::Cgroup(b), None)),
            // No fallback: the subreaper cannot enforce a limit.
            Err(why) if !opts.limits.is_empty() => Err(why),
            Err(why) => subreaper().map(|b| {
                let warning = format!(
                    "reaper: warning: no cgroup for this run ({why}); using the subreaper backend instead; run `reaper doctor` for details"
                );
                (b, Some(warning))
            }),
        },
    }
}

/// The subreaper and pgid backends find the tree in `/proc` by the pids it lists: under a
/// `/proc` of another PID namespace those name other processes (the parent namespace's: as
/// PID 1, "descendants of 1" would be the host's whole tree), so they refuse it.
#[cfg(target_os = "linux")]
fn foreign_proc(backend: &str) -> Result<(), String> {
    if reaper_platform::linux::procfs::is_foreign() {
        return Err(format!(
            "the {backend} backend cannot work here: /proc shows another PID namespace than \
             reaper's (a PID namespace entered without a /proc of its own); mount one for this \
             namespace (`unshare --pid --fork --mount-proc`; container runtimes do)"
        ));
    }
    Ok(())
}

/// Whether `--cgroup-parent` itself is what the cgroup backend refused.
#[cfg(target_os = "linux")]
fn placement_refused(opts: &ContainOpts) -> bool {
    setup::discover().is_ok_and(|env| env.placement(opts.cgroup_parent.as_deref()).is_err())
}

/// Stale cgroups are swept once per reaper process, under the first parent it uses.
#[cfg(target_os = "linux")]
async fn sweep_once(dir: &std::path::Path) {
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SWEPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
        setup::sweep_stale(dir, Instant::now() + SWEEP_DEADLINE).await;
    }
}

/// Why a run could not start; each maps to timeout(1)'s exit status.
#[derive(Debug)]
pub enum StartError {
    /// 127: the program does not exist (and the errno, for timeout(1)'s message).
    NotFound(String, i32),
    /// 126: it exists but cannot be executed.
    NotExecutable(String, i32),
    /// 126: its arguments and environment are over the kernel's limits for exec (E2BIG).
    TooLarge(String),
    /// 125: reaper itself failed (no containment, no pidfd…).
    Reaper(String),
}

impl StartError {
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::NotFound(..) => 127,
            StartError::NotExecutable(..) | StartError::TooLarge(_) => 126,
            StartError::Reaper(_) => 125,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            StartError::NotFound(m, _)
            | StartError::NotExecutable(m, _)
            | StartError::TooLarge(m)
            | StartError::Reaper(m) => m,
        }
    }
    /// Why exec failed, when it did (`No such file or directory`).
    pub fn exec_error(&self) -> Option<std::io::Error> {
        match self {
            StartError::NotFound(_, e) | StartError::NotExecutable(_, e) => {
                Some(std::io::Error::from_raw_os_error(*e))
            }
            StartError::TooLarge(_) => Some(std::io::Error::from_raw_os_error(libc::E2BIG)),
            StartError::Reaper(_) => None,
        }
    }
}

/// The leader's pipes, when the command asked for them.
pub struct Pipes {
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// The leader: watched through its handle (a pidfd on Linux), reaped through [`reap`], status
/// kept once known.
struct Leader {
    handle: Handle,
    status: Option<ExitStatus>,
    gone: bool,
    at: Option<Instant>,
    sigchld: Option<SignalStream>,
    /// The terminal, when the leader's new process group was made its foreground group.
    terminal: Option<Foreground>,
    /// Whether a stop of the leader is passed on to reaper's job (see `pass_on_stop`): not once
    /// reaper itself signals the tree.
    job_control: bool,
    sink: EventSink,
}

impl Leader {
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.gone {
            return self.status;
        }
        match reap::try_reap_leader(&self.handle) {
            Ok(Some(st)) => self.done(Some(st)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(
                    "cannot wait for the leader (pid {}): {e}",
                    self.handle.raw_pid()
                );
                self.done(None)
            }
        }
    }

    fn done(&mut self, st: Option<ExitStatus>) -> Option<ExitStatus> {
        self.release_terminal();
        self.status = st;
        self.gone = true;
        self.at = Some(Instant::now());
        let (code, sig) = outcome::status_parts(st);
        self.sink.emit(Event::LeaderExited { code, signal: sig });
        st
    }

    /// Waits for the leader to exit and reaps it, reaping orphans meanwhile. Idempotent.
    async fn wait(&mut self) -> Option<ExitStatus> {
        loop {
            if self.gone {
                return self.status;
            }
            if let Some(st) = self.poll() {
                return Some(st);
            }
            let sigchld = async {
                match self.sigchld.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.handle.exited() => {}
                _ = sigchld => { reap::reap_orphans(); }
            }
            self.pass_on_stop();
        }
    }

    /// The terminal goes back to reaper's group (the leader is done with it).
    fn release_terminal(&mut self) {
        if let Some(t) = self.terminal.take() {
            if let Err(e) = t.take_back_from(self.handle.raw_pid()) {
                tracing::debug!("cannot take the terminal back: {e}");
            }
        }
    }

    /// Job control, as a shell does it: when the leader (in the terminal's foreground) is
    /// stopped by Ctrl-Z or a background read, reaper takes the terminal back and stops its own
    /// job, so the user's shell sees the job stopped; when the shell continues it (`fg`),
    /// reaper hands the terminal back and continues the leader's group. After `bg` the
    /// terminal stays with the shell (`Foreground` only moves it while reaper's group has it).
    fn pass_on_stop(&mut self) {
        let Some(t) = &self.terminal else { return };
        if !self.job_control {
            return;
        }
        let Some(sig) = reap::leader_stopped(&self.handle) else {
            return;
        };
        if ![Signal::TSTP, Signal::TTIN, Signal::TTOU, Signal::STOP].contains(&sig) {
            return;
        }
        let group = self.handle.raw_pid();
        let _ = t.take_back_from(group);
        // Returns once reaper's job is continued (or at once if no shell controls it).
        signal::stop_own_job();
        if let Err(e) = t.give_to(group) {
            tracing::debug!("cannot hand the terminal back to group {group}: {e}");
        }
        if let Some(g) = reaper_platform::Pid::from_raw(group) {
            let _ = signal::to_process_group(g, Signal::CONT);
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.release_terminal();
    }
}

/// A running, contained command.
pub struct Run {
    argv: Vec<String>,
    backend: Backend,
    leader: Leader,
    sink: EventSink,
    started: Instant,
    stop_at: Option<Instant>,
    /// The processes a stop ended, by pid: every one alive when the stop began (whoever ended
    /// it: reaper's signals, or the leader stopping its own tree), and every one reaper killed
    /// after. A pid is not reused within one teardown: the killed processes are ours to reap,
    /// or PID 1's, and the tree forks no more.
    stopped: HashSet<i32>,
    /// `finish` or `keep` ran; otherwise dropping the run kills its tree (see `Drop`).
    ended: bool,
    /// The fallback warning, if `auto` fell back.
    pub warning: Option<String>,
    guardian: Option<Arc<Guardian>>,
    /// The limits set on the run cgroup.
    limits: containment::limits::Limits,
}

impl Run {
    /// Spawns `cmd` into fresh containment. The leader joins it before it runs any code.
    pub async fn start(
        cmd: LeaderCommand,
        opts: &ContainOpts,
        sink: EventSink,
    ) -> Result<(Run, Pipes), StartError> {
        let argv = cmd.argv_lossy();
        let (mut backend, warning) = contain(opts).await.map_err(StartError::Reaper)?;
        let guardian = opts.guardian.clone();
        // Orphans of the tree reparent to us rather than PID 1, so we reap them at once (PID 1
        // may be slow to) and the subreaper backend can find them. (macOS: no such thing.)
        #[cfg(target_os = "linux")]
        if let Err(e) = subreaper::become_subreaper() {
            tracing::debug!("not a subreaper: {e}");
        }
        let sigchld = unix_signal(SignalKind::child()).ok();
        // A leader in a process group of its own needs the terminal handed to it, or its first
        // read from it stops it (SIGTTIN).
        let terminal = (cmd.wants_terminal()
            && (cmd.starts_own_group() || backend.kind() == BackendKind::Pgid))
            .then(Foreground::if_foreground)
            .flatten();
        // The reaping lock from the spawn to `register_leader` (no `.await` in between): no
        // `reap_orphans` can take the leader's status, nor the status of a child whose exec
        // failed, which std's spawn waits for itself.
        let reaping = reap::hold();
        let spawned = match command::spawn(cmd, &backend, terminal.as_ref(), opts.sandbox) {
            Ok(s) => s,
            Err(e) => {
                drop(reaping);
                if let Some(t) = &terminal {
                    t.take_back_after_failed_spawn();
                }
                let _ = backend.release();
                return Err(classify_spawn_error(&e, &argv[0]));
            }
        };
        let (pid, pipes) = (spawned.pid, spawned.pipes);
        tracing::debug!(
            pid = pid.as_raw_nonzero().get(),
            how = spawned.how,
            "leader started"
        );
        reaping.register_leader(pid);
        backend.spawned(pid);
        let leader = match spawned.handle {
            Ok(fd) => fd,
            Err(e) => {
                // Without a pidfd we cannot watch safely: kill what we started and give up.
                if let Some(t) = &terminal {
                    t.take_back_after_failed_spawn();
                }
                backend.kill_all();
                let _ = backend.wait_empty(Instant::now() + KILL_DEADLINE).await;
                let _ = backend.release();
                reap::reap_orphans();
                reap::unregister_leader(pid);
                return Err(StartError::Reaper(format!(
                    "pidfd_open({pid:?}) failed: {e} (Linux 5.4+ needed)"
                )));
            }
        };
        sink.emit(Event::Spawned {
            pid: leader.raw_pid(),
            backend: backend.kind().as_str(),
            cgroup: backend.cgroup_path().map(|p| p.display().to_string()),
        });
        if let Some(t) = &terminal {
            if let Err(e) = t.give_to(leader.raw_pid()) {
                tracing::debug!("cannot hand the terminal to the leader's group: {e}");
            }
        }
        let leader = Leader {
            handle: leader,
            status: None,
            gone: false,
            at: None,
            sigchld,
            terminal,
            job_control: true,
            sink: sink.clone(),
        };
        let run = Run {
            argv,
            backend,
            leader,
            sink,
            started: Instant::now(),
            stop_at: None,
            stopped: HashSet::new(),
            ended: false,
            warning,
            guardian,
            limits: opts.limits,
        };
        Ok((run, pipes))
    }

    pub fn leader_pid(&self) -> i32 {
        self.leader.handle.raw_pid()
    }

    pub fn backend_kind(&self) -> containment::BackendKind {
        self.backend.kind()
    }

    pub fn cgroup_path(&self) -> Option<String> {
        self.backend.cgroup_path().map(|p| p.display().to_string())
    }

    /// The systemd unit delegated to reaper that holds the run cgroup, if any.
    pub fn scope(&self) -> Option<String> {
        #[cfg(target_os = "linux")]
        if self.backend.cgroup_path().is_some() {
            return containment::delegate::done()
                .and_then(|d| d.unit())
                .map(str::to_owned);
        }
        None
    }

    /// The leader's exit code or signal name, once it has been reaped.
    pub fn leader_status_parts(&self) -> (Option<i32>, Option<String>) {
        outcome::status_parts(self.leader.status)
    }

    pub fn events(&self) -> &EventSink {
        &self.sink
    }

    /// Live processes of the run.
    pub fn members(&self) -> Vec<Member> {
        self.backend.members()
    }

    /// How many processes the run has, as cheaply as the backend can tell (for progress
    /// reports; may include one that is exiting).
    pub fn process_count(&self) -> usize {
        self.backend.pids().len()
    }

    /// The processes of the run seen outside its cgroup so far (see `Containment::escapees`).
    pub fn escapees(&self) -> Vec<containment::Escapee> {
        self.backend.escapees()
    }

    /// Waits for the leader to exit and reaps it, reaping orphans meanwhile. Idempotent.
    pub async fn wait_leader(&mut self) -> Option<ExitStatus> {
        self.leader.wait().await
    }

    /// reaper is about to stop the leader itself (`reaper check`'s interrupt): such a stop is
    /// not the user's Ctrl-Z, so it is not passed on to reaper's job.
    pub fn end_job_control(&mut self) {
        self.leader.job_control = false;
    }

    /// Sends `sig` to the leader alone, through its handle.
    pub fn signal_leader(&self, sig: Signal) -> bool {
        !self.leader.gone
            && matches!(
                signal::to_handle(&self.leader.handle, sig),
                Ok(signal::Delivery::Sent)
            )
    }

    /// Passes `sig` on, as an init does: to the leader alone, or to every member with
    /// `to_tree`. Not a stop: the run goes on, nothing is counted as stopped, and no SIGCONT
    /// follows. Returns how many processes it reached.
    pub fn forward(&self, sig: Signal, to_tree: bool) -> usize {
        let n = if to_tree {
            self.backend.signal_all(sig).len()
        } else {
            usize::from(self.signal_leader(sig))
        };
        self.sink.emit(Event::Forwarded {
            signal: signal::name(sig),
            n,
        });
        n
    }

    /// Lets the tree run on its own until it is empty or `linger` has passed.
    pub async fn linger(&mut self, linger: Duration) -> bool {
        self.backend.wait_empty(Instant::now() + linger).await
    }

    /// Stops the whole tree: `first` to every member (then SIGCONT, so a stopped process sees
    /// it), up to `grace` for them to exit, then SIGKILL for all (cgroup.kill, or the subreaper
    /// sweep) until the tree is empty. `cut_short` ends the grace early (a second Ctrl-C).
    /// `first` may be `None` (timeout(1)'s signal 0): nothing is sent, the grace still runs.
    pub async fn stop(
        &mut self,
        first: impl Into<Option<Signal>>,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) {
        self.stop_with(first.into(), FirstTo::All, grace, cut_short)
            .await
    }

    /// Sends `sig` to every member (or to the leader alone), then SIGCONT so that a stopped
    /// process sees it; the tree is not waited for. Returns how many processes it reached.
    /// timeout(1)'s face signals first and waits for the leader only.
    pub fn signal(&mut self, sig: Signal, leader_only: bool) -> usize {
        self.stop_at.get_or_insert_with(Instant::now);
        // reaper's own signal may stop the leader: not a job-control stop to pass on.
        self.leader.job_control = false;
        let to = if leader_only {
            FirstTo::Leader
        } else {
            FirstTo::All
        };
        self.send_first(sig, to)
    }

    fn send_first(&mut self, first: Signal, to: FirstTo) -> usize {
        let reached = match to {
            // Each member is counted as it is reached: `signal_all` lists the members before it
            // signals them, so one that dies of the signal is counted too.
            FirstTo::All => {
                let reached = self.backend.signal_all(first);
                self.record(&reached);
                reached.len()
            }
            // Counted before the signal: the leader may die of it (and its tree with it) before
            // any later look, yet it was alive when the stop began.
            FirstTo::Leader => {
                let alive = self.backend.pids();
                let sent = self.signal_leader(first);
                self.stopped.extend(alive);
                usize::from(sent)
            }
        };
        self.sink.emit(Event::Signalled {
            signal: signal::name(first),
            n: reached,
            via: signal::VIA_HANDLE,
        });
        if first != Signal::CONT && reached > 0 {
            self.backend.signal_all(Signal::CONT);
        }
        reached
    }

    /// [`Run::stop`], with the first signal to the leader alone: for a leader that stops its
    /// own tree gracefully on it (codex on SIGINT kills its tool process groups); whatever it
    /// leaves is killed after the grace like everything else.
    pub async fn stop_from_leader(
        &mut self,
        first: Signal,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) {
        self.stop_with(Some(first), FirstTo::Leader, grace, cut_short)
            .await
    }

    async fn stop_with(
        &mut self,
        first: Option<Signal>,
        to: FirstTo,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) {
        self.stop_at.get_or_insert_with(Instant::now);
        // reaper's own signals may stop the leader (SIGSTOP sweeps, `--signal TSTP`): not a
        // job-control stop to pass on.
        self.leader.job_control = false;
        // The common end: the leader exited and left nothing. Only the cgroup's `populated`
        // is atomic; a look at /proc can miss a process reparented to reaper while it reads,
        // so those backends need a second look (after reaping) to agree. Still far fewer than
        // the stop sequence's: the pgid backend's looks read the whole process table.
        if self.leader.gone
            && self.backend.is_empty()
            && (self.backend.kind() == BackendKind::Cgroup || {
                reap::reap_orphans();
                self.backend.is_empty()
            })
        {
            reap::reap_orphans();
            self.sink.emit(Event::TreeEmpty);
            return;
        }
        if !grace.is_zero() && first != Some(Signal::KILL) {
            if let Some(first) = first {
                self.send_first(first, to);
            }
            let deadline = Instant::now() + grace;
            let empty = self.backend.wait_empty(deadline);
            tokio::pin!(empty, cut_short);
            loop {
                tokio::select! {
                    _ = &mut empty => break,
                    _ = &mut cut_short => break,
                    // Reap the leader as soon as it exits, so its status and time are exact.
                    _ = self.leader.wait(), if !self.leader.gone => {}
                }
            }
        }
        let final_deadline = Instant::now() + KILL_DEADLINE;
        // cgroup.kill is atomic: one write, then only waiting. Sweeps that a fork can outrun
        // (no cgroup.kill before Linux 5.14, subreaper, pgid) are repeated.
        let atomic_kill = match &self.backend {
            #[cfg(target_os = "linux")]
            Backend::Cgroup(b) => b.cgroup().has_kill(),
            #[allow(unreachable_patterns)]
            _ => false,
        };
        let round = if atomic_kill {
            KILL_DEADLINE
        } else {
            KILL_ROUND
        };
        loop {
            if self.backend.is_empty() {
                break;
            }
            let killed = self.backend.kill_all();
            self.record(&killed);
            let via = match self.backend.kind() {
                BackendKind::Cgroup => "cgroup.kill",
                BackendKind::Subreaper => signal::VIA_HANDLE,
                BackendKind::Pgid => signal::VIA_GROUP_AND_HANDLE,
            };
            self.sink.emit(Event::Signalled {
                signal: "KILL".into(),
                n: killed.len(),
                via,
            });
            let now = Instant::now();
            if self
                .backend
                .wait_empty((now + round).min(final_deadline))
                .await
                || Instant::now() >= final_deadline
            {
                break;
            }
        }
        reap::reap_orphans();
        self.leader.poll();
        if self.backend.is_empty() {
            self.sink.emit(Event::TreeEmpty);
        }
    }

    /// The run cgroup's statistics (cgroup backend only).
    fn usage(&self) -> Option<containment::limits::Usage> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = self.backend.cgroup_path() {
            return Some(containment::limits::Usage::read(dir));
        }
        None
    }

    /// The run's memory now, when it has a memory limit.
    pub fn memory_now(&self) -> Option<u64> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = self.backend.cgroup_path() {
            return limits::memory_now(dir);
        }
        None
    }

    pub fn limits(&self) -> containment::limits::Limits {
        self.limits
    }

    fn record(&mut self, ms: &[Member]) {
        self.stopped.extend(ms.iter().map(|m| m.pid));
    }

    /// Ends the run without stopping it: whatever is alive keeps running (`check --keep`).
    /// Returns where it lives: the cgroup, renamed so no sweep takes it, or `None` for the
    /// subreaper backend (the processes are reaper's descendants, reparented when it exits).
    pub fn keep(mut self) -> Result<Option<PathBuf>, String> {
        self.ended = true;
        // The kept cgroup's name (`reaper-kept-…`) is not one the guardian takes over.
        let kept = match &mut self.backend {
            #[cfg(target_os = "linux")]
            Backend::Cgroup(b) => {
                let kept = b.keep()?;
                // The kept cgroup is fresh: the run's limits go with its processes.
                let cg = reaper_platform::linux::cgroup::Cgroup::at(&kept);
                if let Err(e) = limits::apply(&cg, &self.limits) {
                    say!("reaper: warning: the kept processes run without their limits: {e}");
                }
                Some(kept)
            }
            _ => None,
        };
        reap::unregister_leader(self.leader.handle.pid());
        Ok(kept)
    }

    /// Ends the run: reaps, lists survivors, removes the cgroup, builds the outcome.
    pub async fn finish(mut self, reason: StopReason, received_signal: Option<Signal>) -> Outcome {
        self.ended = true;
        // The leader is dead by now (the tree was stopped); collect its status.
        if !self.leader.gone {
            let _ = tokio::time::timeout(KILL_DEADLINE, self.leader.wait()).await;
        }
        reap::reap_orphans();
        let survivors: Vec<String> = self.backend.members().iter().map(Member::label).collect();
        // Read before the cgroup is removed with them.
        let usage = self.usage();
        let mut error = None;
        if survivors.is_empty() {
            if let Err(e) = self.backend.release() {
                error = Some(e);
            }
        } else {
            error = Some(format!(
                "{} process(es) survived SIGKILL for {}s: {}",
                survivors.len(),
                KILL_DEADLINE.as_secs(),
                survivors.join(", ")
            ));
        }
        reap::unregister_leader(self.leader.handle.pid());
        let end = Instant::now();
        let ms = |d: Duration| d.as_millis() as u64;
        let escapees: Vec<String> = self
            .backend
            .escapees()
            .iter()
            .map(containment::Escapee::label)
            .collect();
        self.sink.emit(Event::Reaped {
            killed: self.stopped.len(),
            survivors: survivors.clone(),
            escapees: escapees.clone(),
            usage: usage.clone(),
        });
        let mut out = Outcome {
            argv: std::mem::take(&mut self.argv),
            backend: self.backend.kind().as_str(),
            cgroup: self.backend.cgroup_path().map(|p| p.display().to_string()),
            scope: self.scope(),
            leader_pid: self.leader.handle.raw_pid(),
            exit_code: None,
            signal: None,
            stop_reason: if error.is_some() && reason == StopReason::Exited {
                StopReason::Error
            } else if reason == StopReason::Exited
                && usage.as_ref().is_some_and(|u| {
                    u.ended_by_oom(match self.leader.status {
                        Some(ExitStatus::Signal(s)) => Some(s),
                        _ => None,
                    })
                })
            {
                StopReason::Oom
            } else {
                reason
            },
            received_signal: received_signal.map(signal::name),
            duration_ms: ms(end - self.started),
            leader_ms: self.leader.at.map(|t| ms(t - self.started)),
            teardown_ms: self.stop_at.map(|t| ms(end - t)).unwrap_or(0),
            killed: self.stopped.len(),
            survivors,
            escapees,
            error,
            guardian_pid: self.guardian.as_ref().map(|g| g.pid()),
            limits: (!self.limits.is_empty()).then_some(self.limits),
            usage,
            leader_status: None,
        };
        out.set_leader_status(self.leader.status);
        out
    }
}

/// Who gets the first stop signal.
#[derive(Clone, Copy)]
enum FirstTo {
    All,
    Leader,
}

/// A run dropped without `finish` (a panicking MCP call, an early return) must not leave its
/// tree running: one synchronous SIGKILL sweep (cgroup.kill for the cgroup backend). The
/// cgroup itself is left to the guardian, which removes it when reaper says `done` or exits.
impl Drop for Run {
    fn drop(&mut self) {
        if !self.ended {
            let killed = self.backend.kill_all();
            tracing::warn!(
                "run of {:?} dropped before its end; killed {} process(es)",
                self.argv.first(),
                killed.len()
            );
            reap::reap_orphans();
        }
    }
}

fn classify_spawn_error(e: &std::io::Error, program: &str) -> StartError {
    use rustix::io::Errno;
    let errno = e.raw_os_error().map(Errno::from_raw_os_error);
    if let Some(r) = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<command::SandboxRefused>())
    {
        return StartError::Reaper(r.0.clone());
    }
    #[cfg(target_os = "linux")]
    if e.raw_os_error() == Some(containment::cgroup::JOIN_FAILED_ERRNO) {
        return StartError::Reaper(format!(
            "cannot move '{program}' into its cgroup before exec; run `reaper doctor`"
        ));
    }
    // `command::spawn` has said by how much (E2BIG comes back as this kind).
    if e.kind() == std::io::ErrorKind::ArgumentListTooLong {
        return StartError::TooLarge(format!(
            "cannot run '{program}': its arguments and environment are too large for exec \
             (E2BIG): {e}; pass large data through a file or stdin instead"
        ));
    }
    match errno {
        Some(Errno::NOENT) => StartError::NotFound(
            format!("cannot run '{program}': command not found"),
            libc::ENOENT,
        ),
        Some(
            Errno::ACCESS
            | Errno::PERM
            | Errno::NOEXEC
            | Errno::ISDIR
            | Errno::TXTBSY
            | Errno::NOTDIR
            | Errno::LOOP
            | Errno::NAMETOOLONG,
        ) => StartError::NotExecutable(
            format!("cannot run '{program}': {e}"),
            e.raw_os_error().unwrap_or(libc::EACCES),
        ),
        _ => StartError::Reaper(format!("cannot start '{program}': {e}")),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
