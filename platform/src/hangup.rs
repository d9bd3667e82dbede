//! Noticing that the other end of a stream is gone, without reading from it: the last writer
//! of a pipe or fifo closed it, a socket's peer shut down its writing side or closed, a
//! terminal hung up. Data still queued in the stream does not hide the hang-up.
//!
//! | platform | how                                                                        |
//! |----------|----------------------------------------------------------------------------|
//! | Linux    | poll(2) for `POLLRDHUP` alone: `POLLHUP`/`POLLERR` are always reported      |
//! | macOS    | kqueue `EVFILT_READ` with `EV_CLEAR`, until an event carries `EV_EOF`       |
//!
//! Neither reads nor changes the file's flags: the fd may be shared with other processes
//! (reaper's stdin), so it is never made non-blocking.

use std::io;
use std::os::fd::BorrowedFd;

/// Whether the other end of `fd` can hang up: a pipe or fifo, a socket, a character device (a
/// terminal). A regular file, a directory or a block device has no other end: it only ends by
/// being read to the end.
pub fn can_hang_up(fd: BorrowedFd<'_>) -> bool {
    use rustix::fs::FileType;
    rustix::fs::fstat(fd).is_ok_and(|st| {
        matches!(
            FileType::from_raw_mode(st.st_mode as _),
            FileType::Fifo | FileType::Socket | FileType::CharacterDevice
        )
    })
}

/// Blocks until the other end of `fd` is gone (see the module). An error means it cannot be
/// watched (never that it hung up). A file without another end ([`can_hang_up`] false) never
/// returns, except with an error.
#[cfg(target_os = "linux")]
pub fn wait_for_hangup(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags};
    // Not POLLIN: data the reader has not taken yet would make every poll return at once.
    // POLLHUP (a pipe without writers, a socket closed both ways, a hung-up terminal) and
    // POLLERR are reported whatever was asked for (poll(2)); POLLRDHUP is a socket's peer that
    // shut down its writing side. POLLNVAL: fd 0 was closed under us, nothing more will come.
    let gone = PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL | PollFlags::RDHUP;
    loop {
        let mut fds = [PollFd::new(&fd, PollFlags::RDHUP)];
        match poll(&mut fds, None) {
            Ok(_) if fds[0].revents().intersects(gone) => return Ok(()),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Blocks until the other end of `fd` is gone (see the module). An error means it cannot be
/// watched (never that it hung up).
#[cfg(target_os = "macos")]
pub fn wait_for_hangup(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::event::kqueue::{kevent, kqueue, Event, EventFilter, EventFlags};
    use std::os::fd::AsRawFd;
    let kq = kqueue()?;
    // EV_CLEAR: the event fires again only when the stream changes (more data, EOF), not for
    // as long as unread data is queued; EV_EOF marks the writer's hang-up.
    let watch = Event::new(
        EventFilter::Read(fd.as_raw_fd()),
        EventFlags::ADD | EventFlags::CLEAR,
        std::ptr::null_mut(),
    );
    let mut none: [Event; 0] = [];
    // SAFETY: `fd` is borrowed for the whole call, so it stays open while registered.
    unsafe {
        kevent(
            &kq,
            &[watch],
            &mut none[..],
            Some(std::time::Duration::ZERO),
        )
    }?;
    loop {
        let mut fired: Vec<Event> = Vec::with_capacity(1);
        // SAFETY: as above.
        match unsafe { kevent(&kq, &[], rustix::buffer::spare_capacity(&mut fired), None) } {
            Ok(_) => {
                if let Some(ev) = fired.first() {
                    if ev.flags().contains(EventFlags::ERROR) {
                        return Err(io::Error::other("kqueue cannot watch this file"));
                    }
                    if ev.flags().contains(EventFlags::EOF) {
                        return Ok(());
                    }
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    /// A pipe whose writer closes while unread data is queued hangs up; one whose writer is
    /// open does not, however much is queued.
    #[test]
    fn a_pipe_hangs_up_when_its_writer_closes_with_data_queued() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        assert!(can_hang_up(r.as_fd()));
        let mut w = std::fs::File::from(w);
        w.write_all(b"unread").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let watcher = std::thread::spawn(move || {
            let res = wait_for_hangup(r.as_fd());
            let _ = tx.send(());
            res
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "a pipe with a live writer was taken for a hang-up"
        );
        drop(w);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the hang-up was not seen");
        watcher.join().unwrap().unwrap();
    }

    #[test]
    fn a_socket_hangs_up_when_its_peer_shuts_down_writing() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(can_hang_up(a.as_fd()));
        (&b).write_all(b"unread").unwrap();
        b.shutdown(std::net::Shutdown::Write).unwrap();
        wait_for_hangup(a.as_fd()).unwrap();
    }

    #[test]
    fn a_regular_file_has_no_other_end() {
        let f = tempfile_in_tmp();
        assert!(!can_hang_up(f.as_fd()));
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("reaper-hangup-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }
}
