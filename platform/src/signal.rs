//! The only module that sends signals. Every signal names its target: a process handle (a
//! pidfd on Linux, a pid whose start time was just checked on macOS), a cgroup (`cgroup.kill`)
//! or a process group, and the debug log line says which.

use std::io;

use rustix::process::{Pid, Signal};

#[cfg(target_os = "linux")]
use crate::linux::cgroup::Cgroup;
#[cfg(target_os = "linux")]
use crate::linux::cgroupfs;
#[cfg(target_os = "linux")]
use crate::linux::pidfd::Pidfd;
use crate::process::Handle;

/// What happened to a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Sent,
    /// The target had already exited (ESRCH): an outcome, not an error.
    AlreadyGone,
}

/// `pidfd_send_signal(2)`: cannot hit a process that reused the pid.
#[cfg(target_os = "linux")]
pub fn to_pidfd(pidfd: &Pidfd, sig: Signal) -> io::Result<Delivery> {
    tracing::debug!(pid = pidfd.raw_pid(), sig = name(sig), "signal via pidfd");
    match rustix::process::pidfd_send_signal(pidfd, sig) {
        Ok(()) => Ok(Delivery::Sent),
        Err(rustix::io::Errno::SRCH) => Ok(Delivery::AlreadyGone),
        Err(e) => Err(e.into()),
    }
}

/// `cgroup.kill`: SIGKILL to every process in the cgroup and below, atomic against fork.
#[cfg(target_os = "linux")]
pub fn to_cgroup_kill(cg: &Cgroup) -> cgroupfs::Result<()> {
    tracing::debug!(cgroup = %cg.path().display(), "SIGKILL via cgroup.kill");
    cg.kill()
}

/// The process behind a [`Handle`]: through its pidfd on Linux ([`to_pidfd`]).
#[cfg(target_os = "linux")]
pub fn to_handle(handle: &Handle, sig: Signal) -> io::Result<Delivery> {
    to_pidfd(handle, sig)
}

/// The process behind a [`Handle`], macOS: `kill(2)` on its pid, right after checking that the
/// pid still has the start time the handle was opened with. There is no pidfd: a pid reused
/// between the check and the kill (a full wrap of the 99 999 pids within microseconds) would
/// be hit; nothing closer is available.
#[cfg(target_os = "macos")]
pub fn to_handle(handle: &Handle, sig: Signal) -> io::Result<Delivery> {
    if !handle.is_current() {
        return Ok(Delivery::AlreadyGone);
    }
    tracing::debug!(
        pid = handle.raw_pid(),
        sig = name(sig),
        "signal via pid (start time checked)"
    );
    match rustix::process::kill_process(handle.pid(), sig) {
        Ok(()) => Ok(Delivery::Sent),
        Err(rustix::io::Errno::SRCH) => Ok(Delivery::AlreadyGone),
        Err(e) => Err(e.into()),
    }
}

/// SIGTSTP to reaper's own process group — its job, as a shell sees it — the way an editor
/// suspends itself: reaper and whatever wrapper started it in that job (`sh -c`, `make`) stop
/// until the shell continues them, then the call returns. If the group is orphaned (no shell
/// does job control for it: `ssh -t`, `docker exec -it`), the kernel discards the signal and
/// the call returns at once, instead of stopping reaper for good.
///
/// reaper may have a handler for SIGTSTP itself (to pass a Ctrl-Z on to a tree in another
/// group): the default action is put back around the kill, so the signal stops reaper instead of
/// reaching that handler again. Call it from the main thread, which the kernel prefers for a
/// signal to the process: then the stop happens before the kill returns, while the default
/// action is still in place.
pub fn stop_own_job() {
    tracing::debug!("stopping reaper's job (job control)");
    // SAFETY: sigaction(2) with zeroed-then-filled plain structs, saving and restoring this
    // process's own disposition; kill(2) with pid 0 signals the caller's own process group.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        let swapped = libc::sigaction(libc::SIGTSTP, &dfl, &mut old) == 0;
        libc::kill(0, libc::SIGTSTP);
        if swapped {
            libc::sigaction(libc::SIGTSTP, &old, std::ptr::null_mut());
        }
    }
}

/// `kill(-pgid, sig)`: only for a process group this process created. Group 1 is refused:
/// `kill(-1, …)` means every process the caller may signal.
pub fn to_process_group(pgid: Pid, sig: Signal) -> io::Result<Delivery> {
    if pgid.as_raw_nonzero().get() == 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "refusing to signal process group 1: kill(-1) would reach every process",
        ));
    }
    tracing::debug!(
        pgid = pgid.as_raw_nonzero().get(),
        sig = name(sig),
        "signal to process group"
    );
    match rustix::process::kill_process_group(pgid, sig) {
        Ok(()) => Ok(Delivery::Sent),
        Err(rustix::io::Errno::SRCH) => Ok(Delivery::AlreadyGone),
        Err(e) => Err(e.into()),
    }
}

