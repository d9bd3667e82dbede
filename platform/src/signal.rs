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
        .find(|n| !n.coreutils_only && n.raw == sig.as_raw())
        .map(|n| n.name.to_owned())
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
    NAMES
        .iter()
        .find(|n| !n.coreutils_only && n.name == bare)
        .and_then(|n| Signal::from_named_raw(n.raw))
}

/// gnulib's `str2sig`, as coreutils' `timeout` and `kill` read a name (the caller upcases it
/// and strips `SIG`): a name of the table (`TERM`, `IOT`, `EXIT` for 0); `RTMIN` or `RTMAX`
/// followed by an offset as strtol(3) reads it (`RTMIN+2`, `RTMIN 2`, `RTMIN02`, `RTMAX-1`),
/// within the real-time range; or decimal digits up to the highest signal number.
pub fn str2sig(name: &str) -> Option<i32> {
    if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        return strtol_whole(name)
            .filter(|n| *n <= i64::from(SIGNUM_BOUND))
            .and_then(|n| i32::try_from(n).ok());
    }
    if let Some(n) = NAMES.iter().find(|n| n.name == name) {
        return Some(n.raw);
    }
    let (min, max) = rt_range()?;
    let (min64, max64) = (i64::from(min), i64::from(max));
    if let Some(offset) = name.strip_prefix("RTMIN") {
        strtol_whole(offset)
            .filter(|n| (0..=max64 - min64).contains(n))
            .map(|n| min + n as i32)
    } else if let Some(offset) = name.strip_prefix("RTMAX") {
        strtol_whole(offset)
            .filter(|n| (min64 - max64..=0).contains(n))
            .map(|n| max + n as i32)
    } else {
        None
    }
}

/// gnulib's `sig2str`, as coreutils' `timeout` names a signal: the table's first name for
/// `raw` (`POLL` before `IO`, `EXIT` for 0), else `RTMIN+N` in the lower half of the real-time
/// range and `RTMAX-N` in the upper. `None` for a number without a name (glibc's own 32 and
/// 33, anything above SIGRTMAX).
pub fn sig2str(raw: i32) -> Option<String> {
    if let Some(n) = NAMES.iter().find(|n| n.raw == raw) {
        return Some(n.name.to_owned());
    }
    let (min, max) = rt_range()?;
    if !(min..=max).contains(&raw) {
        return None;
    }
    Some(if raw <= min + (max - min) / 2 {
        match raw - min {
            0 => "RTMIN".to_owned(),
            d => format!("RTMIN+{d}"),
        }
    } else {
        match max - raw {
            0 => "RTMAX".to_owned(),
            d => format!("RTMAX-{d}"),
        }
    })
}

/// The real-time signals the C library leaves to applications (glibc keeps 32 and 33 for
/// itself, so SIGRTMIN is 34 there); macOS has none.
fn rt_range() -> Option<(i32, i32)> {
    #[cfg(target_os = "linux")]
    return Some((libc::SIGRTMIN(), libc::SIGRTMAX()));
    #[cfg(not(target_os = "linux"))]
    None
}

/// The highest signal number gnulib's `str2sig` takes as digits (NSIG - 1).
#[cfg(target_os = "linux")]
const SIGNUM_BOUND: i32 = 64;
#[cfg(not(target_os = "linux"))]
const SIGNUM_BOUND: i32 = 31;

