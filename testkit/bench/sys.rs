//! Raw process and cgroup primitives for the benchmark, kept as close to the kernel as a C loop
//! would be: `fork`/`clone3` + `execv` + `waitpid` with nothing allocated in the child, pidfds,
//! `/proc` readings, and a cgroup of the benchmark's own for the platform floors.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libc::{c_char, c_int, pid_t};

use reaper_platform::linux::procfs::{self, ProcStat};
use reaper_platform::linux::spawn::{CloneArgs, CLONE_INTO_CGROUP};

/// A program and its argv, prepared so that the child only has to call `execv`.
pub struct Cmd {
    argv: Vec<CString>,
    ptrs: Vec<*const c_char>,
    pub label: String,
}

impl Cmd {
    pub fn new<S: AsRef<OsStr>>(args: &[S]) -> Cmd {
        let argv: Vec<CString> = args
            .iter()
            .map(|a| {
                // Invariant: arguments come from paths and literals of this program, none of
                // which contains a NUL byte.
                CString::new(a.as_ref().as_bytes()).expect("an argument without NUL")
            })
            .collect();
        let mut ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let label = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        Cmd { argv, ptrs, label }
    }

    /// In the child: stdio, then exec. Allocation-free; `_exit(127)` when exec fails.
    fn exec_child(&self, io: &Stdio) -> ! {
        // SAFETY: only async-signal-safe calls on fds and pointers prepared before the fork.
        unsafe {
            libc::dup2(io.stdin, 0);
            libc::dup2(io.stdout, 1);
            libc::dup2(io.stderr, 2);
            libc::execv(self.argv[0].as_ptr(), self.ptrs.as_ptr());
            libc::_exit(127)
        }
    }
}

/// The child's stdio: fds that stay open in the parent for the whole benchmark.
pub struct Stdio {
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
}

/// How the child enters its containment, between fork and exec or at the fork itself.
#[derive(Clone, Copy)]
pub enum Join {
    /// Nothing: the bare fork/exec/wait floor.
    Nothing,
    /// `setpgid(0, 0)`: a process group of its own, as process-group wrappers do.
    Pgroup,
    /// `write("0")` to this `cgroup.procs` fd in the child, as `reaper run` does.
    CgroupProcs(RawFd),
    /// `clone3(CLONE_INTO_CGROUP)` with this cgroup directory fd: born in the cgroup.
    Clone3(RawFd),
}

/// Forks (or clone3s) a child that joins as asked and execs `cmd`. Returns its pid.
pub fn spawn(cmd: &Cmd, join: Join, io: &Stdio) -> io::Result<pid_t> {
    let pid = match join {
        Join::Clone3(dirfd) => {
            let mut args = CloneArgs {
                flags: CLONE_INTO_CGROUP,
                exit_signal: libc::SIGCHLD as u64,
                cgroup: dirfd as u64,
                ..CloneArgs::default()
            };
            // SAFETY: clone3 without CLONE_VM is a fork; the child only execs.
            unsafe {
                libc::syscall(
                    libc::SYS_clone3,
                    &mut args as *mut CloneArgs,
                    std::mem::size_of::<CloneArgs>(),
                ) as pid_t
            }
        }
        // SAFETY: the child only makes async-signal-safe calls before exec.
        _ => unsafe { libc::fork() },
    };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            match join {
                // SAFETY: setpgid(2) on the child itself; async-signal-safe.
                Join::Pgroup => unsafe {
                    libc::setpgid(0, 0);
                },
                // SAFETY: async-signal-safe calls on a prepared fd (`cgroup.procs`, opened before
                // the fork) and a static buffer.
                Join::CgroupProcs(fd) => unsafe {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        libc::_exit(126);
                    }
                },
                Join::Nothing | Join::Clone3(_) => {}
            }
            cmd.exec_child(io)
        }
        pid => {
            if let Join::Pgroup = join {
                // Both sides set it, so neither the exec nor a killpg can race the child's own
                // call. EACCES after the exec is fine: the child did it first.
                // SAFETY: plain syscall on our own child.
                unsafe { libc::setpgid(pid, pid) };
            }
            Ok(pid)
        }
    }
}

