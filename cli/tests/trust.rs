//! A run's record and control socket are claims, never authority: every process of a run runs
//! as the run's user and can rewrite its record, plant links and fifos beside it, replace its
//! socket, and send orders to any socket of its user. Each test here has the tree (or a
//! sibling) do one of those — a file it writes proves it did — and checks that nothing outside
//! the run is touched, nothing is written through a link, no order from a run is obeyed, and
//! nobody waits or grows on what the tree planted.
//!
//! The hostile side is `tests/trust/hostile.py` (python3). Processes started here are ended
//! through pidfds opened on (pid, start time); cgroups made here are `reaper-test-…`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{have, reaper, Need};
use reaper::runs::RUNTIME_DIR_ENV;

const NOBODY: u32 = 65534;
const HOSTILE: &str = include_str!("trust/hostile.py");

/// A scratch directory everyone can read (uid 65534's runs read the script in it), with
/// `out/` everyone can write, and `hostile.py`.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Scratch {
        let t = tempfile::tempdir().expect("a temporary directory");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(t.path().join("hostile.py"), HOSTILE).expect("write hostile.py");
        let out = t.path().join("out");
        std::fs::create_dir(&out).expect("mkdir out");
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        Scratch(t)
    }

    fn py(&self) -> PathBuf {
        self.0.path().join("hostile.py")
    }

    fn out(&self, name: &str) -> PathBuf {
        self.0.path().join("out").join(name)
    }

    /// A records directory of root's own (`REAPER_RUNTIME_DIR`), so that no other test's run
    /// is in it.
    fn records(&self) -> PathBuf {
        let d = self.0.path().join("records");
        if !d.exists() {
            std::fs::create_dir(&d).expect("mkdir records");
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        }
        d
    }
}

/// Processes a test started, SIGKILLed through pidfds on drop (whatever the test's outcome).
#[derive(Default)]
struct Ends(Vec<(i32, u64)>);

impl Ends {
    fn add(&mut self, pid: i32) -> (i32, u64) {
        let st = common::stat(pid).map(|s| s.1).expect("a live process");
        self.0.push((pid, st));
        (pid, st)
    }
}

