//! The process table from `/proc` (Linux): one `stat` file per process, no fork, about a
//! millisecond for a hundred processes.

use std::io;

use crate::linux::procfs;
use crate::proctable::{not_shown, sanity_check, ProcStat, ProcessTable};

pub struct ProcTable;

impl ProcessTable for ProcTable {
    fn snapshot(&mut self) -> io::Result<Vec<ProcStat>> {
        let dir = list()?;
        let rows: Vec<ProcStat> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            // A process that exited since the listing has no stat file any more: it is simply
            // not in this snapshot.
            .filter_map(|pid| procfs::stat(pid).ok())
            .collect();
        sanity_check(&rows, "/proc")?;
        Ok(rows)
    }

    fn lookup(&mut self, pid: i32) -> io::Result<Option<ProcStat>> {
        match procfs::stat(pid) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// From `/proc/PID/task/*/children` (every thread's: a subreaper's orphans may be parented
    /// to any of its threads). `None` when the kernel has no such file (CONFIG_PROC_CHILDREN).
    fn children(&mut self, pid: i32) -> io::Result<Option<Vec<i32>>> {
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let task = task?.path();
            match std::fs::read_to_string(task.join("children")) {
                Ok(text) => out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                ),
                // A thread that exited since the listing has no children left to list.
                Err(_) if !task.exists() => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(out))
    }

    /// The listing and reaper's own `stat`, as a snapshot would read them, without reading
    /// every other process's.
    fn probe(&mut self) -> io::Result<()> {
        let rows = list()?
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<i32>().is_ok())
            })
            .count();
        let me = rustix::process::getpid().as_raw_nonzero().get();
        match procfs::stat(me) {
            Ok(_) => Ok(()),
            Err(_) => Err(not_shown("/proc", rows, me)),
        }
    }

    fn name(&self) -> &'static str {
        "/proc"
    }
}

fn list() -> io::Result<std::fs::ReadDir> {
    std::fs::read_dir("/proc")
        .map_err(|e| io::Error::new(e.kind(), format!("cannot list /proc: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;

    #[test]
    fn snapshot_shows_this_process_with_its_identity() {
        let rows = ProcTable.snapshot().unwrap();
        let Identity {
            pid,
            starttime: start,
        } = procfs::self_identity().unwrap();
        let me = rows.iter().find(|e| e.pid == pid).unwrap();
        assert_eq!(me.starttime, start);
        assert_eq!(me.pgid, crate::process::own_process_group());
        assert!(!me.is_dead());
        // The same process; its state (R, S) may change between two reads.
        let again = ProcTable.lookup(pid).unwrap().expect("this process");
        assert_eq!(again.identity(), me.identity());
        assert_eq!(
            (again.ppid, again.pgid, again.sid),
            (me.ppid, me.pgid, me.sid)
        );
        assert_eq!(ProcTable.lookup(i32::MAX).unwrap(), None);
        ProcTable.probe().unwrap();
    }

    #[test]
    fn children_lists_a_child_until_it_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let me = std::process::id() as i32;
        let listed = |t: &mut ProcTable| t.children(me).unwrap().unwrap().contains(&pid);
        assert!(listed(&mut ProcTable));
        child.kill().unwrap();
        // A zombie is still a child.
        while !matches!(procfs::stat(pid), Ok(s) if s.is_dead()) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(listed(&mut ProcTable));
        child.wait().unwrap();
        assert!(!listed(&mut ProcTable));
    }
}
