//! The guardian process: it reads what reaper tells it until reaper is gone, continues a
//! reaper something else stopped meanwhile, then kills and removes what reaper left.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Duration;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::{detach, procfs, signal};
use reaper_platform::Signal;

use crate::containment::cgroup::{place, stale};

/// Once reaper is dead, how long the guardian waits for its pipe to reach EOF.
const EOF_AFTER_DEATH: Duration = Duration::from_millis(200);

/// How long the guardian waits for a killed cgroup to empty before removing what it can.
const TAKEOVER_DEADLINE: Duration = Duration::from_millis(900);

/// The guardian process itself, for the reaper `(reaper_pid, reaper_start)` it was forked from.
///
/// It reads records until its stdin reaches EOF: reaper's end of the pipe closes when reaper
/// exits, however it exits (the pipe is close-on-exec, so no descendant keeps it), or when it
/// says it is done. Whatever run cgroup of reaper's is still there then was not removed by
/// reaper — it died, or it finished without being able to clean up (survivors, a dropped run) —
/// and is taken over. The pidfd on reaper bounds the wait for that EOF once reaper is known to
/// be dead, and tells when reaper's supervisor leaf is empty.
pub(super) fn main(reaper_pid: i32, reaper_start: u64) -> u8 {
    ignore_stop_signals();
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
    // None: reaper already died before we could watch it; its records are still in the pipe.
    let reaper = Pidfd::open_checked(reaper_pid, reaper_start);
    let dirs = listen(reaper.as_ref(), reaper_start);
    // Names that carry reaper's whole identity are its alone: no other live process has its
    // pid and start time in its namespace. Its owner lock proves nothing here: at reaper's
    // death the kernel hands it to whoever waits in `flock` on the directory, a process of the
    // run included.
    let owner = place::Owner {
        pidns: Some(pidns),
        pid: reaper_pid,
        start: reaper_start,
    };
    let leaf = place::supervisor_name(owner);
    let runs = owned(&dirs, |name| {
        place::owner_of(name) == Some(owner) && name != leaf
    });
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
                starttime: reaper_start,
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
/// [`EOF_AFTER_DEATH`] (something else holds the pipe: a child between fork and exec). Meanwhile
/// a reaper found stopped is continued ([`continue_if_stopped`], every [`STOP_LOOK`]). Returns
/// the directories it named.
fn listen(reaper: Option<&Pidfd>, reaper_start: u64) -> Vec<PathBuf> {
    use rustix::event::{poll, PollFd, PollFlags};
    use std::time::Instant;
    let stdin = std::io::stdin();
    let pipe = stdin.as_fd();
    let mut inbox = Inbox::default();
    let mut reaper_dead_since = reaper.is_none().then(Instant::now);
    let mut next_look = Instant::now() + STOP_LOOK;
    let mut warned = false;
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
                if !continue_if_stopped(r, reaper_start, &mut inbox, pipe, &mut warned) {
                    break;
                }
            }
        }
    }
    inbox.dirs
}

/// How often the guardian looks whether reaper is stopped, while reaper lives.
const STOP_LOOK: Duration = Duration::from_millis(250);

/// What reaper has said on its pipe: NUL-terminated records `+DIR` (see the module docs), `P`
/// (reaper is about to stop its own job: job control) and `R` (it was continued).
#[derive(Default)]
struct Inbox {
    /// The start of a record whose NUL has not come yet.
    partial: Vec<u8>,
    dirs: Vec<PathBuf>,
    /// Between a `P` and the next `R`: a stop of reaper now is its own.
    pausing: bool,
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
                Some((b'P', [])) => self.pausing = true,
                Some((b'R', [])) => self.pausing = false,
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
/// no timeout and answers nothing. So a reaper found stopped (`T` in `/proc/PID/stat`) that has
/// not said it stops its own job ([`Inbox::pausing`]) is continued through its pidfd, and the
/// guardian says so once. A traced reaper (`t`: a debugger holds it) is left alone. False at
/// the pipe's EOF.
fn continue_if_stopped(
    reaper: &Pidfd,
    start: u64,
    inbox: &mut Inbox,
    pipe: BorrowedFd<'_>,
    warned: &mut bool,
) -> bool {
    match procfs::stat(reaper.raw_pid()) {
        Ok(st) if st.starttime == start && st.state == 'T' => {}
        _ => return true,
    }
    // reaper writes `P` before it stops its job: read after seeing the stop, it is there.
    if !inbox.read_ready(pipe) {
        return false;
    }
    if inbox.pausing {
        return true;
    }
    if let Err(e) = signal::to_pidfd(reaper, Signal::CONT) {
        tracing::debug!("cannot continue reaper: {e}");
        return true;
    }
    if !*warned {
        *warned = true;
        say!(
            "reaper guardian: reaper (pid {}) is stopped, and not by its own job control (a \
             SIGSTOP from a process of its run?); continued it (SIGCONT)",
            reaper.raw_pid()
        );
    }
    true
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
