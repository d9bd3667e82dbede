//! Resource limits of a run (`--memory-max`, `--pids-max`, `--cpus`): the run cgroup's
//! `memory.max` (with `memory.oom.group` and `memory.swap.max`), `pids.max` and `cpu.max`, from
//! controllers reaper enables in a cgroup it owns — and what the limits did, for reports.
//!
//! A limit that cannot be enforced is an error, never dropped: on a host where cgroup v2 lacks
//! the controller (hybrid hosts, where cgroup v1 holds it: reaper never touches v1), under a
//! parent that did not delegate it, or where the cgroup reaper would have to change is not
//! reaper's (the root cgroup, a cgroup systemd manages for another unit), the run does not start.

use serde::Serialize;

/// The limits asked for; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Limits {
    /// `memory.max`, in bytes.
    #[serde(rename = "memory_max_bytes")]
    pub memory_max: Option<u64>,
    /// `pids.max`: processes and threads.
    pub pids_max: Option<u64>,
    /// `cpu.max` as cores (`0.5`: 50 ms of CPU time per 100 ms period).
    pub cpus: Option<f64>,
}

/// `cpu.max`'s period, in microseconds (the kernel's default).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // macOS has no cgroups
pub const CPU_PERIOD_USEC: u64 = 100_000;

impl Limits {
    /// No limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory_max.is_none() && self.pids_max.is_none() && self.cpus.is_none()
    }

    /// The controllers these limits need, each with the flag that needs it.
    pub fn controllers(&self) -> Vec<(&'static str, &'static str)> {
        let mut v = Vec::new();
        if self.memory_max.is_some() {
            v.push(("memory", "--memory-max"));
        }
        if self.pids_max.is_some() {
            v.push(("pids", "--pids-max"));
        }
        if self.cpus.is_some() {
            v.push(("cpu", "--cpus"));
        }
        v
    }

    /// The flags given, for messages: `--memory-max and --cpus`.
    pub fn flags(&self) -> String {
        and(self.controllers().iter().map(|(_, f)| *f))
    }

    /// `cpu.max`'s content: `QUOTA PERIOD`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn cpu_max(cpus: f64) -> String {
        let quota = (cpus * CPU_PERIOD_USEC as f64).round() as u64;
        format!("{quota} {CPU_PERIOD_USEC}")
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = items.collect();
    match v.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// What the limits did, and the run's CPU time, read from the run cgroup just before it is
/// removed. A field is `None` where the kernel has no such file (the controller is not enabled
/// for the run: no limit of that kind was set; or an older kernel: `memory.peak` is 5.19+).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// `memory.peak`: the most memory the run used at once.
    pub memory_peak_bytes: Option<u64>,
    /// `memory.events` `oom_kill`: processes the OOM killer killed in the run.
    pub oom_kill: Option<u64>,
    /// `memory.events` `oom_group_kill`: times it killed the whole run (memory.oom.group).
    pub oom_group_kill: Option<u64>,
    /// `pids.events` `max`: forks and clones `pids.max` refused.
    pub pids_max_events: Option<u64>,
    /// `cpu.stat` `usage_usec`: CPU time of the whole run (there without any controller).
    pub cpu_usage_usec: Option<u64>,
    /// `cpu.stat` `nr_throttled`: periods in which `cpu.max` held the run back.
    pub cpu_nr_throttled: Option<u64>,
    /// `cpu.stat` `throttled_usec`: how long it was held back.
    pub cpu_throttled_usec: Option<u64>,
}

impl Usage {
    /// Whether the memory limit is why the run ended: the OOM killer killed the whole run
    /// (`oom_group_kill` > 0; with `memory.oom.group` = 1, as reaper sets it, any OOM kill in
    /// the run is one), or it killed the leader (it died of SIGKILL and `oom_kill` > 0: the
    /// leader was the only process, or a group kill spared a process with oom_score_adj -1000).
    pub fn ended_by_oom(&self, leader_signal: Option<i32>) -> bool {
        self.oom_group_kill.is_some_and(|n| n > 0)
            || (leader_signal == Some(reaper_platform::Signal::KILL.as_raw())
                && self.oom_kill.is_some_and(|n| n > 0))
    }
}

