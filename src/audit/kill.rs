//! `reaper audit --kill`: ends the processes the caller chose, each named by pid and start
//! time, through a pidfd opened and checked on that process — never a pid alone, never a
//! name. Each is stopped first (SIGSTOP: a stopped process cannot fork), then killed.
//!
//! What the census calls certain rests on what a user can arrange (a run's id in an
//! environment, a cgroup named after a run in a subtree the user owns), so root ends a leak
//! of another user's as that user ([`crate::runs::as_user`]): a process that user could not
//! signal — a root process moved into the user's cgroup, say — is left alone and reported.

use std::os::unix::fs::MetadataExt;

use super::{Census, Leak};
use crate::containment::Process;
use crate::runs::RunId;
use crate::Identity;
use reaper_platform::linux::procfs;
use reaper_platform::process::Handle;
use reaper_platform::{signal, Signal};

/// What [`kill_leaks`] or [`kill_chosen`] did to one process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Killed {
    /// The process.
    pub process: Identity,
    /// `killed`; `gone` (it had exited, or its pid names another process now); or
    /// `not-permitted` (the user acted for may not signal it).
    pub result: &'static str,
}

/// SIGSTOPs, then SIGKILLs, each of `targets` that is still the process it names, with this
/// process's own power.
pub(crate) fn kill(targets: &[Identity]) -> Vec<Killed> {
    let mut held: Vec<(Identity, Handle)> = Vec::new();
    let mut out: Vec<Killed> = Vec::new();
    let result = |t: &Identity, result| Killed {
        process: *t,
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
    out.sort_by_key(|k| targets.iter().position(|t| *t == k.process));
    out
}

/// Kills the census's `leaks` (what it found certain, say). Root kills each leak as the user it
/// is provably of: the owner of the run cgroup it lives in, else the owner of its root
/// process; anyone else kills with their own power.
pub fn kill_leaks(leaks: &[Leak]) -> Vec<Killed> {
    leaks
        .iter()
        .flat_map(|l| kill_as(acting_uid(l), &l.identities()))
        .collect()
}

/// Kills `targets`, each as [`kill_leaks`] would when it belongs to a leak of `census`
/// (certain or suspect), with this process's own power when it belongs to none.
pub fn kill_chosen(census: &Census, targets: &[Identity]) -> Vec<Killed> {
    let mut left: Vec<Identity> = targets.to_vec();
    let mut out = Vec::new();
    for leak in census.certain.iter().chain(&census.suspect) {
        let ids = leak.identities();
        let chosen: Vec<Identity> = left.iter().filter(|t| ids.contains(t)).copied().collect();
        if chosen.is_empty() {
            continue;
        }
        left.retain(|t| !chosen.contains(t));
        out.extend(kill_as(acting_uid(leak), &chosen));
    }
    out.extend(kill(&left));
    out.sort_by_key(|k| targets.iter().position(|t| *t == k.process));
    out
}

/// Whom to act as on `leak`: the user it is of when this process is root (`None`: unknown,
/// so nobody), else this process's own user.
fn acting_uid(leak: &Leak) -> Option<u32> {
    let me = rustix::process::geteuid().as_raw();
    if me == 0 {
        whose(leak)
    } else {
        Some(me)
    }
}

/// [`kill`] as user `uid` (on a thread that became that user, when it is not this process's).
fn kill_as(uid: Option<u32>, targets: &[Identity]) -> Vec<Killed> {
    let me = rustix::process::geteuid().as_raw();
    let all = |result| {
        targets
            .iter()
            .map(|t| Killed {
                process: *t,
                result,
            })
            .collect()
    };
    match uid {
        Some(uid) if uid == me => kill(targets),
        Some(uid) => match crate::runs::as_user::run_blocking(uid, gid_of(uid), || kill(targets)) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!("cannot act as uid {uid}: {e}");
                all("not-permitted")
            }
        },
        None => all("not-permitted"),
    }
}

/// The user a leak is provably of: whoever made the run cgroup its root lives in, else whoever
/// owns its root process; `None` when neither can be read.
fn whose(leak: &Leak) -> Option<u32> {
    let mount = crate::containment::cgroup::place::mount_point().ok();
    if let (Some(cg), Some(mount)) = (&leak.root.cgroup, mount) {
        // The innermost run cgroup on its path.
        let parts: Vec<&str> = cg.split('/').collect();
        let run = parts
            .iter()
            .rposition(|c| RunId::from_cgroup_name(c).is_some() || crate::naming::is_kept_name(c));
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
