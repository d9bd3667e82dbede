//! A run's start: containment chosen, the leader spawned into it, watched through its pidfd.

use std::collections::HashSet;
use std::process::{ChildStderr, ChildStdin, ChildStdout};

use reaper_platform::reap;
use reaper_platform::terminal::Foreground;
use tokio::signal::unix::{signal as unix_signal, SignalKind};
use tokio::time::Instant;

use super::leader::Leader;
use super::spawn;
use super::stop::KILL_DEADLINE;
use super::Run;
use super::Spec;
use crate::containment::select::contain;
use crate::containment::Backend;
use crate::{Error, Event};

/// The leader's pipes, when the command asked for them.
pub(crate) struct Pipes {
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

impl Run {
    /// Spawns `cmd` into fresh containment. The leader joins it before it runs any code.
    pub(crate) async fn start(cmd: &mut Spec) -> Result<(Run, Pipes), Error> {
        let argv = cmd.argv_lossy();
        let opts = cmd.options.clone();
        let sink = cmd.events.clone();
        let (mut backend, warning) = contain(&opts.request()).await.map_err(Error::Containment)?;
        #[cfg(target_os = "linux")]
        let id = run_id(&backend);
        let guardian = opts.guardian.clone();
        let sigchld = unix_signal(SignalKind::child()).ok();
        // The leader leads a process group of its own, so that the tree never shares reaper's
        // or the caller's (`kill 0` stays inside): it needs the terminal handed to it, or its
        // first read from it stops it (SIGTTIN). A sandboxed one leads a session of its own,
        // which no terminal can be handed to.
        let terminal = (cmd.terminal && opts.sandbox.is_none())
            .then(Foreground::if_foreground)
            .flatten();
        // A leader given no terminal, and holding none on its stdin, stdout or stderr, leads a
        // session of its own: with no controlling terminal it cannot open `/dev/tty`, so it
        // cannot type into the caller's (TIOCSTI), nor join reaper's process group.
        let own_session = terminal.is_none() && !cmd.holds_a_terminal();
        // The reaping lock from the spawn to `register_leader` (no `.await` in between): no
        // `reap_orphans` can take the leader's status, nor the status of a child whose exec
        // failed, which std's spawn waits for itself.
        // Before the leader is forked: nothing forked inherits the raise.
        if opts.raise_priority {
            super::priority::at_start();
        }
        let reaping = reap::hold();
        // Every process of the run inherits its id (unless it clears its environment).
        #[cfg(target_os = "linux")]
        let tagged = id.map(|id| {
            cmd.env
                .push((crate::runs::RUN_ID_ENV.into(), Some(id.to_string().into())))
        });
        let spawned = spawn::spawn(cmd, &backend, terminal.as_ref(), own_session, &opts);
        #[cfg(target_os = "linux")]
        if tagged.is_some() {
            cmd.env.pop();
        }
        let spawned = match spawned {
            Ok(s) => s,
            Err(e) => {
                drop(reaping);
                if let Some(t) = &terminal {
                    t.take_back_after_failed_spawn();
                }
                let _ = backend.release();
                return Err(spawn::classify(e, &backend, &argv[0]));
            }
        };
        let (pid, pipes) = (spawned.pid, spawned.pipes);
        #[cfg(target_os = "linux")]
        let sandbox_ids = spawned.sandbox_ids;
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
                return Err(Error::NoPidfd {
                    pid: pid.as_raw_nonzero().get(),
                    source: e,
                });
            }
        };
        sink.emit(Event::Spawned {
            pid: leader.raw_pid(),
            backend: backend.kind(),
            cgroup: backend.cgroup_path().map(Into::into),
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
            watch: None,
            sigchld,
            terminal,
            job_control: true,
            guardian: guardian.clone(),
            deadline: None,
            own_session: own_session || opts.sandbox.is_some(),
            sink: sink.clone(),
        };
        #[cfg(target_os = "linux")]
        let registration = id.and_then(|id| {
            crate::runs::registration::Registration::new(record(id, cmd, &argv, &backend, &leader))
        });
        let live = super::dropped::alive(&backend, &leader.handle);
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
            raise_priority: opts.raise_priority,
            #[cfg(target_os = "linux")]
            registration,
            #[cfg(target_os = "linux")]
            sandbox_ids,
            _live: live,
        };
        Ok((run, pipes))
    }
}

/// The run's id: its cgroup's name says it; a run without one takes the next number.
#[cfg(target_os = "linux")]
fn run_id(backend: &crate::containment::select::AnyBackend) -> Option<crate::runs::RunId> {
    use crate::runs::RunId;
    match backend.cgroup_path() {
        Some(p) => p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(RunId::from_cgroup_name),
        None => RunId::this_process(crate::naming::next_seq()),
    }
}

/// What the run's record says, as the leader has just started.
#[cfg(target_os = "linux")]
fn record(
    id: crate::runs::RunId,
    cmd: &Spec,
    argv: &[String],
    backend: &crate::containment::select::AnyBackend,
    leader: &Leader,
) -> crate::runs::RunRecord {
    use crate::runs::{record, Phase, RunRecord, RECORD_VERSION};
    let pid = leader.handle.raw_pid();
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    RunRecord {
        version: RECORD_VERSION,
        id,
        boot_id: record::boot_id().to_owned(),
        uid: rustix::process::geteuid().as_raw(),
        argv: argv.to_vec(),
        started_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, ms),
        backend: backend.kind().as_str().to_owned(),
        cgroup: backend.cgroup_path().map(Into::into),
        limits: (!cmd.options.limits.is_empty()).then_some(cmd.options.limits),
        leader_pid: pid,
        // The leader is our child, not reaped yet: its pid is its own.
        leader_starttime: reaper_platform::linux::procfs::stat(pid)
            .map(|s| s.starttime)
            .unwrap_or(0),
        timeout_ms: cmd.timeout.map(ms),
        stop_signal: cmd.stop_signal.map(|s| s.as_raw()),
        grace_ms: ms(cmd.grace),
        request_id: cmd.request_id.clone(),
        phase: Phase::Running,
        stop_reason: None,
    }
}
