//! Whether a job-control stop came from outside the run. The tree must not be able to stop its
//! own supervisor: a stop that reaper passes on ends with reaper's own job stopped, and a
//! stopped reaper enforces nothing. So a stop is taken only from the terminal (the kernel sent
//! it) or from a process proven to be none of the run's; the sender's pid is a fact the kernel
//! wrote (`kill`, `tgkill`), but the process now behind it may have started since (a reused
//! pid), and the run's processes are more than its cgroup's (an escapee, a tree without a
//! cgroup): everything that is not proven outside is taken for inside.

use std::time::Duration;

use reaper_platform::job_control::StopSender;

use super::Run;
use crate::containment::Backend;

impl Run {
    /// Whether a stop from `sender` may stop reaper's job: the terminal's, or a process's that
    /// is alive, started before the signal came, is not a process of the run and does not
    /// descend from this process (orphans of the tree come back to it, a child subreaper). A
    /// sender this PID namespace does not see (pid 0) lives in a namespace above it, where no
    /// process of the run is.
    pub(crate) fn sent_from_outside(&self, sender: StopSender) -> bool {
        match sender {
            StopSender::Terminal => true,
            StopSender::Unproven => false,
            StopSender::Process { pid: 0, .. } => true,
            StopSender::Process { pid, at } => self.process_is_outside(pid, at),
        }
    }

    #[cfg(target_os = "linux")]
    fn process_is_outside(&self, pid: i32, at: Duration) -> bool {
        use reaper_platform::linux::procfs;
        let Ok(st) = procfs::stat(pid) else {
            return false;
        };
        // Start times count clock ticks since boot, rounded down: one in the tick the signal
        // came in may be later than the signal.
        let hz = u128::from(rustix::param::clock_ticks_per_second());
        let tick = at.as_nanos().saturating_mul(hz) / 1_000_000_000;
        if st.is_dead() || u128::from(st.starttime) >= tick {
            return false;
        }
        if self.backend.pids().contains(&pid) {
            return false;
        }
        let me = rustix::process::getpid().as_raw_nonzero().get();
        if !matches!(procfs::descends_from(st.identity(), me), Ok(false)) {
            return false;
        }
        // Still the process all of the above was about.
        procfs::is_alive(pid, st.starttime)
    }

    /// Without `/proc`, only the run's own processes as the backend knows them are refused.
    #[cfg(not(target_os = "linux"))]
    fn process_is_outside(&self, pid: i32, _at: Duration) -> bool {
        !self.backend.pids().contains(&pid)
    }
}
