//! A run's record: a small JSON file (`ID.json`) in its user's records directory
//! ([`super::dir`]), written by the run's owner when the leader has started, rewritten when the
//! run's state changes, removed when the run ends — by the owner (its end, a dropped
//! [`crate::Child`]), its guardian (the owner was SIGKILLed), or the next stale sweep. Beside
//! it: the run's control socket (`ID.sock`, [`super::control`]) and, once someone stopped the
//! run directly while its owner could not answer, a note saying so (`ID.stopped`).
//!
//! Files are replaced by a rename, so a reader sees a whole record or none. Everything here is
//! written by the run's user, and so by any process of the run: read as a claim (what `ps`
//! shows), never as what may be signalled — see [`super::act`].

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use reaper_platform::linux::{cgroup::Cgroup, procfs};
use serde::{Deserialize, Serialize};

use super::dir::Dir;
use crate::naming::RunId;
use crate::{Limits, StopReason};

/// The record's format; a reader skips records of another.
pub const RECORD_VERSION: u32 = 1;

/// What a run's owner writes about it, for `reaper ps` and others to read without asking the
/// owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The run.
    pub id: RunId,
    /// The owner's `/proc/sys/kernel/random/boot_id`: a record of another boot names processes
    /// that are gone, whatever pids now have its numbers.
    pub boot_id: String,
    /// The user the run runs as (the owner's effective uid).
    pub uid: u32,
    /// The command line.
    pub argv: Vec<String>,
    /// When the leader started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// The containment: `cgroup`, `subreaper` or `pgid`.
    pub backend: String,
    /// The run's cgroup directory (cgroup backend), or the cgroup it was kept in (`kept`).
    pub cgroup: Option<PathBuf>,
    /// The limits set on the run.
    pub limits: Option<Limits>,
    /// The leader's pid.
    pub leader_pid: i32,
    /// The leader's start time (clock ticks after boot).
    pub leader_starttime: u64,
    /// The run's timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// The first signal of its stop sequence (its number; `None`: none, SIGKILL after the
    /// grace).
    pub stop_signal: Option<i32>,
    /// The grace of its stop sequence, in milliseconds.
    pub grace_ms: u64,
    /// The request the run serves, when its owner named one (an MCP request id).
    pub request_id: Option<String>,
    /// Where the run is, as its owner last said.
    pub phase: Phase,
    /// Why it is stopping, once it is.
    pub stop_reason: Option<StopReason>,
}

/// Where a run is, as its owner last wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Phase {
    /// The leader runs.
    Running,
    /// The leader has exited; the rest of the tree may run on for the plan's linger.
    Lingering,
    /// The stop sequence runs (`stop_reason` says why).
    Stopping,
    /// The run ended without stopping its tree (`reaper check --keep`): it lives on in
    /// `cgroup`, out of reaper's hands.
    Kept,
}

/// How a run is ended from another process ([`super::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The plan's stop sequence: first signal, grace, SIGKILL.
    Stop,
    /// SIGKILL for the whole tree at once.
    Kill,
}

impl How {
    /// `stop`, `kill`: the word on the control socket and in the note.
    pub(crate) fn word(self) -> &'static str {
        match self {
            How::Stop => "stop",
            How::Kill => "kill",
        }
    }

    /// The stop reason the run's outcome gives for it.
    pub fn reason(self) -> StopReason {
        match self {
            How::Stop => StopReason::Stopped,
            How::Kill => StopReason::Killed,
        }
    }
}

/// The names of run `id`'s files in its records directory.
pub(crate) struct Names {
    pub record: String,
    pub socket: String,
    pub note: String,
}

impl Names {
    pub(crate) fn of(id: &RunId) -> Names {
        Names {
            record: format!("{id}.json"),
            socket: format!("{id}.sock"),
            note: format!("{id}.stopped"),
        }
    }

    /// Removes all of them from `dir` (each may be gone already).
    pub(crate) fn remove(&self, dir: &Dir) {
        for f in [&self.record, &self.socket, &self.note] {
            dir.remove(f);
        }
    }
}

/// `/proc/sys/kernel/random/boot_id`, read once.
pub(crate) fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    })
}

