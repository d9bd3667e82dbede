//! Reading the process table from `/proc`: who is alive, who is whose child, when it started.
//!
//! A pid alone names a process only until it is reaped; `(pid, starttime)` names it for good,
//! so everything that remembers a process remembers both.

use std::io;
use std::path::PathBuf;

use rustix::process::Pid;

/// The fields of `/proc/PID/stat` reaper uses (proc(5)), in the portable shape.
pub use crate::identity::{Identity, ProcStat};

/// Splits a `/proc/PID/stat` line: the pid, the comm (the text between the first `(` and the
/// *last* `)`: a process can name itself `a) R 1 (b`), and the fields after it (field 3 first).
fn split_stat(text: &str) -> Option<(i32, &str, std::str::SplitWhitespace<'_>)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?;
    Some((pid, comm, text.get(close + 1..)?.split_whitespace()))
}

/// Parses `/proc/PID/stat`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let (pid, comm, mut rest) = split_stat(text)?;
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgid = rest.next()?.parse().ok()?;
    let sid = rest.next()?.parse().ok()?;
    // Fields 7..=21 (tty_nr … itrealvalue) are 15 fields; starttime is field 22.
    let starttime = rest.nth(15)?.parse().ok()?;
    Some(ProcStat {
        pid,
        comm: comm.to_owned(),
        state,
        ppid,
        pgid,
        sid,
        starttime,
    })
}

/// Field `n` of a `/proc/PID/stat` line as a number, in proc(5)'s numbering (3 is the state,
/// the first field after the comm), for the fields [`ProcStat`] does not carry.
pub fn stat_field(text: &str, n: usize) -> Option<u64> {
    split_stat(text)?.2.nth(n.checked_sub(3)?)?.parse().ok()
}

/// `/proc/PID/stat` of one process (`pid` as this process numbers it, also under a foreign
/// `/proc`: see [`is_foreign`]). `NotFound` when it is gone (reaped).
pub fn stat(pid: i32) -> io::Result<ProcStat> {
    in_proc(pid, |q| {
        let mut buf = [0u8; 1024];
        let text = read_proc_file(&format!("/proc/{q}/stat"), &mut buf)?;
        let mut s = parse_stat(&text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unparsable /proc/{q}/stat"),
            )
        })?;
        // ppid, pgid and sid stay as /proc numbers them (see `is_foreign`).
        s.pid = pid;
        Ok(s)
    })
}

/// Whether `/proc` shows another PID namespace than this process's: a namespace entered
/// without a `/proc` of its own (`unshare --pid --fork` without `--mount-proc`, `nsenter
/// --pid`). There `/proc/PID` is not the process this namespace calls PID, and the pids in
/// `children` files and the `/proc` listing are the other namespace's. [`stat`], [`cgroup`],
/// [`cmdline`] and [`exe`] translate (they take pids of this namespace); [`children`],
/// [`descendants`] and [`all`] cannot be used there (their pids are /proc's), so the
/// backends built on them refuse a foreign `/proc`. Decided once: `/proc/self` names this
/// process by /proc's number for it.
pub fn is_foreign() -> bool {
    static FOREIGN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOREIGN.get_or_init(|| {
        let own = rustix::process::getpid().as_raw_nonzero().get();
        std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str()?.parse::<i32>().ok())
            .is_some_and(|seen| seen != own)
    })
}

/// Runs `read` with the number `/proc` knows the process `pid` (of this namespace) by. Under
/// a foreign `/proc` that is the `Pid:` of a pidfd's fdinfo (proc(5): the pid in the PID
/// namespace of the `/proc` mount; 0 when the process is not visible there, -1 once it has been
/// reaped), read again after `read`: if it is unchanged the process still held that number, so
/// what `read` saw was that process, not one that reused the number.
fn in_proc<T>(pid: i32, read: impl FnOnce(i32) -> io::Result<T>) -> io::Result<T> {
    if !is_foreign() {
        return read(pid);
    }
    let gone = || io::Error::from_raw_os_error(libc::ESRCH);
    let p = Pid::from_raw(pid).ok_or_else(gone)?;
    let fd = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())?;
    let number = || -> io::Result<i32> {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 1024];
        let info = read_proc_file(&format!("/proc/self/fdinfo/{}", fd.as_raw_fd()), &mut buf)?;
        info.lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|n| n.trim().parse::<i32>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(gone)
    };
    let q = number()?;
    let out = read(q)?;
    if number()? != q {
        return Err(gone());
    }
    Ok(out)
}

