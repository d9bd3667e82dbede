//! The guardian: a small process that outlives reaper only to clean up after it.
//!
//! If reaper is SIGKILLed — alone, or with its whole process group, which is what MCP clients
//! do to their stdio servers — nothing in reaper runs any more, and a run's tree would live on in
//! its cgroup. The guardian is a copy of reaper forked before any thread or runtime exists
//! ([`Guardian::fork`]), in a session (and so a process group) of its own, holding a pidfd on
//! reaper. When reaper's pipe reaches EOF (reaper exited, however), the guardian does for reaper
//! what the next reaper's stale sweep would, but at once (`takeover`): under each directory
//! reaper named, it kills (`cgroup.kill`), empties and removes every cgroup whose name carries
//! *this* reaper's PID namespace, pid and start time (`reaper-PIDNS-PID-START-SEQ`, see
//! `containment::setup`), and, once reaper has exited, reaper's supervisor leaf, which reaper
//! cannot remove while it lives in it. Nothing else: not `reaper-kept-…`, not another
//! reaper's, not a foreign cgroup. The name alone decides, not the owner lock: no other live
//! process has that identity, and the lock can be taken by a process of the run (it waits in
//! `flock` and gets it when reaper dies).
//!
//! While reaper lives the guardian also looks at it every `STOP_LOOK`: a process of the run
//! can SIGSTOP reaper (it has reaper's uid), and a stopped reaper enforces no timeout and serves
//! nothing. A reaper stopped other than by its own job control is continued.
//!
//! The guardian holds nothing of the caller's: stdout is `/dev/null`, and so is stderr unless
//! reaper's is a terminal or a file (a pipe held by a stopped guardian would never reach its
//! end for the caller reading it).
//!
//! A stop of reaper's own job (job control: the user's Ctrl-Z, passed on to the run) is left
//! alone, but only while it is one: reaper says what bounds it (`P`), and the guardian
//! continues reaper as soon as either bound is passed. The run's job must be stopped too — a
//! real Ctrl-Z stops the leader's group, which reaper passes it on to — so a reaper stopped
//! while its leader runs (or has exited) is continued after a short grace ([`PAUSE_GRACE`]:
//! the leader's own Ctrl-Z handler may take a moment to stop it); and the pause never outlasts
//! the run's timeout, so that a job left stopped (by the user, or by a tree that stopped its
//! own leader while reaper held the terminal) still ends when the run should. Without a
//! timeout, a stopped leader keeps reaper stopped as long as it is: that is job control, and
//! the user's shell shows the job stopped.
//!
//! Protocol on the guardian's stdin, NUL-terminated records: `+DIR`, one per directory reaper
//! creates cgroups in, sent before the first cgroup is created there; `PJOB LEFT` when reaper is
//! about to stop its own job (JOB: the leader as `PID:START`, or `-` once it has exited; LEFT:
//! milliseconds until the run's timeout, or `-`), `R` once it was continued. A reaper has one
//! or two such directories, and only the newest pausing state is ever queued, so the pipe
//! carries a few hundred bytes at most: it can never fill, and reaper's writes, non-blocking,
//! never wait for the guardian. A guardian that does not read (stopped) therefore never stops
//! reaper; reaper reports it once.
//!
//! A process of the run may also `PTRACE_ATTACH` reaper and hold it: reaper is not dumpable
//! ([`crate::deny_tracing`]), which refuses that to every process without CAP_SYS_PTRACE; a
//! root tree has it, so at each look the guardian also reads reaper's tracer, and kills a
//! tracer that is a process of the run (a descendant of reaper, or in one of its run
//! cgroups); then reaper is continued as above. A debugger from outside the run is left
//! alone.
//!
//! | module     | job                                                          |
//! |------------|--------------------------------------------------------------|
//! | this one   | reaper's side: the fork, the pipe, what reaper tells         |
//! | `takeover` | the guardian process: listens, continues, takes over         |

mod takeover;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::sync::{Arc, Mutex};

use reaper_platform::linux::detach::{self, Forked, SelfStat};
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::procfs;
use reaper_platform::Signal;
use reaper_platform::{reap, signal};

pub use crate::error::GuardianError;

