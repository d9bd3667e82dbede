//! The guardian: a small process that outlives reaper only to clean up after it.
//!
//! If reaper is SIGKILLed — alone, or with its whole process group, which is what MCP clients
//! do to their stdio servers — nothing in reaper runs any more, and a run's tree would live on in
//! its cgroup. The guardian is a copy of reaper forked in `main` before any thread or runtime
//! exists ([`fork_early`]; by exec of `reaper guardian PID START` where that is not possible), in
//! a session (and so a process group) of its own, holding a pidfd on reaper. When reaper's pipe reaches EOF (reaper exited,
//! however), the guardian does for reaper what the next reaper's stale sweep would, but at once:
//! under each directory reaper named, it kills (`cgroup.kill`), empties and removes every cgroup
//! whose name carries *this* reaper's pid and start time (`reaper-PID-START-SEQ`, see
//! `containment::setup`), and, once reaper has exited, reaper's supervisor leaf
//! (`reaper-PID-START-supervisor`), which reaper cannot remove while it lives in it. Nothing
//! else: not `reaper-kept-…` (`check --keep`), not another reaper's, not a foreign cgroup.
//!
//! Does not cover the subreaper backend: without a cgroup there is nothing the guardian could
//! name the tree by once reaper (the subreaper) is gone, so the orphans reparent upwards.
//!
//! Protocol on the guardian's stdin: NUL-terminated records `+DIR`, one per directory reaper
//! creates cgroups in, sent before the first cgroup is created there. A reaper has one or two
//! such directories (its `--cgroup-parent` or its own cgroup, and its supervisor leaf), so the
//! pipe carries a few hundred bytes in reaper's whole life: it can never fill, and reaper's
//! writes, non-blocking, never wait for the guardian. A guardian that does not read (stopped by
//! a same-uid process with SIGSTOP) therefore never stops reaper; reaper reports it once.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::{procfs, reap};

use crate::containment::setup;

/// Once reaper is dead, how long the guardian waits for its pipe to reach EOF.
const EOF_AFTER_DEATH: Duration = Duration::from_millis(200);

/// How long the guardian waits for a killed cgroup to empty before removing what it can.
const TAKEOVER_DEADLINE: Duration = Duration::from_millis(900);

/// reaper's side: the pipe to its guardian.
#[derive(Debug)]
pub struct Guardian {
    pid: i32,
    /// Its start time, read while it was certainly our unreaped child (see [`Guardian::spawn`]).
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
}

/// How many directories reaper tells its guardian about, at most: a reaper uses one or two
/// (`--cgroup-parent` or its own cgroup, and its supervisor leaf), so this bounds only a reaper
/// that something keeps moving between cgroups.
const MAX_DIRS: usize = 64;

/// The guardian [`fork_early`] forked, waiting for [`Guardian::spawn`] to take it (or the reason
/// it could not be started, which `spawn` reports as its own failure), with the read end of a
/// pipe that reaches EOF once the guardian has its command line (see [`child`]).
static EARLY: Mutex<Option<Early>> = Mutex::new(None);

/// What [`EARLY`] holds: the guardian (or why there is none) and its `ready` pipe.
type Early = (Result<Guardian, String>, Option<OwnedFd>);

/// The guardian's command line, as `ps` and the tests find it: `reaper guardian PID START`.
fn title(pid: i32, start: u64) -> Vec<u8> {
    format!("reaper\0guardian\0{pid}\0{start}\0").into_bytes()
}

/// What `/proc/self/stat` says about this process before the fork (proc(5) field numbers).
struct SelfStat {
    pid: i32,
    /// Field 22.
    starttime: u64,
    /// Field 20: the fork is sound only while this is 1.
    threads: u64,
    /// Fields 48 and 49: the argument block the kernel shows as `/proc/PID/cmdline`.
    arg_start: usize,
    arg_end: usize,
    /// Fields 50 and 51: the environment block, which the kernel places right after it.
    env_start: usize,
    env_end: usize,
}

fn self_stat() -> Option<SelfStat> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let st = procfs::parse_stat(&text)?;
    let field = |n| usize::try_from(procfs::stat_field(&text, n)?).ok();
    Some(SelfStat {
        pid: st.pid,
        starttime: st.starttime,
        threads: procfs::stat_field(&text, 20)?,
        arg_start: field(48)?,
        arg_end: field(49)?,
        env_start: field(50)?,
        env_end: field(51)?,
    })
}

