//! Nothing user-visible changes by accident: the faces' JSON outputs and messages, compared with
//! golden files in tests/golden/ (one per test).
//!
//! JSON is compared by structure: the same keys, the same value types, the same values where
//! they are stable. A volatile value (a pid, a time, a duration, a run id, a cgroup name, a boot
//! id, a uid) is replaced by its type (`"<number>"`, `"<string>"`, `"<null>"`…), chosen by its
//! KEY (`VOLATILE` below), never by what the text looks like. Strings that depend on where the
//! test runs (the binaries' paths, the test's temporary directories, the cgroup2 mount) become
//! `<reaper>`, `<fixture>`, `<tmp>`, `<cgroup2>`…; a message's pids and run ids, known to the
//! test, become `<owner-pid>`, `<run-id>`…. Lines of stderr that are JSON (`--events`) are
//! compared as JSON.
//!
//! `REAPER_UPDATE_GOLDEN=1 cargo test --test cli_outputs` rewrites the golden files (review the
//! diff: it is the user-visible change); otherwise a difference fails with each path that
//! differs and the whole normalized output.
//!
//! The goldens are this kind of machine's (root, cgroup v2 beside v1): where a test needs the
//! cgroup backend it says `skipped` elsewhere. `reaper doctor`'s values that differ between
//! such hosts (kernel, controllers, why) are kept as types only.

mod common;
mod mcp_support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{have, reaper, Need, Tree};
use serde_json::{json, Map, Value};

/// Keys whose values change from run to run: compared by type only. A rule is a key, or a
/// key under a path's end (`survivors[].state`: a survivor's process state, but not a run's).
const VOLATILE: &[&str] = &[
    // processes
    "pid",
    "ppid",
    "pgid",
    "sid",
    "leader_pid",
    "guardian_pid",
    "leader_starttime",
    "starttime",
    "survivors[].state",
    "uid",
    // times and durations
    "t_ms",
    "duration_ms",
    "leader_ms",
    "teardown_ms",
    "ran_ms",
    "elapsed_ms",
    "age_s",
    "age_secs",
    "age_ms",
    "started_unix_ms",
    // runs and their cgroups
    "id",
    "short_id",
    "run",
    "boot_id",
    "cgroup",
    // what the kernel measured
    "cpu_usage_usec",
    "cpu_usec",
    "current_bytes",
    "peak_bytes",
    "memory_peak_bytes",
    // the machine's other processes
    "scanned",
    "unreadable",
    "init",
];

/// Arrays whose order follows volatile values (pids): compared as sets.
const UNORDERED: &[&str] = &["survivors", "descendants"];

/// One golden file: the steps of a test, each what a command printed and how it exited.
struct Golden {
    name: &'static str,
    steps: Vec<Value>,
    subst: Vec<(String, String)>,
    types_only: Vec<&'static str>,
}

impl Golden {
    fn new(name: &'static str) -> Golden {
        let mut g = Golden {
            name,
            steps: Vec::new(),
            subst: Vec::new(),
            types_only: Vec::new(),
        };
        g.known(env!("CARGO_BIN_EXE_reaper"), "<reaper>");
        g.known(common::fixture_bin(), "<fixture>");
        g.known(mcp_support::fake_codex(), "<fake-codex>");
        if let Some(m) = common::cgroup2_mount() {
            g.known(m.display(), "<cgroup2>");
        }
        g
    }

    /// Every occurrence of `value` in the outputs (a path, a pid, a run id the test knows)
    /// becomes `placeholder`. A number is replaced only where it is a whole number.
    fn known(&mut self, value: impl std::fmt::Display, placeholder: &str) {
        let v = value.to_string();
        assert!(!v.is_empty(), "an empty value for {placeholder}");
        self.subst.push((v, placeholder.to_owned()));
        // The longest first: a run id before the pid inside it.
        self.subst.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    }