impl Drop for Ends {
    fn drop(&mut self) {
        for &(pid, st) in &self.0 {
            if let Some(fd) = common::pidfd_checked(pid, st) {
                let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The file `path`, once something wrote it (the hostile side's proof it ran).
fn written(path: &Path, within: Duration) -> String {
    assert!(
        common::wait_until(within, || path.exists()),
        "{} was never written: the hostile step did not run",
        path.display()
    );
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `cmd` as uid 65534 (no groups, no records directory of the test's).
fn as_nobody(cmd: &mut Command) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(cmd.get_program())
    .args(cmd.get_args())
    .env_remove(RUNTIME_DIR_ENV);
    c
}

/// `reaper run` of `python3 hostile.py ARGS…`, in the background.
fn hostile_run(s: &Scratch, flags: &[&str], args: &[&str]) -> Command {
    let mut c = reaper();
    c.args(["run", "--grace", "300ms"]).args(flags);
    // A sandbox has a /tmp of its own: the scratch directory is declared (its `out` writable).
    if flags.iter().any(|f| f.starts_with("--sandbox")) {
        c.arg("--sandbox-ro")
            .arg(s.0.path())
            .arg("--sandbox-rw")
            .arg(s.0.path().join("out"));
    }
    c.arg("--")
        .arg("python3")
        .arg(s.py())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn reaper_as(uid_env: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut c = reaper();
    c.args(args).stdin(Stdio::null());
    match uid_env {
        Some(d) => c.env(RUNTIME_DIR_ENV, d),
        None => c.env_remove(RUNTIME_DIR_ENV),
    };
    c.output().expect("reaper runs")
}

fn wait(child: &mut Child) -> std::process::ExitStatus {
    common::wait_with_deadline(child, Duration::from_secs(30))
}

fn root_python() -> bool {
    have(Need::Root) && have(Need::Python3)
}

/// The tree names an innocent process outside every run as its leader, drops its cgroup from
/// the record and deletes its socket: `reaper kill` ends the tree (it carries the run's id)
/// and never the innocent.
#[test]
fn a_rewritten_record_cannot_retarget_a_kill_to_an_outside_process() {
    if !have(Need::Python3) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let mut innocent = Command::new("setsid")
        .args(["sleep", "600"])
        .stdin(Stdio::null())
        .spawn()
        .expect("setsid sleep");
    let (ipid, istart) = ends.add(innocent.id() as i32);
    let planted = s.out("planted");
    let mut owner = hostile_run(
        &s,
        &[],
        &[
            "retarget",
            &ipid.to_string(),
            &istart.to_string(),
            planted.to_str().unwrap_or_default(),
        ],
    )
    .env(RUNTIME_DIR_ENV, s.records())
    .spawn()
    .expect("reaper run");
    ends.add(owner.id() as i32);
    let id = written(&planted, Duration::from_secs(20));
    // `ps` shows the record's claims, but not the innocent as one of the run's processes.
    let ps = reaper_as(Some(&s.records()), &["ps", "--tree", "--json"]);
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&ps.stdout).expect("JSON");
    let listed: Vec<i64> = runs
        .iter()
        .flat_map(|r| r["processes"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["pid"].as_i64())
        .collect();
    assert!(
        !listed.contains(&i64::from(ipid)),
        "ps lists the innocent as the run's: {listed:?}"
    );
    let o = reaper_as(Some(&s.records()), &["kill", &id]);
    assert!(
        common::alive(ipid, istart),
        "reaper kill killed the process the record named: {}",
        common::stderr(&o)
    );
    assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
    wait(&mut owner);
    let _ = innocent.kill();
    let _ = innocent.wait();
}

/// Inside a PID namespace, the tree names PID 1 as its leader: `reaper kill` stops and kills
/// nothing outside the run (neither PID 1's other children nor the caller's ancestors).
#[test]
fn pid_1_is_never_taken_for_a_runs_leader() {
    if !have(Need::PidNamespace) || !have(Need::Python3) {
        return;
    }
    let s = Scratch::new();
    let d = s.0.path();
    let script = r#"
        set -u
        D=$1; REAPER=$2; PY=$3
        sleep 600 & innocent=$!
        mkdir -m 700 $D/ns-records
        export REAPER_RUNTIME_DIR=$D/ns-records
        $REAPER run --grace 300ms -- python3 $PY retarget 1 "$(cut -d' ' -f22 /proc/1/stat)" $D/out/planted &
        owner=$!
        i=0; while [ ! -e $D/out/planted ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
        $REAPER kill "$(cat $D/out/planted)" 2>$D/out/kill.err; echo $? > $D/out/kill.code
        if kill -0 $innocent 2>/dev/null; then echo alive > $D/out/innocent; else echo dead > $D/out/innocent; fi
        kill -9 $innocent 2>/dev/null
        wait $owner
        echo $? > $D/out/owner.code
    "#;
    let mut ns = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", script, "sh"])
        .arg(d)
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .arg(s.py())
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare");
    let status = common::wait_with_deadline(&mut ns, Duration::from_secs(60));
    let innocent = written(&s.out("innocent"), Duration::ZERO);
    let kill_err = std::fs::read_to_string(s.out("kill.err")).unwrap_or_default();
    assert_eq!(
        innocent.trim(),
        "alive",
        "PID 1's other child was killed: {kill_err}"
    );
    assert!(
        status.success() && s.out("owner.code").exists(),
        "PID 1 or the owner was stopped or killed ({status:?}): {kill_err}"
    );
    assert_eq!(
        std::fs::read_to_string(s.out("kill.code"))
            .unwrap_or_default()
            .trim(),
        "0",
        "{kill_err}"
    );
}

/// uid 65534's tree names, as its leader, a process of that user's whose child is root's (a
/// login session's shape): root's `reaper kill` acts with 65534's power and through the run's
/// proof — the root process and its parent survive, the tree dies.
#[test]
fn root_ending_a_users_run_has_no_more_power_than_the_user() {
    if !root_python() || !have(Need::Program("setpriv")) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let b_file = s.out("b");
    let mut session = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sleep 600 & echo $! > {}; exec setpriv --reuid 65534 --regid 65534 --clear-groups sleep 600",
            b_file.display()
        ))
        .stdin(Stdio::null())
        .spawn()
        .expect("the session");
    let b: i32 = written(&b_file, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("a pid");
    let (bpid, bstart) = ends.add(b);
    assert!(common::wait_until(Duration::from_secs(10), || {
        reaper_platform::linux::procfs::uid(session.id() as i32) == Some(NOBODY)
    }));
    let (apid, astart) = ends.add(session.id() as i32);
    assert_eq!(reaper_platform::linux::procfs::uid(bpid), Some(0));
    let planted = s.out("planted");
    let mut owner = as_nobody(&mut hostile_run(
        &s,
        &[],
        &[
            "retarget",
            &apid.to_string(),
            &astart.to_string(),
            planted.to_str().unwrap_or_default(),
        ],
    ))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("the user's run");
    ends.add(owner.id() as i32);
    let id = written(&planted, Duration::from_secs(20));
    let o = reaper_as(None, &["kill", &id]);
    let err = common::stderr(&o);
    assert!(
        common::alive(bpid, bstart),
        "root's process in the user's session was killed: {err}"
    );
    assert!(
        common::alive(apid, astart),
        "the user's process the record named was killed: {err}"
    );
    assert_eq!(common::code(&o), 0, "{err}");
    wait(&mut owner);
    let _ = session.kill();
    let _ = session.wait();
}

/// Root under `--sandbox=pid` links the record's temporary name and the note to a root-only
/// file outside the run, then orders its own owner to stop: the owner refuses the order, and
/// nothing is ever written through the links.
#[test]
fn a_sandboxed_root_tree_cannot_write_through_a_link() {
    if !root_python() || !have(Need::Cgroup) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let victim = s.0.path().join("victim");
    std::fs::write(&victim, "precious").expect("the victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let answer = s.out("answer");
    let report = s.out("report.json");
    let mut owner = hostile_run(
        &s,
        &[
            "--sandbox=pid",
            "--report",
            report.to_str().unwrap_or_default(),
        ],
        &[
            "send-own",
            "stop",
            victim.to_str().unwrap_or_default(),
            answer.to_str().unwrap_or_default(),
        ],
    )
    .env(RUNTIME_DIR_ENV, s.records())
    .spawn()
    .expect("reaper run");
    ends.add(owner.id() as i32);
    let said = written(&answer, Duration::from_secs(20));
    let status = wait(&mut owner);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap_or_default(),
        "precious",
        "written through the link (the owner answered {said:?})"
    );
    // Refused — or, once the sandbox hides the records directory, not even sent.
    assert!(
        said.starts_with("error:") || said.starts_with("unreachable:"),
        "the owner took its own tree's order: {said}"
    );
    assert!(
        status.success(),
        "the run did not end as its leader did: {status:?}"
    );
    assert_ne!(common::read_report(&report)["stop_reason"], "stopped");
}

/// uid 65534's tree takes its run's socket over, links the notes to a root-only file, and
/// when root's `reaper stop` asks, swaps the records directory for a link to a root-owned
/// directory: root writes nothing into either, and the tree dies all the same.
#[test]
fn a_users_tree_cannot_redirect_roots_writes() {
    if !root_python() || !have(Need::Program("setpriv")) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let victim = s.0.path().join("victim");
    std::fs::write(&victim, "precious").expect("the victim");
    let victim_dir = s.0.path().join("victim-dir");
    std::fs::create_dir(&victim_dir).expect("the victim directory");
    let ready = s.out("ready");
    let mut owner = as_nobody(&mut hostile_run(
        &s,
        &[],
        &[
            "impostor",
            "dgram",
            victim.to_str().unwrap_or_default(),
            victim_dir.to_str().unwrap_or_default(),
            ready.to_str().unwrap_or_default(),
        ],
    ))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("the user's run");
    ends.add(owner.id() as i32);
    let id = written(&ready, Duration::from_secs(20));
    let o = reaper_as(None, &["stop", "--answer-within", "2s", &id]);
    // Put the user's directory back, whatever the tree did to it.
    let users = Path::new("/tmp/reaper-65534");
    let moved = Path::new("/tmp/reaper-65534.moved");
    if moved.exists() {
        let _ = std::fs::remove_file(users);
        let _ = std::fs::rename(moved, users);
    }
    for planted in [format!("{id}.json.tmp"), format!("{id}.stopped")] {
        let _ = std::fs::remove_file(users.join(planted));
    }
    let err = common::stderr(&o);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap_or_default(),
        "precious",
        "{err}"
    );
    let inside: Vec<_> = std::fs::read_dir(&victim_dir)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        inside.is_empty(),
        "root wrote {inside:?} through the swapped directory: {err}"
    );
    assert_eq!(common::code(&o), 0, "{err}");
    assert!(
        !err.contains("by its owner"),
        "the impostor's answer was believed: {err}"
    );
    wait(&mut owner);
}

/// A tree orders its own owner to kill the run: refused, and the run goes on to end as its
/// leader does.
#[test]
fn a_run_takes_no_order_from_its_own_tree() {
    if !have(Need::Python3) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let answer = s.out("answer");
    let report = s.out("report.json");
    let mut owner = hostile_run(
        &s,
        &["--report", report.to_str().unwrap_or_default()],
        &["send-own", "kill", "-", answer.to_str().unwrap_or_default()],
    )
    .env(RUNTIME_DIR_ENV, s.records())
    .spawn()
    .expect("reaper run");
    ends.add(owner.id() as i32);
    let said = written(&answer, Duration::from_secs(20));
    let status = wait(&mut owner);
    assert!(
        said.starts_with("error:"),
        "the owner took the order: {said}"
    );
    assert!(status.success(), "{status:?} (the owner answered {said:?})");
    assert_eq!(common::read_report(&report)["stop_reason"], "exited");
}

/// Root under `--sandbox=pid` orders every other run's owner to kill: none obeys, and a
/// sibling root run lives on (until the test's own `reaper kill`, from outside, which works).
#[test]
fn a_sandboxed_run_cannot_order_a_sibling_killed() {
    if !root_python() || !have(Need::Cgroup) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let mut sibling = reaper()
        .args(["run", "--", "sleep", "600"])
        .env(RUNTIME_DIR_ENV, s.records())
        .stdin(Stdio::null())
        .spawn()
        .expect("the sibling");
    ends.add(sibling.id() as i32);
    let socket = || {
        std::fs::read_dir(s.records())
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.ends_with(".sock"))
    };
    assert!(
        common::wait_until(Duration::from_secs(20), || socket().is_some()),
        "the sibling's socket"
    );
    let sock = socket().unwrap_or_default();
    let answer = s.out("answer");
    let mut attacker = hostile_run(
        &s,
        &["--sandbox=pid"],
        &["send-all", "kill", answer.to_str().unwrap_or_default()],
    )
    .env(RUNTIME_DIR_ENV, s.records())
    .spawn()
    .expect("the attacker");
    ends.add(attacker.id() as i32);
    let said = written(&answer, Duration::from_secs(20));
    wait(&mut attacker);
    // Asked and refused — or, once the sandbox hides the records directory, not reachable.
    assert!(
        said.contains(&sock) || said.starts_with("unreachable:"),
        "the sibling was not asked: {said}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        sibling.try_wait().expect("try_wait").is_none(),
        "the sibling was killed (it answered {said:?})"
    );
    assert!(!said.contains("ok kill"), "{said}");
    // From outside, as root: obeyed.
    let id = format!("{}-0", sibling.id());
    let o = reaper_as(Some(&s.records()), &["kill", &id]);
    assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("by its owner"),
        "{}",
        common::stderr(&o)
    );
    wait(&mut sibling);
}

/// A record that is not the run's own cannot shadow it: uid 65534 copies root's run's record
/// into its own directory (the same id, claiming itself): `reaper ps` lists the run once and
/// `reaper kill` ends it through its owner.
#[test]
fn a_copied_record_does_not_shadow_the_run() {
    if !root_python() || !have(Need::Program("setpriv")) {
        return;
    }
    let mut ends = Ends::default();
    let mut run = reaper()
        .args(["run", "--", "sleep", "600"])
        .env_remove(RUNTIME_DIR_ENV)
        .stdin(Stdio::null())
        .spawn()
        .expect("root's run");
    ends.add(run.id() as i32);
    let pid = run.id();
    let listed = |id: Option<&str>| -> Vec<serde_json::Value> {
        let o = reaper_as(None, &["ps", "--json"]);
        let all: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
        all.into_iter()
            .filter(|r| match id {
                Some(id) => r["id"] == id,
                None => r["short_id"]
                    .as_str()
                    .is_some_and(|s| s.starts_with(&format!("{pid}-"))),
            })
            .collect()
    };
    assert!(common::wait_until(Duration::from_secs(20), || !listed(
        None
    )
    .is_empty()));
    let mine = listed(None).remove(0);
    let id = mine["id"].as_str().unwrap_or_default().to_owned();
    let original = std::fs::read_to_string(format!("/run/reaper/{id}.json")).expect("the record");
    let mut copy: serde_json::Value = serde_json::from_str(&original).expect("JSON");
    copy["uid"] = NOBODY.into();
    let users = Path::new("/tmp/reaper-65534");
    let mut plant = as_nobody(Command::new("sh").arg("-c").arg(format!(
        "mkdir -p -m 700 {d} && cat > {d}/{id}.json",
        d = users.display()
    )));
    let mut planting = plant.stdin(Stdio::piped()).spawn().expect("setpriv");
    {
        use std::io::Write as _;
        let mut stdin = planting.stdin.take().expect("stdin");
        stdin
            .write_all(copy.to_string().as_bytes())
            .expect("the copy");
    }
    assert!(
        planting.wait().expect("setpriv").success(),
        "the copy was not planted"
    );
    let copy_path = users.join(format!("{id}.json"));
    let twice = listed(Some(&id));
    let o = reaper_as(None, &["kill", &id]);
    let _ = std::fs::remove_file(&copy_path);
    assert_eq!(twice.len(), 1, "listed {} times: {twice:?}", twice.len());
    assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("by its owner"),
        "{}",
        common::stderr(&o)
    );
    wait(&mut run);
}

/// What the tree can plant where a record or a note is read — a fifo, a huge sparse file —
/// blocks nobody and grows nobody: `reaper ps`, `reaper audit`, the record sweep and the run's
/// owner all finish, and the owner reads none of a 1 GiB note.
#[test]
fn fifos_and_huge_files_block_and_grow_nobody() {
    if !have(Need::Python3) {
        return;
    }
    let s = Scratch::new();
    let records = s.records();
    let pidns = common::pidns();
    // Runs whose owners never were (pid 4194304 is above any pid_max's default).
    let fake = |n: u32| format!("{pidns}-4194303-1-{n}");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        records.join(format!("{}.json", fake(0))),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("a fifo record");
    std::fs::File::create(records.join(format!("{}.json", fake(1))))
        .and_then(|f| f.set_len(1 << 40))
        .expect("a sparse record");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let stale = records.join(format!("{}.json", fake(2)));
    let record = serde_json::json!({
        "version": 1, "id": fake(2), "boot_id": boot.trim(), "uid": rustix::process::geteuid().as_raw(),
        "argv": ["x"], "started_unix_ms": 1, "backend": "pgid", "cgroup": null, "limits": null,
        "leader_pid": 4194303, "leader_starttime": 1, "timeout_ms": null, "stop_signal": 15,
        "grace_ms": 100, "request_id": null, "phase": "running", "stop_reason": null,
    });
    std::fs::write(&stale, record.to_string()).expect("a stale record");
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // An orphan carrying the fifo run's id, for audit to look its record up.
    let mut ends = Ends::default();
    let orphan_pid = s.out("orphan");
    let made = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "setsid sleep 600 & echo $! > {}",
            orphan_pid.display()
        ))
        .env("REAPER_RUN_ID", fake(0))
        .stdin(Stdio::null())
        .status()
        .expect("sh");
    assert!(made.success());
    let orphan: i32 = written(&orphan_pid, Duration::from_secs(5))
        .trim()
        .parse()
        .expect("a pid");
    ends.add(orphan);
    let within = |args: &[&str]| {
        let mut c = reaper()
            .args(args)
            .env(RUNTIME_DIR_ENV, &records)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("reaper");
        wait(&mut c)
    };
    assert!(within(&["ps", "--json"]).success(), "reaper ps");
    within(&["audit", "--json"]);
    // The sweep runs in the background of the first run of a process in this directory: that
    // run lasts until the stale record is gone (or its timeout, 124).
    let gone = format!("while [ -e {} ]; do sleep 0.02; done", stale.display());
    assert!(
        within(&["run", "--timeout", "20s", "--", "sh", "-c", &gone]).success(),
        "the record sweep did not get past the fifo and the sparse file to the stale record"
    );
    // The owner reads the note of an outside stop when its run ends.
    for kind in ["fifo", "sparse"] {
        let planted = s.out(&format!("planted-{kind}"));
        let owner = hostile_run(
            &s,
            &[],
            &["note", kind, planted.to_str().unwrap_or_default()],
        )
        .env(RUNTIME_DIR_ENV, &records)
        .spawn()
        .expect("reaper run");
        ends.add(owner.id() as i32);
        let (status, max_rss_kib) = wait_measured(owner, Duration::from_secs(30));
        written(&planted, Duration::ZERO);
        eprintln!("{kind} note: the owner's peak RSS was {max_rss_kib} KiB");
        assert_eq!(
            status,
            Some(0),
            "{kind}: the owner did not end as its leader did"
        );
        assert!(
            max_rss_kib < 256 * 1024,
            "{kind}: the owner grew to {max_rss_kib} KiB reading the note"
        );
    }
}