/// Forks the guardian now, while reaper is one thread and no runtime exists, so that a run
/// pays neither a second exec of reaper's binary nor its dynamic loading and start (issue 16,
/// fix 3). Call first thing in `main`, only when the command will want a guardian; the result
/// waits for [`Guardian::spawn`]. Returns `Some(exit status)` in the guardian, which `main`
/// returns at once, and `None` in reaper. Does nothing (and `spawn` starts the guardian the old
/// way, by exec) when reaper already has a second thread: fork is sound only without one.
pub fn fork_early() -> Option<u8> {
    let me = self_stat()?;
    if me.threads != 1 {
        return None;
    }
    let pipes = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).and_then(|p| {
        Ok((
            p,
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?,
        ))
    });
    let ((read, write), (ready, ready_w)) = match pipes {
        Ok(p) => p,
        Err(e) => {
            *EARLY.lock().unwrap_or_else(|p| p.into_inner()) = Some((
                Err(format!("cannot start the guardian: no pipe ({e})")),
                None,
            ));
            return None;
        }
    };
    // SAFETY: reaper has one thread (checked above, and nothing in `main` starts one before
    // this call), so the child is a complete copy with no lock held by a vanished thread, and
    // may allocate and do anything the parent could.
    match unsafe { libc::fork() } {
        -1 => {
            let e = std::io::Error::last_os_error();
            *EARLY.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((Err(format!("cannot start the guardian: {e}")), None));
            None
        }
        0 => {
            drop((write, ready));
            Some(child(&me, read, ready_w))
        }
        gpid => {
            drop((read, ready_w));
            // Nothing reaps before the runtime exists; the lock says so to the next reader.
            let reaping = reap::hold();
            let g = adopt(gpid, Some(ChildStdin::from(write)));
            drop(reaping);
            *EARLY.lock().unwrap_or_else(|p| p.into_inner()) = Some((g, Some(ready)));
            None
        }
    }
}

/// The forked guardian, before [`main`]: everything an exec of `reaper guardian PID START`
/// gave it. Its own session (outside reaper's process group, so `kill -KILL -PGID` and a
/// terminal's SIGHUP miss it), the pipe as stdin and `/dev/null` as stdout, no other fd of
/// reaper's (nor one reaper inherited), an empty signal mask, its own tracing at `warn`
/// (`RUST_LOG` is reaper's), and that command line. `ready` is closed once the command line is
/// set (by the exec, when it takes one), as std's spawn returns only after the exec: whoever
/// looks for `reaper guardian PID START` once reaper is serving finds it.
fn child(me: &SelfStat, pipe: OwnedFd, ready: OwnedFd) -> u8 {
    use std::os::fd::AsRawFd;
    let _ = rustix::process::setsid();
    // SAFETY: plain fd and signal-mask calls on fds this process owns; single-threaded.
    unsafe {
        libc::dup2(pipe.as_raw_fd(), 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
        }
        // dup2 onto itself (reaper started with stdin or stdout closed) keeps close-on-exec.
        libc::fcntl(0, libc::F_SETFD, 0);
        libc::fcntl(1, libc::F_SETFD, 0);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    if retitle(me) {
        // Closes `ready` too, with every other fd of reaper's.
        // SAFETY: closes fds by number; the ones this function owns are forgotten below.
        // The raw syscall: musl's libc has no close_range wrapper.
        if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
            close_all_above_stderr();
        }
        // Closed above; dropping them would close whatever reuses their numbers.
        std::mem::forget((pipe, ready));
    } else {
        // No room for the command line and no CAP_SYS_RESOURCE to move it: become the
        // guardian the old way, by exec (the pipe is stdin already; close-on-exec closes the
        // rest, `ready` and the pipe's first fd with it, unless that fd is stdin).
        std::mem::forget(pipe);
        let e = Command::new("/proc/self/exe")
            .arg0("reaper")
            .args(["guardian", &me.pid.to_string(), &me.starttime.to_string()])
            .env_remove("RUST_LOG")
            .exec();
        say!("reaper guardian: cannot exec reaper ({e})");
        return 1;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_target(false)
        .init();
    main(me.pid, me.starttime)
}

/// Fallback of `close_range(2)` (Linux < 5.9): closes every fd above stderr that
/// `/proc/self/fd` lists.
fn close_all_above_stderr() {
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|&fd| fd > 2)
                .collect()
        })
        .unwrap_or_default();
    for fd in fds {
        // SAFETY: closing an fd number; nothing in this fresh child owns one above stderr
        // (the directory's own fd is already closed, and then fails with EBADF).
        unsafe {
            libc::close(fd);
        }
    }
}