    /// Keys of this golden compared by type only (besides `VOLATILE`).
    fn types_only(&mut self, keys: &[&'static str]) {
        self.types_only.extend_from_slice(keys);
    }

    fn text(&self, s: &str) -> String {
        let mut s = s.to_owned();
        for (v, p) in &self.subst {
            s = replace_whole(&s, v, p);
        }
        // A cell cut to a column's width ends where the raw paths' lengths put it (the
        // checkout's path moves the cut): kept up to its first path, the program.
        if let Some(cut) = s.strip_suffix('…') {
            let is_path = |w: &str| self.subst.iter().any(|(v, p)| p == w && v.contains('/'));
            let words: Vec<&str> = cut.split(' ').collect();
            let kept = match words.iter().position(|w| is_path(w)) {
                Some(i) => words[..=i].join(" "),
                None => words[..words.len().saturating_sub(1)].join(" "),
            };
            s = format!("{kept} …");
        }
        s
    }

    /// Output text as lines; a line that is a JSON object is kept as JSON.
    fn lines(&self, s: &str) -> Value {
        Value::Array(
            s.lines()
                .map(|l| match serde_json::from_str::<Value>(l) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => Value::String(self.text(l)),
                })
                .collect(),
        )
    }

    /// A step: `fields` (command, exit, stdout, stderr, report…), normalized when compared.
    fn step(&mut self, what: &str, fields: Value) {
        let mut m = Map::new();
        m.insert(what.to_owned(), fields);
        self.steps.push(Value::Object(m));
    }

    /// `reaper ARGS` to completion (stdin closed): its command line, exit, stdout and stderr
    /// as a step; stdout is parsed as JSON when `json`. Returns the output.
    fn reaper(&mut self, what: &str, args: &[&str], json_out: bool) -> Output {
        let o = common::run_reaper(args);
        self.record(what, args, &o, json_out, Value::Null);
        o
    }

    fn record(&mut self, what: &str, args: &[&str], o: &Output, json_out: bool, extra: Value) {
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stdout = if json_out {
            serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e}): {stdout}"))
        } else {
            self.lines(&stdout)
        };
        let mut fields = json!({
            "command": std::iter::once("reaper").chain(args.iter().copied()).collect::<Vec<_>>(),
            "exit": common::code(o),
            "stdout": stdout,
            "stderr": self.lines(&common::stderr(o)),
        });
        if let (Value::Object(f), Value::Object(e)) = (&mut fields, extra) {
            f.extend(e);
        }
        self.step(what, fields);
    }

    fn normalize(&self, v: &Value, path: &mut Vec<String>) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, val) in m {
                    path.push(k.clone());
                    let rules = VOLATILE.iter().chain(&self.types_only);
                    let volatile = rules.into_iter().any(|r| ends_with(path, r));
                    out.insert(
                        k.clone(),
                        if volatile {
                            type_of(val)
                        } else {
                            self.normalize(val, path)
                        },
                    );
                    path.pop();
                }
                Value::Object(out)
            }
            Value::Array(a) => {
                path.push("[]".into());
                let mut out: Vec<Value> = a.iter().map(|x| self.normalize(x, path)).collect();
                path.pop();
                if path.last().is_some_and(|k| UNORDERED.contains(&k.as_str())) {
                    out.sort_by_key(|x| x.to_string());
                }
                Value::Array(out)
            }
            Value::String(s) => Value::String(self.text(s)),
            other => other.clone(),
        }
    }

    /// Compares with tests/golden/NAME.json, or rewrites it under REAPER_UPDATE_GOLDEN=1.
    fn finish(self) {
        let actual = self.normalize(&Value::Array(self.steps.clone()), &mut Vec::new());
        let path = golden_path(self.name);
        let pretty = serde_json::to_string_pretty(&actual).expect("JSON serializes") + "\n";
        if std::env::var_os("REAPER_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().expect("tests/golden"))
                .expect("mkdir tests/golden");
            std::fs::write(&path, &pretty).expect("write the golden file");
            eprintln!("wrote {}", path.display());
            return;
        }
        let expected: Value = match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display())),
            Err(e) => panic!(
                "{}: {e}; write it with REAPER_UPDATE_GOLDEN=1 cargo test --test cli_outputs\nthe output now:\n{pretty}",
                path.display()
            ),
        };
        let mut diffs = Vec::new();
        diff(&expected, &actual, "$", &mut diffs);
        assert!(
            diffs.is_empty(),
            "{} differs from what the CLI prints now:\n  {}\n\nthe output now (normalized):\n{pretty}\n\
             A deliberate change? REAPER_UPDATE_GOLDEN=1 cargo test --test cli_outputs, and commit the \
             golden file with it.",
            path.display(),
            diffs.join("\n  ")
        );
    }
}

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.json"))
}