/// A process that outlives this one only to clean up after it: if this process is SIGKILLed
/// (alone, or with its process group, as MCP clients do to their servers), the guardian kills
/// and removes the cgroups of every run it started (cgroup backend), within a second; when this
/// process ends normally ([`Guardian::done`]), the guardian exits. Opt-in, for runs that pass
/// it to [`crate::Command::guardian`]; the `reaper` binary has one by default.
///
/// It is forked ([`Guardian::fork`]), so it must start while this process has one thread:
/// first thing in `main`, before any tokio runtime. It costs a few MiB of shared pages.
///
/// What protects it: a session of its own (a SIGKILL of this process's group and a terminal's
/// SIGHUP miss it), no run's cgroup, and it ignores the signals a stop sends. What does not: a
/// process of the same user can still SIGKILL or SIGSTOP it by pid (this process reports a
/// stopped guardian and continues it when done). It does not cover the subreaper and pgid
/// backends: without a cgroup nothing names the tree once this process is gone.
#[derive(Debug)]
pub struct Guardian {
    pid: i32,
    /// Its start time, read while it was certainly our unreaped child.
    starttime: u64,
    /// A pidfd on the guardian (reaper's child), to see it stopped or gone.
    handle: Option<Pidfd>,
    channel: Mutex<Channel>,
}

#[derive(Debug)]
struct Channel {
    /// reaper's end of the pipe, O_NONBLOCK; `None` once closed.
    pipe: Option<ChildStdin>,
    /// Directories already queued for the guardian (a handful: see the module docs).
    told: Vec<PathBuf>,
    /// Bytes the pipe did not take yet (EAGAIN); sent before anything new.
    unsent: Vec<u8>,
    /// The guardian's fault (stopped, gone, not reading) has been reported.
    reported: bool,
    /// [`MAX_DIRS`] was reached (and reported).
    full: bool,
    /// Whether reaper is stopping its own job on purpose ([`Guardian::pausing`]), and what
    /// bounds that stop: as last asked for, and as last queued. Only the newest state is ever
    /// sent, after what is queued, so the pipe never holds more than one pending state record.
    pause: Option<Pause>,
    pause_queued: Option<Pause>,
}

/// What bounds a stop of reaper's own job (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pause {
    /// The leader, which a real job-control stop stops too; `None` once it has exited.
    pub job: Option<crate::Identity>,
    /// The time left until the run's timeout, if it has one.
    pub left: Option<std::time::Duration>,
}

impl Pause {
    /// The `P` record (see the module docs).
    fn record(&self) -> Vec<u8> {
        let job = self
            .job
            .map_or("-".to_owned(), |j| format!("{}:{}", j.pid, j.starttime));
        let left = self
            .left
            .map_or("-".to_owned(), |d| d.as_millis().to_string());
        format!("P{job} {left}\0").into_bytes()
    }
}

/// How many directories reaper tells its guardian about, at most: a reaper uses one or two
/// (`--cgroup-parent` or its own cgroup, and its supervisor leaf), so this bounds only a reaper
/// that something keeps moving between cgroups.
const MAX_DIRS: usize = 64;

/// The guardian's command line, as `ps` and the tests find it: `reaper guardian PID START`.
fn title(pid: i32, starttime: u64) -> Vec<u8> {
    format!("reaper\0guardian\0{pid}\0{starttime}\0").into_bytes()
}

/// reaper's side of a guardian just started as child `gpid`: the pipe made non-blocking, the
/// guardian named by pid and start time and a pidfd opened on it.
fn adopt(gpid: i32, pipe: Option<ChildStdin>) -> Result<Guardian, GuardianError> {
    if let Some(p) = &pipe {
        // The write end is reaper's alone (close-on-exec, the guardian holds the read end),
        // so O_NONBLOCK changes nobody else's I/O.
        let io = |e: rustix::io::Errno| GuardianError::Io(e.into());
        let flags = rustix::fs::fcntl_getfl(p).map_err(io)?;
        rustix::fs::fcntl_setfl(p, flags | rustix::fs::OFlags::NONBLOCK).map_err(io)?;
    }
    // Nobody waits for the guardian: `reap::reap_orphans` reaps it like an orphan once it
    // exits, and its pid may then be reused. Until the caller lets go of the reaping lock (or,
    // before the runtime exists, until anything reaps at all) it cannot be: read its start
    // time and open its pidfd now.
    let starttime = procfs::stat(gpid).map_err(GuardianError::Io)?.starttime;
    let handle = reaper_platform::Pid::from_raw(gpid).and_then(|p| Pidfd::open(p).ok());
    Ok(Guardian {
        pid: gpid,
        starttime,
        handle,
        channel: Mutex::new(Channel {
            pipe,
            told: Vec::new(),
            unsent: Vec::new(),
            reported: false,
            full: false,
            pause: None,
            pause_queued: None,
        }),
    })
}

impl crate::containment::Watcher for Guardian {
    fn watch(&self, dir: &Path) {
        self.watch_dir(dir);
    }