#[cfg(target_os = "linux")]
pub use linux::*;

#[cfg(target_os = "linux")]
mod linux {
    use std::path::Path;

    use reaper_platform::linux::cgroup::Cgroup;
    use reaper_platform::linux::controllers;

    use super::{and, Limits, Usage};
    use crate::containment::setup::{CgroupEnv, Placement};
    use crate::containment::{Error, Kind};

    /// Whether reaper may enable controllers in the placement, and if not, why.
    pub enum Ownership {
        /// `--cgroup-parent`, or the scope systemd delegated to reaper.
        Ours,
        /// Not reaper's to change: why (for the message).
        NotOurs(&'static str),
    }

    /// Whether reaper may enable controllers where its run cgroups go: a `--cgroup-parent` the
    /// user named, or the scope systemd delegated to reaper. Not its own cgroup otherwise (the
    /// root cgroup, a cgroup of a unit nobody delegated, a CI job's cgroup).
    pub fn ownership(cgroup_parent_given: bool) -> Ownership {
        if cgroup_parent_given
            || crate::containment::delegate::done().is_some_and(|d| d.unit().is_some())
        {
            Ownership::Ours
        } else {
            Ownership::NotOurs(
                "reaper runs there without a delegation: no systemd scope was delegated to it, \
                 and no --cgroup-parent was given",
            )
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
        let missing: Vec<_> = needed
            .iter()
            .filter(|(c, _)| !available.iter().any(|a| a == c))
            .copied()
            .collect();
        let dir = placement.dir.display();
        if !missing.is_empty() {
            let names = and(missing.iter().map(|(c, _)| *c));
            let flags = and(missing.iter().map(|(_, f)| *f));
            let listed = if available.is_empty() {
                "none".to_owned()
            } else {
                available.join(" ")
            };
            let (it, flag) = if missing.len() > 1 {
                ("them", "flags")
            } else {
                ("it", "flag")
            };
            let todo = if env.hybrid {
                format!(
                    "this host mounts cgroup v1 beside v2 (hybrid mode) and v1 holds {it}, which \
                     reaper never uses: boot with systemd.unified_cgroup_hierarchy=1 (or \
                     cgroup_no_v1=all) so that cgroup v2 has {it}, or run without the {flag}"
                )
            } else {
                format!(
                    "the cgroup above {dir} did not delegate {it}: enable {it} there (echo \
                     {} > PARENT/cgroup.subtree_control), run reaper under systemd (a scope \
                     with Delegate=yes: the user manager delegates cpu memory pids), or name a \
                     cgroup that has {it} with --cgroup-parent",
                    missing
                        .iter()
                        .map(|(c, _)| format!("+{c}"))
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
                "{flags} {need} the cgroup v2 {names} {ctl}, which {is} not available in {dir} \
                 (its cgroup.controllers lists: {listed}); {todo}; a limit is never dropped, so \
                 the run did not start"
            ),
            ));
        }
        let to_enable: Vec<&'static str> = needed
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| !enabled.iter().any(|e| e == c))
            .collect();
        if to_enable.is_empty() {
            return Ok(to_enable);
        }
        let why = match ownership {
            _ if placement.path == "/" => Some("it is the root cgroup, the whole machine's"),
            Ownership::NotOurs(why) => Some(why),
            Ownership::Ours => None,
        };
        if let Some(why) = why {
            let flags = and(needed
                .iter()
                .filter(|(c, _)| to_enable.contains(c))
                .map(|(_, f)| *f));
            let need = if to_enable.len() > 1 { "need" } else { "needs" };
            return Err(Error::new(
                Kind::LimitUnavailable,
                format!(
                "{flags} {need} the {} controller enabled in {dir}/cgroup.subtree_control, and \
                 {dir} is not reaper's to change ({why}): name a cgroup of yours with \
                 --cgroup-parent (mkdir it under the cgroup2 mount), or run reaper under \
                 systemd, which delegates a scope to it; a limit is never dropped, so the run \
                 did not start",
                and(to_enable.iter().copied())
            ),
            ));
        }
        Ok(to_enable)
    }