/// strtol(3) in base 10 and the C locale, when it leaves nothing unread: white space, a sign,
/// digits, saturating at the `long` range as strtol does. Empty text is 0 (nothing to convert,
/// and nothing left); anything else without digits is `None` (strtol leaves it all unread).
fn strtol_whole(text: &str) -> Option<i64> {
    if text.is_empty() {
        return Some(0);
    }
    let s = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.bytes().fold(0i128, |acc, c| {
        (acc * 10 + i128::from(c - b'0')).min(i128::from(i64::MAX) + 1)
    });
    let value = if negative { -magnitude } else { magnitude };
    Some(value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// One name of a signal, without `SIG`.
struct Name {
    name: &'static str,
    raw: i32,
    /// A name only coreutils' `timeout` and `kill` use (an old or System V alias, a signal
    /// reaper never names, `EXIT` for 0): [`str2sig`] and [`sig2str`] know it, [`name`] and
    /// [`parse`] do not.
    coreutils_only: bool,
}

const fn own(name: &'static str, raw: i32) -> Name {
    Name {
        name,
        raw,
        coreutils_only: false,
    }
}

const fn coreutils(name: &'static str, raw: i32) -> Name {
    Name {
        name,
        raw,
        coreutils_only: true,
    }
}

/// Every signal name, in the order of gnulib's sig2str table: where two share a number, the
/// first is coreutils' name for it (`POLL` for 29 on Linux, where reaper says `IO`).
const NAMES: &[Name] = &[
    own("HUP", libc::SIGHUP),
    own("INT", libc::SIGINT),
    own("QUIT", libc::SIGQUIT),
    own("ILL", libc::SIGILL),
    own("TRAP", libc::SIGTRAP),
    own("ABRT", libc::SIGABRT),
    own("FPE", libc::SIGFPE),
    own("KILL", libc::SIGKILL),
    own("SEGV", libc::SIGSEGV),
    own("BUS", libc::SIGBUS),
    own("PIPE", libc::SIGPIPE),
    own("ALRM", libc::SIGALRM),
    own("TERM", libc::SIGTERM),
    own("USR1", libc::SIGUSR1),
    own("USR2", libc::SIGUSR2),
    own("CHLD", libc::SIGCHLD),
    own("URG", libc::SIGURG),
    own("STOP", libc::SIGSTOP),
    own("TSTP", libc::SIGTSTP),
    own("CONT", libc::SIGCONT),
    own("TTIN", libc::SIGTTIN),
    own("TTOU", libc::SIGTTOU),
    own("SYS", libc::SIGSYS),
    #[cfg(target_os = "linux")]
    coreutils("POLL", libc::SIGPOLL),
    own("VTALRM", libc::SIGVTALRM),
    own("PROF", libc::SIGPROF),
    own("XCPU", libc::SIGXCPU),
    own("XFSZ", libc::SIGXFSZ),
    coreutils("IOT", libc::SIGIOT),
    #[cfg(target_os = "macos")]
    coreutils("EMT", libc::SIGEMT),
    #[cfg(target_os = "linux")]
    coreutils("CLD", libc::SIGCHLD),
    #[cfg(target_os = "linux")]
    own("PWR", libc::SIGPWR),
    own("WINCH", libc::SIGWINCH),
    #[cfg(target_os = "macos")]
    own("INFO", libc::SIGINFO),
    own("IO", libc::SIGIO),
    #[cfg(target_os = "linux")]
    coreutils("STKFLT", libc::SIGSTKFLT),
    coreutils("EXIT", 0),
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
        for n in NAMES.iter().filter(|n| !n.coreutils_only) {
            let s = Signal::from_named_raw(n.raw).expect("a named signal");
            assert_eq!(name(s), n.name);
            assert_eq!(parse(n.name), Some(s));
            assert_eq!(parse(&n.raw.to_string()), Some(s));
        }
        // coreutils' own names stay out of reaper's.
        assert_eq!(name(Signal::IO), "IO");
        assert_eq!(parse("CLD"), None);
        assert_eq!(parse("EXIT"), None);
    }

    #[test]
    fn str2sig_as_gnulib() {
        assert_eq!(str2sig("TERM"), Some(15));
        assert_eq!(str2sig("IOT"), Some(6));
        assert_eq!(str2sig("EXIT"), Some(0));
        assert_eq!(str2sig("9"), Some(9));
        assert_eq!(str2sig("015"), Some(15));
        assert_eq!(str2sig("99999999999999999999999"), None);
        assert_eq!(str2sig("9 "), None);
        assert_eq!(str2sig("term"), None, "the caller upcases");
        assert_eq!(str2sig("SIGTERM"), None, "the caller strips SIG");
        assert_eq!(str2sig(""), None);
        #[cfg(target_os = "linux")]
        {
            assert_eq!(str2sig("CLD"), Some(17));
            assert_eq!(str2sig("POLL"), Some(29));
            assert_eq!(str2sig("STKFLT"), Some(16));
            assert_eq!(str2sig("64"), Some(64));
            assert_eq!(str2sig("65"), None);
            let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
            for (t, want) in [
                ("RTMIN", Some(min)),
                ("RTMIN+1", Some(min + 1)),
                ("RTMIN 1", Some(min + 1)),
                ("RTMIN\t+1", Some(min + 1)),
                ("RTMIN01", Some(min + 1)),
                ("RTMIN-0", Some(min)),
                ("RTMIN+30", Some(max.min(min + 30))),
                ("RTMAX", Some(max)),
                ("RTMAX-1", Some(max - 1)),
                ("RTMAX -1", Some(max - 1)),
                ("RTMAX+0", Some(max)),
                ("RTMIN ", None),
                ("RTMIN+", None),
                ("RTMIN+ 1", None),
                ("RTMIN1 ", None),
                ("RTMIN+0x1", None),
                ("RTMIN-1", None),
                ("RTMAX1", None),
                ("RTMIN+99999999999999999999", None),
                ("RTMAX-99999999999999999999", None),
            ] {
                assert_eq!(str2sig(t), want, "{t:?}");
            }
            assert_eq!(str2sig(&format!("RTMIN+{}", max - min + 1)), None);
            assert_eq!(str2sig(&format!("RTMAX-{}", max - min)), Some(min));
        }
    }

    #[test]
    fn sig2str_as_gnulib() {
        assert_eq!(sig2str(0).as_deref(), Some("EXIT"));
        assert_eq!(sig2str(6).as_deref(), Some("ABRT"));
        assert_eq!(sig2str(17).as_deref(), Some("CHLD"));
        #[cfg(target_os = "linux")]
        {
            assert_eq!(sig2str(16).as_deref(), Some("STKFLT"));
            assert_eq!(sig2str(29).as_deref(), Some("POLL"));
            assert_eq!(sig2str(32), None);
            assert_eq!(sig2str(33), None);
            assert_eq!(sig2str(34).as_deref(), Some("RTMIN"));
            assert_eq!(sig2str(49).as_deref(), Some("RTMIN+15"));
            assert_eq!(sig2str(50).as_deref(), Some("RTMAX-14"));
            assert_eq!(sig2str(64).as_deref(), Some("RTMAX"));
            assert_eq!(sig2str(65), None);
        }
        assert_eq!(sig2str(-1), None);
        // Every number it names, str2sig reads back.
        for raw in 0..=SIGNUM_BOUND {
            if let Some(n) = sig2str(raw) {
                assert_eq!(str2sig(&n), Some(raw), "{n}");
            }
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