/// Shortens what a record quotes (the command line, the request id) until it is well under
/// what a reader reads ([`super::dir::MAX_FILE`]): a record is for showing, and an argv may
/// be as long as the kernel allows (megabytes).
pub(crate) fn fit(record: &mut RunRecord) {
    const MAX_ARG: usize = 4096;
    let cut = |s: &str, max: usize| -> String {
        if s.len() <= max {
            return s.to_owned();
        }
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    };
    if let Some(r) = &record.request_id {
        record.request_id = Some(cut(r, 1024));
    }
    let whole = std::mem::take(&mut record.argv);
    let mut budget = 32 * 1024;
    loop {
        let mut left = budget;
        record.argv = Vec::new();
        for a in &whole {
            if left == 0 {
                record.argv.push("…".into());
                break;
            }
            let arg = cut(a, MAX_ARG.min(left));
            left = left.saturating_sub(arg.len());
            record.argv.push(arg);
        }
        let small = serde_json::to_vec(record).is_ok_and(|j| j.len() <= super::dir::MAX_FILE / 2);
        if small || budget < 64 {
            return;
        }
        budget /= 2;
    }
}

/// Writes `record` into `dir` whole (a new file renamed over the old: a reader sees the old
/// record or the new, and whatever the tree put at its name is replaced, not written through).
pub(crate) fn write(dir: &Dir, record: &RunRecord) -> std::io::Result<()> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    dir.replace(&Names::of(&record.id).record, &json)
}

/// A record read back, with what its file says about who wrote it.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub record: RunRecord,
    /// The directory it is in.
    pub dir: PathBuf,
    /// The file's owner: who wrote it (a record whose `uid` differs is not trusted).
    pub file_uid: u32,
}

/// The most records read from one directory: what a reader holds stays bounded whatever a
/// user puts there (each record is at most [`super::dir::MAX_FILE`]).
const MAX_RECORDS: usize = 4096;

/// Every record in `dir` that reads as one and is its user's own (the first [`MAX_RECORDS`]).
pub(crate) fn read_dir(dir: &Dir) -> Vec<Found> {
    let mut ids: Vec<RunId> = dir
        .names()
        .iter()
        .filter_map(|n| n.strip_suffix(".json")?.parse::<RunId>().ok())
        .collect();
    if ids.len() > MAX_RECORDS {
        tracing::warn!(
            "{} holds {} records; only {MAX_RECORDS} are read",
            dir.path().display(),
            ids.len()
        );
        // Which ones is arbitrary: a user who fills their directory hides only their own runs.
        ids.sort();
        ids.truncate(MAX_RECORDS);
    }
    ids.iter().filter_map(|id| read_one(dir, id)).collect()
}

/// The record of run `id` in `dir`, if it is there, reads as one, and is the directory's
/// user's. A claim all the same: it says what its writer (the run's user, and so every
/// process of the run) wanted it to say.
pub(crate) fn read_one(dir: &Dir, id: &RunId) -> Option<Found> {
    let (bytes, file_uid) = dir.read(&Names::of(id).record)?;
    let record: RunRecord = serde_json::from_slice(&bytes).ok()?;
    let uid = dir.uid();
    // A record names itself and its writer: one copied under another name, or claiming
    // another user, is not believed; nor one whose live owner is another user's process.
    let believed = record.version == RECORD_VERSION
        && record.id == *id
        && file_uid == uid
        && record.uid == uid
        && owner_uid(&record).is_none_or(|u| u == uid);
    believed.then(|| Found {
        record,
        dir: dir.path().to_owned(),
        file_uid,
    })
}

/// The effective uid of the record's owner, when it is alive in this PID namespace.
fn owner_uid(record: &RunRecord) -> Option<u32> {
    if !matches!(owner(record), Liveness::Alive { .. }) {
        return None;
    }
    let o = record.id.owner();
    let status = std::fs::read_to_string(format!("/proc/{}/status", o.pid)).ok()?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    // Read after the status: still the owner, so the status was its.
    procfs::is_alive(o.pid, o.starttime).then_some(euid)
}

/// Whether the record's owner is alive, as far as this process can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Alive; `stopped`: in state T (SIGSTOP) or t (traced), answering nothing.
    Alive { stopped: bool },
    /// Provably gone: no process of its PID namespace has its pid and start time, or the
    /// record is from another boot.
    Gone,
    /// In another PID namespace than this process's: its pid means nothing here.
    Unknown,
}