/// Waits for `child` (killing it at `within`): its exit code and its peak resident size, KiB.
fn wait_measured(mut child: Child, within: Duration) -> (Option<i32>, i64) {
    let pid = child.id() as libc::pid_t;
    let deadline = std::time::Instant::now() + within;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value; wait4 writes it and `status`.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is this test's own unreaped child; the pointers are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return (code, usage.ru_maxrss);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the owner did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A root process moved into a cgroup of uid 65534's named after a run whose owner is gone
/// looks certain to `reaper audit`; `reaper audit --kill` (root) acts as 65534 and leaves it
/// (named, so that nothing else certain on the machine is killed by this test).
#[test]
fn audit_kill_leaves_a_process_disguised_as_a_users_leak() {
    if !have(Need::Root) || !have(Need::Cgroup) {
        return;
    }
    let s = Scratch::new();
    let mount = common::cgroup2_mount().expect("a cgroup2 mount");
    let parent = mount.join(format!("reaper-test-trust-audit-{}", std::process::id()));
    std::fs::create_dir(&parent).expect("the test cgroup");
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            common::remove_test_cgroup(&self.0);
        }
    }
    let _remove = Remove(parent.clone());
    let disguise = parent.join(format!("reaper-{}-4194303-1-0", common::pidns()));
    std::fs::create_dir(&disguise).expect("the disguise");
    std::os::unix::fs::chown(&disguise, Some(NOBODY), Some(NOBODY)).expect("chown");
    let mut ends = Ends::default();
    let pid_file = s.out("innocent");
    let made = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "setsid sleep 600 & echo $! > {}",
            pid_file.display()
        ))
        .stdin(Stdio::null())
        .status()
        .expect("sh");
    assert!(made.success());
    let pid: i32 = written(&pid_file, Duration::from_secs(5))
        .trim()
        .parse()
        .expect("a pid");
    let (pid, start) = ends.add(pid);
    std::fs::write(disguise.join("cgroup.procs"), pid.to_string()).expect("moved");
    let o = reaper_as(None, &["audit", "--json"]);
    let census: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let certain = census["certain"].to_string();
    assert!(
        certain.contains(&format!("\"pid\":{pid},")),
        "the disguise did not work: {certain}"
    );
    let o = reaper_as(None, &["audit", "--kill", &format!("{pid}@{start}")]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        common::alive(pid, start),
        "audit --kill killed root's process: {out}{}",
        common::stderr(&o)
    );
    assert!(
        out.contains(&format!("{pid}@{start}: not-permitted")),
        "{out}"
    );
}

