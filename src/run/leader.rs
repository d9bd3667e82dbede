//! The leader: watched through its handle (a pidfd on Linux), reaped, its terminal handed over
//! and taken back, a job-control stop passed on to reaper's own job.

use std::sync::Arc;

use reaper_platform::process::{ExitWatch, Handle};
use reaper_platform::terminal::Foreground;
use reaper_platform::{reap, signal, ExitStatus, Signal};
use tokio::signal::unix::Signal as SignalStream;
use tokio::time::Instant;

use crate::event::{Event, EventSink};
use crate::guardian::Guardian;

/// The leader: watched through its handle (a pidfd on Linux), reaped through [`reap`], status
/// kept once known.
pub(crate) struct Leader {
    pub(crate) handle: Handle,
    pub(crate) status: Option<ExitStatus>,
    pub(crate) gone: bool,
    pub(crate) at: Option<Instant>,
    /// The exit's one registration with the reactor, made at the first wait and kept: the
    /// supervisor's step is re-entered on every turn of a face's `select!` (each read of
    /// codex's output), and a fresh registration each time cost a dup, two `epoll_ctl` and a
    /// close per turn. `None` until then, or if it could not be made (then each wait
    /// registers afresh, as before).
    pub(crate) watch: Option<ExitWatch>,
    pub(crate) sigchld: Option<SignalStream>,
    /// The terminal, when the leader's new process group was made its foreground group.
    pub(crate) terminal: Option<Foreground>,
    /// Whether a stop of the leader is passed on to reaper's job (see `pass_on_stop`): not once
    /// reaper itself signals the tree.
    pub(crate) job_control: bool,
    /// The run's guardian, told when reaper stops its own job: it continues a reaper stopped
    /// any other way.
    pub(crate) guardian: Option<Arc<Guardian>>,
    /// The run's timeout: a stop of reaper's own job does not outlast it (the guardian
    /// continues reaper then).
    pub(crate) deadline: Option<Instant>,
    /// The leader leads a session of its own (it holds no terminal): its process group is
    /// orphaned, where the kernel discards SIGTSTP, SIGTTIN and SIGTTOU; a stop is passed on as
    /// SIGSTOP.
    pub(crate) own_session: bool,
    pub(crate) sink: EventSink,
}

impl Leader {
    pub(crate) fn poll(&mut self) -> Option<ExitStatus> {
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
        self.sink.emit(Event::LeaderExited { status: st });
        st
    }

    /// Waits for the leader to exit and reaps it, reaping orphans meanwhile. Idempotent.
    pub(crate) async fn wait(&mut self) -> Option<ExitStatus> {
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
            if self.watch.is_none() {
                match self.handle.exit_watch() {
                    Ok(w) => self.watch = Some(w),
                    Err(e) => tracing::debug!("cannot keep a watch on the leader's exit: {e}"),
                }
            }
            let (watch, handle) = (&self.watch, &self.handle);
            let exited = async move {
                match watch {
                    Some(w) => w.exited().await,
                    None => handle.exited().await,
                }
            };
            tokio::select! {
                _ = exited => {}
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
        self.stop_own_job();
        let Some(t) = &self.terminal else { return };
        if let Err(e) = t.give_to(group) {
            tracing::debug!("cannot hand the terminal back to group {group}: {e}");
        }
        if let Some(g) = reaper_platform::Pid::from_raw(group) {
            let _ = signal::to_process_group(g, Signal::CONT);
        }
    }

    /// Stops reaper's own job, telling the guardian first that this stop is reaper's own (it
    /// continues a reaper stopped by anyone else), and what bounds it: the leader, which a real
    /// job-control stop stops too, and the run's timeout. Returns once reaper's job is continued
    /// (or at once if no shell controls it).
    fn stop_own_job(&self) {
        if let Some(g) = &self.guardian {
            g.pausing(self.pause());
        }
        signal::stop_own_job();
        if let Some(g) = &self.guardian {
            g.resumed();
        }
    }

    /// What bounds a stop of reaper's own job now: the leader while it lives (not reaped, its
    /// pid is its own), and the time left until the run's timeout.
    fn pause(&self) -> crate::guardian::Pause {
        #[cfg(target_os = "linux")]
        let job = (!self.gone)
            .then(|| reaper_platform::linux::procfs::stat(self.handle.raw_pid()).ok())
            .flatten()
            .map(|s| s.identity());
        #[cfg(not(target_os = "linux"))]
        let job = None;
        crate::guardian::Pause {
            job,
            left: self
                .deadline
                .map(|d| d.saturating_duration_since(Instant::now())),
        }
    }

    /// reaper itself got a job-control stop (a Ctrl-Z reached reaper's group, which is not the
    /// leader's): the leader's group gets the same signal, as the terminal would have sent it
    /// had that group been in the foreground (SIGSTOP for a group the kernel would let it pass
    /// by: see `own_session`); then reaper's own job stops, and once the shell continues it,
    /// the leader's group is continued too. A leader that has exited leaves only reaper's own
    /// job to stop.
    pub(crate) fn relay_stop(&mut self, sig: Signal) {
        let group = (!self.gone)
            .then(|| reaper_platform::Pid::from_raw(self.handle.raw_pid()))
            .flatten();
        if let Some(g) = group {
            let sig = if self.own_session { Signal::STOP } else { sig };
            let _ = signal::to_process_group(g, sig);
        }
        self.stop_own_job();
        if let Some(g) = group {
            let _ = signal::to_process_group(g, Signal::CONT);
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.release_terminal();
    }
}
