//! The pgid backend, for macOS and anywhere without cgroups: the leader starts in a process
//! group of its own, and a tracker reads the process table (`/proc` on Linux, `ps` on macOS)
//! every `--poll`, remembering every process, process group and session the tree was ever seen
//! with ([`tracker`] has the rules, [`schedule`] the timing). Stopping SIGSTOPs every remembered group
//! and process until a look finds nobody new (a stopped process cannot fork or `setsid()`, so
//! its children stay findable through it), then SIGKILLs the groups (`killpg`) and the
//! processes (pidfd; on macOS the pid, its start time checked just before).
//!
//! Does not contain:
//! - A process that double-forks with `setsid()` in the middle, the middle exiting before the
//!   next look (fork, setsid, fork, exit within one poll interval): nothing of the run was ever
//!   seen in its session, and its parent is gone. On Linux, after `own_every_child` (the
//!   `reaper` binary), reaper is a child subreaper, so such an orphan becomes reaper's child,
//!   and the backend claims reaper's children born after the leader — but only while its
//!   backend is the only one in this reaper process: with several concurrent runs (`reaper
//!   mcp`) an orphan cannot be told apart (nor from another run's leader, forked but not yet
//!   registered), and the gap is open, as it always is on macOS, and in a program that did not
//!   declare every child reaper's (its own children are never claimed).
//! - Nothing keeps the tree together if reaper itself is SIGKILLed: remembered groups live only
//!   in reaper's memory (the guardian covers cgroups only).
//! - A process that joins a process group the run did not create (reaper's own, the login
//!   shell's, another job's: any group of reaper's session, where the leader starts) is killed
//!   by pid only: that group is never remembered nor signalled, and its other members are not
//!   the run's.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

#[cfg(target_os = "linux")]
use reaper_platform::linux::subreaper;
use reaper_platform::process::{self, Handle};
use reaper_platform::proctable::{ProcStat, ProcessTable};
use reaper_platform::{reap, signal, Pid, Signal};
use tokio::time::Instant;

use super::{Backend, BackendKind, Capabilities, Error, Process};
pub use schedule::Schedule;
use tracker::{Adopter, Tracker};

pub mod schedule;
pub mod tracker;

/// pgid backends alive in this process, each counted from its creation until it is released,
/// and how many were ever made. Orphans adopted by reaper are attributed to a run only while
/// its backend is the only one: a backend exists before its leader is forked, so no other
/// run's leader (reaper's child, born after this run's leader) can be taken for an orphan in
/// the window between its fork and `spawned`.
static LIVE_BACKENDS: AtomicUsize = AtomicUsize::new(0);
static BACKENDS_MADE: AtomicUsize = AtomicUsize::new(0);

/// (alive, ever made): equal before and after a snapshot, with one alive, means no other
/// backend existed at any time while it was taken.
fn backend_counts() -> (usize, usize) {
    (
        LIVE_BACKENDS.load(Ordering::SeqCst),
        BACKENDS_MADE.load(Ordering::SeqCst),
    )
}

pub struct PgidBackend {
    shared: Arc<Mutex<Shared>>,
    /// The remembered groups as of the last look, readable while a look is in progress.
    groups: Arc<Mutex<Vec<i32>>>,
    schedule: Schedule,
    poller: Option<tokio::task::JoinHandle<()>>,
    /// Counted in `LIVE_BACKENDS` (from `new` until `release` or drop).
    counted: bool,
}

/// What the poller and the run's own calls share: one table, one bookkeeping.
struct Shared {
    table: Box<dyn ProcessTable>,
    tracker: Tracker,
    self_pid: i32,
    /// The members of the last look that could read the table.
    last: Vec<ProcStat>,
    /// The tracker's groups, copied after each look (the backend's `groups`).
    groups: Arc<Mutex<Vec<i32>>>,
    warned: bool,
}