/// A small `/proc` file in as few system calls as it takes: open, one read into `buf` (the
/// kernel hands over a whole seq_file record at once), a second read only if `buf` filled up,
/// close. `std::fs::read_to_string` probes with 32 bytes and grows: six reads for one `stat`
/// file, and the pgid and subreaper backends read one per process of the machine or the tree.
fn read_proc_file<'b>(path: &str, buf: &'b mut [u8]) -> io::Result<std::borrow::Cow<'b, str>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let n = loop {
        match rustix::io::read(&fd, &mut *buf) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    if n < buf.len() {
        return Ok(String::from_utf8_lossy(&buf[..n]));
    }
    let mut all = buf.to_vec();
    let mut more = [0u8; 4096];
    loop {
        match rustix::io::read(&fd, &mut more) {
            Ok(0) => break,
            Ok(k) => all.extend_from_slice(&more[..k]),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(std::borrow::Cow::Owned(
        String::from_utf8_lossy(&all).into_owned(),
    ))
}

/// Whether `(pid, starttime)` is still a live (non-zombie) process.
pub fn is_alive(pid: i32, starttime: u64) -> bool {
    matches!(stat(pid), Ok(s) if s.starttime == starttime && !s.is_dead())
}

/// Direct children of `pid`, from `/proc/PID/task/*/children` (not under a foreign `/proc`:
/// [`is_foreign`]) (every thread's children: a
/// subreaper's orphans may be parented to any of its threads). Includes zombies.
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        let mut buf = [0u8; 1024];
        if let Ok(text) = path
            .to_str()
            .ok_or(io::ErrorKind::InvalidInput.into())
            .and_then(|p| read_proc_file(p, &mut buf))
        {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// The children of `parent`, zombies included, each proved one: its `stat` names `parent`'s
/// pid as its parent, and `parent` is still the same process once they were all read. A pid
/// from a `children` list may have been freed and reused before it is read (by a process
/// anywhere on the machine); a process whose parent's pid named `parent` all along is
/// `parent`'s child.
pub fn children_of(parent: Identity) -> Vec<ProcStat> {
    children_among(parent, children(parent.pid), |_| true)
}

/// [`children_of`] from `listed`, a [`children`] list of `parent.pid` (read before, by a caller
/// that needed to know whether it is empty), reading only the pids `want` accepts.
pub fn children_among(
    parent: Identity,
    listed: Vec<i32>,
    want: impl FnMut(i32) -> bool,
) -> Vec<ProcStat> {
    proved_children(parent, listed, want, |pid| stat(pid).ok())
}

/// [`children_among`], reading through `stat`.
fn proved_children(
    parent: Identity,
    listed: Vec<i32>,
    mut want: impl FnMut(i32) -> bool,
    stat: impl Fn(i32) -> Option<ProcStat>,
) -> Vec<ProcStat> {
    let out: Vec<ProcStat> = listed
        .into_iter()
        .filter(|&pid| want(pid))
        .filter_map(&stat)
        .filter(|s| s.ppid == parent.pid)
        .collect();
    if out.is_empty() {
        return out;
    }
    // A start time cannot come back: if `parent` is alive (or a zombie) now, its pid named it
    // while each child was read.
    match stat(parent.pid) {
        Some(p) if p.starttime == parent.starttime => out,
        _ => Vec::new(),
    }
}

/// Every descendant of `root` (not `root` itself), depth first, zombies included, each step
/// proved ([`children_of`]); `skip` prunes the subtree of each process it names (reaper's
/// guardian, say). By start time too: once a skipped process is reaped its pid may be reused by
/// a process that must not be skipped. `root` is whatever process holds that pid when the walk
/// begins.
pub fn descendants(root: i32, skip: &[Identity]) -> Vec<ProcStat> {
    let mut out = Vec::new();
    let Ok(root) = stat(root) else {
        return out;
    };
    let mut queue = vec![root.identity()];
    while let Some(p) = queue.pop() {
        for s in children_of(p) {
            if skip.contains(&s.identity()) {
                continue;
            }
            queue.push(s.identity());
            out.push(s);
        }
    }
    out
}

/// Every process on the machine, for callers that need a ppid map (not under a foreign
/// `/proc`: [`is_foreign`]).
pub fn all() -> Vec<ProcStat> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(|pid| stat(pid).ok())
        .collect()
}

/// The command line, arguments joined by spaces (empty for kernel threads and zombies).
pub fn cmdline(pid: i32) -> String {
    in_proc(pid, |q| std::fs::read(format!("/proc/{q}/cmdline")))
        .map(|b| {
            let s: Vec<String> = b
                .split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            s.join(" ")
        })
        .unwrap_or_default()
}

/// The value of the environment variable `name` in the environment the process was started
/// with (`/proc/PID/environ`: what it got at its last exec, not what it set since). `None`
/// when it has none, or its environment is not readable (another user's, without root).
pub fn environ_var(pid: i32, name: &str) -> Option<String> {
    let env = in_proc(pid, |q| std::fs::read(format!("/proc/{q}/environ"))).ok()?;
    let key = name.as_bytes();
    env.split(|&c| c == 0).find_map(|kv| {
        let v = kv.strip_prefix(key)?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(v).into_owned())
    })
}

