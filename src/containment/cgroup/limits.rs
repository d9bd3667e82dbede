//! The limits of a run set on its cgroup: the controllers they need checked and enabled where
//! run cgroups go, `memory.max` (with `memory.oom.group` and `memory.swap.max`), `pids.max` and
//! `cpu.max` written before anything runs, and what they did read back ([`Usage`]).

use std::path::Path;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::controllers;

use super::place::{CgroupEnv, Placement};
use crate::error::{ContainError as Error, ContainErrorKind as Kind, Refusal};
use crate::limits::{and, Limits, Usage};

/// Whether reaper may enable controllers in the placement.
pub enum Ownership {
    /// A `cgroup_parent` the caller named, or the scope systemd delegated to reaper.
    Ours,
    /// Not reaper's to change: nobody delegated it, and no `cgroup_parent` was named.
    NotOurs,
}

/// Whether reaper may enable controllers where its run cgroups go: a `cgroup_parent` the
/// caller named, or the scope systemd delegated to reaper (`delegated`). Not its own cgroup
/// otherwise (the root cgroup, a cgroup of a unit nobody delegated, a CI job's cgroup).
pub fn ownership(cgroup_parent_given: bool, delegated: bool) -> Ownership {
    if cgroup_parent_given || delegated {
        Ownership::Ours
    } else {
        Ownership::NotOurs
    }
}