impl PgidBackend {
    /// A backend whose tracker looks every `schedule` interval once the leader runs.
    pub fn new(schedule: Schedule) -> std::io::Result<Self> {
        let table = process::table()?;
        let own_pgid = process::own_process_group();
        let own_sid = process::session_of(None)?;
        let groups = Arc::new(Mutex::new(Vec::new()));
        let mut shared = Shared {
            table,
            tracker: Tracker::new(own_pgid, own_sid),
            self_pid: rustix::process::getpid().as_raw_nonzero().get(),
            last: Vec::new(),
            groups: groups.clone(),
            warned: false,
        };
        // Fail now, with the reason, rather than at the first look of a running tree.
        shared.table.probe()?;
        // Counted before the leader is forked (see `LIVE_BACKENDS`).
        LIVE_BACKENDS.fetch_add(1, Ordering::SeqCst);
        BACKENDS_MADE.fetch_add(1, Ordering::SeqCst);
        Ok(Self {
            shared: Arc::new(Mutex::new(shared)),
            groups,
            schedule,
            poller: None,
            counted: true,
        })
    }

    fn stop_polling(&mut self) {
        if let Some(p) = self.poller.take() {
            p.abort();
        }
        if std::mem::take(&mut self.counted) {
            LIVE_BACKENDS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for PgidBackend {
    fn drop(&mut self) {
        self.stop_polling();
    }
}

impl Shared {
    /// One look: the live members and how many processes were new. If the table cannot be read
    /// (on macOS `ps` cannot even be started when a fork storm has used up the process limit),
    /// the last members stand: "nobody left" would end the run with the storm still running.
    fn look(&mut self) -> (Vec<ProcStat>, usize) {
        let found = self.look_once();
        *lock(&self.groups) = self.tracker.groups();
        found
    }

    fn look_once(&mut self) -> (Vec<ProcStat>, usize) {
        if self.look_without_the_table() {
            self.last.clear();
            return (Vec::new(), 0);
        }
        let before = backend_counts();
        match self.table.snapshot() {
            Ok(snap) => {
                let adopter = self.adopter(before);
                let table = &mut self.table;
                let o = self.tracker.observe_proved(&snap, adopter, |parent| {
                    parent_unchanged(table.as_mut(), parent)
                });
                self.last = o.members.clone();
                (o.members, o.recorded)
            }
            Err(e) => {
                if !std::mem::replace(&mut self.warned, true) {
                    tracing::warn!(
                        "cannot read the process table ({}): {e}; stopping the processes seen so far",
                        self.table.name()
                    );
                }
                (self.last.clone(), 0)
            }
        }
    }

    /// Whether a whole look would find nobody, told from a few files when the tracker allows
    /// ([`Tracker::quick_look`]): the leader's pid does not name the leader, no remembered
    /// group has a member (`kill(-pgid, 0)`; zombies count), and reaper, when adopting, has no
    /// child born after the leader. In that order: a member that exits before its group is
    /// probed has left its children to reaper (the orphans' subreaper) before reaper's
    /// children are listed. If so, the bookkeeping is updated as that look would have updated
    /// it. A whole look reads one `stat` per process on the machine; this one, a few.
    fn look_without_the_table(&mut self) -> bool {
        let Some((leader, groups)) = self.tracker.quick_look() else {
            return false;
        };
        let before = backend_counts();
        let at_leaders_pid = match self.table.lookup(leader.pid) {
            Ok(None) => None,
            Ok(Some(e)) if e.starttime != leader.starttime => Some(e.starttime),
            _ => return false,
        };
        let mut started = std::collections::HashMap::new();
        for g in groups {
            let Some(pgid) = Pid::from_raw(g) else {
                return false;
            };
            if !matches!(signal::group_has_members(pgid), Ok(false)) {
                return false;
            }
            // A group whose number a live process holds, with another start time than its
            // founder's, is forgotten as a whole look would.
            // (The leader's group is named after its pid, just looked up.)
            let now = if g == leader.pid {
                at_leaders_pid
            } else {
                match self.table.lookup(g) {
                    Ok(e) => e.map(|e| e.starttime),
                    Err(_) => return false,
                }
            };
            if let Some(now) = now {
                started.insert(g, now);
            }
        }
        if let Some(a) = self.adopter(before) {
            let Ok(Some(children)) = self.table.children(a.pid) else {
                return false;
            };
            // Adopted are the children born after the leader (the guardian is older).
            for c in children {
                match self.table.lookup(c) {
                    Ok(None) => {}
                    Ok(Some(e)) if e.starttime < leader.starttime => {}
                    _ => return false,
                }
            }
        }
        self.tracker.observe_nobody(&started);
        true
    }

    /// reaper as child subreaper receives the tree's orphans; they are this run's only if this
    /// process declared every child reaper's (`own_every_child`: else a child born after the
    /// leader may be the program's own), and no other run could have left them, nor forked its
    /// leader, while the snapshot was taken (`before`: the census just before it).
    fn adopter(&self, before: (usize, usize)) -> Option<Adopter> {
        #[cfg(target_os = "linux")]
        let adopting = reap::reaps_every_child()
            && subreaper::is_subreaper()
            && before.0 == 1
            && backend_counts() == before;
        // macOS has no subreaper: orphans go to launchd, out of reaper's reach.
        #[cfg(not(target_os = "linux"))]
        let adopting = {
            let _ = before;
            false
        };
        adopting.then_some(Adopter { pid: self.self_pid })
    }
}

/// Whether `parent` still holds its pid, asked after a snapshot: `/proc` is read one process
/// at a time, so a parent's pid may have been reused by the time its children's rows were
/// read. A zombie still holds it. `ps` on macOS reads the table at one instant (one sysctl).
fn parent_unchanged(table: &mut dyn ProcessTable, parent: tracker::Identity) -> bool {
    #[cfg(target_os = "linux")]
    return matches!(table.lookup(parent.pid), Ok(Some(e)) if e.starttime == parent.starttime);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (table, parent);
        true
    }
}

fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic during a look leaves valid (if one look stale) bookkeeping behind.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

fn member(e: ProcStat) -> Process {
    Process {
        pid: e.pid,
        starttime: e.starttime,
        comm: e.comm,
    }
}

/// `killpg`, for a group the tracker remembered (one the run created, never reaper's own).
fn signal_group(pgid: i32, sig: Signal) {
    let Some(pid) = Pid::from_raw(pgid) else {
        return;
    };
    if let Err(e) = signal::to_process_group(pid, sig) {
        tracing::debug!("signal to process group {pgid}: {e}");
    }
}

/// The poller: looks on `schedule` until the backend is dropped or released. Each look runs on
/// the blocking pool: reading `/proc` takes about a millisecond, running `ps` tens.
async fn poll(shared: Weak<Mutex<Shared>>, mut schedule: Schedule) {
    let mut wait = schedule.first();
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let began = Instant::now();
        let Ok(found) = tokio::task::spawn_blocking(move || lock(&shared).look().1).await else {
            return;
        };
        // Never spend more than a quarter of the time reading the table: on a busy Mac one
        // `ps` alone takes tens of milliseconds.
        wait = schedule.next(found > 0).max(began.elapsed() * 3);
    }
}

impl Backend for PgidBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Pgid
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            atomic_kill: false,
            exact_emptiness: false,
            // Each run's tracker follows its own leader's tree, by its own process group and
            // the groups and sessions it moves to. On macOS too: there reaper never adopts
            // orphans, so a fast double-fork escapes with one run as with many.
            isolates_concurrent_runs: true,
            spawns_leader_inside: false,
        }
    }

    fn kill_label(&self) -> &'static str {
        super::VIA_GROUP_AND_HANDLE
    }

    /// Nothing: the spawn gives every leader a process group of its own (`setpgid(0, 0)`, or
    /// `setsid` for a leader that holds no terminal), what the tree does not move out of and one
    /// `killpg` reaches atomically.
    fn prepare(&self, _cmd: &mut Command) {}

    fn spawned(&mut self, leader: Pid) {
        let pid = leader.as_raw_nonzero().get();
        {
            let mut s = lock(&self.shared);
            s.tracker.set_leader(pid, pid);
            *lock(&s.groups) = s.tracker.groups();
            // The leader is our unreaped child, so its pid is its until we reap it: take its
            // start time now, from its own entry. A whole look would block the runtime thread
            // for as long as the table takes to read (tens of ms beside a fork storm), and the
            // signals reaper gets meanwhile would be merged into one.
            match s.table.lookup(pid) {
                Ok(Some(e)) => s.tracker.leader_started(e.starttime),
                Ok(None) => tracing::debug!("leader {pid} already gone before its first look"),
                Err(e) => tracing::debug!("leader {pid}: {e}; identified at the first look"),
            }
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                self.poller = Some(rt.spawn(poll(Arc::downgrade(&self.shared), self.schedule)))
            }
            Err(_) => tracing::debug!("no async runtime: the pgid tracker looks only when asked"),
        }
    }

    fn members(&self) -> Vec<Process> {
        lock(&self.shared)
            .look()
            .0
            .into_iter()
            .map(member)
            .collect()
    }

    fn signal_all(&self, sig: Signal) -> Vec<Process> {
        super::signal_each(self.members(), sig)
    }

    /// SIGSTOP the remembered groups and every member, look again until a look finds nobody
    /// new, then SIGKILL the groups and the members.
    fn kill_all(&self) -> Vec<Process> {
        // The groups first, without waiting for a look in progress (the poller's, which a fork
        // storm makes long, while the storm grows): a stopped group forks no more.
        for g in lock(&self.groups).clone() {
            signal_group(g, Signal::STOP);
        }
        let mut s = lock(&self.shared);
        let stopped = super::sigstop::stop(|round| {
            // The first round starts from the last look's members (the stop sequence looked
            // just before): a stopped process stays findable, and the pass ends only when a
            // look of its own finds nobody new. Saves one whole-table read per stop.
            let members = if round == 0 && !s.last.is_empty() {
                s.last.clone()
            } else {
                s.look().0
            };
            for g in s.tracker.groups() {
                signal_group(g, Signal::STOP);
            }
            members.into_iter().map(member).collect()
        });
        for g in s.tracker.groups() {
            signal_group(g, Signal::KILL);
        }
        let killed = stopped.kill();
        drop(s);
        reap::reap_orphans();
        killed
    }

    /// Reading the whole table costs about a millisecond per hundred processes, so between two
    /// looks only the members' pidfds are watched: the table is read again as soon as one of
    /// them exits, or after a poll interval (a member may have forked).
    async fn wait_empty(&mut self, deadline: Instant) -> bool {
        loop {
            // Orphans adopted by reaper (Linux) die as reaper's children: reap them.
            reap::reap_orphans();
            let members = self.members();
            if members.is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            let fds: Vec<Handle> = members
                .iter()
                .filter_map(|m| Handle::open_checked(m.pid, m.starttime))
                .collect();
            let next_look = deadline.min(Instant::now() + self.schedule.slow());
            while fds.len() == members.len()
                && !Handle::any_exited(&fds)
                && Instant::now() < next_look
            {
                tokio::time::sleep_until(next_look.min(Instant::now() + LOOK_AGAIN)).await;
            }
        }
    }

    fn release(&mut self) -> Result<(), Error> {
        self.stop_polling();
        Ok(())
    }
}

