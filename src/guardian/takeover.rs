//! The guardian process: it reads what reaper tells it until reaper is gone, continues a
//! reaper something else stopped meanwhile, then kills and removes what reaper left.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Duration;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::{detach, procfs};
use reaper_platform::signal;
use reaper_platform::Signal;

use crate::containment::cgroup::stale;
use crate::naming;
use crate::Identity;

/// Once reaper is dead, how long the guardian waits for its pipe to reach EOF.
const EOF_AFTER_DEATH: Duration = Duration::from_millis(200);

/// How long the guardian waits for a killed cgroup to empty before removing what it can.
const TAKEOVER_DEADLINE: Duration = Duration::from_millis(900);

/// The guardian process itself, for the reaper `(reaper_pid, reaper_starttime)` it was forked from.
///
/// It reads records until its stdin reaches EOF: reaper's end of the pipe closes when reaper
/// exits, however it exits (the pipe is close-on-exec, so no descendant keeps it), or when it
/// says it is done. Whatever run cgroup of reaper's is still there then was not removed by
/// reaper — it died, or it finished without being able to clean up (survivors, a dropped run) —
/// and is taken over. The pidfd on reaper bounds the wait for that EOF once reaper is known to
/// be dead, and tells when reaper's supervisor leaf is empty.
pub(super) fn main(reaper_pid: i32, reaper_starttime: u64) -> u8 {
    ignore_stop_signals();
    // A process of the run (reaper's uid) must not trace the guardian either.
    if let Err(e) = crate::deny_tracing() {
        tracing::debug!("the guardian stays traceable: {e}");
    }
    // reaper's PID namespace is the guardian's own: reaper forks (or spawns) it before anything
    // else, and never enters another namespace itself (only a sandboxed leader gets one).
    let pidns = match procfs::pid_namespace() {
        Ok(ns) => ns,
        Err(e) => {
            say!(
                "reaper guardian: cannot read /proc/self/ns/pid: {e}; reaper's cgroups are left \
                 to the next reaper's stale sweep"
            );
            return 1;
        }
    };
    // Names that carry reaper's whole identity are its alone: no other live process has its
    // pid and start time in its namespace. Its owner lock proves nothing here: at reaper's
    // death the kernel hands it to whoever waits in `flock` on the directory, a process of the
    // run included.
    let owner = naming::Owner {
        pidns: Some(pidns),
        process: Identity {
            pid: reaper_pid,
            starttime: reaper_starttime,
        },
    };
    let leaf = naming::supervisor_name(owner);
    let is_run = |name: &str| naming::owner_of(name) == Some(owner) && name != leaf;
    // None: reaper already died before we could watch it; its records are still in the pipe.
    let reaper = Pidfd::open_checked(reaper_pid, reaper_starttime);
    let dirs = listen(reaper.as_ref(), reaper_starttime, &is_run);
    let runs = owned(&dirs, is_run);
    let leaves = owned(&dirs, |name| name == leaf);
    if runs.is_empty() && leaves.is_empty() {
        return 0;
    }
    // Its own runtime (one thread, as reaper's): the guardian sits below the faces.
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 1;
    };
    rt.block_on(async {
        let mut failed = false;
        if !runs.is_empty() {
            failed |= take_over(&runs, true).await;
            let who = crate::Identity {
                pid: reaper_pid,
                starttime: reaper_starttime,
            };
            crate::runs::record::remove_taken_over(who, pidns);
        }
        if !leaves.is_empty() {
            // reaper lives in its supervisor leaf until it exits: only then is the leaf empty.
            if let Some(r) = &reaper {
                let _ = r.exited().await;
            }
            failed |= take_over(&leaves, false).await;
        }
        u8::from(failed)
    })
}

