//! The run's control socket (`ID.sock` beside its record): how another process asks the
//! run's owner to stop or kill it, as its own timeout would, without waiting on the owner.
//!
//! A datagram socket, so nothing a sender does can hold the owner up: a request is one
//! datagram (`stop` or `kill`), taken when the owner next looks at its run (a [`crate::Child`]
//! being waited on or stepped), answered at once (`ok stop`) and, when the run is over, once
//! more with how it ended (`done {…}`). The socket is in the user's 0700 directory: only the
//! run's user and root can send to it. A sender that gets no answer (the owner is stopped, or
//! does not poll its run) acts without it (see [`super::act`]).
//!
//! The sender listens on an abstract address of its own (no file, no permission needed to
//! answer it: the answer carries nothing a stranger could use).

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::record::How;
use crate::{Outcome, StopReason};

/// The owner's end: bound at `ID.sock` for the run's life.
pub(crate) struct Control {
    sock: tokio::net::UnixDatagram,
    /// Who asked, to tell them how the run ended.
    askers: Mutex<Vec<SocketAddr>>,
}

/// The largest datagram either side sends.
const MAX_MESSAGE: usize = 4096;

impl Control {
    /// Binds the socket at `path` (a run's id is never reused, so nothing is there yet; the
    /// directory, closed to others, is what keeps them out); needs a tokio runtime.
    pub(crate) fn bind(path: &Path) -> std::io::Result<Control> {
        let std = UnixDatagram::bind(path)?;
        std.set_nonblocking(true)?;
        let sock = tokio::net::UnixDatagram::from_std(std)?;
        Ok(Control {
            sock,
            askers: Mutex::new(Vec::new()),
        })
    }

    /// The next request: answered at once, its sender remembered for [`Control::done`]. Never
    /// resolves if the socket fails (the run goes on without it).
    pub(crate) async fn request(&self) -> How {
        let mut buf = [0u8; 64];
        loop {
            let (n, from) = match self.sock.recv_from(&mut buf).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!("the run's control socket failed: {e}");
                    return std::future::pending().await;
                }
            };
            let how = match std::str::from_utf8(&buf[..n]).map(str::trim) {
                Ok("stop") => How::Stop,
                Ok("kill") => How::Kill,
                _ => {
                    reply(&from.into(), b"error: not a request (stop, kill)");
                    continue;
                }
            };
            let from: SocketAddr = from.into();
            reply(&from, format!("ok {}", how.word()).as_bytes());
            self.askers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(from);
            return how;
        }
    }

    /// Tells everyone who asked how the run ended.
    pub(crate) fn done(&self, outcome: &Outcome) {
        let askers = std::mem::take(&mut *self.askers.lock().unwrap_or_else(|p| p.into_inner()));
        if askers.is_empty() {
            return;
        }
        let ended = Ended::of(outcome);
        let msg = match serde_json::to_string(&ended) {
            Ok(json) => format!("done {json}"),
            Err(_) => return,
        };
        for a in &askers {
            reply(a, msg.as_bytes());
        }
    }
}

/// One datagram to `to`, never waiting: an asker that went away or does not read misses it.
fn reply(to: &SocketAddr, msg: &[u8]) {
    let Ok(s) = UnixDatagram::unbound() else {
        return;
    };
    if s.set_nonblocking(true).is_ok() {
        let _ = s.send_to_addr(&msg[..msg.len().min(MAX_MESSAGE)], to);
    }
}

/// How a run ended, as its owner tells whoever asked it to stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        Ended {
            stop_reason: o.stop_reason,
            killed: o.killed,
            survivors: o.survivors.len(),
            exit_code: o.exit_code,
            signal: o.signal.clone(),
        }
    }
}

/// The asking end, in the process that wants a run stopped.
pub(crate) struct Asker {
    sock: UnixDatagram,
}

/// What a request came to.
pub(crate) enum Answer {
    /// The owner took it.
    Taken,
    /// No answer in time: the owner is stopped, busy, or not looking at its run.
    Silent,
    /// Nobody listens there: the owner is gone, or the run is over.
    NoListener,
}

impl Asker {
    /// An asker on a fresh abstract address.
    pub(crate) fn new() -> std::io::Result<Asker> {
        use std::os::linux::net::SocketAddrExt;
        let pid = std::process::id();
        let mut last = None;
        for attempt in 0..8u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("reaper-ask-{pid}-{nanos:x}-{attempt}");
            let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
            match UnixDatagram::bind_addr(&addr) {
                Ok(sock) => return Ok(Asker { sock }),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no abstract address")))
    }

    /// Sends `how` to the socket at `path` and waits up to `within` for the owner to take it.
    /// The socket must be a socket owned by `uid` (the run's user), not a link: the directory
    /// is that user's, who could otherwise point root's request at any socket of the machine.
    pub(crate) fn ask(
        &self,
        path: &Path,
        uid: u32,
        how: How,
        within: Duration,
    ) -> std::io::Result<Answer> {
        use rustix::fs::{FileType, Mode, OFlags};
        use std::io::ErrorKind;
        use std::os::fd::AsRawFd;
        let fd = match rustix::fs::open(
            path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(Answer::NoListener),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Socket || st.st_uid != uid {
            return Err(std::io::Error::other(format!(
                "{} is not a socket of uid {uid}; not sent",
                path.display()
            )));
        }
        // Through the descriptor just checked, not the path, which may change meanwhile.
        let checked = format!("/proc/self/fd/{}", fd.as_raw_fd());
        match self.sock.send_to(how.word().as_bytes(), &checked) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                return Ok(Answer::NoListener)
            }
            // The owner's queue is full: it is not reading.
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Answer::Silent),
            Err(e) => return Err(e),
        }
        let deadline = Instant::now() + within;
        while let Some(msg) = self.next(deadline)? {
            if msg.starts_with("ok ") {
                return Ok(Answer::Taken);
            }
        }
        Ok(Answer::Silent)
    }

    /// Waits up to `until` for the owner's word on how the run ended.
    pub(crate) fn ended(&self, until: Instant) -> std::io::Result<Option<Ended>> {
        while let Some(msg) = self.next(until)? {
            if let Some(json) = msg.strip_prefix("done ") {
                return Ok(serde_json::from_str(json).ok());
            }
        }
        Ok(None)
    }

    /// The next message before `deadline`, or `None`.
    fn next(&self, deadline: Instant) -> std::io::Result<Option<String>> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.recv(&mut buf) {
                Ok(n) => return Ok(Some(String::from_utf8_lossy(&buf[..n]).into_owned())),
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
        let dir = std::env::temp_dir().join(format!("reaper-unit-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let path = dir.join("x.sock");
        let control = Control::bind(&path).unwrap();
        // A link to a socket is not followed: the directory's user could point it anywhere.
        let link = dir.join("link.sock");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let asker = Asker::new().unwrap();
        assert!(asker.ask(&link, uid, How::Kill, Duration::ZERO).is_err());
        assert!(
            asker
                .ask(&path, uid + 1, How::Kill, Duration::ZERO)
                .is_err(),
            "another uid's"
        );
        let p = path.clone();
        let asked = std::thread::spawn(move || {
            asker
                .ask(&p, uid, How::Kill, Duration::from_secs(5))
                .map(|a| (a, asker))
        });
        assert_eq!(control.request().await, How::Kill);
        let (answer, asker) = asked.join().unwrap().unwrap();
        assert!(matches!(answer, Answer::Taken));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            asker
                .ask(&path, uid, How::Stop, Duration::from_millis(10))
                .unwrap(),
            Answer::NoListener
        ));
    }
}
