//! Shared test harness: run reaper and the hostile fixture, and tell for certain whether every
//! process of a tree is dead.
//!
//! Two death oracles that cannot lie: the fixture's lock file (every process of the tree holds
//! a shared flock through an inherited fd; `LOCK_EX|LOCK_NB` succeeds only when all are gone,
//! zombies included since they have closed their fds) and its pid file (`PID STARTTIME ROLE …`
//! lines, to name survivors). Whatever a test leaves alive is killed on drop, through pidfds
//! opened on `(pid, starttime)`, and the test fails.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use reaper_platform::linux::procfs;

pub fn reaper() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reaper"));
    c.env("RUST_LOG", "warn");
    c
}

/// `reaper-fixture` (a binary of the testkit package, built if needed).
pub fn fixture_bin() -> &'static str {
    reaper_testkit::fixture()
}

/// The cgroup2 mount, when there is one.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split(' ').next()? == "cgroup2")
            .then(|| PathBuf::from(pre.split(' ').nth(4).unwrap_or("")))
    })
}

/// GNU coreutils' timeout, where Debian installs it.
pub const GNU_TIMEOUT: &str = "/usr/bin/timeout";
/// Where glibc's locale sources are (what localedef -i reads).
pub const LOCALE_SOURCES: &str = "/usr/share/i18n/locales";

/// The cgroup v1 freezer's mount (hybrid and v1 hosts), when there is one.
pub fn v1_freezer_mount() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut f = post.split(' ');
        (f.next()? == "cgroup" && f.nth(1)?.split(',').any(|o| o == "freezer"))
            .then(|| PathBuf::from(pre.split(' ').nth(4).unwrap_or("")))
    })
}

/// Whether the cgroup backend can work here (asks `reaper doctor` once per test binary).
pub fn cgroup_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        let out = reaper().args(["doctor", "--json"]).output();
        match out {
            Ok(o) => serde_json::from_slice::<serde_json::Value>(&o.stdout)
                .map(|v| v["cgroup_writable"] == true && v["cgroup_kill"] == true)
                .unwrap_or(false),
            Err(_) => false,
        }
    })
}

/// What a test may need that a machine may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The cgroup backend (a writable cgroup2 directory with `cgroup.kill`).
    Cgroup,
    /// `unshare --pid --fork --mount-proc` (root).
    PidNamespace,
    /// util-linux `script`, for a pseudo-terminal.
    Script,
    /// `python3`, for hostile clients and parents written in Python.
    Python3,
    /// Running as root (the escapes a sandbox must stop are root's).
    Root,
    /// A program on `PATH` (or a path) that answers `--version`.
    Program(&'static str),
    /// The real Codex CLI ([`real_codex`]).
    Codex,
    /// A cgroup v1 freezer hierarchy and root to make a cgroup in it: a process it freezes
    /// outlives SIGKILL until thawed.
    Freezer,
    /// GNU coreutils 9.1's timeout at /usr/bin/timeout (Debian 12's), the one reaper's face
    /// follows.
    GnuTimeout91,
    /// localedef(1) and the glibc locale sources (Debian: `locales`), to build a locale.
    LocaleSources,
}

/// The real Codex CLI: `$REAPER_REAL_CODEX`, else where ci/install-deps.sh puts it.
pub fn real_codex() -> PathBuf {
    std::env::var_os("REAPER_REAL_CODEX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/reaper-ci/codex/node_modules/.bin/codex")
        })
}

