//! Root acting for a user: the work runs on a thread of its own that first became that user
//! (its credentials only: Linux keeps them per thread), so the kernel's own checks apply to
//! every signal, every `cgroup.kill` written, every `/proc/PID/environ` read and every file
//! made. What the user could not do is not done, whatever the user's files claim.

use reaper_platform::linux::creds;

/// Runs `f` as user `uid` (group `gid`, no others) on a thread that ends with it.
pub(crate) async fn run<T: Send + 'static>(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("reaper-as-user".into())
        .spawn(move || {
            let _ = tx.send(creds::become_on_this_thread(uid, gid).map(|()| f()));
        })?;
    rx.await.map_err(std::io::Error::other)?
}

/// [`run`], waited for on this thread.
pub(crate) fn run_blocking<T: Send>(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> T + Send,
) -> std::io::Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("reaper-as-user".into())
            .spawn_scoped(s, move || {
                creds::become_on_this_thread(uid, gid).map(|()| f())
            })?
            .join()
            .map_err(|_| std::io::Error::other("the thread acting as the user panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As uid 65534, root's own processes are out of reach: the kernel says so.
    #[test]
    fn a_thread_that_became_a_user_has_that_users_power_only() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let init = rustix::process::Pid::from_raw(1).unwrap();
        let denied = run_blocking(65534, 65534, || {
            rustix::process::test_kill_process(init).err()
        })
        .unwrap();
        assert_eq!(denied, Some(rustix::io::Errno::PERM));
        // This thread is still root.
        assert!(rustix::process::test_kill_process(init).is_ok());
    }
}