/// How often the members' pidfds are checked while waiting for the tree to empty.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(5);

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Set in the copy of the test binary that runs a test alone (see [`alone`]).
    const ALONE: &str = "REAPER_PGID_TEST_ALONE";

    /// Whether this is the copy that runs `name` alone; if not, runs that copy and checks it
    /// passed. Adoption depends on process-wide state (being a child subreaper, the number of
    /// pgid backends alive), which other tests of this binary would share.
    fn alone(name: &str) -> bool {
        if std::env::var_os(ALONE).is_some() {
            return true;
        }
        let exe = std::env::current_exe().expect("the test binary's path");
        let out = Command::new(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(ALONE, "1")
            .output()
            .expect("run the test binary again");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{name} alone: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        false
    }

    fn sleeper(backend: &PgidBackend) -> std::process::Child {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        backend.prepare(&mut cmd);
        cmd.spawn().expect("spawn sleep")
    }

    fn pid_of(child: &std::process::Child) -> Pid {
        Pid::from_raw(child.id() as i32).expect("a child's pid is positive")
    }

    fn pids(members: &[Process]) -> Vec<i32> {
        members.iter().map(|m| m.pid).collect()
    }

    /// Issue 10 (settled): in `reaper mcp --containment pgid`, call A's tracker adopted reaper's
    /// children born after A's leader while A was the only run counted, and a run was counted
    /// only from `spawned`: call B's leader, forked but not yet registered, was taken for A's
    /// orphan (with its group), so A's stop would have killed B's tree. A backend now counts
    /// from its creation, before its leader is forked.
    #[test]
    fn another_runs_leader_is_not_adopted_before_it_is_registered() {
        if !alone(
            "containment::pgid::tests::another_runs_leader_is_not_adopted_before_it_is_registered",
        ) {
            return;
        }
        crate::run::own_every_child().expect("become a child subreaper");
        let schedule = Schedule::new(Duration::from_millis(5), Duration::from_millis(50));
        let mut a = PgidBackend::new(schedule).expect("backend A");
        let mut leader_a = sleeper(&a);
        a.spawned(pid_of(&leader_a));
        assert_eq!(pids(&a.members()), vec![leader_a.id() as i32]);
        // Call B has made its backend and forked its leader; `spawned` has not run yet.
        let mut b = PgidBackend::new(schedule).expect("backend B");
        let mut leader_b = sleeper(&b);
        let seen_by_a = pids(&a.members());
        b.spawned(pid_of(&leader_b));
        let seen_by_b = pids(&b.members());
        for c in [&mut leader_a, &mut leader_b] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert_eq!(
            seen_by_a,
            vec![leader_a.id() as i32],
            "A adopted B's leader"
        );
        assert_eq!(seen_by_b, vec![leader_b.id() as i32]);
        assert!(!a
            .shared
            .lock()
            .map(|s| s.tracker.groups().contains(&(leader_b.id() as i32)))
            .unwrap_or(true));
    }

    /// Issue 16: the look that reads a few files instead of the whole table finds what a whole
    /// look finds. A leader that leaves an orphan in a session of its own and exits: its group
    /// is empty, but the orphan, reaper's child, is adopted, so a whole look is taken and claims
    /// it. Once the orphan is gone, the short look answers alone, with nobody.
    #[test]
    fn a_look_without_the_table_still_claims_an_adopted_orphan() {
        if !alone(
            "containment::pgid::tests::a_look_without_the_table_still_claims_an_adopted_orphan",
        ) {
            return;
        }
        crate::run::own_every_child().expect("become a child subreaper");
        let schedule = Schedule::new(Duration::from_millis(5), Duration::from_millis(50));
        let mut b = PgidBackend::new(schedule).expect("backend");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "setsid sleep 30 & exit 0"]);
        b.prepare(&mut cmd);
        let mut leader = cmd.spawn().expect("spawn sh");
        b.spawned(pid_of(&leader));
        leader.wait().expect("reap the leader");
        // The orphan, once it has left the leader's group for a session of its own.
        let me = std::process::id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let orphan = loop {
            let settled = reaper_platform::linux::procfs::children(me)
                .into_iter()
                .find(|&c| matches!(process::stat(c), Ok(s) if s.sid == c && s.comm == "sleep"));
            if let Some(c) = settled {
                break c;
            }
            assert!(std::time::Instant::now() < deadline, "no orphan in 10 s");
            std::thread::yield_now();
        };
        let short = lock(&b.shared).look_without_the_table();
        let seen = pids(&b.members());
        if let Some(fd) = Pid::from_raw(orphan).and_then(|p| Handle::open(p).ok()) {
            let _ = signal::to_handle(&fd, Signal::KILL);
        }
        // SAFETY: waitpid(2) on our own child (adopted), with a null status pointer.
        unsafe { libc::waitpid(orphan, std::ptr::null_mut(), 0) };
        assert!(!short, "the short look missed the adopted orphan");
        assert_eq!(seen, vec![orphan]);
        // The orphan's group and session stay remembered until two whole looks found them
        // empty; from then on the short look answers.
        let mut quick = false;
        for _ in 0..3 {
            if lock(&b.shared).look_without_the_table() {
                quick = true;
                break;
            }
            assert!(b.members().is_empty());
        }
        assert!(quick, "the short look never answered");
    }
}