impl Need {
    /// The name `REAPER_REQUIRE` uses.
    pub fn name(self) -> &'static str {
        match self {
            Need::Cgroup => "cgroup",
            Need::PidNamespace => "pidns",
            Need::Script => "script",
            Need::Python3 => "python3",
            Need::Root => "root",
            Need::Program(p) => p,
            Need::Codex => "codex",
            Need::Freezer => "freezer",
            Need::GnuTimeout91 => "gnu-timeout-9.1",
            Need::LocaleSources => "locales",
        }
    }

    /// `Err(why)` when this machine lacks it.
    fn check(self) -> Result<(), &'static str> {
        let ok = match self {
            Need::Cgroup => cgroup_usable(),
            Need::PidNamespace => Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc", "true"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            Need::Script => Command::new("script")
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .is_ok(),
            Need::Python3 => Command::new("python3")
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            Need::Root => rustix::process::geteuid().is_root(),
            Need::Codex => Command::new(real_codex())
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            Need::Freezer => rustix::process::geteuid().is_root() && v1_freezer_mount().is_some(),
            Need::GnuTimeout91 => Command::new(GNU_TIMEOUT)
                .arg("--version")
                .env("LC_ALL", "C")
                .output()
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .is_some_and(|l| l == "timeout (GNU coreutils) 9.1")
                }),
            Need::LocaleSources => {
                Path::new(LOCALE_SOURCES).join("de_DE").exists()
                    && Command::new("localedef")
                        .arg("--version")
                        .stdout(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success())
            }
            Need::Program(p) => Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        };
        ok.then_some(()).ok_or(match self {
            Need::Cgroup => "the cgroup backend is not usable here (see `reaper doctor`)",
            Need::PidNamespace => "cannot make a PID namespace here (`unshare --pid` needs root)",
            Need::Script => "util-linux `script` is not installed",
            Need::Python3 => "python3 is not installed",
            Need::Root => "not running as root",
            Need::Program(_) => "the program is not installed (or `--version` fails)",
            Need::Codex => "the real Codex CLI is not installed (ci/install-deps.sh)",
            Need::Freezer => "no cgroup v1 freezer hierarchy (pure cgroup v2), or not root",
            Need::GnuTimeout91 => "/usr/bin/timeout is not GNU coreutils 9.1's",
            Need::LocaleSources => "no localedef or no locale sources (Debian package locales)",
        })
    }
}

/// Whether the running test can have `need`. When it cannot, says `skipped: TEST: WHY` (and
/// appends that line to `$REAPER_TEST_SKIPS`, so ci/test.sh lists every skip by name) and the
/// test returns early — unless the machine is declared to have it: ci/test.sh puts what it found
/// into `REAPER_REQUIRE` (e.g. `cgroup pidns script`), and there a skip would be a vacuous pass,
/// so the test fails instead.
pub fn have(need: Need) -> bool {
    let Err(why) = need.check() else {
        return true;
    };
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed test)");
    let required = std::env::var("REAPER_REQUIRE")
        .is_ok_and(|r| r.split_whitespace().any(|n| n == need.name()));
    assert!(
        !required,
        "{test} needs {} ({why}), which REAPER_REQUIRE says this machine has",
        need.name()
    );
    let line = format!("skipped: {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("REAPER_TEST_SKIPS") {
        use std::io::Write as _;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
    false
}

