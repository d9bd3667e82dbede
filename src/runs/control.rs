//! The run's control socket (`ID.sock` beside its record): how another process asks the
//! run's owner to stop or kill it, as its own timeout would, without waiting on the owner.
//!
//! A stream socket, so that each end knows who the other is from the kernel (`SO_PEERCRED`,
//! and a pidfd where the kernel gives one), never from what is sent:
//! - the owner takes orders only from root or the run's user, and never from a process of a
//!   run (in a run cgroup, carrying [`super::RUN_ID_ENV`], or below the owner): a tree cannot
//!   stop itself through its owner, nor another run — a refused asker is told why and nothing
//!   is done;
//! - the asker believes only the run's owner (pid and start time from the run id): an answer
//!   from anyone else is no answer, and the run is ended without it.
//!
//! A request is one line (`stop` or `kill`), taken when the owner next looks at its run (a
//! [`crate::Child`] being waited on or stepped), answered then (`ok stop`) and, when the run is
//! over, once more with how it ended (`done {…}`). Nothing an asker does holds the owner up:
//! a request must arrive within [`READ_WITHIN`], at most [`MAX_READING`] connections are read
//! at once and [`MAX_WAITING`] kept for an answer (more are refused), and every answer is
//! written without waiting (an asker that does not read misses it).

use std::io::Write as _;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reaper_platform::linux::peer::Peer;
use reaper_platform::linux::procfs;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::dir::Dir;
use super::record::How;
use crate::naming::{RunId, RUN_ID_ENV};
use crate::{Outcome, StopReason};

/// How long an asker has to send its request once connected.
const READ_WITHIN: Duration = Duration::from_secs(2);
/// Connections read at once; more are refused until one is done.
const MAX_READING: usize = 8;
/// Requests taken (or waiting to be) whose askers wait for how the run ended.
const MAX_WAITING: usize = 16;
/// The longest request line.
const MAX_REQUEST: usize = 64;
/// The longest answer line an asker reads.
const MAX_ANSWER: usize = 4096;

/// The owner's end: listening at `ID.sock` for the run's life.
pub(crate) struct Control {
    /// Requests that passed the checks, with their askers, for the owner to take.
    taken: tokio::sync::Mutex<mpsc::Receiver<(How, UnixStream)>>,
    /// Askers whose request was taken, to tell them how the run ended.
    askers: Mutex<Vec<UnixStream>>,
    /// The task that accepts and checks connections.
    serving: tokio::task::JoinHandle<()>,
}

impl Control {
    /// Listens at `name` in `dir` (through the directory's descriptor: the path cannot be
    /// redirected) for requests about a run of `run_uid`; needs a tokio runtime. Whatever
    /// the tree put at that name is replaced.
    pub(crate) fn bind(dir: &Dir, name: &str, run_uid: u32) -> std::io::Result<Control> {
        let rt = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        dir.remove(name);
        let std = std::os::unix::net::UnixListener::bind(dir.pinned(name))?;
        std.set_nonblocking(true)?;
        let _guard = rt.enter();
        let listener = tokio::net::UnixListener::from_std(std)?;
        let (tx, rx) = mpsc::channel(MAX_WAITING);
        let serving = rt.spawn(serve(listener, tx, run_uid));
        Ok(Control {
            taken: tokio::sync::Mutex::new(rx),
            askers: Mutex::new(Vec::new()),
            serving,
        })
    }

    /// The next request: answered now (`ok stop`), its asker kept for [`Control::done`].
    /// Never resolves if the socket fails (the run goes on without it). Cancel-safe.
    pub(crate) async fn request(&self) -> How {
        let Some((how, mut asker)) = self.taken.lock().await.recv().await else {
            return std::future::pending().await;
        };
        let _ = asker.write(format!("ok {}\n", how.word()).as_bytes());
        let mut askers = self.askers.lock().unwrap_or_else(|p| p.into_inner());
        if askers.len() < MAX_WAITING {
            askers.push(asker);
        }
        how
    }

