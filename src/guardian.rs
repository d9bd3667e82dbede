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
use reaper_platform::linux::procfs;

use crate::containment::setup;

/// How long the guardian waits for a killed cgroup to empty before removing what it can.
const TAKEOVER_DEADLINE: Duration = Duration::from_millis(900);

/// reaper's side: the pipe to its guardian.
#[derive(Debug)]
pub struct Guardian {
    pid: i32,
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
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the guardian: {e}"))?;
        let pipe = child.stdin.take();
        // The child is reaped by `reap::reap_orphans` like any other non-leader child.
        Ok(Guardian {
            pid: child.id() as i32,
            pipe: Mutex::new(pipe),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
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
pub fn main(reaper_pid: i32, reaper_start: u64) -> u8 {
    let Some(reaper) = Pidfd::open_checked(reaper_pid, reaper_start) else {
        // reaper died before we could watch it; it had not told us of any cgroup yet.
        return 0;
    };
    let mut watched: Vec<PathBuf> = Vec::new();
    let mut stdin = std::io::stdin().lock();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let finished_cleanly = loop {
        use rustix::event::{poll, PollFd, PollFlags};
        let stdin_fd = std::io::stdin();
        let mut fds = [
            PollFd::new(&reaper, PollFlags::IN),
            PollFd::new(&stdin_fd, PollFlags::IN),
        ];
        if let Err(e) = poll(&mut fds, None) {
            if e == rustix::io::Errno::INTR {
                continue;
            }
            break false;
        }
        let reaper_gone = !fds[0].revents().is_empty();
        if !fds[1].revents().is_empty() {
            let n = stdin.read(&mut chunk).unwrap_or(0);
            buf.extend_from_slice(&chunk[..n]);
            let mut done = false;
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
                    _ if rec == b"done" => done = true,
                    _ => {}
                }
            }
            if done {
                break true;
            }
            if n == 0 {
                // EOF without `done`: reaper's end of the pipe closed, so reaper is dead.
                break false;
            }
        }
        if reaper_gone {
            break false;
        }
    };
    if finished_cleanly || watched.is_empty() {
        return 0;
    }
    take_over(&watched)
}

/// reaper died mid-run: kill and remove every cgroup it told us about.
fn take_over(cgroups: &[PathBuf]) -> u8 {
    let Ok(rt) = crate::cli::runtime() else {
        return 1;
    };
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + TAKEOVER_DEADLINE;
        let mut failed = false;
        for path in cgroups {
            if let Err(e) = setup::remove_tree(&Cgroup::at(path), deadline).await {
                eprintln!("reaper guardian: {e}");
                failed = true;
            } else {
                eprintln!(
                    "reaper guardian: reaper died; killed and removed {}",
                    path.display()
                );
            }
        }
        u8::from(failed)
    })
}
