//! The leader's spawn into its containment: created inside its cgroup by clone3, or started by
//! std's `Command` and joined before exec (`containment::spawn` says which), both built from
//! the run's [`Spec`]; and the one translation of a failed spawn into an [`Error`].

#[cfg(target_os = "linux")]
use std::ffi::OsStr;
use std::ffi::OsString;

use reaper_platform::process::Handle;
use reaper_platform::terminal::Foreground;
use reaper_platform::Pid;

use super::Pipes;
use super::{Spec, Stdio};
use crate::containment::select::AnyBackend;
use crate::containment::Backend;
use crate::{ContainError, ContainErrorKind, Error, SandboxError};

/// Why a spawn failed, before it becomes an [`Error`] ([`classify`]).
pub(crate) enum Failure {
    /// The sandbox could not be set up: nothing ran.
    Sandbox(SandboxError),
    /// The spawn's own error: exec's errno, E2BIG explained, or a backend's failure between
    /// fork and exec.
    Io(std::io::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Io(e)
    }
}

/// A failed spawn as the caller needs it: not found, not executable, too large, the sandbox,
/// the cgroup join, or reaper's own failure.
pub(crate) fn classify(f: Failure, backend: &AnyBackend, program: &str) -> Error {
    use rustix::io::Errno;
    let program = program.to_owned();
    let e = match f {
        Failure::Sandbox(e) => return Error::Sandbox(e),
        Failure::Io(e) => backend.spawn_error(e),
    };
    if let Some(c) = e.get_ref().and_then(|r| r.downcast_ref::<ContainError>()) {
        if c.kind() == ContainErrorKind::JoinFailed {
            return Error::JoinFailed {
                program,
                cause: c.clone(),
            };
        }
    }
    // `explain` has said by how much (E2BIG comes back as this kind).
    if e.kind() == std::io::ErrorKind::ArgumentListTooLong {
        return Error::TooLarge { program, source: e };
    }
    match e.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::NOENT) => Error::NotFound { program },
        Some(
            Errno::ACCESS
            | Errno::PERM
            | Errno::NOEXEC
            | Errno::ISDIR
            | Errno::TXTBSY
            | Errno::NOTDIR
            | Errno::LOOP
            | Errno::NAMETOOLONG,
        ) => Error::NotExecutable { program, source: e },
        _ => Error::Spawn { program, source: e },
    }
}

impl Spec {
    /// The command's environment: this process's (unless cleared), with the changes on top.
    fn environment(&self) -> std::collections::BTreeMap<OsString, OsString> {
        let mut env: std::collections::BTreeMap<OsString, OsString> = if self.env_clear {
            Default::default()
        } else {
            std::env::vars_os().collect()
        };
        for (k, v) in &self.env {
            match v {
                Some(v) => env.insert(k.clone(), v.clone()),
                None => env.remove(k),
            };
        }
        env
    }