/// Thousands of idle connections to a run's socket — from outside, as root, and from the
/// run's own tree — neither delay the run's end (its timeout) nor grow its owner.
#[test]
fn a_flood_of_connections_neither_delays_nor_grows_the_owner() {
    if !have(Need::Python3) {
        return;
    }
    let s = Scratch::new();
    let mut ends = Ends::default();
    let planted = s.out("planted");
    let owner = hostile_run(
        &s,
        &["--timeout", "3s"],
        &["flood", "2000", planted.to_str().unwrap_or_default()],
    )
    .env(RUNTIME_DIR_ENV, s.records())
    .spawn()
    .expect("reaper run");
    ends.add(owner.id() as i32);
    let id = written(&planted, Duration::from_secs(20));
    let sock = s.records().join(format!("{id}.sock"));
    let mut held = Vec::new();
    for _ in 0..2000 {
        match std::os::unix::net::UnixStream::connect(&sock) {
            Ok(c) => held.push(c),
            Err(_) => break,
        }
    }
    assert!(
        held.len() > 100,
        "only {} connections were made",
        held.len()
    );
    let (status, max_rss_kib) = wait_measured(owner, Duration::from_secs(30));
    eprintln!(
        "owner's peak RSS with {} connections from outside and 2000 from its tree: {max_rss_kib} KiB",
        held.len()
    );
    assert_eq!(status, Some(124), "the run did not end by its timeout");
    assert!(
        max_rss_kib < 100 * 1024,
        "the owner grew to {max_rss_kib} KiB under the flood"
    );
}