/// Whether a JSON path (`["runs", "[]", "survivors", "[]", "state"]`) ends with `rule`
/// (`survivors[].state`, or a bare key).
fn ends_with(path: &[String], rule: &str) -> bool {
    let segs: Vec<&str> = rule
        .split('.')
        .flat_map(|s| match s.strip_suffix("[]") {
            Some(k) => vec![k, "[]"],
            None => vec![s],
        })
        .collect();
    path.len() >= segs.len()
        && path[path.len() - segs.len()..]
            .iter()
            .zip(&segs)
            .all(|(p, s)| p == s)
}

fn type_of(v: &Value) -> Value {
    Value::String(
        match v {
            Value::Null => "<null>",
            Value::Bool(_) => "<bool>",
            Value::Number(_) => "<number>",
            Value::String(_) => "<string>",
            Value::Array(_) => "<array>",
            Value::Object(_) => "<object>",
        }
        .into(),
    )
}

/// `s` with every occurrence of `from` replaced; a number only where no digit touches it.
fn replace_whole(s: &str, from: &str, to: &str) -> String {
    if !from.bytes().all(|b| b.is_ascii_digit()) {
        return s.replace(from, to);
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(|c| c.is_ascii_digit()) || after.is_some_and(|c| c.is_ascii_digit()) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

/// The paths where `actual` differs from `expected`, readably.
fn diff(expected: &Value, actual: &Value, at: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                match a.get(k) {
                    Some(av) => diff(ev, av, &format!("{at}.{k}"), out),
                    None => out.push(format!("{at}.{k}: gone (was {ev})")),
                }
            }
            for (k, av) in a {
                if !e.contains_key(k) {
                    out.push(format!("{at}.{k}: new ({av})"));
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!("{at}: {} items, was {}", a.len(), e.len()));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                diff(ev, av, &format!("{at}[{i}]"), out);
            }
        }
        (e, a) if e != a => out.push(format!("{at}: {a}, was {e}")),
        _ => {}
    }
}