    /// Whether the leader would hold a terminal: one of its stdin, stdout and stderr is one
    /// (this process's own, inherited, or a descriptor given).
    pub(crate) fn holds_a_terminal(&self) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: isatty(3) only asks about a descriptor number, and fails on a closed one.
        let isatty = |fd: i32| unsafe { libc::isatty(fd) == 1 };
        self.stdio.iter().enumerate().any(|(i, io)| match io {
            Stdio::Inherit => isatty(i as i32),
            Stdio::Fd(fd) => isatty(fd.as_raw_fd()),
            Stdio::Null | Stdio::Piped => false,
        })
    }

    /// std's `Command` for this command. Takes the stdio out (it is moved into the `Command`);
    /// the rest stays, so a failed spawn can still be explained ([`Spec::explain`]).
    /// `own_session`: the leader leads a session of its own rather than only a process group.
    fn take_std(&mut self, own_session: bool) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(&self.args);
        if self.env_clear {
            cmd.env_clear();
        }
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if let Some(d) = &self.cwd {
            cmd.current_dir(d);
        }
        let [i, o, e] = std::mem::take(&mut self.stdio);
        cmd.stdin(std_stdio(i))
            .stdout(std_stdio(o))
            .stderr(std_stdio(e));
        if own_session {
            // setsid(2) fails for a group leader: it makes the new group itself. SAFETY:
            // setsid is async-signal-safe and allocates nothing.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    if libc::setsid() < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        } else {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        cmd
    }

    /// What execve(2) counts against its limits for this command: the file name, and each
    /// argument and environment string, each with its NUL, plus a pointer to each string.
    /// Computed only to explain an E2BIG.
    fn exec_size(&self) -> ExecSize {
        let env = self.environment();
        let strings = std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.len() + 1)
            .chain(env.iter().map(|(k, v)| k.len() + v.len() + 2));
        // execve(2) copies the file name it runs too (no pointer to it): here the program.
        let mut size = ExecSize {
            total: self.program.len() + 1,
            largest: 0,
        };
        for n in strings {
            size.total += n + std::mem::size_of::<usize>();
            size.largest = size.largest.max(n);
        }
        size
    }

    /// A spawn error as the user needs it: E2BIG (the exec's arguments and environment are over
    /// the kernel's limits) becomes an `ArgumentListTooLong` error that says by how much.
    fn explain(&self, e: std::io::Error) -> std::io::Error {
        if e.raw_os_error() != Some(libc::E2BIG) {
            return e;
        }
        std::io::Error::new(
            std::io::ErrorKind::ArgumentListTooLong,
            self.exec_size().describe(),
        )
    }
}

fn std_stdio(io: Stdio) -> std::process::Stdio {
    match io {
        Stdio::Inherit => std::process::Stdio::inherit(),
        Stdio::Null => std::process::Stdio::null(),
        Stdio::Piped => std::process::Stdio::piped(),
        Stdio::Fd(fd) => std::process::Stdio::from(fd),
    }
}

/// The size of an exec's arguments and environment, as execve(2) counts it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ExecSize {
    /// Every string with its NUL, plus a pointer for each.
    total: usize,
    /// The longest single string, with its NUL.
    largest: usize,
}

/// Linux's limit on one argument or environment string, NUL included: 32 pages
/// (`MAX_ARG_STRLEN`, include/uapi/linux/binfmts.h); E2BIG above it, whatever the total.
#[cfg(target_os = "linux")]
const MAX_ARG_STRLEN: usize = 32 * 4096;

impl ExecSize {
    /// Which limit was passed, in numbers.
    fn describe(self) -> String {
        #[cfg(target_os = "linux")]
        if self.largest > MAX_ARG_STRLEN {
            return format!(
                "one argument or environment variable is {} bytes, over the {MAX_ARG_STRLEN}-byte \
                 limit for a single one",
                self.largest
            );
        }
        let (limit, what) = exec_limit();
        // A `#!` interpreter line adds to the arguments after this count: "near", not "over".
        let rel = match limit {
            Some(n) if self.total <= n => "near",
            _ => "over",
        };
        let limit = match limit {
            Some(n) => format!("{n} bytes ({what})"),
            None => what.into(),
        };
        format!(
            "{} bytes in all (each string with its NUL, and a pointer to it), {rel} this \
             system's limit of {limit}",
            self.total
        )
    }
}

/// The total execve(2) allows: a quarter of the stack size limit, at most 6 MiB (three quarters
/// of `_STK_LIM`), at least 128 KiB (fs/exec.c, `bprm_stack_limits`).
#[cfg(target_os = "linux")]
fn exec_limit() -> (Option<usize>, &'static str) {
    let stack = rustix::process::getrlimit(rustix::process::Resource::Stack).current;
    let quarter = stack.map_or(usize::MAX, |s| usize::try_from(s / 4).unwrap_or(usize::MAX));
    (
        Some(quarter.clamp(128 << 10, 6 << 20)),
        "a quarter of the stack size limit, `ulimit -s`, at most 6 MiB",
    )
}