/// The tree takes its run's socket over and answers, as the owner would, that the run was
/// stopped: `reaper stop` does not believe it (the listener is not the owner) and ends the
/// tree itself.
#[test]
fn an_answer_from_anyone_but_the_owner_is_not_believed() {
    if !have(Need::Python3) {
        return;
    }
    for mode in ["stream", "dgram"] {
        let s = Scratch::new();
        let mut ends = Ends::default();
        let ready = s.out("ready");
        let mut owner = hostile_run(
            &s,
            &[],
            &[
                "impostor",
                mode,
                "-",
                "-",
                ready.to_str().unwrap_or_default(),
            ],
        )
        .env(RUNTIME_DIR_ENV, s.records())
        .spawn()
        .expect("reaper run");
        ends.add(owner.id() as i32);
        let id = written(&ready, Duration::from_secs(20));
        let o = reaper_as(Some(&s.records()), &["stop", &id]);
        let err = common::stderr(&o);
        assert_eq!(common::code(&o), 0, "{mode}: {err}");
        assert!(
            !err.contains("by its owner"),
            "{mode}: the impostor was believed: {err}"
        );
        let status = wait(&mut owner);
        assert!(
            !status.success(),
            "{mode}: the tree was not ended: {status:?}"
        );
    }
}

/// The run's user, from outside every run, still ends its run through its owner.
#[test]
fn a_user_ends_their_own_run_through_its_owner() {
    if !have(Need::Root) || !have(Need::Program("setpriv")) {
        return;
    }
    let mut ends = Ends::default();
    let mut run = as_nobody(reaper().args(["run", "--", "sleep", "600"]))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the user's run");
    ends.add(run.id() as i32);
    // `PID-N`: N is 1 when a cgroup could not be made for the run first.
    let listed = || -> Option<String> {
        let o = as_nobody(reaper().args(["ps", "--json"])).output().ok()?;
        let all: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).ok()?;
        all.iter().find_map(|r| {
            let s = r["short_id"].as_str()?;
            s.starts_with(&format!("{}-", run.id()))
                .then(|| s.to_owned())
        })
    };
    assert!(
        common::wait_until(Duration::from_secs(20), || listed().is_some()),
        "the run is listed"
    );
    let short = listed().unwrap_or_default();
    let o = as_nobody(reaper().args(["stop", &short]))
        .stdin(Stdio::null())
        .output()
        .expect("reaper stop");
    let err = common::stderr(&o);
    assert_eq!(common::code(&o), 0, "{err}");
    assert!(
        err.contains("by its owner") && err.contains("stop_reason stopped"),
        "{err}"
    );
    wait(&mut run);
}
