//! The process at the other end of a connected UNIX socket, as the kernel names it
//! (`SO_PEERCRED`, and `SO_PEERPIDFD` where the kernel has it, 6.5+): what a socket's owner
//! may act on, unlike anything the peer writes.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The peer of a connected socket: for a connecting socket, the process that listened; for an
/// accepted one, the process that connected. Taken by the kernel at `connect`/`listen`.
#[derive(Debug)]
pub struct Peer {
    /// Its pid, in the PID namespace of the socket's reader (0: not visible there).
    pub pid: i32,
    /// Its effective uid then.
    pub uid: u32,
    /// Its effective gid then.
    pub gid: u32,
    /// A pidfd on that very process, when the kernel gives one.
    pidfd: Option<OwnedFd>,
}

/// `SO_PEERPIDFD` (asm-generic; the architectures with their own numbering go without).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "s390x",
    target_arch = "powerpc64"
))]
const SO_PEERPIDFD: Option<libc::c_int> = Some(77);
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "s390x",
    target_arch = "powerpc64"
)))]
const SO_PEERPIDFD: Option<libc::c_int> = None;

impl Peer {
    /// The peer of `sock`.
    pub fn of(sock: BorrowedFd<'_>) -> io::Result<Peer> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid for writes of the sizes given; the kernel writes
        // one `struct ucred`.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Peer {
            // 0 when the peer's PID namespace does not map into the reader's.
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
            pidfd: SO_PEERPIDFD.and_then(|opt| peer_pidfd(sock, opt)),
        })
    }

    /// Whether [`Peer::pid`] still names the peer: `Some(true)` while the process lives (its
    /// pid cannot be reused until it is reaped), `Some(false)` once it is gone, `None` when the
    /// kernel gave no pidfd to tell (then the pid may have been reused meanwhile).
    pub fn still_there(&self) -> Option<bool> {
        let fd = self.pidfd.as_ref()?;
        // A pidfd's fdinfo says `Pid: -1` once its process was reaped.
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|v| v.trim().parse::<i32>().ok())?;
        Some(pid == self.pid)
    }

    /// The pidfd, when the kernel gave one.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }
}

/// `getsockopt(SO_PEERPIDFD)`; `None` where the kernel has no such option (before 6.5).
fn peer_pidfd(sock: BorrowedFd<'_>, opt: libc::c_int) -> Option<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are valid for writes of the sizes given; the kernel writes one
    // int (a new descriptor, O_CLOEXEC) on success.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    // SAFETY: on success `fd` is a descriptor the kernel just opened for this process, owned
    // by nobody else.
    (r == 0 && fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_of_a_pair_are_this_process() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let me = std::process::id() as i32;
        for s in [&a, &b] {
            let p = Peer::of(s.as_fd()).unwrap();
            assert_eq!(p.pid, me);
            assert_eq!(p.uid, rustix::process::geteuid().as_raw());
            assert_ne!(p.still_there(), Some(false));
        }
    }
}
