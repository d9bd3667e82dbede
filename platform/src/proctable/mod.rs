//! The process table: every process's [`ProcStat`] (pid, ppid, pgid, sid, start time, state,
//! comm), read whole. Mechanism only: which of these processes belong to a run is the pgid backend's
//! business (reaper's `containment::pgid`), not this layer's.
//!
//! Sources: `/proc` on Linux ([`crate::linux::proctable`]), `ps` on macOS
//! (`macos::PsTable`, with the parser in [`ps`], tested on Linux);
//! [`crate::process::table`] picks this platform's.

pub mod ps;

pub use crate::identity::ProcStat;

/// Where snapshots of the process table come from.
pub trait ProcessTable: Send {
    /// Every process on the machine. An error means the table could not be read at all; the
    /// caller must not take it for "nobody is left".
    fn snapshot(&mut self) -> std::io::Result<Vec<ProcStat>>;
    /// One process, if it exists. Sources that can look up a single pid cheaply (`/proc`)
    /// override this whole-table fallback.
    fn lookup(&mut self, pid: i32) -> std::io::Result<Option<ProcStat>> {
        Ok(self.snapshot()?.into_iter().find(|e| e.pid == pid))
    }
    /// The direct children of `pid` (zombies too), when this source can list them without
    /// reading the whole table (`/proc`); `None` when it cannot.
    fn children(&mut self, pid: i32) -> std::io::Result<Option<Vec<i32>>> {
        let _ = pid;
        Ok(None)
    }
    /// Fails, with the reason, when [`snapshot`](Self::snapshot) would: checked once before a
    /// run starts. Sources that can tell without reading every process override this.
    fn probe(&mut self) -> std::io::Result<()> {
        self.snapshot().map(drop)
    }
    /// For logs and `reaper doctor`: `/proc`, `ps`.
    fn name(&self) -> &'static str;
}

/// A table that does not show the calling process is not the whole table (a `ps` that failed
/// half-way, a `/proc` mounted with `hidepid`): refuse it rather than report everyone gone.
pub(crate) fn sanity_check(rows: &[ProcStat], source: &str) -> std::io::Result<()> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    if rows.iter().any(|e| e.pid == me) {
        Ok(())
    } else {
        Err(not_shown(source, rows.len(), me))
    }
}

/// The error of [`sanity_check`]: a table of `rows` rows from `source` without reaper (`me`).
pub(crate) fn not_shown(source: &str, rows: usize, me: i32) -> std::io::Error {
    std::io::Error::other(format!(
        "the process table from {source} ({rows} rows) does not show reaper itself (pid {me}); \
         cannot track processes with it"
    ))
}
