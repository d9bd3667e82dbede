//! The calling thread's scheduling: raised (a lower nice value, or round-robin real time) with
//! `SCHED_RESET_ON_FORK`, so that nothing it forks or spawns inherits the raise, and put back.

use std::io;

/// `struct sched_attr` (sched_setattr(2)), its first version (48 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// How the calling thread is raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// `SCHED_OTHER` at this nice value (negative: higher priority).
    Nice(i32),
    /// `SCHED_RR` at this static priority (1..=99).
    RoundRobin(u32),
}

/// The calling thread's scheduling before a [`raise`], to [`restore`] it.
#[derive(Debug, Clone, Copy)]
pub struct Saved(SchedAttr);

fn get() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: sched_getattr(2) on the calling thread (pid 0) fills at most `size` bytes of
    // `attr`, a plain struct of that size owned by this frame.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

fn set(attr: &SchedAttr) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        ..*attr
    };
    // SAFETY: sched_setattr(2) on the calling thread (pid 0) reads `size` bytes of `attr`.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the calling thread runs at the default: `SCHED_OTHER` at nice 0, without
/// `SCHED_RESET_ON_FORK`.
pub fn is_default() -> bool {
    get().is_ok_and(|a| a.policy == libc::SCHED_OTHER as u32 && a.nice == 0 && a.flags == 0)
}

/// Whether the calling thread runs `SCHED_OTHER` at nice `nice` with `SCHED_RESET_ON_FORK`, as
/// [`raise`] with [`Raise::Nice`] leaves it.
pub fn is_raised_nice(nice: i32) -> bool {
    get().is_ok_and(|a| {
        a.policy == libc::SCHED_OTHER as u32
            && a.nice == nice
            && a.flags & SCHED_FLAG_RESET_ON_FORK != 0
    })
}

/// Raises the calling thread as `how` says, with `SCHED_RESET_ON_FORK`; returns what it was.
/// Fails (and changes nothing) without the privilege to (`CAP_SYS_NICE`, or an `RLIMIT_NICE` /
/// `RLIMIT_RTPRIO` that allows it), or when the thread already runs at a higher priority.
pub fn raise(how: Raise) -> io::Result<Saved> {
    let old = get()?;
    let (policy, nice, priority) = match how {
        Raise::Nice(n) => (libc::SCHED_OTHER as u32, n, 0),
        Raise::RoundRobin(p) => (libc::SCHED_RR as u32, 0, p),
    };
    // Never lower: a thread already real-time, or nicer than asked, is left as it is.
    let higher = match how {
        Raise::Nice(n) => old.policy == libc::SCHED_OTHER as u32 && n < old.nice,
        Raise::RoundRobin(p) => {
            old.policy != libc::SCHED_FIFO as u32
                && (old.policy != libc::SCHED_RR as u32 || p > old.priority)
        }
    };
    if !higher {
        return Err(io::Error::from(io::ErrorKind::AlreadyExists));
    }
    set(&SchedAttr {
        policy,
        flags: SCHED_FLAG_RESET_ON_FORK,
        nice,
        priority,
        ..SchedAttr::default()
    })?;
    Ok(Saved(old))
}

/// Puts the calling thread's scheduling back as [`raise`] found it.
pub fn restore(saved: Saved) -> io::Result<()> {
    set(&saved.0)
}
