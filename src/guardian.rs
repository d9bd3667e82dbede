//! The guardian: a small process that outlives reaper only to clean up after it.
//!
//! If reaper is SIGKILLed — alone, or with its whole process group, which is what MCP clients
//! do to their stdio servers — nothing in reaper runs any more, and a run's tree would live on in
//! its cgroup. The guardian is reaper's own binary, started in a session (and so a process
//! group) of its own, holding a pidfd on reaper. reaper tells it over a pipe which run cgroups
//! exist; when reaper dies without having said `done`, the guardian kills those cgroups
//! (`cgroup.kill`), waits for them to empty, removes them, and exits. It never touches a cgroup
//! it was not told about, and it exits as soon as reaper finishes normally.
//!
//! Does not cover the subreaper backend: without a cgroup there is nothing the guardian could
//! name the tree by once reaper (the subreaper) is gone, so the orphans reparent upwards.
//!
//! Protocol on the guardian's stdin: NUL-terminated records `+PATH` (watch), `-PATH` (forget),
//! `done` (reaper finished its teardown).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::{procfs, reap};

use crate::containment::setup;

/// Once reaper is dead, how long the guardian waits for its pipe to reach EOF.
const EOF_AFTER_DEATH: Duration = Duration::from_millis(200);

/// How long the guardian waits for a killed cgroup to empty before removing what it can.
const TAKEOVER_DEADLINE: Duration = Duration::from_millis(900);

/// reaper's side: the pipe to its guardian.
#[derive(Debug)]
pub struct Guardian {
    pid: i32,
    /// Its start time, read while it was certainly our unreaped child (see [`Guardian::spawn`]).
    starttime: u64,
    pipe: Mutex<Option<ChildStdin>>,
}