    fn process(&self) -> crate::Identity {
        crate::Identity {
            pid: self.pid,
            starttime: self.starttime,
        }
    }
}

impl Guardian {
    /// Forks the guardian of this process. Call it first thing in `main`, while this process
    /// has a single thread (before any tokio runtime): a fork is sound only then. In the
    /// guardian process this call does not return: the guardian runs to its end and exits.
    pub fn fork() -> Result<Arc<Guardian>, GuardianError> {
        let me = SelfStat::read().ok_or(GuardianError::NotSingleThreaded)?;
        if me.threads != 1 {
            return Err(GuardianError::NotSingleThreaded);
        }
        let pipe = || {
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| GuardianError::Io(e.into()))
        };
        let (read, write) = pipe()?;
        // EOF once the guardian has its title: whoever looks for `reaper guardian PID START`
        // once this returns finds it.
        let (ready, ready_w) = pipe()?;
        // Nothing reaps before this returns; the lock says so to the next reader.
        let reaping = reap::hold();
        match detach::fork(&me).map_err(GuardianError::Io)? {
            Forked::Child => {
                drop(reaping);
                drop((write, ready));
                std::process::exit(i32::from(guardian_process(&me, read, ready_w)))
            }
            Forked::Parent(gpid) => {
                drop((read, ready_w));
                let g = adopt(gpid, Some(ChildStdin::from(write)));
                drop(reaping);
                let mut byte = [0u8; 1];
                while let Err(rustix::io::Errno::INTR) = rustix::io::read(&ready, &mut byte) {}
                g.map(Arc::new)
            }
        }
    }

    /// Starts the guardian by running `command` with two arguments added, this process's pid
    /// and start time, for a process that has threads already and so cannot
    /// [`Guardian::fork`]. The program `command` runs is the caller's: it must pass them to
    /// [`Guardian::serve`] (the `reaper` binary's hidden `reaper guardian PID START` does).
    /// Its standard streams and `RUST_LOG` are set here: the guardian reads its stdin.
    pub fn exec(mut command: std::process::Command) -> Result<Arc<Guardian>, GuardianError> {
        let procfs::Identity {
            pid,
            starttime: start,
        } = procfs::self_identity().map_err(GuardianError::Io)?;
        let cmd = &mut command;
        cmd.args([pid.to_string(), start.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(if detach::stderr_holds_an_eof() {
                std::process::Stdio::null()
            } else {
                std::process::Stdio::inherit()
            })
            .env_remove("RUST_LOG");
        detach::detach_on_exec(cmd);
        // Under the reaping lock (see reap.rs): std's spawn waits for a child whose exec
        // failed, and until the lock is let go the guardian's pid is its own.
        let reaping = reap::hold();
        let mut child = cmd.spawn().map_err(GuardianError::Io)?;
        let pipe = child.stdin.take();
        let g = adopt(child.id() as i32, pipe);
        drop(reaping);
        g.map(Arc::new)
    }

    /// The guardian process itself, for the process `(reaper_pid, reaper_starttime)`: reads what
    /// that process tells it on stdin until EOF (or its death), continuing it when something
    /// else stops it, then kills and removes what it left. Returns the exit status (1 when a
    /// cgroup could not be removed). What `reaper guardian PID START` runs.
    pub fn serve(reaper_pid: i32, reaper_starttime: u64) -> u8 {
        takeover::main(reaper_pid, reaper_starttime)
    }

    /// The guardian's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// reaper is about to create cgroups under `dir`: if reaper dies, the guardian kills and
    /// removes the ones that carry its name there. Cheap after the first call for a directory:
    /// one look at the guardian's state, no write.
    fn watch_dir(&self, dir: &Path) {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if ch.told.len() >= MAX_DIRS {
            // Only a reaper moved from cgroup to cgroup again and again gets here; what it
            // creates from now on is left to the next reaper's stale sweep.
            if !ch.told.iter().any(|d| d == dir) && !ch.full {
                ch.full = true;
                tracing::warn!(
                    "reaper has used {MAX_DIRS} cgroup directories; its guardian is not told of \
                     more ({}): if reaper is SIGKILLed, the next reaper's stale sweep removes \
                     what it leaves there",
                    dir.display()
                );
            }
        } else if !ch.told.iter().any(|d| d == dir) {
            ch.told.push(dir.to_owned());
            ch.unsent.push(b'+');
            ch.unsent
                .extend_from_slice(dir.as_os_str().as_encoded_bytes());
            ch.unsent.push(0);
        }
        self.flush(&mut ch);
        self.check(&mut ch);
    }

    /// This process's teardown is complete (every run is over): closing the pipe lets the
    /// guardian exit, after removing whatever a run could not, and the supervisor leaf once this
    /// process has exited. A guardian stopped now would stay so, unseen: it is continued, with
    /// a warning. Call it once, last.
    pub fn done(&self) {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        self.flush(&mut ch);
        if let Some(h) = self.handle.as_ref().filter(|h| h.is_stopped()) {
            tracing::warn!(
                "the guardian (pid {}) is stopped (SIGSTOP); reaper continues it (SIGCONT) so \
                 that it can finish its work and exit",
                self.pid
            );
            if let Err(e) = signal::to_pidfd(h, Signal::CONT) {
                tracing::warn!("cannot continue the guardian (pid {}): {e}", self.pid);
            }
            ch.reported = true;
        }
        self.check(&mut ch);
        ch.pipe = None;
    }

    /// reaper is about to stop its own job on purpose (job control: `signal::stop_own_job`),
    /// bounded by `pause`. Without this the guardian would take the stop for one a process of
    /// the run caused, and continue reaper. Never blocks, like [`Guardian::watch_dir`].
    pub(crate) fn pausing(&self, pause: Pause) {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        ch.pause = Some(pause);
        self.flush(&mut ch);
    }

    /// reaper's job was continued after [`Guardian::pausing`]: a stop from now on is not
    /// reaper's own again.
    pub(crate) fn resumed(&self) {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        ch.pause = None;
        self.flush(&mut ch);
    }

    /// Writes what is queued without ever blocking; what the pipe does not take stays queued.
    /// A changed pausing state is queued once the rest is written, so records never interleave
    /// and a state that changes while the pipe is full takes no more room.
    fn flush(&self, ch: &mut Channel) {
        while ch.pipe.is_some() {
            if ch.unsent.is_empty() {
                if ch.pause == ch.pause_queued {
                    return;
                }
                ch.pause_queued = ch.pause;
                let record = ch.pause.map_or(b"R\0".to_vec(), |p| p.record());
                ch.unsent.extend_from_slice(&record);
            }
            let Some(pipe) = ch.pipe.as_ref() else {
                return;
            };
            match rustix::io::write(pipe, &ch.unsent) {
                Ok(n) => {
                    ch.unsent.drain(..n);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::PIPE) => {
                    tracing::warn!(
                        "the guardian (pid {}) is gone; if reaper is SIGKILLed now, its runs' \
                         cgroups are left to the next reaper's stale sweep",
                        self.pid
                    );
                    ch.reported = true;
                    ch.pipe = None;
                    ch.unsent.clear();
                }
                // Never close the pipe while the guardian may live: it would read that EOF as
                // "reaper is done" and take over runs that are still going. Retry next time.
                Err(e) => {
                    if !ch.reported {
                        ch.reported = true;
                        tracing::warn!(
                            "cannot write to the guardian's pipe (pid {}): {e}; if reaper is \
                             SIGKILLed, the next reaper's stale sweep removes its runs' cgroups",
                            self.pid
                        );
                    }
                    return;
                }
            }
        }
    }

    /// Reports, once, a guardian that cannot do its job: stopped (a process with reaper's uid
    /// can SIGSTOP it), exited, or not reading. reaper serves on either way.
    fn check(&self, ch: &mut Channel) {
        if ch.reported || ch.pipe.is_none() {
            return;
        }
        let what = match &self.handle {
            Some(h) if h.is_stopped() => "is stopped (SIGSTOP)",
            Some(h) if h.has_exited() => "has exited",
            _ if !ch.unsent.is_empty() => "does not read its pipe",
            _ => return,
        };
        ch.reported = true;
        tracing::warn!(
            "the guardian (pid {}) {what}: reaper serves on, but if reaper is SIGKILLed while it \
             stays so, its runs' cgroups are removed only when the guardian runs again, or by \
             the next reaper's stale sweep",
            self.pid
        );
    }
}

/// The forked guardian: detached from reaper (a session of its own, reaper's pipe as stdin, no
/// other descriptor of reaper's; stderr kept only where it holds nobody's EOF), named `reaper
/// guardian PID START`, then the guardian itself ([`takeover::main`]).
fn guardian_process(me: &SelfStat, pipe: OwnedFd, ready: OwnedFd) -> u8 {
    // Without room for the title it runs as it is, named as reaper.
    let _ = detach::set_title(me, &title(me.pid, me.starttime));
    // Closes `ready` too, with every other fd of reaper's.
    std::mem::forget(ready);
    detach::detach(pipe, detach::stderr_holds_an_eof());
    takeover::main(me.pid, me.starttime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// reaper's side of a guardian that reads nothing: its pipe (both ends non-blocking)
    /// already full. Returns it, the read end and how many bytes fill the pipe.
    fn with_a_full_pipe() -> (Guardian, OwnedFd, usize) {
        use rustix::fs::OFlags;
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        rustix::fs::fcntl_setfl(&w, OFlags::NONBLOCK).unwrap();
        rustix::fs::fcntl_setfl(&r, OFlags::NONBLOCK).unwrap();
        let filler = [b'x'; 4096];
        let mut filled = 0;
        for chunk in [&filler[..], &filler[..1]] {
            while let Ok(n) = rustix::io::write(&w, chunk) {
                filled += n;
            }
        }
        let g = Guardian {
            pid: 1,
            starttime: 0,
            handle: None,
            channel: Mutex::new(Channel {
                pipe: Some(ChildStdin::from(w)),
                told: Vec::new(),
                unsent: Vec::new(),
                reported: false,
                full: false,
                pause: None,
                pause_queued: None,
            }),
        };
        (g, r, filled)
    }

    /// Everything the guardian's end of the pipe holds now.
    fn drain(r: &OwnedFd) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = rustix::io::read(r, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    /// A guardian that reads nothing (its pipe already full): telling it never blocks, what the
    /// pipe does not take is queued, the queue stays bounded, the fault is reported, and once
    /// the guardian reads again everything arrives, in order.
    #[test]
    fn a_full_pipe_never_blocks_and_the_queue_stays_bounded() {
        let (g, r, filled) = with_a_full_pipe();
        let dir = |i: usize| PathBuf::from(format!("/sys/fs/cgroup/test-{i}"));
        for round in 0..3 {
            for i in 0..1000 {
                g.watch_dir(&dir(i + round));
            }
        }
        {
            let ch = g.channel.lock().unwrap();
            assert_eq!(ch.told.len(), MAX_DIRS);
            assert!(ch.reported && ch.full);
            let queued: usize = (0..MAX_DIRS).map(|i| dir(i).as_os_str().len() + 2).sum();
            assert!(!ch.unsent.is_empty() && ch.unsent.len() <= queued);
        }
        // The guardian reads again: the next look sends what was queued.
        assert_eq!(drain(&r).len(), filled);
        g.watch_dir(&dir(0));
        assert!(g.channel.lock().unwrap().unsent.is_empty());
        let got = drain(&r);
        let want: Vec<u8> = (0..MAX_DIRS)
            .flat_map(|i| format!("+{}\0", dir(i).display()).into_bytes())
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }

    /// Pausing and resuming while the guardian reads nothing never queue more than one state
    /// record, after what was queued before; once it reads again the newest state is what it
    /// ends with.
    #[test]
    fn pausing_states_coalesce_in_a_full_pipe() {
        let (g, r, filled) = with_a_full_pipe();
        let pause = Pause {
            job: Some(crate::Identity {
                pid: 12,
                starttime: 34,
            }),
            left: Some(std::time::Duration::from_millis(1500)),
        };
        g.watch_dir(Path::new("/sys/fs/cgroup/a"));
        for _ in 0..1000 {
            g.pausing(pause);
            g.resumed();
        }
        g.pausing(pause);
        assert_eq!(g.channel.lock().unwrap().unsent, b"+/sys/fs/cgroup/a\0");
        assert_eq!(drain(&r).len(), filled);
        g.resumed();
        g.pausing(pause);
        assert_eq!(drain(&r), b"+/sys/fs/cgroup/a\0P12:34 1500\0");
        // Full again: the first change is queued (never more than that one record), the
        // newest state follows it once the pipe takes it.
        let mut filled = 0;
        {
            let ch = g.channel.lock().unwrap();
            let w = ch.pipe.as_ref().unwrap();
            while let Ok(n) = rustix::io::write(w, &[b'x'; 4096]) {
                filled += n;
            }
            while let Ok(n) = rustix::io::write(w, b"x") {
                filled += n;
            }
        }
        for _ in 0..1000 {
            g.resumed();
            g.pausing(pause);
        }
        g.resumed();
        assert_eq!(g.channel.lock().unwrap().unsent, b"R\0");
        assert_eq!(drain(&r).len(), filled);
        g.watch_dir(Path::new("/sys/fs/cgroup/a"));
        assert_eq!(
            drain(&r),
            b"R\0",
            "R is the newest state: nothing follows it"
        );
        g.pausing(Pause::default());
        assert_eq!(drain(&r), b"P- -\0");
    }
}
