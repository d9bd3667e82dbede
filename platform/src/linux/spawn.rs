//! Starting a process directly inside a cgroup: `clone3(CLONE_INTO_CGROUP | CLONE_PIDFD)`.
//!
//! The portable way in (a `write("0")` to `cgroup.procs` between fork and exec) migrates a live
//! task, which takes the kernel's `cgroup_threadgroup_rwsem` for writing and so waits for an RCU
//! grace period (~10 ms) whenever nobody migrated a task moments before: the cost of a lone
//! `reaper run` or MCP call. `CLONE_INTO_CGROUP` (Linux 5.7) creates the child in the cgroup and
//! takes that lock only for reading. `CLONE_PIDFD` hands back a pidfd with the child, so there
//! is no moment when the child is known only by its pid.
//!
//! std's `Command` cannot pass clone flags, so this is a small spawn of its own, doing what std
//! does between fork and exec: stdio `dup2`'d into place, the signal mask emptied and SIGPIPE
//! back to its default, the working directory, exec along `PATH` like `execvp`, and the exec
//! error carried back through a close-on-exec pipe so "not found" and "not executable" stay
//! exact. Everything the child needs is built before the clone: between clone and exec the
//! child only makes system calls (the parent may have other threads; no allocation, no locks).
//!
//! [`Unsupported`](SpawnError::Unsupported) means this kernel (or a seccomp filter in front of
//! it) has no usable `clone3`: the caller falls back to the portable path.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::process::Pid;

use super::pidfd::Pidfd;
use super::sandbox::{SandboxPlan, Step, StepError};

/// What a child is started with. Every string is a C string already: the child cannot allocate.
pub struct SpawnSpec<'a> {
    /// The files to try to execute, in order (the `PATH` search happens before the clone).
    pub candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub cwd: Option<CString>,
    /// The child's fds 0, 1, 2; `None` keeps reaper's own.
    pub stdio: [Option<BorrowedFd<'a>>; 3],
    /// `setpgid(0, 0)`: the child leads a new process group.
    pub new_process_group: bool,
    /// `setsid()`: the child leads a new session (and process group), without a controlling
    /// terminal. Wins over `new_process_group`.
    pub new_session: bool,
    /// With `new_process_group`: a terminal whose foreground group the new group becomes
    /// ([`crate::terminal::child_take_foreground`]).
    pub foreground_tty: Option<RawFd>,
    /// The signal the child gets when reaper dies (`PR_SET_PDEATHSIG`), checked against a death
    /// that already happened.
    pub parent_death_signal: Option<rustix::process::Signal>,
    /// An fd of the cgroup's directory (`O_RDONLY` or `O_PATH`).
    pub cgroup: BorrowedFd<'a>,
    /// Instead of exec'ing `candidates`, the child calls this once it is set up (in its cgroup,
    /// its sandbox, its stdio in place) and exits with what it returns: a self-check that needs
    /// no program of its own. It runs between clone and exec, so it must not allocate or lock.
    pub call: Option<&'a (dyn Fn() -> i32 + Sync)>,
    /// `--sandbox`: the clone makes its user (and PID) namespace, the parent writes the maps,
    /// then the child applies the rest once it is in the cgroup, before anything else; with a
    /// PID namespace the child is PID 1 of it.
    pub sandbox: Option<&'a SandboxPlan>,
}

#[derive(Debug)]
pub enum SpawnError {
    /// No usable `clone3(CLONE_INTO_CGROUP)` here (ENOSYS, E2BIG, EINVAL, EPERM from a filter).
    Unsupported(std::io::Error),
    /// The kernel would not create a child in this cgroup (EACCES, EBUSY, ENOENT, …): the
    /// portable way in may still work, and names the problem if it does not.
    CgroupRefused(std::io::Error),
    /// The child could not enter its sandbox: nothing ran.
    Sandbox(StepError),
    /// The child was created but could not exec (its errno: ENOENT, EACCES, …), or the clone
    /// itself failed for a reason a fallback would meet too (EAGAIN, ENOMEM).
    Failed(std::io::Error),
}

/// An exec's environment as `KEY=VALUE` C strings; `None` when one holds a NUL byte (which
/// exec could not pass).
pub fn env_block<'a>(
    env: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
) -> Option<Vec<CString>> {
    use std::os::unix::ffi::OsStrExt;
    env.into_iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect()
}