/// Makes `/proc/self/cmdline` read `reaper guardian PID START`: in place when reaper's own
/// argument block is long enough (the rest zeroed, so the kernel still reads the block as
/// NUL-separated arguments); else, as setproctitle(3) does, as one string written over the
/// argument block and on into the environment block that follows it (the kernel reads past the
/// argument block when its last byte is not NUL: `get_mm_cmdline`; the guardian reads no
/// environment variable, so nothing needs what it overwrites); else by pointing the kernel at a
/// copy (`PR_SET_MM`, which needs CAP_SYS_RESOURCE). False when none works.
fn retitle(me: &SelfStat) -> bool {
    let title = title(me.pid, me.starttime);
    let len = me.arg_end.saturating_sub(me.arg_start);
    if me.arg_start != 0 && len >= title.len() {
        // SAFETY: [arg_start, arg_end) is the argument block the kernel copied onto this
        // process's stack at exec (proc(5)): mapped and writable for the process's life, and
        // nothing reads it while we write (one thread; std keeps only raw pointers into it).
        unsafe {
            let block = std::slice::from_raw_parts_mut(me.arg_start as *mut u8, len);
            block[..title.len()].copy_from_slice(&title);
            block[title.len()..].fill(0);
        }
        return true;
    }
    // The same words with spaces, one string ending in its NUL. Longer than the argument
    // block (which is shorter than `title`, of the same length), so the block's last byte is
    // one of the words', not a NUL: the kernel then shows the string.
    let spaced: Vec<u8> = title
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if b == 0 && i + 1 < title.len() {
                b' '
            } else {
                b
            }
        })
        .collect();
    let both = me.env_end.saturating_sub(me.arg_start);
    if me.arg_start != 0 && me.env_start == me.arg_end && both >= spaced.len() {
        // SAFETY: the argument and environment blocks are contiguous here (checked), both
        // copied onto this process's stack at exec: mapped and writable for the process's life.
        // One thread; `environ` keeps only pointers into the block, which then read as empty.
        unsafe {
            let block = std::slice::from_raw_parts_mut(me.arg_start as *mut u8, both);
            block[..spaced.len()].copy_from_slice(&spaced);
            block[spaced.len()..].fill(0);
        }
        return true;
    }
    let copy: &'static [u8] = Vec::leak(title);
    let start = copy.as_ptr() as libc::c_ulong;
    let end = start + copy.len() as libc::c_ulong;
    // SAFETY: prctl with integer arguments; `copy` lives as long as the process. The start goes
    // first: the kernel requires start <= end after each call, and the old end (the stack) is
    // above any heap address.
    unsafe {
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_ARG_START, start, 0, 0) == 0
            && libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_ARG_END, end, 0, 0) == 0
    }
}

/// reaper's side of a guardian just started as child `gpid`: the pipe made non-blocking, the
/// guardian named by pid and start time and a pidfd opened on it.
fn adopt(gpid: i32, pipe: Option<ChildStdin>) -> Result<Guardian, String> {
    if let Some(p) = &pipe {
        // The write end is reaper's alone (close-on-exec, the guardian holds the read end),
        // so O_NONBLOCK changes nobody else's I/O.
        let flags = rustix::fs::fcntl_getfl(p).map_err(|e| {
            format!("cannot read the flags of the guardian's pipe (fcntl F_GETFL): {e}")
        })?;
        rustix::fs::fcntl_setfl(p, flags | rustix::fs::OFlags::NONBLOCK).map_err(|e| {
            format!("cannot make the guardian's pipe non-blocking (fcntl F_SETFL): {e}")
        })?;
    }
    // Nobody waits for the guardian: `reap::reap_orphans` reaps it like an orphan once it
    // exits, and its pid may then be reused. Until the caller lets go of the reaping lock (or,
    // before the runtime exists, until anything reaps at all) it cannot be: read its start
    // time and open its pidfd now.
    let starttime = procfs::stat(gpid)
        .map_err(|e| format!("cannot read the guardian's /proc/{gpid}/stat: {e}"))?
        .starttime;
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
        }),
    })
}

