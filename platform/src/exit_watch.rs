//! [`ExitWatch`]: one process's exit, registered once with the reactor.

/// A [`Handle`](crate::process::Handle)'s exit, watched through one registration with the reactor that lives as long
/// as this does: waiting again (a `select!` loop that re-enters its wait on every turn) costs no
/// system call, where each [`Handle::exited`](crate::process::Handle::exited) duplicates the fd and registers it afresh.
/// Cancel-safe: the readiness is kept by the registration, not by the future.
#[derive(Debug)]
pub struct ExitWatch {
    /// `None`: the process had exited when the watch was made.
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl ExitWatch {
    pub(crate) fn new(fd: Option<std::os::fd::OwnedFd>) -> std::io::Result<Self> {
        Ok(ExitWatch {
            fd: fd.map(crate::async_readable).transpose()?,
        })
    }

    /// Resolves once the process has exited. An exit stays readable, so the readiness is never
    /// cleared and every later wait resolves at once.
    pub async fn exited(&self) -> std::io::Result<()> {
        if let Some(fd) = &self.fd {
            let _ready = fd.readable().await?;
        }
        Ok(())
    }
}
