//! Resource limits of a run (`--memory-max`, `--pids-max`, `--cpus`): the run cgroup's
//! `memory.max` (with `memory.oom.group` and `memory.swap.max`), `pids.max` and `cpu.max`, from
//! controllers reaper enables in a cgroup it owns — and what the limits did, for reports.
//!
//! A limit that cannot be enforced is an error, never dropped: on a host where cgroup v2 lacks
//! the controller (hybrid hosts, where cgroup v1 holds it: reaper never touches v1), under a
//! parent that did not delegate it, or where the cgroup reaper would have to change is not
//! reaper's (the root cgroup, a cgroup systemd manages for another unit), the run does not start.

use serde::{Deserialize, Serialize};

/// The limits asked for; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
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

    /// The controllers these limits need, each with the file it writes (for the containment's
    /// messages), in the order memory, pids, cpu.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn controllers(&self) -> Vec<(&'static str, &'static str)> {
        let mut v = Vec::new();
        if self.memory_max.is_some() {
            v.push(("memory", "memory.max"));
        }
        if self.pids_max.is_some() {
            v.push(("pids", "pids.max"));
        }
        if self.cpus.is_some() {
            v.push(("cpu", "cpu.max"));
        }
        v
    }

    /// The limits among these whose controller is one of `controllers`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn only(&self, controllers: &[&str]) -> Limits {
        let has = |c: &str| controllers.contains(&c);
        Limits {
            memory_max: self.memory_max.filter(|_| has("memory")),
            pids_max: self.pids_max.filter(|_| has("pids")),
            cpus: self.cpus.filter(|_| has("cpu")),
        }
    }

    /// The files these limits write, for messages: `memory.max and cpu.max`.
    pub(crate) fn files(&self) -> String {
        and(self.controllers().iter().map(|(_, f)| *f))
    }

    /// `cpu.max`'s content: `QUOTA PERIOD`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn cpu_max(cpus: f64) -> String {
        let quota = (cpus * CPU_PERIOD_USEC as f64).round() as u64;
        format!("{quota} {CPU_PERIOD_USEC}")
    }
}

/// `a`, `a and b`, `a, b and c`.
pub(crate) fn and<'a>(items: impl Iterator<Item = &'a str>) -> String {
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
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_cpu_max() {
        let l = Limits {
            memory_max: Some(1 << 30),
            pids_max: None,
            cpus: Some(0.5),
        };
        assert_eq!(l.files(), "memory.max and cpu.max");
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