/// The owner of `record`, looked at now.
pub(crate) fn owner(record: &RunRecord) -> Liveness {
    if !record.boot_id.is_empty() && record.boot_id != boot_id() {
        return Liveness::Gone;
    }
    let mine = procfs::pid_namespace().ok();
    if mine != Some(record.id.pidns()) || procfs::is_foreign() {
        return Liveness::Unknown;
    }
    let o = record.id.owner();
    match procfs::stat(o.pid) {
        Ok(s) if s.starttime == o.starttime && !s.is_dead() => Liveness::Alive {
            stopped: matches!(s.state, 'T' | 't'),
        },
        _ => Liveness::Gone,
    }
}

/// The cgroup a record names, if it is provably the run's: named after the run (the id the
/// record's file is named after, or its kept name), under the cgroup2 mount, made by the
/// record's user. Anything else is never read for figures, nor signalled.
pub(crate) fn cgroup_of(record: &RunRecord, file_uid: u32) -> Option<Cgroup> {
    use crate::containment::cgroup::place;
    let dir = record.cgroup.as_deref()?;
    let name = dir.file_name()?.to_str()?;
    let id = record.id;
    let named = match record.phase {
        Phase::Kept => name == id.kept_cgroup_name(),
        _ => name == id.cgroup_name(),
    };
    if !named {
        return None;
    }
    let mount = place::mount_point().ok()?;
    let real = std::fs::canonicalize(dir).ok()?;
    let meta = std::fs::symlink_metadata(&real).ok()?;
    let made_by_user = meta.is_dir() && meta.uid() == file_uid;
    let under = real.starts_with(&mount) && real != mount;
    let same_name = real.file_name().and_then(|n| n.to_str()) == Some(name);
    (under && made_by_user && same_name).then(|| Cgroup::at(real))
}

/// A note that the run was ended from outside while its owner could not answer, for the owner
/// to report truthfully once it runs again: a fresh file renamed into place, the directory's
/// user's.
pub(crate) fn write_note(dir: &Dir, id: &RunId, how: How) {
    if let Err(e) = dir.replace(&Names::of(id).note, how.word().as_bytes()) {
        tracing::debug!("no note of the stop in {}: {e}", dir.path().display());
    }
}

/// The note of run `id`, if someone left one.
pub(crate) fn read_note(dir: &Dir, id: &RunId) -> Option<How> {
    let (bytes, _) = dir.read(&Names::of(id).note)?;
    match std::str::from_utf8(&bytes).ok()?.trim() {
        "stop" => Some(How::Stop),
        "kill" => Some(How::Kill),
        _ => None,
    }
}

/// Whether this process should sweep `dir` now: at most once a minute for each records
/// directory, by the time of a marker file (`.swept`) that the sweeper makes anew. A run's
/// start pays one `stat` otherwise.
pub(crate) fn sweep_due(dir: &Dir) -> bool {
    const MARKER: &str = ".swept";
    if dir.age(MARKER).is_some_and(|age| age < SWEEP_EVERY) {
        return false;
    }
    // Replaced, never written through: whatever is at the name is unlinked first.
    dir.remove(MARKER);
    dir.create_new(MARKER)
}

/// How often a records directory is swept, at most.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the records in `dir` whose run is provably over: the owner is gone and so is what
/// the run lived in (its cgroup removed or empty; without one, its leader). A kept run's
/// record goes with its kept cgroup. Returns how many it removed. Only files are at stake: a
/// lying record is removed early or kept late, and nothing is signalled.
pub(crate) fn sweep(dir: &Dir) -> usize {
    let mut removed = 0;
    for found in read_dir(dir) {
        let r = &found.record;
        let over = match r.phase {
            Phase::Kept => !cgroup_populated(&found),
            _ => {
                owner(r) == Liveness::Gone
                    && match r.cgroup {
                        Some(_) => !cgroup_populated(&found),
                        None => !procfs::is_alive(r.leader_pid, r.leader_starttime),
                    }
            }
        };
        if over {
            Names::of(&r.id).remove(dir);
            removed += 1;
        }
    }
    removed
}

