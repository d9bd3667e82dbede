//! A run's record: a small JSON file (`ID.json`) in its user's records directory
//! ([`super::dir`]), written by the run's owner when the leader has started, rewritten when the
//! run's state changes, removed when the run ends — by the owner (its end, a dropped
//! [`crate::Child`]), its guardian (the owner was SIGKILLed), or the next stale sweep. Beside
//! it: the run's control socket (`ID.sock`, [`super::control`]) and, once someone stopped the
//! run directly while its owner could not answer, a note saying so (`ID.stopped`).
//!
//! Files are replaced by a rename, so a reader sees a whole record or none.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use reaper_platform::linux::{cgroup::Cgroup, procfs};
use serde::{Deserialize, Serialize};

use super::id::RunId;
use crate::{Limits, StopReason};

/// The record's format; a reader skips records of another.
pub const RECORD_VERSION: u32 = 1;

/// What a run's owner writes about it, for `reaper ps` and others to read without asking the
/// owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// `stop`, `kill`.
    pub fn word(self) -> &'static str {
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

/// The files of run `id` in `dir`.
pub(crate) struct Files {
    pub record: PathBuf,
    pub socket: PathBuf,
    pub note: PathBuf,
}

impl Files {
    pub(crate) fn of(dir: &Path, id: &RunId) -> Files {
        Files {
            record: dir.join(format!("{id}.json")),
            socket: dir.join(format!("{id}.sock")),
            note: dir.join(format!("{id}.stopped")),
        }
    }

    /// Removes all of them (each may be gone already).
    pub(crate) fn remove(&self) {
        for f in [&self.record, &self.socket, &self.note] {
            let _ = std::fs::remove_file(f);
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

/// Writes the first `record` of a run to `path`, a new file, in one write: a reader sees it
/// empty (not a record yet) or whole.
pub(crate) fn create(path: &Path, record: &RunRecord) -> std::io::Result<()> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(&json)
}

/// Writes `record` to `path` whole: a temporary file beside it, renamed over it.
pub(crate) fn write(path: &Path, record: &RunRecord) -> std::io::Result<()> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&json)?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
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

/// Every record in `dir` (of user `uid`) that reads as one and is that user's own.
pub(crate) fn read_dir(dir: &Path, uid: u32) -> Vec<Found> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<RunId>().ok())
        else {
            continue;
        };
        if let Some(f) = read_one(dir, uid, &id) {
            out.push(f);
        }
    }
    out
}

/// The record of run `id` in `dir`, if it is there, reads as one, and is `uid`'s.
pub(crate) fn read_one(dir: &Path, uid: u32, id: &RunId) -> Option<Found> {
    let file = open_nofollow(&Files::of(dir, id).record)?;
    let file_uid = file.metadata().ok()?.uid();
    let record: RunRecord = serde_json::from_reader(std::io::BufReader::new(file)).ok()?;
    // A record names itself and its writer: one copied under another name, or claiming
    // another user, is not believed.
    (record.version == RECORD_VERSION && record.id == *id && file_uid == uid && record.uid == uid)
        .then(|| Found {
            record,
            dir: dir.to_owned(),
            file_uid,
        })
}

/// `path` opened for reading, unless it is a symbolic link.
fn open_nofollow(path: &Path) -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()
}

/// Whether the record's owner is alive, as far as this process can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Alive; `stopped`: in state T (SIGSTOP) or t (traced), answering nothing.
    Alive { stopped: bool },
    /// Provably gone: no process of its PID namespace has its pid and start time, or the
    /// record is from another boot.
    Gone,
    /// In another PID namespace than this process's: its pid means nothing here.
    Unknown,
}

/// The owner of `record`, looked at now.
pub(crate) fn owner(record: &RunRecord) -> Owner {
    if !record.boot_id.is_empty() && record.boot_id != boot_id() {
        return Owner::Gone;
    }
    let mine = procfs::pid_namespace().ok();
    if mine != Some(record.id.pidns()) || procfs::is_foreign() {
        return Owner::Unknown;
    }
    let o = record.id.owner();
    match procfs::stat(o.pid) {
        Ok(s) if s.starttime == o.starttime && !s.is_dead() => Owner::Alive {
            stopped: matches!(s.state, 'T' | 't'),
        },
        _ => Owner::Gone,
    }
}

/// The cgroup a record names, if it is one the record's run may have: under the cgroup2
/// mount, named after the run (or its kept name), and made by the record's user. Anything else
/// is never read for figures, nor signalled.
pub(crate) fn cgroup_of(record: &RunRecord, file_uid: u32) -> Option<Cgroup> {
    use crate::containment::cgroup::place;
    let dir = record.cgroup.as_deref()?;
    let name = dir.file_name()?.to_str()?;
    let id = record.id;
    let named = match record.phase {
        Phase::Kept => name == format!("{}kept-{}", place::PREFIX, id),
        _ => name == id.cgroup_name(),
    };
    if !named {
        return None;
    }
    let mount = place::mount_point().ok()?;
    let real = std::fs::canonicalize(dir).ok()?;
    let meta = std::fs::symlink_metadata(&real).ok()?;
    (real.starts_with(&mount) && real != mount && meta.uid() == file_uid).then(|| Cgroup::at(real))
}

