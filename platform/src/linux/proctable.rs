//! The process table from `/proc` (Linux): one `stat` file per process, no fork, about a
//! millisecond for a hundred processes.

use std::io;

use crate::linux::procfs;
use crate::proctable::{sanity_check, ProcEntry, ProcessTable};

pub struct ProcTable;

impl ProcessTable for ProcTable {
    fn snapshot(&mut self) -> io::Result<Vec<ProcEntry>> {
        let dir = std::fs::read_dir("/proc")
            .map_err(|e| io::Error::new(e.kind(), format!("cannot list /proc: {e}")))?;
        let rows: Vec<ProcEntry> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            // A process that exited since the listing has no stat file any more: it is simply
            // not in this snapshot.
            .filter_map(|pid| procfs::stat(pid).ok())
            .map(ProcEntry::from)
            .collect();
        sanity_check(&rows, "/proc")?;
        Ok(rows)
    }

    fn lookup(&mut self, pid: i32) -> io::Result<Option<ProcEntry>> {
        match procfs::stat(pid) {
            Ok(s) => Ok(Some(s.into())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn name(&self) -> &'static str {
        "/proc"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_shows_this_process_with_its_identity() {
        let rows = ProcTable.snapshot().unwrap();
        let (pid, start) = procfs::self_identity().unwrap();
        let me = rows.iter().find(|e| e.pid == pid).unwrap();
        assert_eq!(me.starttime, start);
        assert_eq!(me.pgid, crate::process::own_process_group());
        assert!(!me.zombie);
        assert_eq!(ProcTable.lookup(pid).unwrap().as_ref(), Some(me));
        assert_eq!(ProcTable.lookup(i32::MAX).unwrap(), None);
    }
}
