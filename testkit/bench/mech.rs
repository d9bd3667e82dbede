//! The kernel mechanisms behind the cgroup rows, each timed alone after an idle pause, the way a
//! single `reaper run` meets them: a batch of back-to-back runs hides a cost that is really an
//! RCU grace period (`cgroup.procs` writes take a percpu rwsem for writing, which waits for one
//! unless another writer held it moments ago; closing an inotify instance waits for an SRCU
//! grace period), and one isolated run pays it in full.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::stats::Summary;
use crate::sys::{self, BenchCgroup, Cmd, Join, Stdio};
use crate::Setup;

/// Between two samples: long enough for the previous grace period's state to settle.
const IDLE: Duration = Duration::from_millis(30);

pub struct MechRow {
    pub name: &'static str,
    pub us: Option<Summary>,
    pub note: Option<String>,
}

/// Median (min–max) µs of `samples` runs of `op`, or why it could not run.
type Timed = (Option<Summary>, Option<String>);

fn timed(samples: usize, mut op: impl FnMut() -> Result<Duration, String>) -> Timed {
    let mut v = Vec::new();
    for _ in 0..samples {
        std::thread::sleep(IDLE);
        match op() {
            Ok(d) => v.push(d.as_secs_f64() * 1e6),
            Err(e) => return (None, Some(e)),
        }
    }
    (Summary::of(&v), None)
}

fn spawn_wait(cmd: &Cmd, join: Join, io: &Stdio) -> Result<(), String> {
    let pid = sys::spawn(cmd, join, io).map_err(|e| e.to_string())?;
    let st = sys::wait(pid).map_err(|e| e.to_string())?;
    sys::exited_ok(st)
        .then_some(())
        .ok_or_else(|| sys::describe_status(st))
}

pub fn bench(s: &Setup, samples: usize) -> Vec<MechRow> {
    let null = s.null.as_raw_fd();
    let io = Stdio {
        stdin: null,
        stdout: null,
        stderr: null,
    };
    let t = Cmd::new(&["/bin/true"]);
    let parent = s.cgroup.as_ref().map(|c| c.own_dir.clone());
    let parent = parent.as_deref();
    let need = |p: Option<&Path>| {
        p.map(Path::to_path_buf)
            .ok_or("no cgroup2 mount".to_owned())
    };

    let mut rows = Vec::new();
    let mut add = |name: &'static str, d: Timed| {
        rows.push(MechRow {
            name,
            us: d.0,
            note: d.1,
        })
    };

    add(
        "fork + exec + wait of `/bin/true`",
        timed(samples, || {
            let t0 = Instant::now();
            spawn_wait(&t, Join::Nothing, &io)?;
            Ok(t0.elapsed())
        }),
    );
    add(
        "mkdir + rmdir of an empty cgroup",
        timed(samples, || {
            let p = need(parent)?;
            let t0 = Instant::now();
            let cg = BenchCgroup::create(&p).map_err(|e| e.to_string())?;
            cg.remove().map_err(|e| e.to_string())?;
            let d = t0.elapsed();
            drop(cg);
            Ok(d)
        }),
    );
    add(
        "one `cgroup.procs` write (moving a sleeping child into a fresh cgroup)",
        timed(samples, || {
            let p = need(parent)?;
            let cg = BenchCgroup::create(&p).map_err(|e| e.to_string())?;
            let sleeper = Cmd::new(&["/bin/sleep", "10"]);
            let pid = sys::spawn(&sleeper, Join::Nothing, &io).map_err(|e| e.to_string())?;
            std::thread::sleep(IDLE);
            let t0 = Instant::now();
            let moved = std::fs::write(cg.path.join("cgroup.procs"), pid.to_string());
            let d = t0.elapsed();
            // SAFETY: plain syscall on our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = sys::wait(pid);
            moved.map_err(|e| e.to_string())?;
            drop(cg);
            Ok(d)
        }),
    );
    add(
        "mkdir + fork + join by `cgroup.procs` write + exec + wait + rmdir (what `reaper run` does)",
        timed(samples, || {
            let p = need(parent)?;
            let t0 = Instant::now();
            let cg = BenchCgroup::create(&p).map_err(|e| e.to_string())?;
            spawn_wait(&t, Join::CgroupProcs(cg.procs.as_raw_fd()), &io)?;
            cg.remove().map_err(|e| e.to_string())?;
            let d = t0.elapsed();
            drop(cg);
            Ok(d)
        }),
    );
    add(
        "mkdir + `clone3(CLONE_INTO_CGROUP)` + exec + wait + rmdir",
        timed(samples, || {
            let p = need(parent)?;
            let t0 = Instant::now();
            let cg = BenchCgroup::create(&p).map_err(|e| e.to_string())?;
            spawn_wait(&t, Join::Clone3(cg.dir.as_raw_fd()), &io)?;
            cg.remove().map_err(|e| e.to_string())?;
            let d = t0.elapsed();
            drop(cg);
            Ok(d)
        }),
    );
    add(
        "`close` of an inotify instance whose watch on `cgroup.events` saw the run's events",
        timed(samples, || {
            let p = need(parent)?;
            let cg = BenchCgroup::create(&p).map_err(|e| e.to_string())?;
            let w = crate::spawn::inotify_watch(&cg.path.join("cgroup.events"))?;
            spawn_wait(&t, Join::Clone3(cg.dir.as_raw_fd()), &io)?;
            // `populated` went 1 and back to 0: wait until the watch has the event.
            let mut pfd = libc::pollfd {
                fd: w.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: plain syscall with one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 1000) };
            let t0 = Instant::now();
            drop(w);
            let d = t0.elapsed();
            drop(cg);
            Ok(d)
        }),
    );
    add(
        "`close` of a `cgroup.events` fd that was polled through the same run",
        timed(samples, || {
            let p = need(parent)?;
            let cg = BenchCgroup::create(&p).map_err(|e| e.to_string())?;
            let mut ev = cg.events().map_err(|e| e.to_string())?;
            spawn_wait(&t, Join::Clone3(cg.dir.as_raw_fd()), &io)?;
            ev.wait_empty(Duration::from_secs(1))
                .map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            drop(ev);
            let d = t0.elapsed();
            drop(cg);
            Ok(d)
        }),
    );
    sys::reap_strays();
    rows
}