/// `reaper ARGS…` started in the background, its output captured.
fn spawn_reaper(args: &[String]) -> std::process::Child {
    reaper()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("reaper starts")
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Waits for the fixture's tree, which must be complete before `child` (its reaper) ends.
fn wait_ready_before_exit(tree: &Tree, child: &mut std::process::Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tree.ready().exists() {
        let exited = child.try_wait().expect("try_wait").is_some();
        assert!(
            !exited && Instant::now() < deadline,
            "{what}: the fixture's tree was not complete before reaper ended (too loaded a machine \
             for the timeout: it cannot show what it is meant to)"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `reaper run --report` for a normal exit, with `--events`: the exit code, the report and
/// the events on stderr.
#[test]
fn run_exit_report_events() {
    if !have(Need::Cgroup) {
        return;
    }
    let mut g = Golden::new("run-exit");
    let dir = Tree::new();
    g.known(dir.dir.path().display(), "<tmp>");
    let report = dir.report();
    let args = [
        "run",
        "--report",
        &report.display().to_string(),
        "--events",
        "--",
        "sh",
        "-c",
        // Nothing on stderr: the events' lines are reaper's alone there, in their order.
        "echo out; exit 3",
    ]
    .map(str::to_owned);
    let o = common::run_reaper(&args);
    g.record(
        "run --report --events (exit 3)",
        &strs(&args),
        &o,
        false,
        json!({"report": common::read_report(&report)}),
    );
    g.finish();
}

/// A timeout with a grandchild that left the session and ignores SIGTERM: 124, the message,
/// the report (killed 3, no survivor) and the events (TERM, then the cgroup's KILL).
#[test]
fn run_timeout_setsid_grandchild() {
    if !have(Need::Cgroup) {
        return;
    }
    let mut g = Golden::new("run-timeout");
    let tree = Tree::new();
    g.known(tree.dir.path().display(), "<tmp>");
    let mut args: Vec<String> = [
        "run",
        "--report",
        &tree.report().display().to_string(),
        "--events",
        "--timeout",
        "4s",
        "--grace",
        "1s",
        "--",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(tree.fixture(&["setsid-grandchild"]));
    let mut child = spawn_reaper(&args);
    wait_ready_before_exit(&tree, &mut child, "run --timeout");
    let o = child.wait_with_output().expect("reaper ends");
    tree.assert_all_dead("after the timeout");
    g.record(
        "run --timeout 4s (setsid grandchild ignoring TERM)",
        &strs(&args),
        &o,
        false,
        json!({"report": common::read_report(&tree.report())}),
    );
    g.finish();
}

/// What `reaper run` says when the command cannot run, or the command line is wrong.
#[test]
fn run_usage_and_exec_errors() {
    let mut g = Golden::new("run-errors");
    let dir = Tree::new();
    g.known(dir.dir.path().display(), "<tmp>");
    let report = dir.report().display().to_string();
    let o = g.reaper(
        "a command that does not exist: 127",
        &["run", "--report", &report, "--", "/nonexistent/command"],
        false,
    );
    assert_eq!(common::code(&o), 127);
    g.step(
        "its report",
        json!({"written": Path::new(&report).exists()}),
    );
    let noexec = dir.dir.path().join("not-executable");
    std::fs::write(&noexec, "#!/bin/sh\n").expect("write a file");
    g.reaper(
        "a file that is not executable: 126",
        &["run", "--", &noexec.display().to_string()],
        false,
    );
    g.reaper(
        "a bad flag value",
        &["run", "--timeout", "xyz", "--", "true"],
        false,
    );
    g.reaper(
        "an unknown flag before the command",
        &["run", "--bogus", "--", "true"],
        false,
    );
    g.reaper("no command", &["run"], false);
    g.reaper("an unknown command", &["frobnicate"], false);
    g.finish();
}

/// The library's errors that stop a run before it starts (exit 125): the words of each.
#[test]
fn library_errors_exit_125() {
    // The messages name the cgroup2 mount.
    if !have(Need::Cgroup) {
        return;
    }
    let mut g = Golden::new("library-errors");
    for (what, args) in [
        (
            "--sandbox on the subreaper backend",
            &[
                "run",
                "--sandbox",
                "--containment",
                "subreaper",
                "--",
                "true",
            ][..],
        ),
        (
            "--memory-max on the pgid backend",
            &[
                "run",
                "--memory-max",
                "10M",
                "--containment",
                "pgid",
                "--",
                "true",
            ],
        ),
        (
            "--pids-max and --cpus on the subreaper backend",
            &[
                "run",
                "--pids-max",
                "5",
                "--cpus",
                "0.5",
                "--containment",
                "subreaper",
                "--",
                "true",
            ],
        ),
        (
            "--cgroup-parent that does not exist",
            &[
                "run",
                "--cgroup-parent",
                "/nonexistent/reaper-test",
                "--",
                "true",
            ],
        ),
    ] {
        let o = g.reaper(what, args, false);
        assert_eq!(common::code(&o), 125, "{what}: {}", common::stderr(&o));
    }
    g.finish();
}

/// `reaper timeout -v`: GNU timeout's messages (the signal sent, then KILL), and its usage
/// and exec errors.
#[test]
fn timeout_face_messages() {
    let mut g = Golden::new("timeout-face");
    let tree = Tree::new();
    g.known(tree.dir.path().display(), "<tmp>");
    let mut args: Vec<String> = ["timeout", "-v", "-k", "0.5", "4"]
        .map(str::to_owned)
        .to_vec();
    args.extend(tree.fixture(&["ignore-term", "60"]));
    let mut child = spawn_reaper(&args);
    wait_ready_before_exit(&tree, &mut child, "timeout -v -k");
    let o = child.wait_with_output().expect("reaper ends");
    tree.assert_all_dead("after timeout -k");
    g.record(
        "-v -k 0.5 4 (a command that ignores TERM)",
        &strs(&args),
        &o,
        false,
        Value::Null,
    );
    g.reaper(
        "-v 0.3 sleep 60",
        &["timeout", "-v", "0.3", "sleep", "60"],
        false,
    );
    g.reaper("no operand", &["timeout"], false);
    g.reaper(
        "an unknown option",
        &["timeout", "--bogus", "1", "true"],
        false,
    );
    g.reaper(
        "a command that does not exist",
        &["timeout", "1", "/nonexistent/command"],
        false,
    );
    g.reaper("a bad duration", &["timeout", "1x", "true"], false);
    g.finish();
}

/// `reaper check --json`, clean and leaking, and the leak's table.
#[test]
fn check_clean_and_leaking() {
    if !have(Need::Cgroup) {
        return;
    }
    let mut g = Golden::new("check");
    g.reaper(
        "--json, clean",
        &[
            "check", "--json", "--settle", "300ms", "--", "sh", "-c", "exit 0",
        ],
        true,
    );
    for json_out in [true, false] {
        let tree = Tree::new();
        g.known(tree.dir.path().display(), "<tmp>");
        let mut args: Vec<String> = ["check", "--settle", "300ms"].map(str::to_owned).to_vec();
        if json_out {
            args.push("--json".into());
        }
        args.push("--".into());
        args.extend(tree.fixture(&["setsid-grandchild", "--leader-exits"]));
        let o = common::run_reaper(&args);
        tree.assert_all_dead("after check");
        assert_eq!(common::code(&o), 1, "{}", common::stderr(&o));
        // The table's pids, process states and ages vary: one space between columns.
        let o = if json_out {
            o
        } else {
            Output {
                stdout: leak_table(&String::from_utf8_lossy(&o.stdout)).into_bytes(),
                stderr: leak_table(&common::stderr(&o)).into_bytes(),
                status: o.status,
            }
        };
        let what = if json_out {
            "--json, leaking (a setsid grandchild)"
        } else {
            "leaking, as a table"
        };
        g.record(what, &strs(&args), &o, json_out, Value::Null);
    }
    g.finish();
}

/// check's table rows: `PID PPID PGID SID S AGE ESCAPED-BY COMMAND`, the first six volatile.
fn leak_table(s: &str) -> String {
    s.lines()
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            if t.len() > 6 && t[..4].iter().all(|x| x.bytes().all(|b| b.is_ascii_digit())) {
                format!(
                    "<pid> <ppid> <pgid> <sid> <state> <age> {}",
                    t[6..].join(" ")
                )
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `reaper doctor --json`: every key, and each value's type (the values are this host's).
#[test]
fn doctor_json() {
    // Which keys have a value (and not null) is this kind of machine's: root, a cgroup.
    if !have(Need::Cgroup) || !have(Need::Root) {
        return;
    }
    let mut g = Golden::new("doctor");
    g.types_only(&[
        "kernel",
        "cgroup_mode",
        "cgroup2_mount",
        "own_cgroup",
        "own_cgroup_dir",
        "delegation",
        "delegated_unit",
        "controllers",
        "subtree_control",
        "limit_controllers",
        "limits_error",
        "cgroup_writable",
        "cgroup_kill",
        "clone_into_cgroup",
        "cgroup_error",
        "pidfd",
        "subreaper",
        "pgid",
        "pgid_table",
        "without_cgroup",
        "auto_backend",
        "why",
        "container.pid1",
        "container.pid_namespace",
        "container.cgroup_namespace",
        "container.cgroupfs_read_only",
        "sandbox.available",
        "sandbox.pid_available",
        "parts[].status",
        "unprivileged_user_namespaces",
        "routes[].closed",
        "routes[].status",
        "nsdelegate",
        "hints",
    ]);
    let o = g.reaper("doctor --json", &["doctor", "--json"], true);
    assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
    g.finish();
}

/// A cgroup of this test's for its runs (so no other reaper's stale sweep takes them).
struct TestCgroup(PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        common::remove_test_cgroup(&self.0);
    }
}

/// `reaper ps --json` with one live run of this test's, then `reaper stop` and `reaper kill`
/// from outside: their messages, and what each owner says and reports.
#[test]
fn ps_stop_kill() {
    if !have(Need::Cgroup) {
        return;
    }
    let mut g = Golden::new("ps-stop-kill");
    let mount = common::cgroup2_mount().expect("a cgroup2 mount");
    let parent = TestCgroup(mount.join(format!("reaper-test-golden-ps-{}", std::process::id())));
    std::fs::create_dir(&parent.0).expect("create the test cgroup");
    g.known(parent.0.display(), "<test-cgroup>");
    for end in ["stop", "kill"] {
        let tree = Tree::new();
        g.known(tree.dir.path().display(), "<tmp>");
        let mut args: Vec<String> = [
            "run",
            "--cgroup-parent",
            &parent.0.display().to_string(),
            "--report",
            &tree.report().display().to_string(),
            "--",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(tree.fixture(&["tree", "3"]));
        let mut owner = spawn_reaper(&args);
        wait_ready_before_exit(&tree, &mut owner, "run");
        g.known(owner.id(), "<owner-pid>");
        let (mut o, mut ours) = (common::run_reaper(["ps", "--json"]), Vec::new());
        let listed = common::wait_until(Duration::from_secs(20), || {
            o = common::run_reaper(["ps", "--json"]);
            assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
            let all: Vec<Value> =
                serde_json::from_slice(&o.stdout).expect("ps --json is a JSON array");
            ours = all
                .into_iter()
                .filter(|r| {
                    r["short_id"]
                        .as_str()
                        .is_some_and(|s| s.starts_with(&format!("{}-", owner.id())))
                })
                .collect();
            ours.len() == 1 && ours[0]["process_count"] == 3
        });
        assert!(
            listed,
            "the run is listed once, with its 3 processes: {ours:?}"
        );
        let id = ours[0]["id"].as_str().expect("an id").to_owned();
        let short = ours[0]["short_id"].as_str().expect("a short id").to_owned();
        g.known(&id, "<run-id>");
        g.known(&short, "<short-id>");
        if end == "stop" {
            g.step(
                "ps --json (this test's run)",
                json!({"command": ["reaper", "ps", "--json"], "exit": common::code(&o), "stdout": ours}),
            );
        }
        let o = g.reaper(&format!("{end} RUN-ID"), &[end, &id], false);
        assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
        let out = owner.wait_with_output().expect("the owner ends");
        tree.assert_all_dead(&format!("after {end}"));
        g.record(
            &format!("the owner, after {end}"),
            &strs(&args),
            &out,
            false,
            json!({"report": common::read_report(&tree.report())}),
        );
    }
    g.reaper(
        "stop a run that does not exist",
        &["stop", "4026531836-1-1-0"],
        false,
    );
    g.finish();
}

/// `reaper audit --json`: its keys, and those of a certain leak (a subreaper run whose reaper
/// was SIGKILLed without a guardian), then `--kill PID@START` of that leak.
#[test]
fn audit_json() {
    let mut g = Golden::new("audit");
    // Where an orphan went: PID 1 (its name is the host's) or a subreaper.
    g.types_only(&["evidence[].to", "evidence[].to_comm"]);
    let tree = Tree::new();
    g.known(tree.dir.path().display(), "<tmp>");
    let mut args: Vec<String> = ["run", "--no-guardian", "--containment", "subreaper", "--"]
        .map(str::to_owned)
        .to_vec();
    args.extend(tree.fixture(&["setsid-grandchild"]));
    let mut owner = reaper()
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("reaper starts");
    tree.wait_ready(Duration::from_secs(20));
    g.known(owner.id(), "<owner-pid>");
    let leader = tree.recorded().into_iter().find(|p| p.2 == "leader");
    owner.kill().expect("SIGKILL the harness");
    owner.wait().expect("reap it");
    // The leader dies with its reaper (PR_SET_PDEATHSIG); its tree is orphaned then.
    assert!(
        common::wait_until(Duration::from_secs(10), || leader
            .as_ref()
            .is_none_or(|(p, s, _)| !common::alive(*p, *s))),
        "the leader outlived its reaper"
    );
    let planted: Vec<(i32, u64)> = tree
        .recorded()
        .into_iter()
        .filter(|(p, s, _)| common::alive(*p, *s))
        .map(|(p, s, _)| (p, s))
        .collect();
    assert_eq!(
        planted.len(),
        2,
        "the child and the grandchild outlive the harness"
    );

    let o = common::run_reaper(["audit", "--json"]);
    let mut v: Value = serde_json::from_slice(&o.stdout).expect("audit --json is JSON");
    let run = v["certain"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|leak| {
            std::iter::once(&leak["root"])
                .chain(leak["descendants"].as_array().into_iter().flatten())
                .any(|p| {
                    planted.contains(&(
                        p["pid"].as_i64().unwrap_or(0) as i32,
                        p["starttime"].as_u64().unwrap_or(0),
                    ))
                })
        })
        .cloned()
        .unwrap_or_else(|| panic!("the planted leak is not certain: {v}"));
    // The machine's other leaks (other tests', other users') are not this test's to compare.
    v["certain"] = json!([run.clone()]);
    v["suspect"] = type_of(&v["suspect"]);
    g.step(
        "audit --json (this test's leak of the certain ones)",
        json!({"command": ["reaper", "audit", "--json"], "exit": common::code(&o), "stdout": v}),
    );
    let id = run["run"]
        .as_str()
        .expect("a certain leak names its run")
        .to_owned();
    g.known(&id, "<run-id>");
    let named: Vec<String> = planted.iter().map(|(p, s)| format!("{p}@{s}")).collect();
    for (i, (p, s)) in planted.iter().enumerate() {
        g.known(format!("{p}@{s}"), &format!("<pid@start {i}>"));
        g.known(p, &format!("<pid {i}>"));
    }
    let mut kill = vec!["audit", "--kill"];
    kill.extend(strs(&named));
    let o = g.reaper("audit --kill PID@START… (the planted leak)", &kill, false);
    assert_eq!(common::code(&o), 0, "{}", common::stderr(&o));
    tree.assert_all_dead("after audit --kill");
    // Its record is a stale run's: `reaper kill` removes it, unless a reaper starting a run
    // meanwhile swept it (so neither its message nor its exit is compared).
    let _ = common::run_reaper(["kill", &id]);
    g.finish();
}

/// The MCP tool's results: a normal call, a timeout, and invalid arguments — `content`,
/// `isError` and `structuredContent`.
#[tokio::test]
async fn mcp_call_results() {
    let mut g = Golden::new("mcp-calls");
    // `timeout_seconds: 30` lasts 30 units of 100 ms.
    let s = mcp_support::start_with_stderr(
        mcp_support::Options {
            args: &["--test-timeout-unit", "100ms", "--grace", "300ms"],
            env: &[],
        },
        Stdio::null(),
    )
    .await;
    g.known(s.dir.path().display(), "<tmp>");
    for (what, args) in [
        (
            "a normal call",
            json!({"prompt": "thread T1\nsay hello\ndone"}),
        ),
        (
            "a timeout (timeout_seconds 30, a second of 100 ms)",
            json!({"prompt": "thread T2\nsay partial\nhang", "timeout_seconds": 30}),
        ),
        (
            "invalid arguments",
            json!({"prompt": 5, "timeout_seconds": 1}),
        ),
        ("codex-reply without a thread", json!({"prompt": "more"})),
    ] {
        let tool = if what.starts_with("codex-reply") {
            "codex-reply"
        } else {
            "codex"
        };
        let r = s.call(tool, args.clone()).await;
        let mut v = serde_json::to_value(&r).expect("a result serializes");
        // The text as lines, for a readable diff.
        if let Some(blocks) = v["content"].as_array_mut() {
            for b in blocks {
                if let Some(t) = b["text"].as_str() {
                    b["text"] = g.lines(t);
                }
            }
        }
        g.step(what, json!({"tool": tool, "arguments": args, "result": v}));
    }
    let procs = s.recorded();
    drop(s);
    mcp_support::assert_nothing_left(&procs, "", Duration::from_secs(10)).await;
    g.finish();
}

/// The goldens' own machinery: a number is replaced only where it is whole, a rule matches a
/// path's end, and a difference is named by its path.
#[test]
fn normalization() {
    assert_eq!(
        replace_whole("pid 123 of 1234, 123-0", "123", "<p>"),
        "pid <p> of 1234, <p>-0"
    );
    let p: Vec<String> = ["runs", "[]", "survivors", "[]", "state"]
        .map(str::to_owned)
        .to_vec();
    assert!(ends_with(&p, "survivors[].state") && ends_with(&p, "state"));
    assert!(!ends_with(&p, "runs.state"));
    let mut d = Vec::new();
    diff(
        &json!({"a": 1, "b": [1]}),
        &json!({"a": "1", "c": 2, "b": []}),
        "$",
        &mut d,
    );
    assert_eq!(
        d,
        ["$.a: \"1\", was 1", "$.b: 0 items, was 1", "$.c: new (2)"]
    );
    let g = Golden::new("unused");
    assert_eq!(
        g.normalize(
            &json!({"pid": 5, "x": {"cgroup": null}, "survivors": [{"pid": 2, "state": "R"}]}),
            &mut Vec::new()
        ),
        json!({"pid": "<number>", "x": {"cgroup": "<null>"}, "survivors": [{"pid": "<number>", "state": "<string>"}]})
    );
}