/// Whether process group `pgid` has a member (zombies count: they stay in their group until
/// reaped), by `kill(-pgid, 0)`: no signal is sent, only the existence and permission checks run
/// (kill(2)). EPERM means a member exists. Group 1 is refused, as in [`to_process_group`].
pub fn group_has_members(pgid: Pid) -> io::Result<bool> {
    if pgid.as_raw_nonzero().get() == 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "refusing to probe process group 1: kill(-1) means every process",
        ));
    }
    match rustix::process::test_kill_process_group(pgid) {
        Ok(()) | Err(rustix::io::Errno::PERM) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The conventional name without `SIG` (`TERM`), or the number.
pub fn name(sig: Signal) -> String {
    NAMES
        .iter()
        .find(|(_, s)| *s == sig)
        .map(|(n, _)| (*n).to_owned())
        .unwrap_or_else(|| sig.as_raw().to_string())
}

/// The signal numbered `n`: a named one, or a real-time one in libc's application range
/// (`SIGRTMIN..=SIGRTMAX`; the numbers below SIGRTMIN are libc's own).
pub fn from_raw(n: i32) -> Option<Signal> {
    if let Some(sig) = Signal::from_named_raw(n) {
        return Some(sig);
    }
    #[cfg(target_os = "linux")]
    if realtime().contains(&n) {
        // SAFETY: a real-time signal in libc's application range (checked just above), which
        // the application may send, catch and block.
        return Some(unsafe { Signal::from_raw_unchecked(n) });
    }
    None
}

/// The real-time signals an application may use (libc reserves the ones below).
#[cfg(target_os = "linux")]
pub fn realtime() -> std::ops::RangeInclusive<i32> {
    libc::SIGRTMIN()..=libc::SIGRTMAX()
}

/// Parses `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse(text: &str) -> Option<Signal> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        return Signal::from_named_raw(n);
    }
    let upper = t.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    NAMES.iter().find(|(n, _)| *n == bare).map(|(_, s)| *s)
}

const NAMES: &[(&str, Signal)] = &[
    ("HUP", Signal::HUP),
    ("INT", Signal::INT),
    ("QUIT", Signal::QUIT),
    ("ILL", Signal::ILL),
    ("TRAP", Signal::TRAP),
    ("ABRT", Signal::ABORT),
    ("BUS", Signal::BUS),
    ("FPE", Signal::FPE),
    ("KILL", Signal::KILL),
    ("USR1", Signal::USR1),
    ("SEGV", Signal::SEGV),
    ("USR2", Signal::USR2),
    ("PIPE", Signal::PIPE),
    ("ALRM", Signal::ALARM),
    ("TERM", Signal::TERM),
    ("CHLD", Signal::CHILD),
    ("CONT", Signal::CONT),
    ("STOP", Signal::STOP),
    ("TSTP", Signal::TSTP),
    ("TTIN", Signal::TTIN),
    ("TTOU", Signal::TTOU),
    ("URG", Signal::URG),
    ("XCPU", Signal::XCPU),
    ("XFSZ", Signal::XFSZ),
    ("VTALRM", Signal::VTALARM),
    ("PROF", Signal::PROF),
    ("WINCH", Signal::WINCH),
    ("IO", Signal::IO),
    #[cfg(target_os = "linux")]
    ("PWR", Signal::POWER),
    #[cfg(target_os = "macos")]
    ("INFO", Signal::INFO),
    ("SYS", Signal::SYS),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_prefixes_case_and_numbers() {
        assert_eq!(parse("TERM"), Some(Signal::TERM));
        assert_eq!(parse("SIGTERM"), Some(Signal::TERM));
        assert_eq!(parse("sigint"), Some(Signal::INT));
        assert_eq!(parse("kill"), Some(Signal::KILL));
        assert_eq!(parse("9"), Some(Signal::KILL));
        assert_eq!(parse(" 1 "), Some(Signal::HUP));
        assert_eq!(parse("IOT"), None);
        assert_eq!(parse("0"), None);
        assert_eq!(parse("-9"), None);
        assert_eq!(parse("999"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("SIG"), None);
    }

    #[test]
    fn names_round_trip() {
        for (n, s) in NAMES {
            assert_eq!(name(*s), *n);
            assert_eq!(parse(n), Some(*s));
            assert_eq!(parse(&s.as_raw().to_string()), Some(*s));
        }
    }

    #[test]
    fn group_1_is_never_signalled() {
        // WINCH is ignored by default: were the guard gone, kill(-1) would harm nothing.
        let one = Pid::from_raw(1).unwrap();
        let e = to_process_group(one, Signal::WINCH).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
}