/// The argv and environment as C strings, and `program` resolved along `PATH` the way
/// `execvp(3)` does (a name with a `/` is used as it is). `path` is the `PATH` the child will
/// have; `None` means glibc's default, `/bin:/usr/bin`.
pub fn exec_candidates(program: &OsStr, path: Option<&OsStr>) -> std::io::Result<Vec<CString>> {
    let c = |b: &[u8]| {
        CString::new(b).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a NUL byte in the program name or PATH",
            )
        })
    };
    let name = program.as_bytes();
    if name.is_empty() {
        return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
    }
    if name.contains(&b'/') {
        return Ok(vec![c(name)?]);
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            // An empty entry is the current directory (execvp(3)).
            let dir = if dir.is_empty() { &b"."[..] } else { dir };
            let mut full = dir.to_vec();
            full.push(b'/');
            full.extend_from_slice(name);
            c(&full)
        })
        .collect()
}

pub use super::clone_args::CloneArgs;
use super::clone_args::CLONE_PIDFD;

const SH: &CStr = c"/bin/sh";
/// include/uapi/linux/sched.h.
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Starts the child described by `spec` inside its cgroup. Returns its pidfd once it has
/// exec'd; on an exec failure the child has already been reaped.
pub fn spawn_into_cgroup(spec: &SpawnSpec<'_>) -> Result<Pidfd, SpawnError> {
    let failed = |e: std::io::Error| SpawnError::Failed(e);
    // Pointer arrays for execve, NULL-terminated, built before the clone.
    let argv: Vec<*const libc::c_char> = spec
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = spec
        .envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let candidates: Vec<&CStr> = spec.candidates.iter().map(|c| c.as_c_str()).collect();
    // For a file without a `#!` line (ENOEXEC), execvp(3) runs it with the shell:
    // `/bin/sh FILE ARGS…`; slot 1 is filled in by the child.
    let mut sh_argv: Vec<*const libc::c_char> = [SH.as_ptr(), std::ptr::null()]
        .into_iter()
        .chain(argv.iter().skip(1).copied())
        .collect();
    if sh_argv.len() < 3 {
        sh_argv.push(std::ptr::null());
    }
    let (err_read, err_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed(e.into()))?;
    // The child dup2's stream i onto fd i in order: a source fd below 3 (other than its own
    // target) would be overwritten before its turn, and so would the error pipe. Move such fds
    // up first, as std does; the copies live until the spawn returns.
    let err_write = above_stdio(err_write.as_fd())
        .map_err(failed)?
        .unwrap_or(err_write);
    let mut moved: [Option<OwnedFd>; 3] = [None, None, None];
    for (i, fd) in spec.stdio.iter().enumerate() {
        if let Some(fd) = fd {
            if fd.as_raw_fd() != i as RawFd {
                moved[i] = above_stdio(*fd).map_err(failed)?;
            }
        }
    }
    let stdio: [Option<RawFd>; 3] = [0, 1, 2].map(|i| match (&moved[i], spec.stdio[i]) {
        (Some(m), _) => Some(m.as_raw_fd()),
        (None, fd) => fd.map(|f| f.as_raw_fd()),
    });
    let parent = rustix::process::getpid();
    // In a new PID namespace getppid() says 0 whether reaper lives or not: the child tells
    // reaper's death from a pidfd of it instead (readable once reaper has exited).
    let new_pid_ns = spec.sandbox.is_some_and(|s| s.pid_namespace());
    let parent_fd = if new_pid_ns {
        Some(
            rustix::process::pidfd_open(parent, rustix::process::PidfdFlags::empty())
                .map_err(|e| failed(e.into()))?,
        )
    } else {
        None
    };

    // A sandboxed child waits on this socket pair until the parent has written its user
    // namespace's maps: without them it is nobody there, and its steps would fail. It first
    // says it is dumpable again (the parent, which may refuse tracing, is not: its copy would
    // keep `/proc/PID/uid_map` root's, which a non-root parent cannot then write).
    let maps_written = match spec.sandbox {
        Some(_) => Some(socket_pair().map_err(failed)?),
        None => None,
    };

    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD | CLONE_INTO_CGROUP | spec.sandbox.map_or(0, |s| s.clone_flags()),
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: spec.cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let mut plan = Some(ChildPlan {
        stdio: &stdio,
        candidates: &candidates,
        argv: &argv,
        sh_argv: &mut sh_argv,
        envp: &envp,
        err_fd: err_write.as_raw_fd(),
        parent,
        parent_fd: parent_fd.as_ref().map(|f| f.as_raw_fd()),
        maps_written: maps_written
            .as_ref()
            .map(|(r, w)| (r.as_raw_fd(), w.as_raw_fd())),
        shared_memory: false,
    });
    // A sandboxed child waits for its maps, which this thread writes after the clone: it
    // cannot be suspended until the child's exec. A self-check never execs.
    let ret = if spec.sandbox.is_none() && spec.call.is_none() && vfork::AVAILABLE {
        if let Some(p) = plan.as_mut() {
            p.shared_memory = true;
        }
        let mut child = (spec, plan.take());
        // SAFETY: `vfork::clone3` suspends this thread until the child has exec'd or exited;
        // the child runs `vfork_child` on a stack of its own, which makes system calls only on
        // `child` and the data it points to, all prepared above and alive until then.
        unsafe {
            vfork::clone3(
                &mut args,
                vfork_child,
                (&mut child as *mut VforkChild).cast(),
            )
        }
    } else {
        // SAFETY: without CLONE_VM the child gets a copy of this address space, like fork(2)
        // (std spawns through this same raw clone3). The child runs only `child_after_clone`,
        // which makes system calls on data prepared above and never returns.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        if ret == 0 {
            if let Some(plan) = plan.take() {
                // SAFETY: in the child; see above.
                unsafe { child_after_clone(spec, plan) }
            }
            // SAFETY: unreachable (the plan was just made); ends the child all the same.
            unsafe { libc::_exit(127) }
        }
        ret
    };
    if ret < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            // The user namespace the sandbox needs (max_user_namespaces 0, unprivileged ones
            // disabled, too many): not clone3's refusal.
            Some(code @ (libc::EPERM | libc::ENOSPC | libc::EUSERS)) if spec.sandbox.is_some() => {
                SpawnError::Sandbox(StepError {
                    step: Step::UserNamespace,
                    errno: code,
                })
            }
            Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM) => {
                SpawnError::Unsupported(e)
            }
            Some(libc::EAGAIN | libc::ENOMEM | libc::EINTR) => SpawnError::Failed(e),
            _ => SpawnError::CgroupRefused(e),
        });
    }
    // SAFETY: CLONE_PIDFD stored a new fd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let pid = Pid::from_raw(ret as i32).ok_or_else(|| failed(std::io::Error::other("pid 0")))?;
    let handle = Pidfd::from_parts(pidfd, pid);
    drop(err_write);
    if let (Some(plan), Some((r, w))) = (spec.sandbox, maps_written) {
        drop(r);
        // The child's word that it is dumpable; EOF (it is gone) leaves the maps' write to
        // fail and say so.
        let mut byte = [0u8; 1];
        while let Err(rustix::io::Errno::INTR) = rustix::io::read(&w, &mut byte) {}
        if let Err(e) = plan.write_maps(pid) {
            kill_and_reap(&handle);
            return Err(SpawnError::Sandbox(e));
        }
        // The child goes on (or, with EOF, gives up: the parent would be gone).
        let _ = rustix::io::write(&w, b"1");
    }

    // EOF: the exec happened (the pipe was close-on-exec). Eight bytes: the child's errno, and
    // the sandbox step that failed (0: not the sandbox).
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(&err_read, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                // Whether it exec'd is unknown: it must not run on untracked.
                kill_and_reap(&handle);
                return Err(failed(e.into()));
            }
        }
    }
    if got == 0 {
        return Ok(handle);
    }
    // The child failed before exec and is exiting: reap it here, so its status goes nowhere.
    kill_and_reap(&handle);
    if got < buf.len() {
        return Err(failed(std::io::Error::from_raw_os_error(libc::EIO)));
    }
    let errno = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
    match Step::from_raw(u32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]])) {
        Some(step) => Err(SpawnError::Sandbox(StepError { step, errno })),
        None => Err(failed(std::io::Error::from_raw_os_error(errno))),
    }
}

