//! A helper process forked from a single-threaded program and detached from it: in a session of
//! its own, holding none of the parent's descriptors but a pipe, named by a title of its own in
//! `/proc/PID/cmdline`. Mechanism for reaper's guardian; what the helper does is the caller's.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::procfs;

/// What `/proc/self/stat` says about this process before a fork (proc(5) field numbers).
#[derive(Debug, Clone, Copy)]
pub struct SelfStat {
    pub pid: i32,
    /// Field 22.
    pub starttime: u64,
    /// Field 20: a fork is sound (the child may do anything) only while this is 1.
    pub threads: u64,
    /// Fields 48 and 49: the argument block the kernel shows as `/proc/PID/cmdline`.
    arg_start: usize,
    arg_end: usize,
    /// Fields 50 and 51: the environment block, which the kernel places right after it.
    env_start: usize,
    env_end: usize,
}

impl SelfStat {
    /// This process, now.
    pub fn read() -> Option<SelfStat> {
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
}

/// Where a [`fork`] returned.
pub enum Forked {
    /// In the new process.
    Child,
    /// In the parent: the child's pid.
    Parent(i32),
}

/// fork(2). Only where `me.threads == 1`: checked here, refused otherwise (a child of a
/// multi-threaded process may hold locks of vanished threads, the allocator's among them).
pub fn fork(me: &SelfStat) -> io::Result<Forked> {
    if me.threads != 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "a fork needs a single-threaded process, and this one has {} threads",
                me.threads
            ),
        ));
    }
    // SAFETY: the process has one thread (checked above), so the child is a complete copy with
    // no lock held by a vanished thread, and may allocate and do anything the parent could.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// In a forked child: a session of its own (out of its parent's process group, so `kill -KILL
/// -PGID` and a terminal's SIGHUP miss it), `stdin` as fd 0, `/dev/null` as stdout and, with
/// `quiet`, as stderr, an empty signal mask, and no other descriptor of its parent's.
pub fn detach(stdin: OwnedFd, quiet: bool) {
    let _ = rustix::process::setsid();
    // SAFETY: plain fd and signal-mask calls on fds this process owns; single-threaded.
    unsafe {
        libc::dup2(stdin.as_raw_fd(), 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
            if quiet {
                libc::dup2(null, 2);
            }
        }
        // dup2 onto itself (a parent started with stdin or stdout closed) keeps close-on-exec.
        libc::fcntl(0, libc::F_SETFD, 0);
        libc::fcntl(1, libc::F_SETFD, 0);
        libc::fcntl(2, libc::F_SETFD, 0);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    // Closed below with every other fd above stderr; dropping it would close whatever reuses
    // its number.
    std::mem::forget(stdin);
    if !close_range_above_stderr(0) {
        close_all_above_stderr();
    }
}

/// `close_range(3, ~0, flags)`: closes (or, with `CLOSE_RANGE_CLOEXEC`, marks close-on-exec)
/// every fd above stderr. Through the raw syscall: musl has no wrapper. False when the kernel
/// has none (Linux < 5.9, or < 5.11 for the flag). Async-signal-safe (a `pre_exec` may call it).
fn close_range_above_stderr(flags: u32) -> bool {
    // SAFETY: close_range(2) acts on fd numbers only; the callers own none above stderr that
    // they still use (a fresh child; a child between fork and exec).
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, flags) == 0 }
}

/// Makes `cmd`'s child a session leader of its own (outside this process's group and
/// session: `kill -PGID` and a terminal's SIGHUP miss it) that keeps no descriptor of this
/// process's above stderr across its exec (a caller's pipe it would hold open).
pub fn detach_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) and close_range(2) are async-signal-safe and allocation-free.
    unsafe {
        cmd.pre_exec(|| {
            close_range_above_stderr(libc::CLOSE_RANGE_CLOEXEC);
            rustix::process::setsid().map(drop).map_err(Into::into)
        });
    }
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

/// Makes `/proc/self/cmdline` read `title` (NUL-separated words, ending in a NUL): in place
/// when the argument block is long enough (the rest zeroed, so the kernel still reads the block
/// as NUL-separated arguments); else, as setproctitle(3) does, as one string written over the
/// argument block and on into the environment block that follows it (the kernel reads past the
/// argument block when its last byte is not NUL: `get_mm_cmdline`; the caller must need no
/// environment variable after this); else by pointing the kernel at a copy (`PR_SET_MM`, which
/// needs CAP_SYS_RESOURCE). False when none works. Only in a single-threaded process.
pub fn set_title(me: &SelfStat, title: &[u8]) -> bool {
    let len = me.arg_end.saturating_sub(me.arg_start);
    if me.arg_start != 0 && len >= title.len() {
        // SAFETY: [arg_start, arg_end) is the argument block the kernel copied onto this
        // process's stack at exec (proc(5)): mapped and writable for the process's life, and
        // nothing reads it while we write (one thread; std keeps only raw pointers into it).
        unsafe {
            let block = std::slice::from_raw_parts_mut(me.arg_start as *mut u8, len);
            block[..title.len()].copy_from_slice(title);
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
    let copy: &'static [u8] = Vec::leak(title.to_vec());
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

/// Ignores each of `signals` (SIG_IGN): no handler runs on their delivery.
pub fn ignore_signals(signals: &[crate::Signal]) {
    for &sig in signals {
        // SAFETY: SIG_IGN installs no handler, so no code runs on delivery.
        unsafe {
            libc::signal(sig.as_raw(), libc::SIG_IGN);
        }
    }
}

/// Whether fd 2 is one whose reader waits until every writer has closed it: a pipe, a FIFO or
/// a socket (`out=$(cmd 2>&1)`, a client capturing a server's stderr).
pub fn stderr_holds_an_eof() -> bool {
    use rustix::fs::FileType;
    rustix::fs::fstat(rustix::stdio::stderr()).is_ok_and(|st| {
        matches!(
            FileType::from_raw_mode(st.st_mode),
            FileType::Fifo | FileType::Socket
        )
    })
}
