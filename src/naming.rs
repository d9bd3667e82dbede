//! The names of runs and of their cgroups, in one place: a run's [`RunId`] (`PIDNS-PID-START-N`,
//! the reaper process that owns it and the run's number there), the cgroup named after it
//! (`reaper-` + id, [`PREFIX`]), the kept cgroup a run left running moves to (`reaper-kept-` +
//! id), the owner's supervisor leaf (`reaper-PIDNS-PID-START-supervisor`), and [`RUN_ID_ENV`],
//! which every process of a run inherits. Parsed and formatted here only.
//!
//! A later reaper of the same namespace proves a cgroup's owner gone by pid and start time before
//! removing it ([`owner_of`]); nothing named otherwise is ever touched.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use reaper_platform::linux::procfs;
use serde::{Deserialize, Serialize};

use crate::Identity;

/// What every name of a cgroup of reaper's starts with.
pub const PREFIX: &str = "reaper-";

/// What the name of a kept cgroup starts with (see [`RunId::kept_cgroup_name`]).
pub(crate) const KEPT_PREFIX: &str = "reaper-kept-";

/// Whether `name` is a kept cgroup's (a run's processes, left running).
pub(crate) fn is_kept_name(name: &str) -> bool {
    name.starts_with(KEPT_PREFIX)
}

/// The name of the kept cgroup for the run cgroup named `run_cgroup`.
pub(crate) fn kept_name(run_cgroup: &str) -> String {
    format!("{KEPT_PREFIX}{}", run_cgroup.trim_start_matches(PREFIX))
}

/// This reaper as its names carry it: its PID namespace, pid and start time, read once (none
/// of them changes for a process's life). Kept with the pid it was read for, so a forked child
/// (the guardian) that inherited the cell reads its own.
pub fn me() -> std::io::Result<Owner> {
    static ME: OnceLock<Owner> = OnceLock::new();
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    match ME.get() {
        Some(&me) if me.process.pid == pid => Ok(me),
        _ => {
            let process = procfs::self_identity()?;
            let me = Owner {
                pidns: Some(procfs::pid_namespace()?),
                process,
            };
            if me.process.pid == pid {
                let _ = ME.set(me);
            }
            Ok(me)
        }
    }
}

/// The name of the leaf reaper `owner` moves itself into (see `create::ensure_leaf`).
pub fn supervisor_name(owner: Owner) -> String {
    owner.name("supervisor")
}

/// The reaper a run cgroup's name says owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The inode of its PID namespace; `None` in a name of the older form
    /// `reaper-PID-STARTTIME-…`, which did not carry it.
    pub pidns: Option<u64>,
    /// Its pid and start time, in that namespace.
    pub process: Identity,
}

impl Owner {
    /// The name of its cgroup `tail` (a sequence number, or `supervisor`).
    pub fn name(&self, tail: &str) -> String {
        let Identity { pid, starttime } = self.process;
        match self.pidns {
            Some(ns) => format!("{PREFIX}{ns}-{pid}-{starttime}-{tail}"),
            None => format!("{PREFIX}{pid}-{starttime}-{tail}"),
        }
    }
}

/// The owner encoded in a name of ours (`reaper-PIDNS-PID-START-SEQ` or `…-supervisor`, or the
/// older form without PIDNS), or `None` for anything else.
pub fn owner_of(name: &str) -> Option<Owner> {
    let fields: Vec<&str> = name.strip_prefix(PREFIX)?.split('-').collect();
    let (pidns, rest) = match fields.as_slice() {
        [ns, pid, start, tail] => (Some(ns.parse().ok()?), [*pid, *start, *tail]),
        [pid, start, tail] => (None, [*pid, *start, *tail]),
        _ => return None,
    };
    let [pid, start, tail] = rest;
    let owner = Owner {
        pidns,
        process: Identity {
            pid: pid.parse().ok()?,
            starttime: start.parse().ok()?,
        },
    };
    (tail == "supervisor" || (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())))
        .then_some(owner)
}

/// The environment variable every process of a run inherits, holding the run's [`RunId`]:
/// what tells a process that escaped (or outlived) its run apart from the rest of the host.
pub const RUN_ID_ENV: &str = "REAPER_RUN_ID";

/// The number of this process's next run (and run cgroup: the two share it).
static SEQ: AtomicU32 = AtomicU32::new(0);

/// The next number for a run of this process.
pub(crate) fn next_seq() -> u32 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// A run's name: `PIDNS-PID-START-N`, the N-th run of the reaper process with that pid and
/// start time (clock ticks after boot) in the PID namespace with that inode. No other run on
/// the machine, now or later in this boot, has it. [`RunId::short`] is the `PID-N` form
/// `reaper ps` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId {
    pidns: u64,
    owner: Identity,
    seq: u32,
}

impl RunId {
    /// The run of this process numbered `seq`; `None` when this process cannot read its own
    /// identity (`/proc/self/stat`, `/proc/self/ns/pid`).
    pub(crate) fn this_process(seq: u32) -> Option<RunId> {
        let me = me().ok()?;
        Some(RunId {
            pidns: me.pidns?,
            owner: me.process,
            seq,
        })
    }

    /// The run whose cgroup has this name (`reaper-PIDNS-PID-START-N`), if it is one.
    pub fn from_cgroup_name(name: &str) -> Option<RunId> {
        name.strip_prefix(PREFIX)?.parse().ok()
    }

    /// The name of the run's cgroup, when it has one.
    pub fn cgroup_name(&self) -> String {
        format!("{PREFIX}{self}")
    }

