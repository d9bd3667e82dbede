//! This process's own lines to stderr (its messages, `--events`, its log), written so that they
//! never block it. stderr is usually shared with the command it runs: a command that fills a
//! pipe whose reader waits for the end (`subprocess.run(capture_output=True)`), or stops a
//! terminal's output (`tcflow(TCOOFF)`, Ctrl-S), would otherwise hold this process in `write`
//! on its summary line for ever, or on an event before it stops the tree.
//!
//! How a write avoids blocking depends on what fd 2 is, asked once (`fstat`): a pipe, FIFO or
//! socket is written with `RWF_NOWAIT` (`pwritev2`), which leaves the file description the
//! command shares untouched (setting `O_NONBLOCK` on it would change the command's writes too);
//! a terminal, and a pipe where `RWF_NOWAIT` is not supported (before Linux 5.x), through a new
//! open file description of `/proc/self/fd/2` opened `O_NONBLOCK`; a regular file or another
//! device as it is (they do not wait on a reader). Where neither works, writes block as before.
//!
//! What the file does not take now waits in a bounded queue, sent before anything new (so lines
//! keep their order), on the next write or on [`flush`]; when the queue is full, new lines are
//! dropped and counted, and the count is said once the queue drains. At exit, [`flush`] (also
//! run as an exit hook) gives the queue a bounded time, then drops it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// The most this process keeps waiting for stderr, in bytes.
const QUEUE_MAX: usize = 1 << 20;

/// How long the exit hook waits for the queue to drain.
const AT_EXIT: Duration = Duration::from_millis(500);

/// How a line reaches fd 2 without blocking.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // elsewhere only `Plain`
enum How {
    /// A file or a device that does not wait on a reader: written as it is.
    Plain,
    /// A pipe, FIFO or socket: `pwritev2(RWF_NOWAIT)`.
    NoWait,
    /// Our own `O_NONBLOCK` open file description of fd 2's file.
    Own(OwnedFd),
    /// Nothing above works: written as it is, and may block.
    Blocking,
}

struct Out {
    /// The process this state is for: a forked child starts afresh.
    pid: u32,
    how: How,
    queue: Vec<u8>,
    /// Lines dropped since the last time that was said.
    dropped: u64,
}

static OUT: Mutex<Option<Out>> = Mutex::new(None);
static HOOK: Once = Once::new();

fn fd2() -> BorrowedFd<'static> {
    rustix::stdio::stderr()
}

/// What fd 2 is, and so how to write to it.
#[cfg(target_os = "linux")]
fn how() -> How {
    use rustix::fs::FileType;
    let Ok(st) = rustix::fs::fstat(fd2()) else {
        return How::Plain;
    };
    // SAFETY: isatty(3) only asks about descriptor 2.
    let tty = unsafe { libc::isatty(2) == 1 };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo | FileType::Socket => How::NoWait,
        FileType::CharacterDevice if tty => reopen(),
        _ => How::Plain,
    }
}

/// Elsewhere (no `RWF_NOWAIT`, no `/proc/self/fd` to reopen): as it is.
#[cfg(not(target_os = "linux"))]
fn how() -> How {
    How::Plain
}

/// A new `O_NONBLOCK` open file description of fd 2's file (`/proc/self/fd/2`): the command's
/// own description keeps its flags.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn reopen() -> How {
    use rustix::fs::{Mode, OFlags};
    match rustix::fs::open(
        "/proc/self/fd/2",
        OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => How::Own(fd),
        Err(_) => How::Blocking,
    }
}

/// One write of `bytes` that does not wait: how many were written (0: none, now).
fn write_once(how: &mut How, bytes: &[u8]) -> io::Result<usize> {
    // A terminal with TOSTOP set (a command can set it) answers a write from a background
    // group with SIGTTOU and a restart of the write: with a handler installed (job control)
    // that loops for ever. Blocked, SIGTTOU is not sent and the write goes through, as GNU
    // timeout's does (it ignores SIGTTOU).
    let _ttou = matches!(how, How::Own(_) | How::Blocking).then(TtouBlocked::new);
    loop {
        let r = match how {
            How::Plain | How::Blocking => rustix::io::write(fd2(), bytes),
            How::Own(fd) => rustix::io::write(fd.as_fd(), bytes),
            #[cfg(target_os = "linux")]
            How::NoWait => {
                let r = rustix::io::pwritev2(
                    fd2(),
                    &[io::IoSlice::new(bytes)],
                    u64::MAX,
                    rustix::io::ReadWriteFlags::NOWAIT,
                );
                if let Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) = r {
                    *how = reopen();
                    continue;
                }
                r
            }
            #[cfg(not(target_os = "linux"))]
            How::NoWait => rustix::io::write(fd2(), bytes),
        };
        return match r {
            Ok(n) => Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => Ok(0),
            Err(e) => Err(e.into()),
        };
    }
}