/// Checks that every controller the limits need is available where run cgroups will be
/// created, and returns those still to be enabled there (nothing is changed yet: a refused
/// run leaves nothing behind).
pub fn check(
    limits: &Limits,
    env: &CgroupEnv,
    placement: &Placement,
    ownership: Ownership,
) -> Result<Vec<&'static str>, Error> {
    let parent = Cgroup::at(&placement.dir);
    let needed = limits.controllers();
    let available = parent.controllers()?;
    let enabled = parent.subtree_control()?;
    let missing: Vec<&'static str> = needed
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !available.iter().any(|a| a == c))
        .collect();
    let dir = placement.dir.display();
    if !missing.is_empty() {
        let refused = limits.only(&missing);
        let names = and(missing.iter().copied());
        let listed = if available.is_empty() {
            "none".to_owned()
        } else {
            available.join(" ")
        };
        let (it, limit) = if missing.len() > 1 {
            ("them", "limits")
        } else {
            ("it", "limit")
        };
        let todo = if env.hybrid {
            format!(
                "this host mounts cgroup v1 beside v2 (hybrid mode) and v1 holds {it}, which \
                 reaper never uses: boot with systemd.unified_cgroup_hierarchy=1 (or \
                 cgroup_no_v1=all) so that cgroup v2 has {it}, or run without the {limit}"
            )
        } else {
            format!(
                "the cgroup above {dir} did not delegate {it}: enable {it} there (echo \
                 {} > PARENT/cgroup.subtree_control), run reaper under systemd (a scope \
                 with Delegate=yes: the user manager delegates cpu memory pids), or name a \
                 cgroup that has {it} as the cgroup parent",
                missing
                    .iter()
                    .map(|c| format!("+{c}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        };
        let (need, ctl, is) = if missing.len() > 1 {
            ("need", "controllers", "are")
        } else {
            ("needs", "controller", "is")
        };
        return Err(Error::new(
            Kind::LimitUnavailable,
            format!(
                "{} {need} the cgroup v2 {names} {ctl}, which {is} not available in {dir} \
                 (its cgroup.controllers lists: {listed}); {todo}; a limit is never dropped, \
                 so the run did not start",
                refused.files()
            ),
        )
        .on(&placement.dir)
        .refused(Refusal::ControllersUnavailable {
            limits: refused,
            available,
            hybrid: env.hybrid,
        }));
    }
    let to_enable: Vec<&'static str> = needed
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !enabled.iter().any(|e| e == c))
        .collect();
    if to_enable.is_empty() {
        return Ok(to_enable);
    }
    let root = placement.path == "/";
    let why = match ownership {
        _ if root => Some("it is the root cgroup, the whole machine's"),
        Ownership::NotOurs => Some(
            "reaper runs there without a delegation: no systemd scope was delegated to it, \
             and no cgroup parent was named",
        ),
        Ownership::Ours => None,
    };
    if let Some(why) = why {
        let refused = limits.only(&to_enable);
        let need = if to_enable.len() > 1 { "need" } else { "needs" };
        return Err(Error::new(
            Kind::LimitUnavailable,
            format!(
                "{} {need} the {} controller enabled in {dir}/cgroup.subtree_control, and \
                 {dir} is not reaper's to change ({why}): name a cgroup of yours as the cgroup \
                 parent (mkdir it under the cgroup2 mount), or run reaper under systemd, which \
                 delegates a scope to it; a limit is never dropped, so the run did not start",
                refused.files(),
                and(to_enable.iter().copied())
            ),
        )
        .on(&placement.dir)
        .refused(Refusal::NotOurs {
            limits: refused,
            root,
        }));
    }
    Ok(to_enable)
}

/// Enables `names` for the children of the placement. reaper must not live there itself
/// (see `create::ensure_leaf`, which runs first).
pub fn enable(placement: &Placement, names: &[&str]) -> Result<(), Error> {
    controllers::enable(&Cgroup::at(&placement.dir), names).map_err(|e| {
        let busy = e.is_busy();
        let errno = e.source.raw_os_error();
        let err = Error::new(
            Kind::LimitUnavailable,
            format!("cannot enable the controllers for the limits: {e}"),
        )
        .on(&e.path)
        .with_errno(errno)
        .refused(Refusal::Enable { busy });
        if busy {
            err.hint(
                " (processes other than reaper live in that cgroup: the kernel enables \
                 controllers only for a cgroup without processes of its own)",
            )
        } else {
            err
        }
    })
}

/// Sets the limits on a fresh run cgroup, before anything runs in it.
pub fn apply(cg: &Cgroup, limits: &Limits) -> Result<(), Error> {
    let set = |file: &str, v: &str, controller: &str| {
        controllers::set(cg, file, v).map_err(|e| {
            let limit = limits.only(&[controller]);
            Error::new(
                Kind::LimitUnavailable,
                format!("cannot set {}: {e}", limit.files()),
            )
            .refused(Refusal::Set {
                limits: limit,
                error: e.to_string(),
            })
        })
    };
    if let Some(bytes) = limits.memory_max {
        set("memory.max", &bytes.to_string(), "memory")?;
        // Without it the run's memory beyond memory.max would go to swap, not to the OOM
        // killer. The file is missing only when the kernel accounts no swap (no swap
        // controller: CONFIG_MEMCG_SWAP off, or swapaccount=0).
        if controllers::has(cg, "memory.swap.max") {
            set("memory.swap.max", "0", "memory")?;
        } else {
            tracing::warn!(
                "{} has no memory.swap.max (the kernel accounts no swap): the run's memory \
                 can go to swap past its memory.max",
                cg.path().display()
            );
        }
        // One OOM kill kills the whole run, not one random process of it (5.4+).
        set("memory.oom.group", "1", "memory")?;
    }
    if let Some(n) = limits.pids_max {
        set("pids.max", &n.to_string(), "pids")?;
    }
    if let Some(c) = limits.cpus {
        set("cpu.max", &Limits::cpu_max(c), "cpu")?;
    }
    Ok(())
}

impl Usage {
    /// Reads the run cgroup's statistics (best effort: a missing file is `None`).
    pub(crate) fn read(dir: &Path) -> Usage {
        let cg = Cgroup::at(dir);
        let keyed = |file: &str| controllers::read_keyed(&cg, file).unwrap_or_default();
        let get =
            |kv: &[(String, u64)], k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
        let mem = keyed("memory.events");
        let pids = keyed("pids.events");
        let cpu = keyed("cpu.stat");
        Usage {
            memory_peak_bytes: controllers::read_value(&cg, "memory.peak").ok(),
            oom_kill: get(&mem, "oom_kill"),
            oom_group_kill: get(&mem, "oom_group_kill"),
            pids_max_events: get(&pids, "max"),
            cpu_usage_usec: get(&cpu, "usage_usec"),
            cpu_nr_throttled: get(&cpu, "nr_throttled"),
            cpu_throttled_usec: get(&cpu, "throttled_usec"),
        }
    }
}

/// The run's memory now (`memory.current`), when the memory controller is on for it.
pub fn memory_now(dir: &Path) -> Option<u64> {
    controllers::read_value(&Cgroup::at(dir), "memory.current").ok()
}