/// Whether the record's cgroup still holds a process (a cgroup that is not the run's holds
/// none of its processes).
fn cgroup_populated(found: &Found) -> bool {
    cgroup_of(&found.record, found.file_uid).is_some_and(|cg| cg.populated().unwrap_or(false))
}

/// Removes the record (in this process's directory) of the run whose cgroup, named `cgroup`,
/// a stale sweep has just removed.
pub(crate) fn forget(cgroup: &str) {
    if let (Some(dir), Some(id)) = (super::dir::own(), RunId::from_cgroup_name(cgroup)) {
        Names::of(&id).remove(dir);
    }
}

/// Removes every record in this process's directory of a run of `owner` whose cgroup is gone
/// (the guardian's takeover has just removed them).
pub(crate) fn remove_taken_over(owner: crate::Identity, pidns: u64) {
    let Some(dir) = super::dir::own() else {
        return;
    };
    for found in read_dir(dir) {
        let r = &found.record;
        if r.id.owner() == owner
            && r.id.pidns() == pidns
            && r.phase != Phase::Kept
            && r.cgroup.as_ref().is_some_and(|c| !c.exists())
        {
            Names::of(&r.id).remove(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> RunRecord {
        RunRecord {
            version: RECORD_VERSION,
            id: id.parse().unwrap(),
            boot_id: boot_id().to_owned(),
            uid: rustix::process::geteuid().as_raw(),
            argv: vec!["sleep".into(), "1".into()],
            started_unix_ms: 1,
            backend: "pgid".into(),
            cgroup: None,
            limits: None,
            leader_pid: 1,
            leader_starttime: 0,
            timeout_ms: None,
            stop_signal: Some(15),
            grace_ms: 2000,
            request_id: None,
            phase: Phase::Running,
            stop_reason: None,
        }
    }

    fn tempdir(what: &str) -> (PathBuf, Dir) {
        use std::os::unix::fs::DirBuilderExt;
        let p = std::env::temp_dir().join(format!("reaper-unit-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::DirBuilder::new().mode(0o700).create(&p).unwrap();
        let d = Dir::open(&p, rustix::process::geteuid().as_raw()).unwrap();
        (p, d)
    }

    #[test]
    fn records_read_back_only_under_their_own_name_and_user() {
        let (p, dir) = tempdir("rec");
        let r = record("1-2-3-4");
        write(&dir, &r).unwrap();
        let back = read_dir(&dir);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].record, r);
        // Copied under another run's name: not believed.
        let other: RunId = "1-2-3-5".parse().unwrap();
        std::fs::copy(
            p.join(Names::of(&r.id).record),
            p.join(Names::of(&other).record),
        )
        .unwrap();
        assert!(read_one(&dir, &other).is_none());
        // Another boot's owner is gone, whoever has its pid now.
        let mut old = record("1-2-3-6");
        old.boot_id = "another boot".into();
        assert_eq!(owner(&old), Liveness::Gone);
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn a_huge_command_line_is_cut_to_fit() {
        let mut r = record("1-2-3-4");
        r.argv = vec!["\u{1}".repeat(1 << 20), "x".repeat(1 << 20), "y".into()];
        r.request_id = Some("z".repeat(1 << 16));
        fit(&mut r);
        let json = serde_json::to_vec(&r).unwrap();
        assert!(
            json.len() <= super::super::dir::MAX_FILE / 2,
            "{}",
            json.len()
        );
        assert!(r.argv[0].starts_with('\u{1}') && r.argv[0].ends_with('…'));
        let mut short = record("1-2-3-5");
        let before = short.clone();
        fit(&mut short);
        assert_eq!(short, before, "a usual record is left as it is");
    }

    #[test]
    fn notes_say_how() {
        let (p, dir) = tempdir("note");
        let id: RunId = "1-2-3-4".parse().unwrap();
        assert_eq!(read_note(&dir, &id), None);
        write_note(&dir, &id, How::Kill);
        assert_eq!(read_note(&dir, &id), Some(How::Kill));
        Names::of(&id).remove(&dir);
        assert_eq!(read_note(&dir, &id), None);
        std::fs::remove_dir_all(&p).unwrap();
    }
}