/// SIGTTOU blocked for this thread until dropped.
struct TtouBlocked(libc::sigset_t);

impl TtouBlocked {
    fn new() -> TtouBlocked {
        // SAFETY: pthread_sigmask(3) on local, initialised signal sets.
        unsafe {
            let (mut ttou, mut old): (libc::sigset_t, libc::sigset_t) =
                (std::mem::zeroed(), std::mem::zeroed());
            libc::sigemptyset(&mut ttou);
            libc::sigaddset(&mut ttou, libc::SIGTTOU);
            libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut old);
            TtouBlocked(old)
        }
    }
}

impl Drop for TtouBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

impl Out {
    fn new() -> Out {
        Out {
            pid: std::process::id(),
            how: how(),
            queue: Vec::new(),
            dropped: 0,
        }
    }

    /// Writes what is queued, as far as the file takes it now. A write error (a closed pipe)
    /// empties the queue: nobody reads it any more.
    fn drain(&mut self) {
        while !self.queue.is_empty() {
            match write_once(&mut self.how, &self.queue) {
                Ok(0) => return,
                Ok(n) => {
                    self.queue.drain(..n);
                }
                Err(_) => {
                    self.queue.clear();
                    self.dropped = 0;
                    return;
                }
            }
        }
        if self.dropped > 0 {
            let note = format!(
                "reaper: {} line(s) of reaper's own output were dropped: its stderr was not \
                 being read\n",
                std::mem::take(&mut self.dropped)
            );
            self.queue.extend_from_slice(note.as_bytes());
            // Once: a note that does not go out now waits like any line.
            if let Ok(n) = write_once(&mut self.how, &self.queue) {
                self.queue.drain(..n);
            }
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.queue.len() + bytes.len() > QUEUE_MAX {
            self.dropped += 1;
            return;
        }
        self.queue.extend_from_slice(bytes);
        self.drain();
    }

    /// The fd a wait for room polls: ours, or fd 2.
    fn poll_fd(&self) -> BorrowedFd<'_> {
        match &self.how {
            How::Own(fd) => fd.as_fd(),
            _ => fd2(),
        }
    }
}

/// The state for this process (a forked child's inherited one is dropped: its queue is its
/// parent's, and its own descriptor may be closed or reused).
fn with<T>(f: impl FnOnce(&mut Out) -> T) -> T {
    let mut g = OUT.lock().unwrap_or_else(|p| p.into_inner());
    let out = match g.as_mut() {
        Some(o) if o.pid == std::process::id() => o,
        _ => g.insert(Out::new()),
    };
    f(out)
}

/// Writes `bytes` to stderr without blocking (see the module docs).
pub fn write(bytes: &[u8]) {
    let queued = with(|o| {
        o.push(bytes);
        !o.queue.is_empty()
    });
    if queued {
        HOOK.call_once(|| {
            // SAFETY: `flush_at_exit` is an `extern "C" fn()` that does not unwind.
            unsafe { libc::atexit(flush_at_exit) };
        });
    }
}

/// One line to stderr, its newline added, without blocking.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut text = args.to_string();
    text.push('\n');
    write(text.as_bytes());
}

/// Waits up to `within` for what is queued to be written, then drops what is left. Returns
/// whether everything went out.
pub fn flush(within: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let deadline = Instant::now() + within;
    with(|o| loop {
        o.drain();
        if o.queue.is_empty() {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            o.queue.clear();
            return false;
        }
        let timeout = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let fd = o.poll_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
        if let Err(e) = poll(&mut fds, Some(&timeout)) {
            if e != rustix::io::Errno::INTR {
                o.queue.clear();
                return false;
            }
        }
    })
}

extern "C" fn flush_at_exit() {
    // Another thread inside a write keeps the lock: exit does not wait for it.
    if OUT.try_lock().is_ok_and(|g| g.is_some()) {
        flush(AT_EXIT);
    }
}

/// stderr as an [`io::Write`] that never blocks (for a logger): every write is taken whole.
#[derive(Debug, Default, Clone, Copy)]
pub struct Writer;

impl io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