impl Guardian {
    /// Starts the guardian for this reaper process.
    pub fn spawn() -> Result<Guardian, String> {
        let (pid, start) =
            procfs::self_identity().map_err(|e| format!("cannot read /proc/self/stat: {e}"))?;
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("reaper")
            .args(["guardian", &pid.to_string(), &start.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .env_remove("RUST_LOG");
        // SAFETY: setsid(2) is async-signal-safe and allocation-free. A session of its own puts
        // the guardian outside reaper's process group and session, so `kill -KILL -PGID` and
        // a terminal's SIGHUP miss it.
        unsafe {
            cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(Into::into));
        }
        // Under the reaping lock (see reap.rs): std's spawn waits for a child whose exec
        // failed, and until the lock is let go the guardian's pid is its own.
        let reaping = reap::hold();
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the guardian: {e}"))?;
        let pipe = child.stdin.take();
        let pid = child.id() as i32;
        // Nobody waits for the guardian: `reap::reap_orphans` reaps it like an orphan once it
        // exits, and its pid may then be reused. Read its start time while it cannot be.
        let starttime = procfs::stat(pid)
            .map_err(|e| format!("cannot read the guardian's /proc/{pid}/stat: {e}"))?
            .starttime;
        drop(reaping);
        Ok(Guardian {
            pid,
            starttime,
            pipe: Mutex::new(pipe),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The guardian's start time: with [`Guardian::pid`], names it even after it was reaped.
    pub fn starttime(&self) -> u64 {
        self.starttime
    }

    fn send(&self, record: &[u8]) {
        let mut pipe = self.pipe.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pipe.as_mut() {
            let mut msg = record.to_vec();
            msg.push(0);
            if let Err(e) = p.write_all(&msg) {
                tracing::warn!(
                    "the guardian (pid {}) is gone: {e}; reaper's own SIGKILL is no longer covered",
                    self.pid
                );
                *pipe = None;
            }
        }
    }

    /// The guardian kills and removes `cgroup` if reaper dies before [`Guardian::forget`].
    pub fn watch(&self, cgroup: &std::path::Path) {
        let mut rec = b"+".to_vec();
        rec.extend_from_slice(cgroup.as_os_str().as_encoded_bytes());
        self.send(&rec);
    }

    /// `cgroup` has been removed by reaper itself.
    pub fn forget(&self, cgroup: &std::path::Path) {
        let mut rec = b"-".to_vec();
        rec.extend_from_slice(cgroup.as_os_str().as_encoded_bytes());
        self.send(&rec);
    }

    /// reaper's teardown is complete: the guardian exits.
    pub fn done(&self) {
        self.send(b"done");
        self.pipe.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// The guardian process itself (`reaper guardian PID STARTTIME`, started by [`Guardian::spawn`]).
///
/// It reads records until its stdin reaches EOF: reaper's end of the pipe closes when reaper
/// exits, however it exits (the pipe is close-on-exec, so no descendant keeps it). Whatever is
/// still watched then was not removed by reaper — it died, or it finished without being able to
/// clean up (survivors, a panicking call) — and is taken over. The pidfd on reaper bounds the
/// wait for that EOF once reaper is known to be dead.
pub fn main(reaper_pid: i32, reaper_start: u64) -> u8 {
    use rustix::event::{poll, PollFd, PollFlags};
    // None: reaper already died before we could watch it; its records are still in the pipe.
    let reaper = Pidfd::open_checked(reaper_pid, reaper_start);
    let mut watched: Vec<PathBuf> = Vec::new();
    let stdin = std::io::stdin();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut reaper_dead_since: Option<std::time::Instant> =
        reaper.is_none().then(std::time::Instant::now);
    loop {
        let timeout = reaper_dead_since.map(|_| rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        });
        let ready = {
            let mut fds = vec![PollFd::new(&stdin, PollFlags::IN)];
            if let (Some(r), None) = (&reaper, reaper_dead_since) {
                fds.push(PollFd::new(r, PollFlags::IN));
            }
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) => (
                    !fds[0].revents().is_empty(),
                    fds.get(1).is_some_and(|f| !f.revents().is_empty()),
                ),
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        };
        if ready.1 {
            reaper_dead_since = Some(std::time::Instant::now());
        }
        if ready.0 {
            let n = (&stdin).read(&mut chunk).unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(end) = buf.iter().position(|&b| b == 0) {
                let rec: Vec<u8> = buf.drain(..=end).take(end).collect();
                match rec.split_first() {
                    Some((b'+', p)) => {
                        watched.push(PathBuf::from(String::from_utf8_lossy(p).into_owned()))
                    }
                    Some((b'-', p)) => {
                        let p = PathBuf::from(String::from_utf8_lossy(p).into_owned());
                        watched.retain(|w| *w != p);
                    }
                    _ => {} // `done`, or anything unknown: EOF follows
                }
            }
        } else if reaper_dead_since.is_some_and(|t| t.elapsed() >= EOF_AFTER_DEATH) {
            // reaper is dead but something still holds the pipe (a child between fork and
            // exec): do not wait for it.
            break;
        }
    }
    if watched.is_empty() {
        return 0;
    }
    take_over(&watched)
}

/// reaper died mid-run: kill and remove every cgroup it told us about.
fn take_over(cgroups: &[PathBuf]) -> u8 {
    // Kill every tree first, then wait and remove: one slow cgroup must not delay the others.
    for path in cgroups {
        let _ = reaper_platform::linux::signal::to_cgroup_kill(&Cgroup::at(path));
    }
    let Ok(rt) = crate::cli::runtime() else {
        return 1;
    };
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + TAKEOVER_DEADLINE;
        let mut failed = false;
        for path in cgroups {
            match setup::remove_tree(&Cgroup::at(path), deadline).await {
                Ok(()) => say!(
                    "reaper guardian: reaper is gone; killed and removed {}",
                    path.display()
                ),
                Err(e) => {
                    say!("reaper guardian: {e}");
                    failed = true;
                }
            }
        }
        u8::from(failed)
    })
}
