//! macOS: one process's facts from `proc_pidinfo(PROC_PIDTBSDINFO)` (libproc, the call `ps`
//! and Activity Monitor use) plus `getsid(2)`, and the [`Handle`] the run layer watches and
//! signals a process through. macOS has no pidfd: a handle is the pid with the start time it
//! had when the handle was opened, checked again before every signal.
//!
//! Start times are `pbi_start_tvsec`, seconds since the epoch: the same value `ps -o lstart`
//! prints, so they compare with the process table's ([`crate::proctable::ps`]).

use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use rustix::event::kqueue::{kevent, kqueue, Event, EventFilter, EventFlags, ProcessEvents};
use rustix::process::Pid;

use crate::identity::{Identity, ProcStat};

/// A process to watch and signal: its pid and the start time it had when the handle was
/// opened (`None`: it had already exited then).
#[derive(Debug)]
pub struct Handle {
    pid: Pid,
    starttime: Option<u64>,
}

impl Handle {
    /// A second handle on the same process.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            pid: self.pid,
            starttime: self.starttime,
        })
    }

    /// A handle on our child `pid`, not yet reaped (so the pid is its own). Never fails; the
    /// `Result` matches Linux's `pidfd_open`.
    pub fn open(pid: Pid) -> io::Result<Self> {
        let raw = pid.as_raw_nonzero().get();
        // A child that already exited may not be visible to proc_pidinfo any more: it is dead.
        let starttime = stat(raw).ok().filter(|s| !s.is_dead()).map(|s| s.starttime);
        Ok(Self { pid, starttime })
    }

    /// A handle on the process `(pid, starttime)`, or `None` when that process is gone.
    pub fn open_checked(pid: i32, starttime: u64) -> Option<Self> {
        let p = Pid::from_raw(pid)?;
        is_alive(pid, starttime).then_some(Self {
            pid: p,
            starttime: Some(starttime),
        })
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    pub fn raw_pid(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// Whether the pid still names the live process the handle was opened on.
    pub fn is_current(&self) -> bool {
        self.starttime
            .is_some_and(|st| is_alive(self.raw_pid(), st))
    }

    /// Resolves once the process has exited: a kqueue watching it for `NOTE_EXIT`
    /// ([`watch_exit`]), readable when the event fires.
    pub async fn exited(&self) -> io::Result<()> {
        if !self.is_current() {
            return Ok(());
        }
        let Some(kq) = watch_exit(self.pid)? else {
            return Ok(());
        };
        let fd = crate::async_readable(kq)?;
        let _ready = fd.readable().await?;
        Ok(())
    }

    /// One kqueue watch for many waits (see [`crate::exit_watch::ExitWatch`]).
    pub fn exit_watch(&self) -> io::Result<crate::exit_watch::ExitWatch> {
        if !self.is_current() {
            return crate::exit_watch::ExitWatch::new(None);
        }
        crate::exit_watch::ExitWatch::new(watch_exit(self.pid)?)
    }

    /// Whether the process has exited (or its pid names another process now).
    pub fn has_exited(&self) -> bool {
        !self.is_current()
    }

    /// Whether any of the processes has exited: one `proc_pidinfo` per process.
    pub fn any_exited(handles: &[Handle]) -> bool {
        handles.iter().any(Handle::has_exited)
    }
}

/// A kqueue with `EVFILT_PROC`/`NOTE_EXIT` registered for `pid` (kevent(2)): it polls readable
/// once the process exits. `None` when it has exited already (registering on a process that is
/// gone, or a zombie, fails with ESRCH).
fn watch_exit(pid: Pid) -> io::Result<Option<OwnedFd>> {
    let kq = kqueue()?;
    let watch = Event::new(
        EventFilter::Proc {
            pid,
            flags: ProcessEvents::EXIT,
        },
        EventFlags::ADD,
        std::ptr::null_mut(),
    );
    let mut none: [Event; 0] = [];
    // SAFETY: a process filter names no file descriptor that could close under the kqueue.
    match unsafe { kevent(&kq, &[watch], &mut none[..], Some(Duration::ZERO)) } {
        Ok(_) => Ok(Some(kq)),
        Err(rustix::io::Errno::SRCH) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One process's facts. `NotFound` when there is no such process (ESRCH).
pub fn stat(pid: i32) -> io::Result<ProcStat> {
    // SAFETY: proc_bsdinfo is plain old data (integers and byte arrays); all zeroes is valid.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: the buffer is a live proc_bsdinfo of exactly `size` bytes, as the flavor wants.
    let got = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            (&mut info as *mut libc::proc_bsdinfo).cast(),
            size,
        )
    };
    if got != size {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) | Some(0) | None => {
                io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}"))
            }
            _ => e,
        });
    }
    let sid = crate::group::session_of(Some(pid)).unwrap_or(0);
    Ok(ProcStat {
        pid,
        comm: c_name(&info.pbi_comm),
        state: match info.pbi_status {
            1 => 'I', // SIDL: being created
            2 => 'R', // SRUN
            4 => 'T', // SSTOP
            libc::SZOMB => 'Z',
            _ => 'S', // SSLEEP
        },
        ppid: info.pbi_ppid as i32,
        pgid: info.pbi_pgid as i32,
        sid,
        starttime: info.pbi_start_tvsec,
    })
}

fn c_name(raw: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `(pid, starttime)` is still a live (non-zombie) process.
pub fn is_alive(pid: i32, starttime: u64) -> bool {
    matches!(stat(pid), Ok(s) if s.starttime == starttime && !s.is_dead())
}

/// This process, named for good.
pub fn self_identity() -> io::Result<Identity> {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    Ok(stat(pid)?.identity())
}

/// The executable's path, when readable (`proc_pidpath(3)`).
pub fn exe(pid: i32) -> Option<PathBuf> {
    let mut buf = vec![0u8; libc::PROC_PIDPATHINFO_MAXSIZE as usize];
    // SAFETY: the buffer is live and as large as the size passed.
    let n = unsafe { libc::proc_pidpath(pid, buf.as_mut_ptr().cast(), buf.len() as u32) };
    if n <= 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(PathBuf::from(String::from_utf8_lossy(&buf).into_owned()))
}

/// The command line (`ps -o command=`; empty when it cannot be read).
pub fn cmdline(pid: i32) -> String {
    std::process::Command::new("/bin/ps")
        .args(["-ww", "-o", "command=", "-p", &pid.to_string()])
        .envs(crate::proctable::ps::ENV.iter().copied())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// How long ago a process started, in seconds.
pub fn age_secs(starttime: u64) -> Option<f64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some((now.as_secs_f64() - starttime as f64).max(0.0))
}