/// `waitpid(pid)`, retried on EINTR; returns the raw wait status.
pub fn wait(pid: pid_t) -> io::Result<c_int> {
    let mut st: c_int = 0;
    loop {
        // SAFETY: plain syscall with a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            return Ok(st);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Reaps one child, any child, blocking. `None` when there are no children (ECHILD).
pub fn wait_any() -> Option<pid_t> {
    let mut st: c_int = 0;
    loop {
        // SAFETY: plain syscall with a valid out pointer.
        let r = unsafe { libc::waitpid(-1, &mut st, 0) };
        if r > 0 {
            return Some(r);
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Reaps every exited child without blocking (orphans reparented to the benchmark, which is a
/// child subreaper). Returns how many.
pub fn reap_strays() -> usize {
    let mut n = 0;
    loop {
        let mut st: c_int = 0;
        // SAFETY: plain syscall with a valid out pointer.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r <= 0 {
            return n;
        }
        n += 1;
    }
}

/// Reaps one member of process group `pgid`, blocking. `None` when none is left (ECHILD).
pub fn wait_group(pgid: pid_t) -> Option<pid_t> {
    let mut st: c_int = 0;
    loop {
        // SAFETY: plain syscall with a valid out pointer.
        let r = unsafe { libc::waitpid(-pgid, &mut st, 0) };
        if r > 0 {
            return Some(r);
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Waits (up to `limit`) until this process has no children left, reaping them: the guardian of
/// a reaper that just exited may still be finishing, reparented here. Returns whether it has none.
pub fn settle_children(limit: Duration) -> bool {
    let me = std::process::id() as pid_t;
    let deadline = Instant::now() + limit;
    loop {
        reap_strays();
        if children(me).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// "exit 0" for a raw wait status.
pub fn exited_ok(st: c_int) -> bool {
    libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
}

pub fn describe_status(st: c_int) -> String {
    if libc::WIFEXITED(st) {
        format!("exit {}", libc::WEXITSTATUS(st))
    } else if libc::WIFSIGNALED(st) {
        format!("signal {}", libc::WTERMSIG(st))
    } else {
        format!("status {st:#x}")
    }
}

/// Orphans of the trees the benchmark starts directly reparent to it, so it can reap them and
/// count them dead the moment they are.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A pidfd on `pid` (Linux 5.3).
pub fn pidfd_open(pid: pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub fn pidfd_signal(fd: &OwnedFd, sig: c_int) -> io::Result<()> {
    // SAFETY: plain syscall on an fd we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// SIGKILL to `pid` only if it is still the process that started at `start` (the pidfd pins
/// it; the start time proves the pid was not reused before the pidfd was opened).
pub fn kill_checked(pid: pid_t, start: u64) -> bool {
    let Ok(fd) = pidfd_open(pid) else {
        return false;
    };
    if stat(pid).map(|s| s.starttime) != Some(start) {
        return false;
    }
    pidfd_signal(&fd, libc::SIGKILL).is_ok()
}

/// `kill(-pgid, sig)`.
pub fn killpg(pgid: pid_t, sig: c_int) -> io::Result<()> {
    // SAFETY: plain syscall.
    if unsafe { libc::kill(-pgid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `/proc/PID/stat` (the platform's parser); `None` once the process is reaped.
pub fn stat(pid: pid_t) -> Option<ProcStat> {
    procfs::stat(pid).ok()
}

/// Whether the process that started at `start` is alive (and not a zombie).
pub fn alive(pid: pid_t, start: u64) -> bool {
    procfs::is_alive(pid, start)
}

/// A field of `/proc/PID/status` in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: pid_t, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Children of `pid` (its main thread's).
pub fn children(pid: pid_t) -> Vec<pid_t> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Lines `PID STARTTIME ROLE PGID SID` the fixture appended to its `--pids` file.
pub fn read_pids(path: &Path) -> Vec<(pid_t, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// Waits until `path` exists (the fixture's `--ready` file), while `pid` (what builds it) runs.
pub fn wait_for_file(path: &Path, pid: pid_t, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(format!("{} not created within {limit:?}", path.display()));
        }
        if stat(pid).is_none_or(|s| s.is_dead()) {
            return Err(format!(
                "pid {pid} ended before creating {}",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// `flock(LOCK_EX | LOCK_NB)` on the fixture's oracle: succeeds only when no process of the tree
/// holds its shared lock any more, i.e. every one of them has exited.
pub fn oracle_free(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    // SAFETY: plain syscall on an fd we own; the lock goes with the file.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// A thread that blocks on `flock(LOCK_EX)` on the oracle and reports the instant it got it:
/// the moment the last process of the tree exited.
pub fn oracle_waiter(path: &Path) -> std::sync::mpsc::Receiver<Instant> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_owned();
    std::thread::spawn(move || {
        if let Ok(f) = File::open(&path) {
            // SAFETY: plain syscall on an fd we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                let _ = tx.send(Instant::now());
            }
        }
    });
    rx
}

/// `/dev/null`, open for the whole benchmark (close-on-exec; `dup2` clears that in children).
pub fn dev_null() -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
}

/// A directory of the benchmark's own under the temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> io::Result<TempDir> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("reaper-bench-{}-{tag}-{n}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where the cgroup2 file system is mounted and this process's cgroup directory in it.
pub struct CgroupHome {
    pub mount: PathBuf,
    pub own_dir: PathBuf,
    /// cgroup v1 hierarchies mounted too.
    pub hybrid: bool,
    pub mount_options: String,
}

impl CgroupHome {
    pub fn find() -> Option<CgroupHome> {
        let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mut found = None;
        let mut hybrid = false;
        for line in mi.lines() {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            match post.first() {
                Some(&"cgroup2") if found.is_none() => {
                    found = Some((
                        pre.get(3)?.to_string(),
                        PathBuf::from(pre.get(4)?),
                        post.get(2).unwrap_or(&"").to_string(),
                    ))
                }
                Some(&"cgroup") => hybrid = true,
                _ => {}
            }
        }
        let (root, mount, opts) = found?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned))?;
        let rel = own.strip_prefix(root.trim_end_matches('/'))?;
        let own_dir = mount.join(rel.trim_start_matches('/'));
        Some(CgroupHome {
            mount,
            own_dir,
            hybrid,
            mount_options: opts,
        })
    }
}

/// A cgroup the benchmark made for one floor measurement, killed and removed on drop.
pub struct BenchCgroup {
    pub path: PathBuf,
    pub dir: OwnedFd,
    pub procs: File,
}

impl BenchCgroup {
    pub fn create(parent: &Path) -> io::Result<BenchCgroup> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = parent.join(format!("reaper-bench-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)?;
        let open = || -> io::Result<(OwnedFd, File)> {
            let dir = File::open(&path)?.into();
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .open(path.join("cgroup.procs"))?;
            Ok((dir, procs))
        };
        match open() {
            Ok((dir, procs)) => Ok(BenchCgroup { path, dir, procs }),
            Err(e) => {
                let _ = std::fs::remove_dir(&path);
                Err(e)
            }
        }
    }

    /// `cgroup.kill`: SIGKILL to every process in it, atomically against fork.
    pub fn kill(&self) -> io::Result<()> {
        std::fs::write(self.path.join("cgroup.kill"), "1")
    }

    /// A watch on `cgroup.events` (kernfs wakes `poll` with POLLPRI when it changes).
    pub fn events(&self) -> io::Result<Events> {
        Ok(Events {
            file: File::open(self.path.join("cgroup.events"))?,
        })
    }

    /// `rmdir`, retried briefly on EBUSY (a cgroup is busy until its last task is released).
    pub fn remove(&self) -> io::Result<u32> {
        let mut tries = 0;
        loop {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return Ok(tries),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(tries),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 2000 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for BenchCgroup {
    fn drop(&mut self) {
        if !self.path.exists() {
            return;
        }
        if let Ok(mut ev) = self.events() {
            if ev.populated().unwrap_or(false) {
                let _ = self.kill();
                let _ = ev.wait_empty(Duration::from_secs(5));
            }
        }
        reap_strays();
        if let Err(e) = self.remove() {
            eprintln!("reaper-bench: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// `cgroup.events`, opened once: `populated` is re-read from offset 0, changes are awaited with
/// `poll(POLLPRI)` (no inotify instance, whose close waits for an SRCU grace period).
pub struct Events {
    file: File,
}

impl Events {
    pub fn populated(&mut self) -> io::Result<bool> {
        let mut text = String::new();
        self.file.rewind()?;
        self.file.read_to_string(&mut text)?;
        Ok(text.lines().any(|l| l == "populated 1"))
    }

    /// Waits until `populated 0`, or `limit` passes (`false`).
    pub fn wait_empty(&mut self, limit: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + limit;
        loop {
            if !self.populated()? {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            };
            // SAFETY: plain syscall with one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as c_int + 1) };
        }
    }
}
