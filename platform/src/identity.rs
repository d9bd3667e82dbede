//! What names a process, on every platform: [`Identity`], its pid and start time (a pid alone
//! names a process only until it is reaped; with the start time it names it for good), and
//! [`ProcStat`], the facts about it reaper reads (`/proc/PID/stat`, `ps`, `proc_pidinfo`).

/// A process, named for good: its pid and its start time, which no later process with that pid
/// shares. Everything that remembers a process remembers this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    /// Its pid, in the PID namespace of the `/proc` (or `ps`) it was read from.
    pub pid: i32,
    /// When it started: clock ticks after boot on Linux (`/proc/PID/stat` field 22), seconds
    /// since the epoch on macOS. Only compared with values from the same source.
    pub starttime: u64,
}

/// The facts about one process reaper uses (on Linux the fields of `/proc/PID/stat`, proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// The executable name (Linux: at most 15 bytes, may contain spaces and parentheses).
    pub comm: String,
    /// `R`, `S`, `D`, `T`, `t`, `Z`, `X`, `I`, …
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// When the process started: clock ticks after boot on Linux (field 22), seconds since the
    /// epoch on macOS. Only compared with values from the same platform.
    pub starttime: u64,
}

impl ProcStat {
    /// The process this row describes, named for good.
    pub fn identity(&self) -> Identity {
        Identity {
            pid: self.pid,
            starttime: self.starttime,
        }
    }

    /// A zombie (or a dead entry) has exited: it is not a survivor.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}