    /// Tells everyone whose request was taken how the run ended.
    pub(crate) fn done(&self, outcome: &Outcome) {
        let askers = std::mem::take(&mut *self.askers.lock().unwrap_or_else(|p| p.into_inner()));
        if askers.is_empty() {
            return;
        }
        let Ok(json) = serde_json::to_string(&Ended::of(outcome)) else {
            return;
        };
        let msg = format!("done {json}\n");
        for mut a in askers {
            let _ = a.write(msg.as_bytes());
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// Accepts connections for as long as the run lives: each sender is checked at once, then
/// read (a few at a time, each within [`READ_WITHIN`]).
async fn serve(
    listener: tokio::net::UnixListener,
    taken: mpsc::Sender<(How, UnixStream)>,
    run_uid: u32,
) {
    let reading = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, say: try again soon, never spin.
                tracing::debug!("the run's control socket: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(mut std) = stream.into_std() else {
            continue;
        };
        // Non-blocking (as `into_std` leaves it): a refusal is written without waiting.
        if let Err(why) = sender_may_ask(&std, run_uid) {
            tracing::debug!("the run's control socket: refused: {why}");
            let _ = std.write(format!("error: {why}\n").as_bytes());
            continue;
        }
        if reading.load(Ordering::Relaxed) >= MAX_READING || taken.capacity() == 0 {
            let _ = std.write(b"error: busy\n");
            continue;
        }
        let Ok(stream) = tokio::net::UnixStream::from_std(std) else {
            continue;
        };
        reading.fetch_add(1, Ordering::Relaxed);
        let (reading, taken) = (reading.clone(), taken.clone());
        tokio::spawn(async move {
            let request = tokio::time::timeout(READ_WITHIN, read_request(&stream)).await;
            reading.fetch_sub(1, Ordering::Relaxed);
            let Ok(mut std) = stream.into_std() else {
                return;
            };
            match request {
                Ok(Some(how)) => {
                    if let Err(mpsc::error::TrySendError::Full((_, mut s))) =
                        taken.try_send((how, std))
                    {
                        let _ = s.write(b"error: busy\n");
                    }
                }
                Ok(None) => {
                    let _ = std.write(b"error: not a request (stop, kill)\n");
                }
                Err(_) => {
                    let _ = std.write(b"error: no request in time\n");
                }
            }
        });
    }
}

/// One request line: `stop` or `kill`; `None` for anything else.
async fn read_request(stream: &tokio::net::UnixStream) -> Option<How> {
    let mut buf = [0u8; MAX_REQUEST];
    let mut n = 0;
    loop {
        stream.readable().await.ok()?;
        match stream.try_read(&mut buf[n..]) {
            Ok(0) => return None,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == b'\n') {
            return match std::str::from_utf8(&buf[..end]).map(str::trim) {
                Ok("stop") => Some(How::Stop),
                Ok("kill") => Some(How::Kill),
                _ => None,
            };
        }
        if n == buf.len() {
            return None;
        }
    }
}

/// Whether the process that connected may give this run orders: root or the run's user,
/// outside every run — the kernel's word for who it is, read while that process still holds
/// its pid. `Err` says why not.
fn sender_may_ask(sock: &UnixStream, run_uid: u32) -> Result<(), String> {
    let peer = Peer::of(sock.as_fd()).map_err(|e| format!("no credentials: {e}"))?;
    if peer.uid != 0 && peer.uid != run_uid {
        return Err(format!(
            "uid {} is neither root nor the run's user ({run_uid})",
            peer.uid
        ));
    }
    let me = std::process::id() as i32;
    // This process ending its own run (an embedder's `runs::end`).
    if peer.pid == me {
        return Ok(());
    }
    if peer.pid <= 0 {
        return Err("the sender is in a PID namespace this owner cannot see into".into());
    }
    if let Some(what) = in_a_run(peer.pid, me) {
        return Err(format!(
            "pid {} is {what}: a run's processes give no orders",
            peer.pid
        ));
    }
    // Everything above was read of the sender, not of a process that took its pid since.
    if peer.still_there() == Some(false) {
        return Err(format!("pid {} is gone", peer.pid));
    }
    Ok(())
}

/// What makes `pid` a process of a run, if anything: a run cgroup on its path, a run's id in
/// its environment, or this owner (`me`) among its ancestors.
fn in_a_run(pid: i32, me: i32) -> Option<String> {
    let Some(cgroup) = procfs::cgroup(pid) else {
        return Some("a process whose cgroup cannot be read".into());
    };
    if let Some(run) = cgroup
        .split('/')
        .find(|c| RunId::from_cgroup_name(c).is_some() || crate::naming::is_kept_name(c))
    {
        return Some(format!("in run cgroup {run}"));
    }
    if let Some(id) = procfs::environ_var(pid, RUN_ID_ENV) {
        return Some(format!("a process of run {id} ({RUN_ID_ENV})"));
    }
    let mut p = pid;
    for _ in 0..4096 {
        match procfs::stat(p) {
            Ok(s) if s.ppid == me => return Some("a descendant of the run's owner".into()),
            Ok(s) if s.ppid > 1 => p = s.ppid,
            _ => break,
        }
    }
    None
}

/// How a run ended, as its owner tells whoever asked it to stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Ended {
    /// Why the run stopped, as its owner reports it.
    pub stop_reason: StopReason,
    /// How many processes the stop ended.
    pub killed: usize,
    /// How many survived SIGKILL (must be none).
    pub survivors: usize,
    /// The leader's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the leader, when one did.
    pub signal: Option<String>,
}

impl Ended {
    fn of(o: &Outcome) -> Ended {
        let (exit_code, signal) = crate::outcome::status_parts(o.leader_status);
        Ended {
            stop_reason: o.stop_reason,
            killed: o.killed,
            survivors: o.survivors.len(),
            exit_code,
            signal,
        }
    }
}

/// The asking end, in the process that wants a run stopped: a connection to its owner.
pub(crate) struct Asker {
    sock: UnixStream,
    /// What was read and not yet used.
    pending: Vec<u8>,
}

/// What a request came to.
pub(crate) enum Answer {
    /// The owner took it.
    Taken(Asker),
    /// The owner refused it, and said why: nothing is to be done.
    Refused(String),
    /// No answer in time: the owner is stopped, busy, or not looking at its run.
    Silent,
    /// Nobody listens there: the owner is gone, or the run is over.
    NoListener,
    /// What listens there is not the run's owner: its word is worth nothing.
    NotTheOwner(String),
}

impl Asker {
    /// Asks the owner of run `id` to end it (`how`), through the socket in `dir`, and waits up
    /// to `within` for it to take the request. The socket must be a socket of the directory's
    /// user, reached without following a link, and what listens there must be the run's owner.
    pub(crate) fn ask(
        dir: &Dir,
        id: &RunId,
        how: How,
        within: Duration,
    ) -> std::io::Result<Answer> {
        use rustix::fs::FileType;
        use rustix::io::Errno;
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        use std::os::fd::AsRawFd;
        let name = super::record::Names::of(id).socket;
        let fd = match dir.open_path(&name) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Answer::NoListener),
            Err(e) => return Err(e),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Socket || st.st_uid != dir.uid() {
            return Err(std::io::Error::other(format!(
                "{} is not a socket of uid {}; not sent",
                dir.path().join(&name).display(),
                dir.uid()
            )));
        }
        let sock = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        // Through the descriptor just checked, not the path, which may change meanwhile.
        let checked = format!("/proc/self/fd/{}", fd.as_raw_fd());
        match rustix::net::connect(&sock, &SocketAddrUnix::new(Path::new(&checked))?) {
            Ok(()) => {}
            Err(Errno::CONNREFUSED | Errno::NOENT) => return Ok(Answer::NoListener),
            // The owner's backlog is full: it is not accepting.
            Err(Errno::AGAIN) => return Ok(Answer::Silent),
            // Not a socket the owner listens on (a datagram socket put there: EPROTOTYPE).
            Err(e) => {
                return Ok(Answer::NotTheOwner(format!(
                    "the run's socket takes no connection: {e}"
                )))
            }
        }
        let sock = UnixStream::from(sock);
        // The kernel's word for who listens: the owner, alive, or nobody worth asking.
        let owner = id.owner();
        let peer = Peer::of(sock.as_fd())?;
        let is_owner = peer.pid == owner.pid
            && procfs::is_alive(owner.pid, owner.starttime)
            && peer.still_there() != Some(false);
        if !is_owner {
            return Ok(Answer::NotTheOwner(format!(
                "pid {} (uid {}) listens at the run's socket, not its owner (pid {})",
                peer.pid, peer.uid, owner.pid
            )));
        }
        sock.set_nonblocking(false)?;
        sock.set_write_timeout(Some(Duration::from_secs(1)))?;
        let mut asker = Asker {
            sock,
            pending: Vec::new(),
        };
        if (&asker.sock)
            .write_all(format!("{}\n", how.word()).as_bytes())
            .is_err()
        {
            return Ok(Answer::Silent);
        }
        let deadline = Instant::now() + within;
        match asker.next(deadline)? {
            Some(l) if l.starts_with("ok ") => Ok(Answer::Taken(asker)),
            // Too many askers at once: the owner is as good as silent.
            Some(l) if l == "error: busy" => Ok(Answer::Silent),
            Some(l) => Ok(Answer::Refused(
                l.strip_prefix("error: ").unwrap_or(&l).to_owned(),
            )),
            None => Ok(Answer::Silent),
        }
    }