/// The process's resident memory, in bytes (`/proc/PID/statm`, field 2, in pages).
pub fn resident_bytes(pid: i32) -> Option<u64> {
    let mut buf = [0u8; 256];
    let text = in_proc(pid, |q| {
        read_proc_file(&format!("/proc/{q}/statm"), &mut buf).map(|t| t.into_owned())
    })
    .ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// CPU time the process used, and its children it waited for, in clock ticks
/// (`/proc/PID/stat` fields 14–17: utime, stime, cutime, cstime).
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let mut buf = [0u8; 1024];
    let text = in_proc(pid, |q| {
        read_proc_file(&format!("/proc/{q}/stat"), &mut buf).map(|t| t.into_owned())
    })
    .ok()?;
    (14..=17).map(|n| stat_field(&text, n)).sum()
}

/// The user id that owns the process (its real uid, as `/proc/PID` is owned).
pub fn uid(pid: i32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    in_proc(pid, |q| std::fs::metadata(format!("/proc/{q}")))
        .ok()
        .map(|m| m.uid())
}

/// What the process's file descriptor `fd` is open on (`/proc/PID/fd/FD`: a path, `pipe:[N]`,
/// `socket:[N]`, `/dev/pts/3`, `… (deleted)`); `Err(NotFound)` when it has no such fd.
pub fn fd_target(pid: i32, fd: i32) -> io::Result<PathBuf> {
    in_proc(pid, |q| std::fs::read_link(format!("/proc/{q}/fd/{fd}")))
}

/// The executable's path, when readable.
pub fn exe(pid: i32) -> Option<PathBuf> {
    in_proc(pid, |q| std::fs::read_link(format!("/proc/{q}/exe"))).ok()
}

/// The unified-hierarchy cgroup path of a process (`0::` line of `/proc/PID/cgroup`).
pub fn cgroup(pid: i32) -> Option<String> {
    super::mountinfo::unified_cgroup_path(
        &in_proc(pid, |q| {
            std::fs::read_to_string(format!("/proc/{q}/cgroup"))
        })
        .ok()?,
    )
}

/// How many parent links [`descends_from`] follows at most: a chain deeper than this is
/// answered with an error, never with "no".
const MAX_DEPTH: usize = 4096;