/// What reaper says on its pipe ([`Inbox`]), read until EOF, or until reaper has been dead for
/// [`EOF_AFTER_DEATH`] (something else holds the pipe: a child between fork and exec). Meanwhile,
/// every [`STOP_LOOK`], a tracer of reaper from its run (`is_run`: the name of one of its run
/// cgroups) is killed ([`kill_tracer_from_run`]) and a reaper found stopped is continued
/// ([`continue_if_stopped`]). Returns the directories it named.
fn listen(
    reaper: Option<&Pidfd>,
    reaper_starttime: u64,
    is_run: &dyn Fn(&str) -> bool,
) -> Vec<PathBuf> {
    use rustix::event::{poll, PollFd, PollFlags};
    use std::time::Instant;
    let stdin = std::io::stdin();
    let pipe = stdin.as_fd();
    let mut inbox = Inbox::default();
    let mut reaper_dead_since = reaper.is_none().then(Instant::now);
    let mut next_look = Instant::now() + STOP_LOOK;
    let mut warned = Warned::default();
    loop {
        let wait = match reaper_dead_since {
            Some(_) => Duration::from_millis(50),
            None => next_look.saturating_duration_since(Instant::now()),
        };
        let timeout = rustix::time::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let ready = {
            let mut fds = vec![PollFd::new(&pipe, PollFlags::IN)];
            if let (Some(r), None) = (reaper, reaper_dead_since) {
                fds.push(PollFd::new(r, PollFlags::IN));
            }
            match poll(&mut fds, Some(&timeout)) {
                Ok(_) => (
                    !fds[0].revents().is_empty(),
                    fds.get(1).is_some_and(|f| !f.revents().is_empty()),
                ),
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        };
        if ready.1 {
            reaper_dead_since = Some(Instant::now());
        }
        if ready.0 {
            if !inbox.read(pipe) {
                break;
            }
        } else if reaper_dead_since.is_some_and(|t| t.elapsed() >= EOF_AFTER_DEATH) {
            break;
        }
        if let (Some(r), None) = (reaper, reaper_dead_since) {
            if Instant::now() >= next_look {
                next_look = Instant::now() + STOP_LOOK;
                kill_tracer_from_run(r, is_run, &mut warned);
                if !continue_if_stopped(r, reaper_starttime, &mut inbox, pipe, &mut warned) {
                    break;
                }
            }
        }
    }
    inbox.dirs
}

/// How often the guardian looks whether reaper is stopped or traced, while reaper lives.
const STOP_LOOK: Duration = Duration::from_millis(250);

/// How long reaper may stay stopped for its own job while the run's job is not stopped: time
/// for the leader to stop itself once it got the stop (an editor's Ctrl-Z handler).
const PAUSE_GRACE: Duration = Duration::from_secs(1);

/// What the guardian has said once already.
#[derive(Default)]
struct Warned {
    stopped: bool,
    pause: bool,
    traced: bool,
}

/// What reaper has said on its pipe: NUL-terminated records `+DIR` (see the module docs), `P`
/// (reaper is about to stop its own job: job control) and `R` (it was continued).
#[derive(Default)]
struct Inbox {
    /// The start of a record whose NUL has not come yet.
    partial: Vec<u8>,
    dirs: Vec<PathBuf>,
    /// Between a `P` and the next `R`: a stop of reaper now is its own, within these bounds.
    pause: Option<Pause>,
}

/// A stop of reaper's own job, as the guardian bounds it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pause {
    /// The leader, as reaper named it: the run's job, which must be stopped too.
    job: Option<crate::Identity>,
    /// The run's timeout, on the guardian's clock.
    until: Option<std::time::Instant>,
    /// Since when the guardian has seen reaper stopped while the job was not.
    job_running_since: Option<std::time::Instant>,
}

impl Pause {
    /// Reads `JOB LEFT` (see the module docs); what cannot be read bounds nothing but the
    /// grace.
    fn parse(rec: &[u8]) -> Pause {
        let text = String::from_utf8_lossy(rec);
        let mut fields = text.split(' ');
        let job = fields.next().and_then(|j| {
            let (pid, start) = j.split_once(':')?;
            Some(crate::Identity {
                pid: pid.parse().ok()?,
                starttime: start.parse().ok()?,
            })
        });
        // A timeout too far for the clock bounds nothing.
        let until = fields
            .next()
            .and_then(|l| l.parse::<u64>().ok())
            .and_then(|ms| std::time::Instant::now().checked_add(Duration::from_millis(ms)));
        Pause {
            job,
            until,
            job_running_since: None,
        }
    }

    /// Whether reaper may stay stopped now: before the run's timeout, and while the leader is
    /// stopped (or for [`PAUSE_GRACE`] after a look found it running).
    fn holds(&mut self) -> bool {
        let now = std::time::Instant::now();
        if self.until.is_some_and(|u| now >= u) {
            return false;
        }
        let job_stopped = self.job.is_some_and(|j| {
            matches!(procfs::stat(j.pid), Ok(s) if s.starttime == j.starttime && s.state == 'T')
        });
        if job_stopped {
            self.job_running_since = None;
            return true;
        }
        let since = *self.job_running_since.get_or_insert(now);
        now.duration_since(since) < PAUSE_GRACE
    }
}