    /// Waits up to `until` for the owner's word on how the run ended.
    pub(crate) fn ended(&mut self, until: Instant) -> std::io::Result<Option<Ended>> {
        while let Some(line) = self.next(until)? {
            if let Some(json) = line.strip_prefix("done ") {
                return Ok(serde_json::from_str(json).ok());
            }
        }
        Ok(None)
    }

    /// The next line before `deadline`; `None` at the deadline, or when the owner closed.
    fn next(&mut self, deadline: Instant) -> std::io::Result<Option<String>> {
        use std::io::Read as _;
        let mut buf = [0u8; 1024];
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Ok(Some(
                    String::from_utf8_lossy(&line[..end]).trim().to_owned(),
                ));
            }
            if self.pending.len() > MAX_ANSWER {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.read(&mut buf) {
                Ok(0) => return Ok(None),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_is_taken_and_answered_and_only_a_real_socket_is_asked() {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("reaper-unit-ctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let dir = Dir::open(&path, uid).unwrap();
        let me = procfs::self_identity().unwrap();
        let id: RunId = format!(
            "{}-{}-{}-0",
            procfs::pid_namespace().unwrap(),
            me.pid,
            me.starttime
        )
        .parse()
        .unwrap();
        let name = super::super::record::Names::of(&id).socket;
        let control = Control::bind(&dir, &name, uid).unwrap();
        // A link to a socket is not followed: the directory's user could point it anywhere.
        let other: RunId = format!(
            "{}-{}-{}-1",
            procfs::pid_namespace().unwrap(),
            me.pid,
            me.starttime
        )
        .parse()
        .unwrap();
        std::os::unix::fs::symlink(
            path.join(&name),
            path.join(super::super::record::Names::of(&other).socket),
        )
        .unwrap();
        assert!(Asker::ask(&dir, &other, How::Kill, Duration::ZERO).is_err());
        let asked = std::thread::spawn(move || {
            let dir = Dir::open(&path, uid).unwrap();
            Asker::ask(&dir, &id, How::Kill, Duration::from_secs(5)).map(|a| (a, path))
        });
        assert_eq!(control.request().await, How::Kill);
        let (answer, path) = asked.join().unwrap().unwrap();
        assert!(matches!(answer, Answer::Taken(_)));
        drop(control);
        std::fs::remove_dir_all(&path).unwrap();
        let dir = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map(|()| Dir::open(&path, uid).unwrap())
            .unwrap();
        assert!(matches!(
            Asker::ask(&dir, &id, How::Stop, Duration::from_millis(10)).unwrap(),
            Answer::NoListener
        ));
        std::fs::remove_dir_all(&path).unwrap();
    }
}
