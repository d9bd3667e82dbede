//! `reaper audit --kill`: ends the processes the caller chose, each named by pid and start
//! time, through a pidfd opened and checked on that process — never a pid alone, never a
//! name. Each is stopped first (SIGSTOP: a stopped process cannot fork), then killed.
//!
//! What the census calls certain rests on what a user can arrange (a run's id in an
//! environment, a cgroup named after a run in a subtree the user owns), so root ends a leak
//! of another user's as that user ([`crate::runs::as_user`]): a process that user could not
//! signal — a root process moved into the user's cgroup, say — is left alone and reported.

use std::os::unix::fs::MetadataExt;

use serde::Serialize;

use super::Leak;
use crate::containment::Process;
use crate::runs::RunId;
use crate::Identity;
use reaper_platform::linux::procfs;
use reaper_platform::process::Handle;
use reaper_platform::{signal, Signal};

/// What [`kill`] did to one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Killed {
    /// The process.
    pub pid: i32,
    /// Its start time.
    pub starttime: u64,
    /// `killed`; `gone` (it had exited, or its pid names another process now); or
    /// `not-permitted` (the user acted for may not signal it).
    pub result: &'static str,
}

/// SIGSTOPs, then SIGKILLs, each of `targets` that is still the process it names, with this
/// process's own power.
pub fn kill(targets: &[Identity]) -> Vec<Killed> {
    let mut held: Vec<(Identity, Handle)> = Vec::new();
    let mut out: Vec<Killed> = Vec::new();
    let result = |t: &Identity, result| Killed {
        pid: t.pid,
        starttime: t.starttime,
        result,
    };
    for t in targets {
        let live = procfs::stat(t.pid)
            .ok()
            .filter(|s| s.starttime == t.starttime && !s.is_dead())
            .map(Process::from);
        let Some(h) = live.and_then(|p| Handle::open_checked(p.pid, p.starttime)) else {
            out.push(result(t, "gone"));
            continue;
        };
        match signal::to_handle(&h, Signal::STOP) {
            Ok(signal::Delivery::Sent) => held.push((*t, h)),
            Ok(signal::Delivery::AlreadyGone) => out.push(result(t, "gone")),
            Err(_) => out.push(result(t, "not-permitted")),
        }
    }
    for (t, h) in held {
        out.push(match signal::to_handle(&h, Signal::KILL) {
            Ok(signal::Delivery::Sent) => result(&t, "killed"),
            Ok(signal::Delivery::AlreadyGone) => result(&t, "gone"),
            Err(_) => result(&t, "not-permitted"),
        });
    }
    // In the order asked.
    out.sort_by_key(|k| {
        targets
            .iter()
            .position(|t| t.pid == k.pid && t.starttime == k.starttime)
    });
    out
}

/// Kills the census's `leaks` (what it found certain, say). Root kills each leak as the user it
/// is provably of: the owner of the run cgroup it lives in, else the owner of its root
/// process; anyone else kills with their own power.
pub fn kill_leaks(leaks: &[Leak]) -> Vec<Killed> {
    let me = rustix::process::geteuid().as_raw();
    let mut out = Vec::new();
    for leak in leaks {
        let targets = leak.identities();
        let user = if me == 0 { whose(leak) } else { Some(me) };
        match user {
            Some(0) => out.extend(kill(&targets)),
            Some(uid) if uid == me => out.extend(kill(&targets)),
            Some(uid) => {
                let gid = gid_of(uid);
                match crate::runs::as_user::run_blocking(uid, gid, || kill(&targets)) {
                    Ok(k) => out.extend(k),
                    Err(e) => {
                        tracing::warn!("cannot act as uid {uid}: {e}");
                        out.extend(targets.iter().map(|t| Killed {
                            pid: t.pid,
                            starttime: t.starttime,
                            result: "not-permitted",
                        }));
                    }
                }
            }
            None => out.extend(targets.iter().map(|t| Killed {
                pid: t.pid,
                starttime: t.starttime,
                result: "gone",
            })),
        }
    }
    out
}

/// The user a leak is provably of: whoever made the run cgroup its root lives in, else whoever
/// owns its root process; `None` when neither can be read.
fn whose(leak: &Leak) -> Option<u32> {
    let mount = crate::containment::cgroup::place::mount_point().ok();
    if let (Some(cg), Some(mount)) = (&leak.root.cgroup, mount) {
        // The innermost run cgroup on its path.
        let parts: Vec<&str> = cg.split('/').collect();
        let run = parts.iter().rposition(|c| {
            RunId::from_cgroup_name(c).is_some()
                || c.starts_with(&format!(
                    "{}kept-",
                    crate::containment::cgroup::place::PREFIX
                ))
        });
        if let Some(n) = run {
            let dir = mount.join(parts[..=n].join("/").trim_start_matches('/'));
            return std::fs::symlink_metadata(dir).ok().map(|m| m.uid());
        }
    }
    procfs::uid(leak.root.pid)
}

/// `uid`'s group: the group of its home in the password database, else the same number.
fn gid_of(uid: u32) -> u32 {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 3 && f[2].parse() == Ok(uid)).then(|| f[3].parse().ok())?
            })
        })
        .unwrap_or(uid)
}