/// Whether `who` is `ancestor` or one of its descendants, by its chain of parents. Each link is
/// proven: a parent read by pid is taken only if the child still names it as its parent after
/// it was read (a parent that exited in between reparents the child, and its pid may be
/// someone else's by then). An error (a process of the chain gone, a chain deeper than any
/// real one) says neither yes nor no. A process whose parent is not visible here (ppid 0) and
/// pid 1 end the chain. Not under a foreign `/proc` ([`is_foreign`]: its parent pids are not
/// this namespace's).
pub fn descends_from(who: Identity, ancestor: i32) -> io::Result<bool> {
    let gone = || io::Error::from_raw_os_error(libc::ESRCH);
    if is_foreign() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "/proc is another PID namespace's: its parent pids are not this one's",
        ));
    }
    let mut cur = who;
    for _ in 0..MAX_DEPTH {
        if cur.pid == ancestor {
            return Ok(true);
        }
        if cur.pid <= 1 {
            return Ok(false);
        }
        let st = stat(cur.pid)?;
        if st.starttime != cur.starttime {
            return Err(gone());
        }
        if st.ppid <= 0 {
            return Ok(false);
        }
        let parent = stat(st.ppid)?;
        let again = stat(cur.pid)?;
        if again.starttime != cur.starttime || again.ppid != st.ppid {
            return Err(gone());
        }
        cur = parent.identity();
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a chain of parents deeper than {MAX_DEPTH}"),
    ))
}

/// The process tracing `pid` (`TracerPid:` of `/proc/PID/status`), `None` when it is not
/// traced. The kernel names the tracing *thread*; this is its thread group (`Tgid:` of that
/// thread's status), the process a signal or a pidfd reaches.
pub fn tracer(pid: i32) -> io::Result<Option<i32>> {
    let Some(thread) = status_field(pid, "TracerPid:")?.filter(|&t| t > 0) else {
        return Ok(None);
    };
    Ok(status_field(thread, "Tgid:")?.filter(|&t| t > 0))
}

/// A numeric field of `/proc/PID/status` (`pid` may name any thread).
fn status_field(pid: i32, name: &str) -> io::Result<Option<i32>> {
    in_proc(pid, |q| {
        let mut buf = [0u8; 4096];
        let text = read_proc_file(&format!("/proc/{q}/status"), &mut buf)?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<i32>().ok()))
    })
}