impl Inbox {
    fn take(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&b| b == 0) {
            let rec: Vec<u8> = self.partial.drain(..=end).take(end).collect();
            match rec.split_first() {
                Some((b'+', p)) => {
                    let dir = PathBuf::from(String::from_utf8_lossy(p).into_owned());
                    if dir.is_absolute() && !self.dirs.contains(&dir) {
                        self.dirs.push(dir);
                    }
                }
                Some((b'P', rest)) => self.pause = Some(Pause::parse(rest)),
                Some((b'R', [])) => self.pause = None,
                // Nothing else is sent; an unknown record is ignored.
                _ => {}
            }
        }
    }

    /// One read of the pipe (unbuffered: a buffer would hide from `poll` what it holds).
    /// False at its EOF, or an error: nothing more will come.
    fn read(&mut self, pipe: BorrowedFd<'_>) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match rustix::io::read(pipe, &mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.take(&chunk[..n]);
                    return true;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return false,
            }
        }
    }

    /// Reads whatever the pipe holds right now, without waiting for more. False at its EOF.
    fn read_ready(&mut self, pipe: BorrowedFd<'_>) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let now = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        loop {
            let mut fds = [PollFd::new(&pipe, PollFlags::IN)];
            match poll(&mut fds, Some(&now)) {
                Ok(0) => return true,
                Ok(_) => {
                    if !self.read(pipe) {
                        return false;
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return true,
            }
        }
    }
}

/// A process of the run can SIGSTOP reaper (it has reaper's uid), and a stopped reaper enforces
/// no timeout and answers nothing. So a reaper found stopped (`T` in `/proc/PID/stat`) is
/// continued through its pidfd, and the guardian says so once — unless reaper said it stops its
/// own job ([`Inbox::pause`]) and that stop still holds ([`Pause::holds`]). A traced reaper
/// (`t`) is left to [`kill_tracer_from_run`]. False at the pipe's EOF.
fn continue_if_stopped(
    reaper: &Pidfd,
    starttime: u64,
    inbox: &mut Inbox,
    pipe: BorrowedFd<'_>,
    warned: &mut Warned,
) -> bool {
    match procfs::stat(reaper.raw_pid()) {
        Ok(st) if st.starttime == starttime && st.state == 'T' => {}
        _ => {
            if let Some(p) = inbox.pause.as_mut() {
                p.job_running_since = None;
            }
            return true;
        }
    }
    // reaper writes `P` before it stops its job: read after seeing the stop, it is there.
    if !inbox.read_ready(pipe) {
        return false;
    }
    let paused = inbox.pause.is_some();
    if inbox.pause.as_mut().is_some_and(Pause::holds) {
        return true;
    }
    if let Err(e) = signal::to_pidfd(reaper, Signal::CONT) {
        tracing::debug!("cannot continue reaper: {e}");
        return true;
    }
    let pid = reaper.raw_pid();
    if paused && !warned.pause {
        warned.pause = true;
        say!(
            "reaper guardian: reaper (pid {pid}) stopped its own job (job control), but its run \
             is not stopped with it, or its timeout has passed; continued it (SIGCONT)"
        );
    } else if !paused && !warned.stopped {
        warned.stopped = true;
        say!(
            "reaper guardian: reaper (pid {pid}) is stopped, and not by its own job control (a \
             SIGSTOP from a process of its run?); continued it (SIGCONT)"
        );
    }
    true
}

/// A root process of the run can `PTRACE_ATTACH` reaper (CAP_SYS_PTRACE passes reaper's not
/// being dumpable) and hold it. A tracer that descends from reaper, or lives in one of its run
/// cgroups (`is_run` accepts a run cgroup's name), is SIGKILLed through a pidfd opened on it
/// and checked to still be reaper's tracer; the kernel then detaches reaper, and a stop it is
/// left in is [`continue_if_stopped`]'s. A tracer that is neither (a debugger from outside) is
/// left alone.
fn kill_tracer_from_run(reaper: &Pidfd, is_run: &dyn Fn(&str) -> bool, warned: &mut Warned) {
    let rpid = reaper.raw_pid();
    let Ok(Some(tracer)) = procfs::tracer(rpid) else {
        return;
    };
    let Ok(st) = procfs::stat(tracer) else {
        return;
    };
    let in_run_cgroup = || procfs::cgroup(tracer).is_some_and(|cg| cg.split('/').any(is_run));
    if !matches!(procfs::descends_from(st.identity(), rpid), Ok(true)) && !in_run_cgroup() {
        return;
    }
    let Some(fd) = reaper_platform::Pid::from_raw(tracer).and_then(|p| Pidfd::open(p).ok()) else {
        return;
    };
    // The pidfd names the process read above, and it still traces reaper.
    if !procfs::is_alive(tracer, st.starttime) || procfs::tracer(rpid).ok() != Some(Some(tracer)) {
        return;
    }
    if let Err(e) = signal::to_pidfd(&fd, Signal::KILL) {
        tracing::debug!("cannot kill reaper's tracer (pid {tracer}): {e}");
        return;
    }
    if !warned.traced {
        warned.traced = true;
        say!(
            "reaper guardian: reaper (pid {rpid}) was traced (ptrace) by pid {tracer}, a process \
             of its run; killed the tracer"
        );
    }
}