/// A hostile tree's bookkeeping: a temp dir with the oracle lock, the pid file, the ready flag.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn new() -> Self {
        Tree {
            dir: tempfile::Builder::new()
                .prefix("reaper-test-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    pub fn oracle(&self) -> PathBuf {
        self.dir.path().join("oracle")
    }
    pub fn pids(&self) -> PathBuf {
        self.dir.path().join("pids")
    }
    pub fn ready(&self) -> PathBuf {
        self.dir.path().join("ready")
    }
    pub fn report(&self) -> PathBuf {
        self.dir.path().join("report.json")
    }

    /// `reaper-fixture --oracle … --pids … --ready … SCENARIO ARGS…` as argv.
    pub fn fixture(&self, scenario: &[&str]) -> Vec<String> {
        let mut v = vec![
            fixture_bin().to_owned(),
            "--oracle".into(),
            self.oracle().display().to_string(),
            "--pids".into(),
            self.pids().display().to_string(),
            "--ready".into(),
            self.ready().display().to_string(),
        ];
        v.extend(scenario.iter().map(|s| s.to_string()));
        v
    }

    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.ready().exists() {
            assert!(
                Instant::now() < deadline,
                "fixture tree not ready after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every process the tree recorded: (pid, starttime, role).
    pub fn recorded(&self) -> Vec<(i32, u64, String)> {
        std::fs::read_to_string(self.pids())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((
                    f.next()?.parse().ok()?,
                    f.next()?.parse().ok()?,
                    f.next().unwrap_or("").to_owned(),
                ))
            })
            .collect()
    }

    /// Recorded processes that are still alive (same start time, not a zombie).
    pub fn survivors(&self) -> Vec<String> {
        self.recorded()
            .into_iter()
            .filter(|(pid, st, _)| alive(*pid, *st))
            .map(|(pid, _, role)| {
                format!("{role} (pid {pid}, state {})", state(pid).unwrap_or('?'))
            })
            .collect()
    }

    /// The lock-file oracle: true when no process of the tree holds the lock any more.
    pub fn all_dead(&self) -> bool {
        let Ok(f) = std::fs::File::open(self.oracle()) else {
            return true;
        };
        rustix::fs::flock(
            f.as_fd(),
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )
        .is_ok()
    }

    /// Asserts the whole tree is dead (waiting briefly for the kernel to finish exits).
    pub fn assert_all_dead(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_millis(1500);
        while !self.all_dead() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let survivors = self.survivors();
        assert!(
            self.all_dead() && survivors.is_empty(),
            "{what}: survivors {survivors:?} (oracle lock held: {})",
            !self.all_dead()
        );
    }

    /// Kills whatever the tree left alive, through pidfds on (pid, starttime). Returns what it
    /// had to kill.
    pub fn kill_leftovers(&self) -> Vec<String> {
        let mut killed = Vec::new();
        for _ in 0..50 {
            let live: Vec<_> = self
                .recorded()
                .into_iter()
                .filter(|(p, s, _)| alive(*p, *s))
                .collect();
            if live.is_empty() {
                break;
            }
            for (pid, st, role) in live {
                if let Some(fd) = pidfd_checked(pid, st) {
                    let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
                    killed.push(format!("{role} (pid {pid})"));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        killed
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let killed = self.kill_leftovers();
        if !killed.is_empty() && !std::thread::panicking() {
            panic!("test left processes alive (now killed): {killed:?}");
        }
    }
}

/// `/proc/PID/stat`'s state and start time (read by the platform's parser).
pub fn stat(pid: i32) -> Option<(char, u64)> {
    procfs::stat(pid).ok().map(|s| (s.state, s.starttime))
}

/// The guardian of reaper `pid`, found by its command line `reaper guardian PID START`: as an
/// exec gives it (NUL-separated arguments), or as the forked guardian writes it over a command
/// line too short for that (one string: see src/guardian.rs `retitle`).
#[allow(dead_code)] // not every test binary looks for a guardian
pub fn guardian_of(pid: i32) -> Option<(i32, u64)> {
    let want = pid.to_string();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        let args: Vec<&str> = cmd.split(['\0', ' ']).filter(|a| !a.is_empty()).collect();
        if args.len() >= 3 && args[1] == "guardian" && args[2] == want {
            return stat(p).map(|(_, st)| (p, st));
        }
    }
    None
}

/// The inode of this process's PID namespace: the first field of the run cgroup names of a
/// reaper started by the test (`reaper-PIDNS-PID-START-SEQ`).
pub fn pidns() -> u64 {
    procfs::pid_namespace().expect("/proc/self/ns/pid")
}

/// The start of the names of the run cgroups of reaper `pid` started by the test.
pub fn run_cgroup_prefix(pid: impl std::fmt::Display) -> String {
    format!("reaper-{}-{pid}-", pidns())
}

pub fn state(pid: i32) -> Option<char> {
    stat(pid).map(|s| s.0)
}

/// Alive = exists with the same start time and is not a zombie (zombies are dead).
pub fn alive(pid: i32, starttime: u64) -> bool {
    procfs::is_alive(pid, starttime)
}

pub fn pidfd_checked(pid: i32, starttime: u64) -> Option<std::os::fd::OwnedFd> {
    let fd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid)?,
        rustix::process::PidfdFlags::empty(),
    )
    .ok()?;
    alive(pid, starttime).then_some(fd)
}

/// Sends a signal to a child we spawned and have not reaped (its pid cannot be reused).
pub fn signal_child(child: &Child, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("child pid");
    rustix::process::kill_process(pid, sig).expect("signal reaper");
}

/// Waits for a child with a deadline; kills it (and fails) if it overruns.
pub fn wait_with_deadline(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("reaper did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills everything in a cgroup a test created and removes it with its subtree (relative to dir
/// fds, so a subtree deeper than PATH_MAX goes too). The killed processes leave the cgroup only
/// once dead, and rmdir says EBUSY until then: retried for up to 5 s, then reported.
pub fn remove_test_cgroup(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match reaper_platform::linux::cgroup::Cgroup::at(dir).remove_subtree() {
            Ok(()) => break,
            Err(e) if Instant::now() >= deadline => {
                eprintln!("could not remove test cgroup {}: {e}", dir.display());
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Checks `cond` every 10 ms until it holds or `within` has passed; says whether it held.
pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// Runs reaper to completion with stdin closed, capturing output.
pub fn run_reaper<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    reaper()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run reaper")
}

/// The `--report` JSON of a run.
pub fn read_report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no report at {}: {e}", path.display()));
    serde_json::from_str(&text).expect("report is JSON")
}

/// Asserts a run left no cgroup behind and reported no survivors.
pub fn assert_clean_report(report: &serde_json::Value) {
    assert_eq!(
        report["survivors"],
        serde_json::json!([]),
        "survivors in report: {report}"
    );
    if let Some(cg) = report["cgroup"].as_str() {
        assert!(!Path::new(cg).exists(), "cgroup {cg} left behind");
    }
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