    /// Enables `names` for the children of the placement. reaper must not live there itself
    /// (see `setup::ensure_leaf`, which runs first).
    pub fn enable(placement: &Placement, names: &[&str]) -> Result<(), Error> {
        controllers::enable(&Cgroup::at(&placement.dir), names).map_err(|e| {
            let busy = if e.is_busy() {
                " (processes other than reaper live in that cgroup: the kernel enables \
                 controllers only for a cgroup without processes of its own; use \
                 --cgroup-parent with an empty cgroup)"
            } else {
                ""
            };
            let errno = e.source.raw_os_error();
            Error::new(
                Kind::LimitUnavailable,
                format!("cannot enable the controllers for the limits: {e}{busy}"),
            )
            .on(&e.path)
            .with_errno(errno)
        })
    }

    /// Sets the limits on a fresh run cgroup, before anything runs in it.
    pub fn apply(cg: &Cgroup, limits: &Limits) -> Result<(), Error> {
        let set = |file: &str, v: &str, flag: &str| {
            controllers::set(cg, file, v)
                .map_err(|e| Error::new(Kind::LimitUnavailable, format!("cannot set {flag}: {e}")))
        };
        if let Some(bytes) = limits.memory_max {
            set("memory.max", &bytes.to_string(), "--memory-max")?;
            // Without it the run's memory beyond memory.max would go to swap, not to the OOM
            // killer. The file is missing only when the kernel accounts no swap (no swap
            // controller: CONFIG_MEMCG_SWAP off, or swapaccount=0).
            if controllers::has(cg, "memory.swap.max") {
                set("memory.swap.max", "0", "--memory-max")?;
            } else {
                tracing::warn!(
                    "{} has no memory.swap.max (the kernel accounts no swap): the run's memory \
                     can go to swap past --memory-max",
                    cg.path().display()
                );
            }
            // One OOM kill kills the whole run, not one random process of it (5.4+).
            set("memory.oom.group", "1", "--memory-max")?;
        }
        if let Some(n) = limits.pids_max {
            set("pids.max", &n.to_string(), "--pids-max")?;
        }
        if let Some(c) = limits.cpus {
            set("cpu.max", &Limits::cpu_max(c), "--cpus")?;
        }
        Ok(())
    }

    impl Usage {
        /// Reads the run cgroup's statistics (best effort: a missing file is `None`).
        pub fn read(dir: &Path) -> Usage {
            let cg = Cgroup::at(dir);
            let keyed = |file: &str| controllers::read_keyed(&cg, file).unwrap_or_default();
            let get = |kv: &[(String, u64)], k: &str| {
                kv.iter().find(|(key, _)| key == k).map(|(_, v)| *v)
            };
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_cpu_max() {
        let l = Limits {
            memory_max: Some(1 << 30),
            pids_max: None,
            cpus: Some(0.5),
        };
        assert_eq!(l.flags(), "--memory-max and --cpus");
        assert_eq!(Limits::cpu_max(0.5), "50000 100000");
        assert_eq!(Limits::cpu_max(2.0), "200000 100000");
        assert!(Limits::default().is_empty());
    }

    #[test]
    fn oom_means_a_group_kill_or_the_leader_killed() {
        let u = |k, g| Usage {
            oom_kill: Some(k),
            oom_group_kill: Some(g),
            ..Usage::default()
        };
        assert!(u(3, 1).ended_by_oom(Some(9)));
        assert!(u(3, 1).ended_by_oom(None));
        assert!(u(1, 0).ended_by_oom(Some(9)));
        assert!(!u(1, 0).ended_by_oom(Some(15)));
        assert!(!u(0, 0).ended_by_oom(Some(9)));
        assert!(!Usage::default().ended_by_oom(Some(9)));
    }
}