/// A note that the run was ended from outside while its owner could not answer, for the owner
/// to report truthfully once it runs again. Written as the run's user (`uid`), through a fresh
/// file renamed into place: the directory is that user's, and root must not write through a
/// link or into a file the user put there.
pub(crate) fn write_note(dir: &Path, id: &RunId, uid: u32, how: How) {
    use rustix::fs::{Mode, OFlags};
    let note = Files::of(dir, id).note;
    let tmp = note.with_extension(format!("stopped.{}", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let fd = rustix::fs::open(
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        if rustix::process::geteuid().as_raw() != uid {
            rustix::fs::fchown(&fd, Some(rustix::process::Uid::from_raw(uid)), None)?;
        }
        std::fs::File::from(fd).write_all(how.word().as_bytes())?;
        std::fs::rename(&tmp, &note)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!("no note of the stop in {}: {e}", dir.display());
    }
}

/// The note of run `id`, if someone left one.
pub(crate) fn read_note(dir: &Path, id: &RunId) -> Option<How> {
    let f = open_nofollow(&Files::of(dir, id).note)?;
    match std::io::read_to_string(f).ok()?.trim() {
        "stop" => Some(How::Stop),
        "kill" => Some(How::Kill),
        _ => None,
    }
}

/// Whether this process should sweep `dir` now: at most once a minute for each records
/// directory, by the time of a marker file (`.swept`) that the sweeper touches. A run's start
/// pays one `stat` otherwise.
pub(crate) fn sweep_due(dir: &Path) -> bool {
    let marker = dir.join(".swept");
    let fresh = std::fs::symlink_metadata(&marker)
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < SWEEP_EVERY);
    if fresh {
        return false;
    }
    // Replaced, not written through: the marker is never followed as a link.
    let _ = std::fs::remove_file(&marker);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&marker)
        .is_ok()
}

/// How often a records directory is swept, at most.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the records in `dir` (of user `uid`) whose run is provably over: the owner is gone
/// and so is what the run lived in (its cgroup removed or empty; without one, its leader).
/// A kept run's record goes with its kept cgroup. Returns how many it removed.
pub(crate) fn sweep(dir: &Path, uid: u32) -> usize {
    let mut removed = 0;
    for found in read_dir(dir, uid) {
        let r = &found.record;
        let over = match r.phase {
            Phase::Kept => !cgroup_populated(&found),
            _ => {
                owner(r) == Owner::Gone
                    && match r.cgroup {
                        Some(_) => !cgroup_populated(&found),
                        None => !procfs::is_alive(r.leader_pid, r.leader_starttime),
                    }
            }
        };
        if over {
            Files::of(dir, &r.id).remove();
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
        Files::of(dir, &id).remove();
    }
}

/// Removes every record in this process's directory of a run of `owner` whose cgroup is gone
/// (the guardian's takeover has just removed them).
pub(crate) fn remove_taken_over(owner: crate::Identity, pidns: u64) {
    let Some(dir) = super::dir::own() else {
        return;
    };
    let uid = rustix::process::geteuid().as_raw();
    for found in read_dir(dir, uid) {
        let r = &found.record;
        if r.id.owner() == owner
            && r.id.pidns() == pidns
            && r.phase != Phase::Kept
            && r.cgroup.as_ref().is_some_and(|c| !c.exists())
        {
            Files::of(dir, &r.id).remove();
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

    #[test]
    fn records_read_back_only_under_their_own_name_and_user() {
        let dir = std::env::temp_dir().join(format!("reaper-unit-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let r = record("1-2-3-4");
        write(&Files::of(&dir, &r.id).record, &r).unwrap();
        let back = read_dir(&dir, uid);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].record, r);
        assert!(read_dir(&dir, uid + 1).is_empty(), "another user's");
        // Copied under another run's name: not believed.
        let other: RunId = "1-2-3-5".parse().unwrap();
        std::fs::copy(
            Files::of(&dir, &r.id).record,
            Files::of(&dir, &other).record,
        )
        .unwrap();
        assert!(read_one(&dir, uid, &other).is_none());
        // Another boot's owner is gone, whoever has its pid now.
        let mut old = record("1-2-3-6");
        old.boot_id = "another boot".into();
        assert_eq!(owner(&old), Owner::Gone);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn notes_say_how() {
        let dir = std::env::temp_dir().join(format!("reaper-unit-note-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let id: RunId = "1-2-3-4".parse().unwrap();
        assert_eq!(read_note(&dir, &id), None);
        write_note(&dir, &id, rustix::process::geteuid().as_raw(), How::Kill);
        assert_eq!(read_note(&dir, &id), Some(How::Kill));
        Files::of(&dir, &id).remove();
        assert_eq!(read_note(&dir, &id), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