#[cfg(not(target_os = "linux"))]
fn exec_limit() -> (Option<usize>, &'static str) {
    // SAFETY: sysconf(3) only reads a system value; -1 (unknown) is handled.
    let arg_max = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    (usize::try_from(arg_max).ok().filter(|&n| n > 0), "ARG_MAX")
}

/// A started leader, not reaped yet. `handle` is an error when the pidfd could not be opened
/// after a std spawn: the caller must then kill what it started.
pub(crate) struct Spawned {
    pub pid: Pid,
    pub handle: std::io::Result<Handle>,
    pub pipes: Pipes,
    /// How the leader got into its containment, for the debug log.
    pub how: &'static str,
    /// A root sandbox's host ids, leased for the run.
    #[cfg(target_os = "linux")]
    pub sandbox_ids: Option<crate::containment::sandbox::IdLease>,
}

/// Whether this is the process's main thread: `PR_SET_PDEATHSIG` fires when the *thread* that
/// forked a child exits, and only the main thread lives as long as the process.
#[cfg(target_os = "linux")]
fn on_main_thread() -> bool {
    rustix::thread::gettid() == rustix::process::getpid()
}

/// Starts `cmd` into `backend`. An `Err` is the spawn's own failure (not found, not executable,
/// too large to exec, could not join the cgroup, the sandbox); nothing is left running then.
/// `terminal`: the leader makes its new group the terminal's foreground group before exec.
/// `own_session`: the leader leads a session of its own (no controlling terminal), not only a
/// process group. `opts`' sandbox: the leader starts in it (Linux, cgroup backend only;
/// anything else is an error, never a weaker sandbox), in a session of its own.
pub(crate) fn spawn(
    cmd: &mut Spec,
    backend: &AnyBackend,
    terminal: Option<&Foreground>,
    own_session: bool,
    opts: &crate::ContainOptions,
) -> Result<Spawned, Failure> {
    let sandbox = opts.sandbox;
    let tty = terminal.map(Foreground::raw_fd);
    #[cfg(not(target_os = "linux"))]
    if sandbox.is_some() {
        return Err(Failure::Sandbox(SandboxError::NotLinux));
    }
    #[cfg(target_os = "linux")]
    let (plan, ids) = match sandbox {
        None => (None, None),
        Some(mode) => {
            if !backend.capabilities().spawns_leader_inside {
                return Err(Failure::Sandbox(SandboxError::NeedsCgroupBackend {
                    backend: backend.kind(),
                }));
            }
            // The run records' sockets take orders: not for the sandbox to see.
            let hidden = crate::runs::dir::all_candidates();
            let (plan, ids) = crate::containment::sandbox::prepare(
                mode == crate::Sandbox::Pid,
                &opts.sandbox_paths,
                &hidden,
            )
            .map_err(|e| Failure::Sandbox(SandboxError::Prepare(e)))?;
            // The sandbox lives in a user namespace of its own: where the kernel forbids
            // unprivileged ones, say so by name rather than fail on a later step.
            if plan.unprivileged()
                && reaper_platform::linux::namespaces::unprivileged_userns() == Some(false)
            {
                return Err(Failure::Sandbox(SandboxError::NoUnprivilegedUserNamespaces));
            }
            (Some(plan), ids)
        }
    };
    #[cfg(target_os = "linux")]
    if let Some(dir) = crate::containment::spawn::clone_target(backend.clone_into_cgroup()) {
        use crate::containment::spawn::Error as CloneError;
        match clone3::spawn(cmd, dir, tty, own_session, plan.as_ref()) {
            Ok(s) => {
                return Ok(Spawned {
                    sandbox_ids: ids,
                    ..s
                })
            }
            Err(CloneError::Sandbox(e)) => {
                let unprivileged = plan.as_ref().is_some_and(|p| p.unprivileged());
                return Err(Failure::Sandbox(step_refused(e, unprivileged)));
            }
            Err(CloneError::Failed(e))
                if ids.is_some() && e.raw_os_error() == Some(libc::EACCES) =>
            {
                return Err(Failure::Sandbox(SandboxError::Stranger(cmd.explain(e))));
            }
            Err(CloneError::Failed(e)) => return Err(Failure::Io(cmd.explain(e))),
            Err(CloneError::Unsupported(e)) if plan.is_some() => {
                return Err(Failure::Sandbox(SandboxError::NeedsClone3 {
                    source: Some(e),
                }));
            }
            Err(CloneError::Unsupported(e)) => crate::containment::spawn::give_up(&e),
            Err(CloneError::CgroupRefused(e)) if plan.is_some() => {
                return Err(Failure::Sandbox(SandboxError::CgroupRefused(e)));
            }
            Err(CloneError::CgroupRefused(e)) => {
                tracing::debug!("clone3 into the run cgroup refused ({e}); trying cgroup.procs");
            }
        }
    }
    // The user namespace's maps are written by reaper between the clone and the child's next
    // step, which only the clone3 path can wait for.
    #[cfg(target_os = "linux")]
    if plan.is_some() {
        return Err(Failure::Sandbox(SandboxError::NeedsClone3 { source: None }));
    }
    spawn_std(cmd, backend, tty, own_session).map_err(|e| Failure::Io(cmd.explain(e)))
}

