//! The command a run starts, and the two ways of starting it: created inside its cgroup by
//! clone3, or by std's `Command` joined before exec (`containment::spawn` says which). std's
//! `Command` has no getters for its stdio, so callers describe the command here and both paths
//! are built from it.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::process::Stdio;

use reaper_platform::process::Handle;
use reaper_platform::terminal::Foreground;
use reaper_platform::Pid;

use super::Pipes;
use crate::containment::select::SandboxMode;
use crate::containment::{Backend, Containment};

/// `--sandbox` could not be set up as asked: the run does not start (exit 125), rather than
/// start weaker than asked.
#[derive(Debug)]
pub struct SandboxRefused(pub String);

impl std::fmt::Display for SandboxRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SandboxRefused {}

fn refused(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::other(SandboxRefused(msg.into()))
}

/// Where one of the leader's standard streams goes.
#[derive(Debug)]
pub enum Io {
    /// reaper's own.
    Inherit,
    /// `/dev/null`.
    Null,
    /// A pipe whose other end reaper gets in [`Pipes`].
    Piped,
    /// This fd.
    Fd(OwnedFd),
}

impl From<Io> for Stdio {
    fn from(io: Io) -> Stdio {
        match io {
            Io::Inherit => Stdio::inherit(),
            Io::Null => Stdio::null(),
            Io::Piped => Stdio::piped(),
            Io::Fd(fd) => Stdio::from(fd),
        }
    }
}

/// A command for [`super::Run::start`]: the environment and working directory are reaper's,
/// with `envs` applied on top.
#[derive(Debug)]
pub struct LeaderCommand {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    stdio: [Io; 3],
    terminal: bool,
}

impl LeaderCommand {
    pub fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            stdio: [Io::Inherit, Io::Inherit, Io::Inherit],
            terminal: false,
        }
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(&mut self, args: I) -> &mut Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.envs
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    pub fn stdin(&mut self, io: Io) -> &mut Self {
        self.stdio[0] = io;
        self
    }

    pub fn stdout(&mut self, io: Io) -> &mut Self {
        self.stdio[1] = io;
        self
    }

    pub fn stderr(&mut self, io: Io) -> &mut Self {
        self.stdio[2] = io;
        self
    }

    /// The leader may use reaper's controlling terminal as a foreground job does: reaper hands
    /// the leader's process group the terminal and passes job control (Ctrl-Z, `fg`) through.
    /// Not for a reaper that reads the terminal itself (`reaper mcp`, `--on-stdin-eof`): it
    /// would be stopped by SIGTTIN. Not under `--sandbox`, whose leader has a session of its
    /// own and so no controlling terminal.
    pub fn use_terminal(&mut self) -> &mut Self {
        self.terminal = true;
        self
    }

    pub fn wants_terminal(&self) -> bool {
        self.terminal
    }

    /// argv as text, for reports and messages.
    pub fn argv_lossy(&self) -> Vec<String> {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// std's `Command` for this command. Takes the stdio out (it is moved into the `Command`);
    /// the rest stays, so a failed spawn can still be explained ([`LeaderCommand::explain`]).
    fn take_std(&mut self) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)));
        let [i, o, e] = std::mem::replace(&mut self.stdio, [Io::Inherit, Io::Inherit, Io::Inherit]);
        cmd.stdin(i).stdout(o).stderr(e);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }

    /// What execve(2) counts against its limits for this command: the file name, and each
    /// argument and environment string (reaper's environment with `envs` on top), each with its
    /// NUL, plus a pointer to each string. Computed only to explain an E2BIG.
    fn exec_size(&self) -> ExecSize {
        let mut env: std::collections::BTreeMap<OsString, usize> = std::env::vars_os()
            .map(|(k, v)| {
                let n = k.len() + v.len() + 2;
                (k, n)
            })
            .collect();
        for (k, v) in &self.envs {
            env.insert(k.clone(), k.len() + v.len() + 2);
        }
        let strings = std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.len() + 1)
            .chain(env.into_values());
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
pub(super) struct Spawned {
    pub pid: Pid,
    pub handle: std::io::Result<Handle>,
    pub pipes: Pipes,
    /// How the leader got into its containment, for the debug log.
    pub how: &'static str,
}