/// The cgroups directly under `dirs` whose name `mine` accepts.
fn owned(dirs: &[PathBuf], mine: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        for name in Cgroup::at(dir).children().unwrap_or_default() {
            let path = dir.join(&name);
            if mine(&name) && !found.contains(&path) {
                found.push(path);
            }
        }
    }
    found
}

/// The guardian must outlive reaper to clean up after it, yet it receives stop signals meant for
/// others: a reaper nested inside another reaper's run has its guardian in that run's tree, and
/// the outer reaper's first signal (TERM, or timeout(1)'s `-s` signal) reaches every member. So
/// every signal whose default action ends a process and that a stop may send is ignored; SIGKILL
/// (the outer reaper's `cgroup.kill`) still ends it, as it must.
fn ignore_stop_signals() {
    use reaper_platform::Signal;
    detach::ignore_signals(&[
        Signal::TERM,
        Signal::INT,
        Signal::HUP,
        Signal::QUIT,
        Signal::ALARM,
        Signal::USR1,
        Signal::USR2,
        Signal::PIPE,
        Signal::VTALARM,
        Signal::PROF,
        Signal::IO,
        Signal::POWER,
        Signal::XCPU,
        Signal::XFSZ,
    ]);
}

/// Kills and removes `cgroups`; says so for run cgroups (`loud`), which reaper should have
/// removed itself. Returns whether one could not be removed.
async fn take_over(cgroups: &[PathBuf], loud: bool) -> bool {
    // Kill every tree first, then wait and remove: one slow cgroup must not delay the others.
    for path in cgroups {
        let _ = signal::to_cgroup_kill(&Cgroup::at(path));
    }
    let deadline = tokio::time::Instant::now() + TAKEOVER_DEADLINE;
    let mut failed = false;
    for path in cgroups {
        match stale::remove_tree(&Cgroup::at(path), deadline).await {
            Ok(()) if loud => say!(
                "reaper guardian: reaper is gone or could not clean up; killed and removed {}",
                path.display()
            ),
            Ok(()) => {}
            Err(e) => {
                say!("reaper guardian: {e}");
                failed = true;
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_record_names_its_job_and_timeout() {
        let p = Pause::parse(b"12:34 1500");
        assert_eq!(
            p.job,
            Some(crate::Identity {
                pid: 12,
                starttime: 34
            })
        );
        let left = p.until.unwrap() - std::time::Instant::now();
        assert!(left <= Duration::from_millis(1500) && left > Duration::from_millis(500));
        let none = Pause::parse(b"- -");
        assert_eq!((none.job, none.until), (None, None));
        // What cannot be read bounds nothing (the grace still does).
        for rec in [&b""[..], b"12 x", b"a:b 1", b":", b"1:2"] {
            assert_eq!(
                Pause::parse(rec).until.is_some(),
                rec == b"a:b 1",
                "{rec:?}"
            );
        }
        // The farthest timeout neither panics nor bounds anything in practice.
        let far = Pause::parse(format!("- {}", u64::MAX).as_bytes()).until;
        assert!(far.is_none_or(|u| u > std::time::Instant::now() + Duration::from_secs(1 << 32)));
        let mut inbox = Inbox::default();
        inbox.take(b"P7:8 -\0");
        assert!(inbox
            .pause
            .is_some_and(|p| p.job.is_some() && p.until.is_none()));
        inbox.take(b"R\0P\0");
        assert!(inbox
            .pause
            .is_some_and(|p| p.job.is_none() && p.until.is_none()));
    }
}