/// The refusal of a sandbox step, with the likely cause when a non-root user's namespace was
/// made but gives no capability: Ubuntu's AppArmor lets an unconfined program create a user
/// namespace and then denies it every capability there.
#[cfg(target_os = "linux")]
fn step_refused(e: reaper_platform::linux::sandbox::StepError, unprivileged: bool) -> SandboxError {
    use reaper_platform::linux::sandbox::Step;
    let restricted =
        std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
            .is_ok_and(|s| s.trim() == "1");
    SandboxError::Step {
        step: e.step,
        errno: e.errno,
        apparmor: unprivileged
            && e.step != Step::UserNamespace
            && matches!(e.errno, libc::EPERM | libc::EACCES)
            && restricted,
    }
}

fn spawn_std(
    cmd: &mut Spec,
    backend: &AnyBackend,
    tty: Option<std::os::fd::RawFd>,
    own_session: bool,
) -> std::io::Result<Spawned> {
    let mut cmd = cmd.take_std(own_session);
    backend.prepare(&mut cmd);
    if let Some(tty) = tty {
        use std::os::unix::process::CommandExt;
        // SAFETY: std runs this after its setpgid, between fork and exec; only
        // async-signal-safe calls (see `child_take_foreground`). Not fatal if it fails: the
        // parent hands the terminal over too.
        unsafe {
            cmd.pre_exec(move || {
                reaper_platform::terminal::child_take_foreground(tty);
                Ok(())
            });
        }
    }
    #[cfg(target_os = "linux")]
    if on_main_thread() {
        use std::os::unix::process::CommandExt;
        let me = rustix::process::getpid();
        // If reaper dies before the leader's exec (or at any time after), the leader gets
        // SIGKILL; the guardian kills the rest. Re-check the parent after setting it: the
        // death may already have happened (prctl(2)). SAFETY: prctl, getppid and _exit are
        // async-signal-safe and allocate nothing.
        unsafe {
            cmd.pre_exec(move || {
                let _ = rustix::process::set_parent_process_death_signal(Some(
                    reaper_platform::Signal::KILL,
                ));
                if rustix::process::getppid() != Some(me) {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn()?;
    let pipes = Pipes {
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    };
    // Invariant: `child.id()` is a live or zombie child we have not reaped, so the pid is ours.
    let pid = Pid::from_raw(child.id() as i32)
        .ok_or_else(|| std::io::Error::other("spawned child has pid 0"))?;
    Ok(Spawned {
        pid,
        handle: Handle::open(pid),
        pipes,
        how: "fork, then join in pre_exec",
        #[cfg(target_os = "linux")]
        sandbox_ids: None,
    })
}

#[cfg(target_os = "linux")]
mod clone3 {
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::process::{ChildStderr, ChildStdin, ChildStdout};

    use reaper_platform::linux::spawn::{self, SpawnSpec};
    use rustix::fs::{Mode, OFlags};

    use super::*;
    use crate::containment::spawn::{clone_into, Error};

    pub fn spawn(
        cmd: &mut Spec,
        cgroup: BorrowedFd<'_>,
        tty: Option<std::os::fd::RawFd>,
        own_session: bool,
        sandbox: Option<&reaper_platform::linux::sandbox::SandboxPlan>,
    ) -> Result<Spawned, Error> {
        let failed = Error::Failed;
        let env = cmd.environment();
        let candidates = spawn::exec_candidates(
            &cmd.program,
            env.get(OsStr::new("PATH")).map(|p| p.as_os_str()),
        )
        .map_err(failed)?;
        let nul = || {
            Error::Failed(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a NUL byte in an argument or the environment",
            ))
        };
        let cstr = |b: Vec<u8>| std::ffi::CString::new(b).map_err(|_| nul());
        use std::os::unix::ffi::OsStrExt;
        let argv = std::iter::once(&cmd.program)
            .chain(&cmd.args)
            .map(|a| cstr(a.as_bytes().to_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = spawn::env_block(env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())))
            .ok_or_else(nul)?;
        // A sandboxed leader enters its working directory by path once its mounts are in
        // place: the one it would inherit is the host's, beneath a declared directory's mount.
        let inherited = || sandbox.and_then(|_| std::env::current_dir().ok());
        let cwd = match cmd.cwd.clone().or_else(inherited) {
            Some(d) => Some(spawn::c_path(&d).map_err(failed)?),
            None => None,
        };

        // The child's ends (kept until the spawn returns) and reaper's ends of the pipes.
        let mut child_ends: [Option<OwnedFd>; 3] = [None, None, None];
        let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
        for (i, io) in cmd.stdio.iter().enumerate() {
            match io {
                Stdio::Inherit => {}
                Stdio::Null => {
                    let null = rustix::fs::open(
                        "/dev/null",
                        OFlags::RDWR | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| failed(e.into()))?;
                    child_ends[i] = Some(null);
                }
                Stdio::Piped => {
                    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                        .map_err(|e| failed(e.into()))?;
                    let (child, mine) = if i == 0 { (r, w) } else { (w, r) };
                    child_ends[i] = Some(child);
                    ours[i] = Some(mine);
                }
                Stdio::Fd(fd) => {
                    child_ends[i] = Some(fd.try_clone().map_err(failed)?);
                }
            }
        }
        let spec = SpawnSpec {
            candidates,
            argv,
            envp,
            cwd,
            stdio: [0, 1, 2].map(|i| child_ends[i].as_ref().map(|f| f.as_fd())),
            new_process_group: true,
            // The sandbox's leader, and one that holds no terminal, cannot reach reaper's
            // terminal: no `vhangup`, no TIOCSTI, no SIGHUP or job-control signal through it.
            new_session: own_session || sandbox.is_some(),
            foreground_tty: tty,
            parent_death_signal: on_main_thread().then_some(reaper_platform::Signal::KILL),
            cgroup,
            call: None,
            sandbox,
        };
        let pidfd = clone_into(&spec)?;
        // The descriptors the child was given are its own now; a second spawn of the same
        // command gets them again (`Fd`), or new pipes.
        let [i, o, e] = ours;
        Ok(Spawned {
            pid: pidfd.pid(),
            handle: Ok(pidfd),
            pipes: Pipes {
                stdin: i.map(ChildStdin::from),
                stdout: o.map(ChildStdout::from),
                stderr: e.map(ChildStderr::from),
            },
            how: "clone3(CLONE_INTO_CGROUP)",
            sandbox_ids: None,
        })
    }
}
