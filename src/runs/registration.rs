//! The owner's side of a run's discoverability: its record written and kept true, its control
//! socket bound, both removed with the run — and, once per process, the sweep of records whose
//! run is over.

use std::path::PathBuf;
use std::sync::Arc;

use super::control::Control;
use super::dir::{self, Dir};
use super::record::{self, How, Names, Phase, RunRecord};
use crate::naming::RunId;
use crate::{Outcome, StopReason};

/// A run, recorded: removed with the run (or when dropped).
pub(crate) struct Registration {
    names: Names,
    dir: &'static Dir,
    record: RunRecord,
    /// Requests from other processes; `None` when the socket could not be bound.
    pub control: Option<Arc<Control>>,
    /// Whether the files are to stay (a kept run's record).
    keep_files: bool,
}

impl Registration {
    /// Records `record` in this process's records directory and binds its control socket
    /// there. `None` when there is no directory to record it in, or the record cannot be
    /// written (the run goes on, unrecorded: `reaper ps` does not show it).
    pub(crate) fn new(mut record: RunRecord) -> Option<Registration> {
        let dir = dir::own()?;
        record::fit(&mut record);
        sweep_once(dir);
        let names = Names::of(&record.id);
        if let Err(e) = record::write(dir, &record) {
            tracing::debug!("run {} not recorded: {e}", record.id);
            return None;
        }
        let control = match Control::bind(dir, &names.socket, record.uid) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::debug!("run {}: no control socket: {e}", record.id);
                None
            }
        };
        Some(Registration {
            names,
            dir,
            record,
            control,
            keep_files: false,
        })
    }

    /// The run's id.
    pub(crate) fn id(&self) -> RunId {
        self.record.id
    }

    /// The run is now in `phase` (stopping: for `reason`).
    pub(crate) fn phase(&mut self, phase: Phase, reason: Option<StopReason>) {
        if self.record.phase == phase && self.record.stop_reason == reason {
            return;
        }
        self.record.phase = phase;
        self.record.stop_reason = reason;
        if let Err(e) = record::write(self.dir, &self.record) {
            tracing::debug!("run {}: record not updated: {e}", self.record.id);
        }
    }

    /// How the run was ended from outside while this process could not answer, if it was.
    pub(crate) fn ended_from_outside(&self) -> Option<How> {
        record::read_note(self.dir, &self.record.id)
    }

    /// The run is over: whoever asked it to stop is told how it ended; its files go.
    pub(crate) fn ended(self, outcome: &Outcome) {
        if let Some(c) = &self.control {
            c.done(outcome);
        }
    }

    /// The run lives on outside reaper (`keep`): its record stays, saying where, until that
    /// cgroup is empty; without one, nothing is left to show and the record goes.
    pub(crate) fn kept(mut self, at: Option<PathBuf>) {
        self.dir.remove(&self.names.socket);
        let Some(at) = at else { return };
        self.record.phase = Phase::Kept;
        self.record.cgroup = Some(at);
        self.record.stop_reason = None;
        if record::write(self.dir, &self.record).is_ok() {
            self.keep_files = true;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.keep_files {
            return;
        }
        self.names.remove(self.dir);
    }
}

/// Once per process at most (and once a minute for the directory, `record::sweep_due`), in
/// the background: the records in `dir` whose run is over are removed (owners SIGKILLed
/// without a guardian, kept runs whose cgroup emptied).
fn sweep_once(dir: &'static Dir) {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        if !record::sweep_due(dir) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("reaper-record-sweep".into())
            .spawn(move || {
                let n = record::sweep(dir);
                tracing::debug!("record sweep of {}: {n} removed", dir.path().display());
            });
        if let Err(e) = spawned {
            tracing::debug!("no record sweep: {e}");
        }
    });
}