/// Seconds since boot, from `/proc/uptime`.
pub fn uptime_secs() -> Option<f64> {
    std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How long ago a process started, in seconds.
pub fn age_secs(starttime: u64) -> Option<f64> {
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Some((uptime_secs()? - starttime as f64 / hz).max(0.0))
}

/// This process, named for good.
pub fn self_identity() -> io::Result<Identity> {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    Ok(stat(pid)?.identity())
}

/// The inode number of this process's PID namespace (`/proc/self/ns/pid`, as `lsns` shows
/// it): no two live PID namespaces of the machine share it, whatever namespace reads it.
pub fn pid_namespace() -> io::Result<u64> {
    Ok(rustix::fs::stat("/proc/self/ns/pid")?.st_ino)
}

pub fn pid_of(raw: i32) -> Option<Pid> {
    Pid::from_raw(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_proc_files_read_whole_in_either_buffer_size() {
        // /proc/self/status is well over 64 bytes: read in one go, and across the refill.
        let want = std::fs::read_to_string("/proc/self/status").unwrap();
        let name = |t: &str| t.lines().next().unwrap_or("").to_owned();
        let mut big = [0u8; 8192];
        let got = read_proc_file("/proc/self/status", &mut big).unwrap();
        assert_eq!(name(&got), name(&want));
        let mut small = [0u8; 64];
        let got = read_proc_file("/proc/self/status", &mut small).unwrap();
        assert!(got.len() > 64 && got.ends_with('\n'), "{got}");
        assert_eq!(got.lines().count(), want.lines().count());
        let e = read_proc_file("/proc/0/stat", &mut big).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    fn row(pid: i32, ppid: i32, starttime: u64) -> ProcStat {
        ProcStat {
            pid,
            comm: "p".into(),
            state: 'S',
            ppid,
            pgid: pid,
            sid: pid,
            starttime,
        }
    }

    /// A pid from a `children` list is followed only while it names a child of the walked
    /// process: one reused by a process of another parent is not, and nothing is once the
    /// walked process's own pid names another process.
    #[test]
    fn a_child_is_one_only_while_its_parent_is_the_walked_process() {
        let parent = Identity {
            pid: 100,
            starttime: 5,
        };
        let table =
            |rows: Vec<ProcStat>| move |pid: i32| rows.iter().find(|r| r.pid == pid).cloned();
        // 101 is the parent's; 102 was, and its pid now names a process of parent 1.
        let now = table(vec![row(100, 1, 5), row(101, 100, 6), row(102, 1, 7)]);
        let kids = proved_children(parent, vec![101, 102, 103], |_| true, now);
        assert_eq!(kids.iter().map(|s| s.pid).collect::<Vec<_>>(), vec![101]);
        // The parent's pid names a younger process: none of what the list said is proved.
        let reused = table(vec![row(100, 1, 9), row(101, 100, 10)]);
        assert!(proved_children(parent, vec![101], |_| true, reused).is_empty());
        // The parent is gone.
        let gone = table(vec![row(101, 100, 6)]);
        assert!(proved_children(parent, vec![101], |_| true, gone).is_empty());
    }

    /// On the real `/proc`: this process's own child is its child; under a start time this
    /// process never had, nobody is.
    #[test]
    fn children_of_this_process_are_proved_by_its_identity() {
        let me = self_identity().expect("this process's identity");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let found = children_of(me).iter().any(|s| s.pid == pid);
        let impostor = Identity {
            starttime: me.starttime + 1,
            ..me
        };
        let under_impostor = children_of(impostor);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "the child was not found");
        assert!(under_impostor.is_empty(), "{under_impostor:?}");
    }

    const STAT: &str = "1234 (sleep) S 1200 1234 1100 34816 1234 4194304 94 0 0 0 0 0 0 0 20 0 1 0 987654 8818688 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn parses_plain_stat() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(
            (
                s.pid,
                s.comm.as_str(),
                s.state,
                s.ppid,
                s.pgid,
                s.sid,
                s.starttime
            ),
            (1234, "sleep", 'S', 1200, 1234, 1100, 987654)
        );
        assert!(!s.is_dead());
    }

    #[test]
    fn comm_with_parentheses_and_spaces() {
        let s = parse_stat(&STAT.replace("(sleep)", "(a) Z 1 (b c)")).unwrap();
        assert_eq!(s.comm, "a) Z 1 (b c");
        assert_eq!(s.state, 'S');
        assert_eq!(s.starttime, 987654);
    }

    #[test]
    fn zombie_is_dead() {
        assert!(parse_stat(&STAT.replace(") S ", ") Z ")).unwrap().is_dead());
    }

    #[test]
    fn truncated_stat_is_refused() {
        assert_eq!(parse_stat("1 (x) S 0 1 1"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn self_is_alive_and_has_a_parent() {
        let Identity { pid, starttime: st } = self_identity().unwrap();
        assert!(is_alive(pid, st));
        assert!(!is_alive(pid, st + 1));
        assert!(children(pid).is_empty() || !children(pid).contains(&pid));
    }

    #[test]
    fn this_process_descends_from_its_parent_and_not_the_other_way() {
        let me = self_identity().unwrap();
        let parent = stat(stat(me.pid).unwrap().ppid).unwrap().identity();
        assert_eq!(descends_from(me, me.pid).ok(), Some(true));
        assert_eq!(descends_from(me, parent.pid).ok(), Some(true));
        assert_eq!(descends_from(parent, me.pid).ok(), Some(false));
        // A wrong start time is no proof either way.
        let stale = Identity {
            starttime: me.starttime + 1,
            ..me
        };
        assert!(descends_from(stale, parent.pid).is_err());
        assert_eq!(tracer(me.pid).ok(), Some(None));
    }
}