    /// The name of the cgroup the run's processes move to when it ends without stopping them
    /// (`reaper check --keep`).
    pub(crate) fn kept_cgroup_name(&self) -> String {
        format!("{KEPT_PREFIX}{self}")
    }

    /// The reaper process that owns the run: its pid and start time, in [`RunId::pidns`].
    pub fn owner(&self) -> Identity {
        self.owner
    }

    /// The inode of the owner's PID namespace (`stat -L -c %i /proc/PID/ns/pid`).
    pub fn pidns(&self) -> u64 {
        self.pidns
    }

    /// The run's number in its owner process.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// `PID-N`: unique among the runs alive at one time in one PID namespace, and what
    /// `reaper ps` shows; [`RunId::matches`] accepts it.
    pub fn short(&self) -> String {
        format!("{}-{}", self.owner.pid, self.seq)
    }

    /// Whether `text` names this run: its full id, or its short form.
    pub fn matches(&self, text: &str) -> bool {
        text == self.to_string() || text == self.short()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let RunId { pidns, owner, seq } = self;
        write!(f, "{pidns}-{}-{}-{seq}", owner.pid, owner.starttime)
    }
}

/// A text that is not a [`RunId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRunId(pub String);

impl fmt::Display for BadRunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a run id (PIDNS-PID-START-N, as REAPER_RUN_ID shows it)",
            self.0
        )
    }
}

impl std::error::Error for BadRunId {}

impl FromStr for RunId {
    type Err = BadRunId;

    fn from_str(s: &str) -> Result<RunId, BadRunId> {
        let bad = || BadRunId(s.to_owned());
        let mut f = s.split('-');
        let mut field = || f.next().ok_or_else(bad);
        let (pidns, pid, start, seq) = (field()?, field()?, field()?, field()?);
        if f.next().is_some() {
            return Err(bad());
        }
        // Digits only: `parse` would take a `+`, and the cgroup name must round-trip.
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if ![pidns, pid, start, seq].into_iter().all(digits) {
            return Err(bad());
        }
        let id = RunId {
            pidns: pidns.parse().map_err(|_| bad())?,
            owner: Identity {
                pid: pid.parse().map_err(|_| bad())?,
                starttime: start.parse().map_err(|_| bad())?,
            },
            seq: seq.parse().map_err(|_| bad())?,
        };
        if id.owner.pid <= 0 || id.to_string() != s {
            return Err(bad());
        }
        Ok(id)
    }
}

impl TryFrom<String> for RunId {
    type Error = BadRunId;
    fn try_from(s: String) -> Result<RunId, BadRunId> {
        s.parse()
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_ours_carry_the_owner() {
        let owner = |pidns, pid, starttime| {
            Some(Owner {
                pidns,
                process: Identity { pid, starttime },
            })
        };
        let me = Owner {
            pidns: Some(4026531836),
            process: Identity {
                pid: 123,
                starttime: 456,
            },
        };
        assert_eq!(owner_of(&me.name("0")), Some(me));
        assert_eq!(owner_of(&supervisor_name(me)), Some(me));
        assert_eq!(
            owner_of("reaper-4026531836-123-456-17"),
            owner(Some(4026531836), 123, 456)
        );
        assert_eq!(supervisor_name(me), "reaper-4026531836-123-456-supervisor");
        // The older form, without the PID namespace.
        assert_eq!(owner_of("reaper-123-456-0"), owner(None, 123, 456));
        assert_eq!(owner_of("reaper-123-456-supervisor"), owner(None, 123, 456));
    }

    #[test]
    fn names_not_ours_are_left_alone() {
        for n in [
            "reaper",
            "reaper-",
            "reaper-1",
            "reaper-1-2",
            "reaper-1-2-",
            "reaper-1-2-x",
            "reaper-a-2-3",
            "user.slice",
            "myreaper-1-2-3",
            "reaper-1-2-3-4-5",
            "reaper-x-1-2-3",
            "reaper-1-2-3-",
            "reaper-kept-1-2-3",
            "reaper-kept-1-2-3-4",
            "reaper-1-2.scope",
        ] {
            assert_eq!(owner_of(n), None, "{n}");
        }
    }

    #[test]
    fn round_trips_and_names_the_cgroup_as_place_does() {
        let id: RunId = "4026531836-123-456-7".parse().unwrap();
        assert_eq!(
            id.owner(),
            Identity {
                pid: 123,
                starttime: 456
            }
        );
        assert_eq!((id.pidns(), id.seq()), (4026531836, 7));
        assert_eq!(id.short(), "123-7");
        assert!(id.matches("123-7") && id.matches("4026531836-123-456-7"));
        assert!(!id.matches("123-70") && !id.matches("12-7"));
        let owner = Owner {
            pidns: Some(4026531836),
            process: Identity {
                pid: 123,
                starttime: 456,
            },
        };
        assert_eq!(id.cgroup_name(), owner.name("7"));
        assert_eq!(RunId::from_cgroup_name(&owner.name("7")), Some(id));
        assert_eq!(RunId::from_cgroup_name(&supervisor_name(owner)), None);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"4026531836-123-456-7\"");
        assert_eq!(serde_json::from_str::<RunId>(&json).unwrap(), id);
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "1-2-3",
            "1-2-3-4-5",
            "1-0-3-4",
            "a-2-3-4",
            "+1-2-3-4",
            "01-2-3-4",
            "1-2-3-",
            "1--3-4",
            "99999999999999999999999-2-3-4",
        ] {
            assert!(bad.parse::<RunId>().is_err(), "{bad}");
        }
    }
}