/// What [`vfork_child`] gets: the spec and the child's plan, in the parent's memory.
type VforkChild<'s, 'p> = (&'s SpawnSpec<'s>, Option<ChildPlan<'p>>);

/// The child of a [`vfork::clone3`], on its own stack, in the parent's memory.
extern "C" fn vfork_child(arg: *mut libc::c_void) -> ! {
    // SAFETY: `arg` is the parent's `VforkChild`, alive while the parent is suspended (until
    // this child execs or exits); only this child uses it meanwhile.
    let (spec, plan) = unsafe { &mut *arg.cast::<VforkChild>() };
    match plan.take() {
        // SAFETY: the child of a clone3 right after the clone; `shared_memory` is set, so
        // nothing here writes to the parent's memory but the plan's own `sh_argv` slot.
        Some(plan) => unsafe { child_after_clone(spec, plan) },
        // SAFETY: ends the child without running anything of the parent's.
        None => unsafe { libc::_exit(127) },
    }
}

/// `clone3` with `CLONE_VM | CLONE_VFORK` (what `posix_spawn` does): the child shares this
/// address space, on a stack of its own, until its exec, so no page table is copied and neither
/// process takes a copy-on-write fault after; the calling thread is suspended meanwhile. The
/// raw system call cannot return into Rust in the child (it would return on a stack with no
/// frame), so the child's first instructions are written here, per architecture: call the
/// entry function on the new stack, which never returns.
mod vfork {
    use super::CloneArgs;

    /// Whether this architecture has [`clone3`]; the caller forks instead where not.
    pub const AVAILABLE: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

    /// The child's stack: `child_after_clone` makes a few dozen system calls, no more.
    const STACK: usize = 64 * 1024;

    /// Stacks kept for the next spawns: mapping one (and unmapping it, which interrupts every
    /// other CPU running this process to flush its TLB) costs more than the clone itself.
    const SPARE_STACKS: usize = 4;

    static SPARE: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());

    /// A child's stack: an anonymous mapping whose lowest page is a guard, so an overflow
    /// faults in the child (a failed spawn) instead of writing over this process's memory.
    struct Stack {
        map: *mut libc::c_void,
        len: usize,
    }

    // SAFETY: a mapping of this process's, used by one spawn at a time (taken from the spare
    // list under its lock, or fresh).
    unsafe impl Send for Stack {}

    impl Stack {
        /// A spare stack, or a new one; `None` with errno set when none can be mapped.
        fn take() -> Option<Stack> {
            let spare = SPARE.lock().unwrap_or_else(|p| p.into_inner()).pop();
            if spare.is_some() {
                return spare;
            }
            let page = rustix::param::page_size();
            let len = STACK + page;
            // SAFETY: a fresh anonymous mapping, owned by the `Stack` returned.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                    -1,
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return None;
            }
            let stack = Stack { map, len };
            // SAFETY: the lowest page of the mapping just made.
            if unsafe { libc::mprotect(map, page, libc::PROT_NONE) } != 0 {
                // SAFETY: this thread's errno, kept across the unmapping for the caller.
                unsafe {
                    let errno = *libc::__errno_location();
                    drop(stack);
                    *libc::__errno_location() = errno;
                }
                return None;
            }
            Some(stack)
        }

        /// Kept for the next spawn, or unmapped when enough are kept.
        fn give_back(self) {
            let mut spare = SPARE.lock().unwrap_or_else(|p| p.into_inner());
            if spare.len() < SPARE_STACKS {
                spare.push(self);
            }
        }
    }

    impl Drop for Stack {
        fn drop(&mut self) {
            // SAFETY: the mapping this `Stack` owns; no child runs on it (CLONE_VFORK).
            unsafe { libc::munmap(self.map, self.len) };
        }
    }

    /// Runs `clone3(args)` with `CLONE_VM | CLONE_VFORK` and a stack of its own; the child
    /// calls `entry(arg)`. Returns the child's pid, or -1 with errno set.
    ///
    /// # Safety
    ///
    /// `entry` must never return, and must only make system calls on data `arg` points to (or
    /// exit): it runs in this process's memory, concurrently with any other thread of it,
    /// while the calling thread is suspended until it exec's or exits.
    pub unsafe fn clone3(
        args: &mut CloneArgs,
        entry: extern "C" fn(*mut libc::c_void) -> !,
        arg: *mut libc::c_void,
    ) -> libc::c_long {
        let Some(stack) = Stack::take() else {
            return -1;
        };
        let (map, len) = (stack.map, stack.len);
        let base = map as usize + rustix::param::page_size();
        // The ABI's alignment for the stack's top; the stack grows down from there.
        let top = (map as usize + len) & !15;
        args.flags |= (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
        args.stack = base as u64;
        args.stack_size = (top - base) as u64;
        // Every signal blocked around the clone: a handler of this process's must not run in
        // the child, on memory both share (the child puts every handled signal back to its
        // default before it lets signals through again).
        // SAFETY: sigset_t is plain data, valid zeroed.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain data filled by sigfillset; the old mask is restored below.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the caller's contract; the stack lives until the clone returns in the
        // parent, which is after the child has exec'd or exited (CLONE_VFORK).
        let ret = unsafe { raw(args, entry, arg) };
        // SAFETY: restores the mask saved above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        // The child is done with the stack (CLONE_VFORK): the next spawn may use it.
        stack.give_back();
        if ret < 0 {
            // SAFETY: errno is this thread's; set again for the caller, as `syscall` would.
            unsafe { *libc::__errno_location() = -ret as i32 };
            return -1;
        }
        ret
    }

    /// The system call itself: returns the child's pid or `-errno`; in the child, calls
    /// `entry(arg)` on the new stack.
    #[cfg(target_arch = "x86_64")]
    unsafe fn raw(
        args: &mut CloneArgs,
        entry: extern "C" fn(*mut libc::c_void) -> !,
        arg: *mut libc::c_void,
    ) -> libc::c_long {
        let ret: libc::c_long;
        // SAFETY: the kernel keeps every register but rax, rcx and r11 across `syscall`, in
        // both processes; the child's rsp is the new stack's 16-byte aligned top, so `call`
        // enters `entry` with the ABI's alignment. The child never comes back here.
        unsafe {
            std::arch::asm!(
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "mov rdi, r13",
                "call r12",
                "ud2",
                "2:",
                inlateout("rax") libc::SYS_clone3 => ret,
                in("rdi") args as *mut CloneArgs,
                in("rsi") std::mem::size_of::<CloneArgs>(),
                in("r12") entry,
                in("r13") arg,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    #[cfg(target_arch = "aarch64")]
    unsafe fn raw(
        args: &mut CloneArgs,
        entry: extern "C" fn(*mut libc::c_void) -> !,
        arg: *mut libc::c_void,
    ) -> libc::c_long {
        let ret: libc::c_long;
        // SAFETY: the kernel keeps every register but x0 across `svc`, in both processes; the
        // child's sp is the new stack's 16-byte aligned top. The child never comes back here.
        unsafe {
            std::arch::asm!(
                "svc #0",
                "cbnz x0, 2f",
                "mov x0, x10",
                "blr x9",
                "brk #1",
                "2:",
                inlateout("x0") args as *mut CloneArgs as libc::c_long => ret,
                in("x1") std::mem::size_of::<CloneArgs>(),
                in("x8") libc::SYS_clone3,
                in("x9") entry,
                in("x10") arg,
                lateout("x30") _,
                options(nostack),
            );
        }
        ret
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    unsafe fn raw(
        _: &mut CloneArgs,
        _: extern "C" fn(*mut libc::c_void) -> !,
        _: *mut libc::c_void,
    ) -> libc::c_long {
        -(libc::ENOSYS as libc::c_long)
    }
}

/// SIGKILL (harmless if it is already exiting) and wait for it, through its pidfd: a child
/// this spawn gives up on is gone when the spawn returns.
pub fn kill_and_reap(child: &Pidfd) {
    let _ = rustix::process::pidfd_send_signal(child, rustix::process::Signal::KILL);
    loop {
        match rustix::process::waitid(
            rustix::process::WaitId::PidFd(child.as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            _ => return,
        }
    }
}

/// A close-on-exec copy of `fd` numbered 3 or above, if `fd` is 0, 1 or 2.
fn above_stdio(fd: BorrowedFd<'_>) -> std::io::Result<Option<OwnedFd>> {
    if fd.as_raw_fd() > 2 {
        return Ok(None);
    }
    Ok(Some(rustix::io::fcntl_dupfd_cloexec(fd, 3)?))
}

/// What the child uses, all built before the clone.
struct ChildPlan<'a> {
    /// The fds to `dup2` onto 0, 1, 2 (none of them below 3 unless it is its own target).
    stdio: &'a [Option<RawFd>; 3],
    candidates: &'a [&'a CStr],
    argv: &'a [*const libc::c_char],
    sh_argv: &'a mut [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    err_fd: RawFd,
    parent: Pid,
    /// With a new PID namespace: a pidfd of reaper, to check its death against.
    parent_fd: Option<RawFd>,
    /// The sandbox's socket pair (the child's end, the parent's end): one byte from the child
    /// once it is dumpable, one from the parent once the maps are written.
    maps_written: Option<(RawFd, RawFd)>,
    /// The child runs in the parent's memory ([`vfork::clone3`]): every handler of the
    /// parent's goes back to its default before signals are let through.
    shared_memory: bool,
}

/// A close-on-exec `AF_UNIX` stream socket pair: (the child's end, the parent's end).
fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair(2) writes two new fds into the local array, which are then owned once.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// In the child between clone and exec: system calls only. Reports the errno of the first step
/// that fails (or of the exec) through `err_fd` and exits 127.
///
/// # Safety
///
/// Call it only in the child of a `clone3` without `CLONE_VM`, right after the clone, and only
/// there: it never returns, and it ends the process with `_exit` or `execve`. The parent may
/// have had other threads, whose locks (the allocator's among them) stay held forever in the
/// child, so nothing here allocates or locks: every C string and pointer array of `spec` and
/// `plan` was built before the clone, is NUL-terminated, and lives in the child's copy of the
/// address space; `err_fd` is the write end of the close-on-exec error pipe.
unsafe fn child_after_clone(spec: &SpawnSpec<'_>, plan: ChildPlan<'_>) -> ! {
    let ChildPlan {
        stdio,
        candidates,
        argv,
        sh_argv,
        envp,
        err_fd,
        parent,
        parent_fd,
        maps_written,
        shared_memory,
    } = plan;
    let fail_step = |errno: i32, step: u32| -> ! {
        let e = errno.to_ne_bytes();
        let s = step.to_ne_bytes();
        let bytes = [e[0], e[1], e[2], e[3], s[0], s[1], s[2], s[3]];
        // SAFETY: `write` reads 8 bytes of a local array; `_exit` ends the child without
        // running atexit handlers or destructors that belong to the parent's state.
        unsafe {
            libc::write(err_fd, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        }
    };
    let fail = |errno: i32| -> ! { fail_step(errno, 0) };
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: system calls only (this function's contract): every pointer passed is to a
    // NUL-terminated C string or a null-terminated pointer array built before the clone (the
    // function's `# Safety`), and every fd is one the child owns or inherited; `sigset_t` is
    // plain data, valid zeroed and then emptied by `sigemptyset`.
    unsafe {
        if let Some(sig) = spec.parent_death_signal {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig.as_raw() as libc::c_ulong) != 0 {
                fail(errno());
            }
            // The parent may have died before the prctl: then nobody would send the signal.
            match parent_fd {
                // getppid() says 0 across the PID namespace: a pidfd polls readable once its
                // process has exited.
                Some(fd) => {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    if libc::poll(&mut p, 1, 0) != 0 {
                        libc::_exit(1);
                    }
                }
                None => {
                    if libc::getppid() != parent.as_raw_nonzero().get() {
                        libc::_exit(1);
                    }
                }
            }
        }
        if let Some((read, write)) = maps_written {
            // Only the parent's end may keep the pair open; reaper's death (PDEATHSIG above)
            // ends this wait too.
            libc::close(write);
            if libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong) != 0
                || libc::write(read, b"d".as_ptr().cast(), 1) != 1
            {
                libc::_exit(1);
            }
            let mut byte = 0u8;
            loop {
                match libc::read(read, (&mut byte as *mut u8).cast(), 1) {
                    1 => break,
                    n if n < 0 && errno() == libc::EINTR => continue,
                    _ => libc::_exit(1),
                }
            }
            libc::close(read);
        }
        if let Some(plan) = spec.sandbox {
            // SAFETY: in the child after the clone, which is already in its cgroup, with its
            // user namespace's maps written. It enters the working directory itself.
            if let Err(e) = plan.apply(spec.cwd.as_deref()) {
                fail_step(e.errno, e.step as u32);
            }
        }
        if spec.new_session {
            if libc::setsid() < 0 {
                fail(errno());
            }
        } else if spec.new_process_group {
            if libc::setpgid(0, 0) != 0 {
                fail(errno());
            }
            if let Some(tty) = spec.foreground_tty {
                // Not fatal: the parent hands the terminal over too.
                crate::terminal::child_take_foreground(tty);
            }
        }
        for (target, fd) in stdio.iter().enumerate() {
            let Some(fd) = *fd else { continue };
            let target = target as RawFd;
            if fd == target {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    fail(errno());
                }
            } else if libc::dup2(fd, target) < 0 {
                fail(errno());
            }
        }
        if let (Some(cwd), None) = (&spec.cwd, spec.sandbox) {
            if libc::chdir(cwd.as_ptr()) != 0 {
                fail(errno());
            }
        }
        if let Some(f) = spec.call {
            libc::_exit(f());
        }
        if shared_memory {
            // A handler of the parent's would run here on the parent's memory (a signal
            // meant for this child taken for reaper's): back to the default while every
            // signal is still blocked. The exec resets handlers anyway.
            for sig in 1..=libc::SIGRTMAX() {
                let mut sa: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut sa) == 0
                    && sa.sa_sigaction != libc::SIG_DFL
                    && sa.sa_sigaction != libc::SIG_IGN
                {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
        }
        // Rust ignores SIGPIPE and tokio's signal handling may leave signals blocked; an
        // ignored signal and the mask survive exec, so reset both like std does.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
            fail(errno());
        }
        if libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR {
            fail(errno());
        }
        // execvp's rules: EACCES from any candidate wins over ENOENT; ENOENT, ENOTDIR and the
        // like go on to the next; anything else stops the search.
        let mut seen_eacces = false;
        let mut last = libc::ENOENT;
        for c in candidates {
            libc::execve(c.as_ptr(), argv.as_ptr(), envp.as_ptr());
            last = errno();
            if last == libc::ENOEXEC {
                sh_argv[1] = c.as_ptr();
                libc::execve(SH.as_ptr(), sh_argv.as_ptr(), envp.as_ptr());
                fail(errno());
            }
            match last {
                libc::EACCES => seen_eacces = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                // Like execvp(3): an error that ends the search is reported as it is.
                _ => fail(last),
            }
        }
        fail(if seen_eacces { libc::EACCES } else { last })
    }
}

/// Whether this process may create a child in the cgroup `dir` names with
/// `clone3(CLONE_INTO_CGROUP)`: tries it, with a child that exits at once, and waits for it.
/// `Ok(())` means it could (the child ran in that cgroup for an instant); the error is the
/// kernel's (or a seccomp filter's) refusal. For a sandbox's self-check.
pub fn try_clone_into(dir: BorrowedFd<'_>) -> std::io::Result<()> {
    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: without CLONE_VM the child gets a copy of this address space, like fork(2); it
    // only calls `_exit`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        // SAFETY: in the child; `_exit` runs nothing of the parent's.
        0 => unsafe { libc::_exit(0) },
        r if r < 0 => Err(std::io::Error::last_os_error()),
        pid => {
            let mut status = 0;
            // SAFETY: waits for our own child by its pid; `status` is a local.
            while unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
            Ok(())
        }
    }
}

/// `cwd` as a C string for [`SpawnSpec::cwd`].
pub fn c_path(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a NUL byte in {}", p.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: Vec<CString>) -> Vec<String> {
        v.into_iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn path_search_follows_execvp() {
        let found = |prog: &str, path: Option<&str>| {
            exec_candidates(OsStr::new(prog), path.map(OsStr::new)).map(names)
        };
        assert_eq!(found("/bin/sh", Some("/x")).unwrap(), ["/bin/sh"]);
        assert_eq!(found("./run", Some("/x")).unwrap(), ["./run"]);
        assert_eq!(found("ls", Some("/a:/b/c")).unwrap(), ["/a/ls", "/b/c/ls"]);
        // An empty entry is the current directory.
        assert_eq!(
            found("ls", Some(":/a:")).unwrap(),
            ["./ls", "/a/ls", "./ls"]
        );
        assert_eq!(found("ls", None).unwrap(), ["/bin/ls", "/usr/bin/ls"]);
        assert_eq!(
            found("", Some("/a")).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        assert_eq!(
            found("a\0b", Some("/a")).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
    }
}
