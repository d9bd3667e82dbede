//! macOS: the process table from `/bin/ps`. The parser ([`crate::proctable::ps`]) is portable
//! and tested on Linux; this file only picks the `ps` flavour and fills in the session, and
//! [`process`] watches, signals and describes one process without a pidfd or `/proc`.
//!
//! COMPILED BUT NEVER RUN IN CI: `ci/test.sh` runs `cargo check --target x86_64-apple-darwin`
//! when that target is installed; nothing here has been executed on a Mac by the test suite.
//!
//! macOS `ps` cannot print a session ID (its `sess` column is a kernel pointer that reads as 0),
//! so each row's session comes from `getsid(2)`, which XNU answers for any pid. Between the
//! `ps` snapshot and the `getsid` call a process may exit (its row is dropped: it is gone) or,
//! after a full wrap of the 99 999 pids, be replaced — too slow to matter within one look.

pub mod process;

use std::io;

use crate::identity::ProcStat;
use crate::proctable::ps::{self, PsFlavor};
use crate::proctable::ProcessTable;

/// `/bin/ps` (setuid root on macOS, so it sees every user's processes).
pub struct PsTable;

impl ProcessTable for PsTable {
    fn snapshot(&mut self) -> io::Result<Vec<ProcStat>> {
        let rows = ps::run("/bin/ps", PsFlavor::Darwin)?;
        let entries: Vec<ProcStat> = rows
            .into_iter()
            .filter_map(|r| {
                // Pid 0 (kernel_task, if listed) has no session of its own to ask for:
                // `getsid(None)` would answer with ours.
                if r.pid <= 0 {
                    return None;
                }
                let sid = crate::group::session_of(Some(r.pid)).ok()?;
                Some(r.into_entry(sid))
            })
            .collect();
        crate::proctable::sanity_check(&entries, "/bin/ps")?;
        Ok(entries)
    }

    /// One process without running `ps`: `proc_pidinfo`, microseconds instead of tens of ms.
    /// Its start time is `ps`'s `lstart` (see [`process`]), so the two compare.
    fn lookup(&mut self, pid: i32) -> io::Result<Option<ProcStat>> {
        match process::stat(pid) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn name(&self) -> &'static str {
        "ps"
    }
}
