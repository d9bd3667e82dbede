//! A sandboxed leader's plan: what [`SandboxPlan`] needs from policy.
//!
//! For root, the sandbox's ids are a range of unprivileged host ids of the run's own, leased
//! for the run's life ([`IdLease`]): 65536 ids, the block `systemd-nspawn` picks from (systemd's
//! "container UID ranges", 0x00080000–0x6FFFFFFF, which no host user is given), never one that
//! `/etc/subuid` or `/etc/subgid` hands to a user's containers, and only ids this process's own
//! user namespace maps. Distinct runs get distinct ranges, so one sandbox's root cannot signal,
//! trace or share files with another's. The lease is a lock on a file named after the range in
//! a directory of root's (`/run/reaper-ids`); a run whose owner was SIGKILLed frees its range
//! when the owner's lock goes, while its tree may live on for the guardian's second.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use reaper_platform::linux::sandbox::{Access, IdRange, SandboxPlan, SandboxSpec};

use super::SandboxAccess;

/// How many ids a root sandbox gets: every id a Linux system uses, `nobody` (65534) included.
pub const IDS: u32 = 65536;
/// Where the ranges are taken from: systemd's container ranges, in blocks of [`IDS`].
const FIRST: u32 = 0x0008_0000;
const END: u32 = 0x6FFF_0000;
/// The lock files of leased ranges, and the fallback when `/run` is not writable.
const LOCKS: [&str; 2] = ["/run/reaper-ids", "/tmp/reaper-ids-0"];
/// How many free-looking ranges are tried before giving up.
const TRIES: usize = 64;

/// A range of host ids held for one run: free for the next once dropped.
#[derive(Debug)]
pub struct IdLease {
    pub range: IdRange,
    /// The locked file; `None` when no lock directory could be used (the range was picked at
    /// random among 28 664).
    _lock: Option<OwnedFd>,
}

/// The plan for a leader in a sandbox (`pid_namespace`: with its own PID namespace), with the
/// lease of its ids when this process is root.
pub fn prepare(
    pid_namespace: bool,
    paths: &[(PathBuf, SandboxAccess)],
    hidden: &[PathBuf],
) -> std::io::Result<(SandboxPlan, Option<IdLease>)> {
    for (p, _) in paths {
        if !p.is_absolute() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a sandbox's directory must be absolute: {}", p.display()),
            ));
        }
    }
    let lease = match rustix::process::geteuid().is_root() {
        true => Some(lease()?),
        false => None,
    };
    let paths: Vec<(PathBuf, Access)> = paths
        .iter()
        .map(|(p, a)| {
            let a = match a {
                SandboxAccess::ReadOnly => Access::ReadOnly,
                SandboxAccess::ReadWrite => Access::ReadWrite,
            };
            (p.clone(), a)
        })
        .collect();
    let plan = SandboxPlan::new(&SandboxSpec {
        pid_namespace,
        ids: lease.as_ref().map(|l| l.range),
        paths: &paths,
        hidden,
    })?;
    Ok((plan, lease))
}

/// A free range of [`IDS`] host ids, leased.
fn lease() -> std::io::Result<IdLease> {
    let mapped = |file: &str| std::fs::read_to_string(file).map(|m| parse_map(&m));
    let (uids, gids) = (mapped("/proc/self/uid_map")?, mapped("/proc/self/gid_map")?);
    let taken: Vec<(u32, u32)> = ["/etc/subuid", "/etc/subgid"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| parse_subids(&t))
        .collect();
    let usable = |base: u32| {
        let (lo, hi) = (u64::from(base), u64::from(base) + u64::from(IDS));
        let within = |map: &[(u32, u32)]| {
            map.iter()
                .any(|&(s, n)| u64::from(s) <= lo && hi <= u64::from(s) + u64::from(n))
        };
        within(&uids)
            && within(&gids)
            && !taken
                .iter()
                .any(|&(s, n)| u64::from(s) < hi && lo < u64::from(s) + u64::from(n))
    };
    let blocks = (END - FIRST) / IDS;
    let start = random_u32() % blocks;
    let candidates = (0..blocks)
        .map(|i| FIRST + ((start + i) % blocks) * IDS)
        .filter(|&b| usable(b))
        .take(TRIES);
    let dir = LOCKS.iter().map(Path::new).find_map(lock_dir);
    let mut seen_any = false;
    for base in candidates {
        seen_any = true;
        let range = IdRange { base, count: IDS };
        let Some(dir) = &dir else {
            return Ok(IdLease { range, _lock: None });
        };
        if let Some(lock) = try_lock(dir, base)? {
            return Ok(IdLease {
                range,
                _lock: Some(lock),
            });
        }
    }
    Err(std::io::Error::other(if seen_any {
        "every range of host ids tried for the sandbox's root is leased by another run"
    } else {
        "this process's user namespace maps no 65536 ids in 524288–1879048191 that no \
         /etc/subuid or /etc/subgid entry claims, for the sandbox's root (a root sandbox runs \
         as unprivileged host ids; in a container with fewer ids it cannot)"
    }))
}

/// `ID-inside ID-outside COUNT` lines (user_namespaces(7)): the inside ranges, which are the ids
/// this process may map.
fn parse_map(map: &str) -> Vec<(u32, u32)> {
    map.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let inside = f.next()?.parse().ok()?;
            let _outside: u64 = f.next()?.parse().ok()?;
            let count = f.next()?.parse().ok()?;
            Some((inside, count))
        })
        .collect()
}

/// `NAME:FIRST:COUNT` lines of /etc/subuid or /etc/subgid.
fn parse_subids(text: &str) -> Vec<(u32, u32)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let _name = f.next()?;
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom(2) writes at most `b.len()` bytes into the local array.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    match n {
        4 => u32::from_ne_bytes(b),
        _ => std::process::id().wrapping_mul(2_654_435_761),
    }
}

/// `dir` opened, made if missing: a directory of root's, not a link, closed to others.
fn lock_dir(dir: &Path) -> Option<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let _ = rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700));
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (st.st_uid == 0 && st.st_mode & 0o077 == 0).then_some(fd)
}

/// The lock of range `base` in `dir`, if no other run holds it.
fn try_lock(dir: &OwnedFd, base: u32) -> std::io::Result<Option<OwnedFd>> {
    use rustix::fs::{flock, FlockOperation, Mode, OFlags};
    let fd = rustix::fs::openat(
        dir,
        format!("{base}"),
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    match flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_subids_parse() {
        assert_eq!(
            parse_map("         0          0 4294967295\n"),
            [(0, 4_294_967_295)]
        );
        assert_eq!(
            parse_map("0 100000 65536\n65536 1000 1\n"),
            [(0, 65536), (65536, 1)]
        );
        assert_eq!(
            parse_subids("alice:100000:65536\n# x\nbob:165536:65536\n"),
            [(100_000, 65536), (165_536, 65536)]
        );
    }

    #[test]
    fn two_leases_never_share_a_range() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let a = lease().unwrap();
        let b = lease().unwrap();
        assert_ne!(a.range, b.range);
        for l in [&a, &b] {
            assert!(l.range.base >= FIRST && l.range.base + IDS <= END);
            assert_eq!(l.range.base % IDS, 0);
        }
    }
}