/// Starts `cmd` into `backend`. An `Err` is the spawn's own error (not found, not executable,
/// too large to exec, could not join the cgroup); nothing is left running then.
/// `terminal`: the leader makes its new group the terminal's foreground group before exec.
/// `sandbox`: the leader starts in it (Linux, cgroup backend only; anything else is an error,
/// never a weaker sandbox).
pub(super) fn spawn(
    mut cmd: LeaderCommand,
    backend: &Backend,
    terminal: Option<&Foreground>,
    sandbox: Option<SandboxMode>,
) -> std::io::Result<Spawned> {
    let tty = terminal.map(Foreground::raw_fd);
    #[cfg(not(target_os = "linux"))]
    if sandbox.is_some() {
        return Err(refused(
            "--sandbox needs Linux (mount, cgroup and PID namespaces, capabilities)",
        ));
    }
    #[cfg(target_os = "linux")]
    let plan = match sandbox {
        None => None,
        Some(mode) => {
            if !backend.capabilities().spawns_leader_inside {
                return Err(refused(format!(
                    "--sandbox needs the cgroup backend (its cgroup namespace is rooted at the \
                     run's cgroup); this run has the {} backend: run `reaper doctor`",
                    backend.kind().as_str()
                )));
            }
            let plan = reaper_platform::linux::sandbox::SandboxPlan::new(mode == SandboxMode::Pid)
                .map_err(|e| refused(format!("--sandbox: cannot prepare the sandbox: {e}")))?;
            // The sandbox lives in a user namespace of its own: where the kernel forbids
            // unprivileged ones, say so by name rather than fail on a later step.
            if plan.unprivileged()
                && reaper_platform::linux::namespaces::unprivileged_userns() == Some(false)
            {
                return Err(refused(
                    "--sandbox as a non-root user needs an unprivileged user namespace, which \
                     this machine disables (user.max_user_namespaces is 0 or \
                     kernel.unprivileged_userns_clone is 0): run `reaper doctor`, enable them, \
                     or run reaper as root",
                ));
            }
            Some(plan)
        }
    };
    #[cfg(target_os = "linux")]
    if let Some(dir) = crate::containment::spawn::clone_target(backend) {
        use crate::containment::spawn::Error;
        match clone3::spawn(&cmd, dir, tty, plan.as_ref()) {
            Ok(s) => return Ok(s),
            Err(Error::Sandbox(e)) => {
                let unprivileged = plan.as_ref().is_some_and(|p| p.unprivileged());
                return Err(refused(step_refused(e, unprivileged)));
            }
            Err(Error::Failed(e)) => return Err(cmd.explain(e)),
            Err(Error::Unsupported(e)) if plan.is_some() => {
                return Err(refused(format!(
                    "--sandbox needs clone3(CLONE_INTO_CGROUP | CLONE_NEWUSER), which this \
                     kernel refused: {e}"
                )));
            }
            Err(Error::Unsupported(e)) => crate::containment::spawn::give_up(&e),
            Err(Error::CgroupRefused(e)) if plan.is_some() => {
                return Err(refused(format!(
                    "--sandbox: the kernel would not create the leader in the run's cgroup: {e}"
                )));
            }
            Err(Error::CgroupRefused(e)) => {
                tracing::debug!("clone3 into the run cgroup refused ({e}); trying cgroup.procs");
            }
        }
    }
    // The user namespace's maps are written by reaper between the clone and the child's next
    // step, which only the clone3 path can wait for.
    #[cfg(target_os = "linux")]
    if plan.is_some() {
        return Err(refused(
            "--sandbox needs clone3(CLONE_INTO_CGROUP), which is not used here (REAPER_CLONE3=0, \
             or a seccomp filter refused it earlier): run `reaper doctor`",
        ));
    }
    spawn_std(&mut cmd, backend, tty).map_err(|e| cmd.explain(e))
}

/// The refusal of a sandbox step, with the likely cause when a non-root user's namespace was
/// made but gives no capability: Ubuntu's AppArmor lets an unconfined program create a user
/// namespace and then denies it every capability there.
#[cfg(target_os = "linux")]
fn step_refused(e: reaper_platform::linux::sandbox::StepError, unprivileged: bool) -> String {
    use reaper_platform::linux::sandbox::Step;
    let restricted =
        std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
            .is_ok_and(|s| s.trim() == "1");
    if unprivileged
        && e.step != Step::UserNamespace
        && matches!(e.errno, libc::EPERM | libc::EACCES)
        && restricted
    {
        format!(
            "{e} (AppArmor restricts unprivileged user namespaces here: \
             kernel.apparmor_restrict_unprivileged_userns is 1; give reaper an AppArmor profile \
             with `userns`, or run it as root)"
        )
    } else {
        e.to_string()
    }
}

fn spawn_std(
    cmd: &mut LeaderCommand,
    backend: &Backend,
    tty: Option<std::os::fd::RawFd>,
) -> std::io::Result<Spawned> {
    let mut cmd = cmd.take_std();
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
    {
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
        cmd: &LeaderCommand,
        cgroup: BorrowedFd<'_>,
        tty: Option<std::os::fd::RawFd>,
        sandbox: Option<&reaper_platform::linux::sandbox::SandboxPlan>,
    ) -> Result<Spawned, Error> {
        let failed = Error::Failed;
        let mut env: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        env.extend(cmd.envs.iter().cloned());
        let candidates = spawn::exec_candidates(
            &cmd.program,
            env.get(std::ffi::OsStr::new("PATH")).map(|p| p.as_os_str()),
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

        // The child's ends (kept until the spawn returns) and reaper's ends of the pipes.
        let mut child_ends: [Option<OwnedFd>; 3] = [None, None, None];
        let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
        for (i, io) in cmd.stdio.iter().enumerate() {
            match io {
                Io::Inherit => {}
                Io::Null => {
                    let null = rustix::fs::open(
                        "/dev/null",
                        OFlags::RDWR | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| failed(e.into()))?;
                    child_ends[i] = Some(null);
                }
                Io::Piped => {
                    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                        .map_err(|e| failed(e.into()))?;
                    let (child, mine) = if i == 0 { (r, w) } else { (w, r) };
                    child_ends[i] = Some(child);
                    ours[i] = Some(mine);
                }
                Io::Fd(fd) => {
                    child_ends[i] = Some(fd.try_clone().map_err(failed)?);
                }
            }
        }
        let spec = SpawnSpec {
            candidates,
            argv,
            envp,
            cwd: None,
            stdio: [0, 1, 2].map(|i| child_ends[i].as_ref().map(|f| f.as_fd())),
            new_process_group: true,
            // The sandbox's leader cannot reach reaper's terminal: no `vhangup`, no TIOCSTI,
            // no SIGHUP or job-control signal through it.
            new_session: sandbox.is_some(),
            foreground_tty: tty,
            parent_death_signal: Some(reaper_platform::Signal::KILL),
            cgroup,
            sandbox,
        };
        let pidfd = clone_into(&spec)?;
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
        })
    }
}