impl Guardian {
    /// The guardian for this reaper process: the one [`fork_early`] forked, else a new one
    /// started by exec of `reaper guardian PID START`.
    pub fn spawn() -> Result<Guardian, String> {
        if let Some((early, ready)) = EARLY.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if let Some(fd) = ready {
                // Usually long closed: the guardian names itself while reaper builds its runtime.
                let mut byte = [0u8; 1];
                while let Err(rustix::io::Errno::INTR) = rustix::io::read(&fd, &mut byte) {}
            }
            return early;
        }
        let (pid, start) =
            procfs::self_identity().map_err(|e| format!("cannot read /proc/self/stat: {e}"))?;
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("reaper")
            .args(["guardian", &pid.to_string(), &start.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .env_remove("RUST_LOG");
        // SAFETY: setsid(2) is async-signal-safe and allocation-free. A session of its own puts
        // the guardian outside reaper's process group and session, so `kill -KILL -PGID` and
        // a terminal's SIGHUP miss it.
        unsafe {
            cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(Into::into));
        }
        // Under the reaping lock (see reap.rs): std's spawn waits for a child whose exec
        // failed, and until the lock is let go the guardian's pid is its own.
        let reaping = reap::hold();
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the guardian: {e}"))?;
        let pipe = child.stdin.take();
        let g = adopt(child.id() as i32, pipe);
        drop(reaping);
        g
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The guardian's start time: with [`Guardian::pid`], names it even after it was reaped.
    pub fn starttime(&self) -> u64 {
        self.starttime
    }

    /// reaper is about to create cgroups under `dir`: if reaper dies, the guardian kills and
    /// removes the ones that carry its name there. Cheap after the first call for a directory:
    /// one look at the guardian's state, no write.
    pub fn watch_dir(&self, dir: &Path) {
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

    /// reaper's teardown is complete: closing the pipe lets the guardian exit (after removing
    /// whatever reaper could not, and its supervisor leaf once reaper has exited).
    pub fn done(&self) {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        self.flush(&mut ch);
        self.check(&mut ch);
        ch.pipe = None;
    }

    /// Writes what is queued without ever blocking; what the pipe does not take stays queued.
    fn flush(&self, ch: &mut Channel) {
        while !ch.unsent.is_empty() {
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

/// The guardian process itself (`reaper guardian PID STARTTIME`, started by [`Guardian::spawn`]).
///
/// It reads records until its stdin reaches EOF: reaper's end of the pipe closes when reaper
/// exits, however it exits (the pipe is close-on-exec, so no descendant keeps it), or when it
/// says it is done. Whatever run cgroup of reaper's is still there then was not removed by
/// reaper — it died, or it finished without being able to clean up (survivors, a dropped run) —
/// and is taken over. The pidfd on reaper bounds the wait for that EOF once reaper is known to
/// be dead, and tells when reaper's supervisor leaf is empty.
pub fn main(reaper_pid: i32, reaper_start: u64) -> u8 {
    ignore_stop_signals();
    // None: reaper already died before we could watch it; its records are still in the pipe.
    let reaper = Pidfd::open_checked(reaper_pid, reaper_start);
    let dirs = read_dirs(reaper.as_ref());
    let owner = (reaper_pid, reaper_start);
    let runs = owned(&dirs, |name| {
        setup::owner_of(name) == Some(owner) && name != setup::supervisor_name(owner.0, owner.1)
    });
    let leaves = owned(&dirs, |name| {
        name == setup::supervisor_name(owner.0, owner.1)
    });
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
        let (runs, _claims) = claimed(runs, reaper.as_ref()).await;
        if !runs.is_empty() {
            failed |= take_over(&runs, true).await;
        }
        if !leaves.is_empty() {
            // reaper lives in its supervisor leaf until it exits: only then is the leaf empty.
            if let Some(r) = &reaper {
                let _ = r.exited().await;
            }
            let (leaves, _claims) = claimed(leaves, None).await;
            failed |= take_over(&leaves, false).await;
        }
        u8::from(failed)
    })
}

/// The cgroups whose owner lock the guardian can take, with the locks (held until they are
/// removed, as the stale sweep holds its claims). A name proves less than it seems: a reaper in
/// another PID namespace can have this reaper's pid and start time (two PID 1s started in the
/// same clock tick), and so its names; its cgroups stay locked while it lives and are never
/// touched. A lock still held may also be reaper's own, in the moment between its pipe's EOF
/// and the end of its exit: those are tried again once `reaper` has exited. A cgroup that
/// cannot be locked for another reason (an error) is still taken over: it is named after this
/// reaper and nobody holds it.
async fn claimed(cgroups: Vec<PathBuf>, reaper: Option<&Pidfd>) -> (Vec<PathBuf>, Vec<OwnedFd>) {
    let mut locks = Vec::new();
    let mut mine = Vec::new();
    let mut held = Vec::new();
    let mut claim =
        |path: PathBuf, held: &mut Vec<PathBuf>| match Cgroup::at(&path).try_lock_owner() {
            Ok(Some(lock)) => {
                locks.push(lock);
                mine.push(path);
            }
            Ok(None) => held.push(path),
            Err(e) => {
                tracing::debug!("cannot lock {}: {e}; taking it over", path.display());
                mine.push(path);
            }
        };
    for path in cgroups {
        claim(path, &mut held);
    }
    if !held.is_empty() {
        if let Some(r) = reaper {
            let _ = r.exited().await;
            let mut still = Vec::new();
            for path in std::mem::take(&mut held) {
                claim(path, &mut still);
            }
            held = still;
        }
    }
    for path in held {
        tracing::debug!(
            "{} is held by another owner (a live reaper of the same name): left alone",
            path.display()
        );
    }
    (mine, locks)
}

/// The directories reaper named, read from stdin until EOF, or until reaper has been dead for
/// [`EOF_AFTER_DEATH`] (something else holds the pipe: a child between fork and exec).
fn read_dirs(reaper: Option<&Pidfd>) -> Vec<PathBuf> {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut dirs: Vec<PathBuf> = Vec::new();
    let stdin = std::io::stdin();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut reaper_dead_since: Option<std::time::Instant> =
        reaper.is_none().then(std::time::Instant::now);
    loop {
        let timeout = reaper_dead_since.map(|_| rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        });
        let ready = {
            let mut fds = vec![PollFd::new(&stdin, PollFlags::IN)];
            if let (Some(r), None) = (reaper, reaper_dead_since) {
                fds.push(PollFd::new(r, PollFlags::IN));
            }
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) => (
                    !fds[0].revents().is_empty(),
                    fds.get(1).is_some_and(|f| !f.revents().is_empty()),
                ),
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        };
        if ready.1 {
            reaper_dead_since = Some(std::time::Instant::now());
        }
        if ready.0 {
            let n = (&stdin).read(&mut chunk).unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(end) = buf.iter().position(|&b| b == 0) {
                let rec: Vec<u8> = buf.drain(..=end).take(end).collect();
                // Nothing else is sent; an unknown record is ignored.
                if let Some((b'+', p)) = rec.split_first() {
                    let dir = PathBuf::from(String::from_utf8_lossy(p).into_owned());
                    if dir.is_absolute() && !dirs.contains(&dir) {
                        dirs.push(dir);
                    }
                }
            }
        } else if reaper_dead_since.is_some_and(|t| t.elapsed() >= EOF_AFTER_DEATH) {
            break;
        }
    }
    dirs
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
    for sig in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGALRM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGPOLL,
        libc::SIGPWR,
        libc::SIGXCPU,
        libc::SIGXFSZ,
    ] {
        // SAFETY: SIG_IGN installs no handler, so no code runs on delivery; nothing else in the
        // guardian changes signal dispositions.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Kills and removes `cgroups`; says so for run cgroups (`loud`), which reaper should have
/// removed itself. Returns whether one could not be removed.
async fn take_over(cgroups: &[PathBuf], loud: bool) -> bool {
    // Kill every tree first, then wait and remove: one slow cgroup must not delay the others.
    for path in cgroups {
        let _ = reaper_platform::linux::signal::to_cgroup_kill(&Cgroup::at(path));
    }
    let deadline = tokio::time::Instant::now() + TAKEOVER_DEADLINE;
    let mut failed = false;
    for path in cgroups {
        match setup::remove_tree(&Cgroup::at(path), deadline).await {
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

    /// A guardian that reads nothing (its pipe already full): telling it never blocks, what the
    /// pipe does not take is queued, the queue stays bounded, the fault is reported, and once
    /// the guardian reads again everything arrives, in order.
    #[test]
    fn a_full_pipe_never_blocks_and_the_queue_stays_bounded() {
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
            }),
        };
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
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = rustix::io::read(&r, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got.len(), filled);
        g.watch_dir(&dir(0));
        assert!(g.channel.lock().unwrap().unsent.is_empty());
        let mut got = Vec::new();
        while let Ok(n) = rustix::io::read(&r, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        let want: Vec<u8> = (0..MAX_DIRS)
            .flat_map(|i| format!("+{}\0", dir(i).display()).into_bytes())
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }
}
