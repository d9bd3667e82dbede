//! issue 15 part A: `reaper timeout` (and reaper called through a link named `timeout`) behaves
//! as GNU timeout(1) — command line, messages, exit statuses — and contains the whole tree;
//! `reaper run` reads durations and signals as timeout(1) does.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn timeout(args: &[&str]) -> Output {
    reaper()
        .arg("timeout")
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("run reaper timeout")
}

/// Exit statuses as timeout(1)'s: COMMAND's own, 124 on timeout, 128+N with
/// --preserve-status, 137 when KILL had to be sent, 125/126/127 for the failures.
#[test]
fn exit_statuses_are_timeouts() {
    let cases: &[(&[&str], i32)] = &[
        (&["10", "true"], 0),
        (&["1d", "true"], 0),
        (&["10", "sh", "-c", "exit 2"], 2),
        (&[".1", "sleep", "10"], 124),
        (&["--preserve-status", ".1", "sleep", "10"], 143),
        // issue 15: -s 0 sends nothing, KILL after -k, and that KILL makes it 137.
        (&["-s0", "-k1", ".1", "sleep", "10"], 137),
        (&["--foreground", "-s0", "-k1", ".1", "sleep", "10"], 137),
        (&["-s", "KILL", ".1", "sleep", "10"], 137),
        (&["-s", "INT", ".1", "sleep", "10"], 124),
        (
            &["--preserve-status", "-s", "INT", ".1", "sleep", "10"],
            130,
        ),
        (&["10", "/"], 126),
        (&["10", "reaper-no-such-command"], 127),
        (&["invalid", "sleep", "0"], 125),
        (&["--kill-after=invalid", "1", "sleep", "0"], 125),
        (&["42D", "sleep", "0"], 125),
        (&["1ms", "sleep", "0"], 125),
        (&["--signal=invalid", "1", "sleep", "0"], 125),
        (&["--", "-1", "sleep", "0"], 125),
        (&[" -1e-10000", "sleep", "0"], 125),
        (&["1"], 125),
        (&[], 125),
    ];
    for (args, want) in cases {
        let o = timeout(args);
        assert_eq!(code(&o), *want, "timeout {args:?}: {}", stderr(&o));
    }
}

/// issue 15: `0` is no timeout; huge values are accepted and never fire; a positive value
/// that underflows is the shortest timeout, not none.
#[test]
fn durations_read_as_timeout_reads_them() {
    for d in [
        "0",
        "4294967296",
        "9223372036854775808d",
        "2.34e+5d",
        "1.18973149535723176502e+4932",
        "inf",
        "10.34",
        "9.999999999",
        "0x10",
    ] {
        let o = timeout(&[d, "sleep", "0.2"]);
        assert_eq!(code(&o), 0, "timeout {d}: {}", stderr(&o));
    }
    let o = timeout(&["1e-5000", "sleep", "10"]);
    assert_eq!(code(&o), 124, "{}", stderr(&o));
}

/// timeout(1) dies of the signal COMMAND died of (no timeout): its parent sees a death by
/// signal, not exit 128+N. With a timeout it is 124 (or 128+N with --preserve-status).
#[test]
fn dies_of_commands_signal_as_timeout_does() {
    use std::os::unix::process::ExitStatusExt;
    let o = timeout(&["10", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.signal(), Some(15), "{:?} {}", o.status, stderr(&o));
    let o = timeout(&["10", "sh", "-c", "kill -INT $$"]);
    assert_eq!(o.status.signal(), Some(2), "{:?}", o.status);
    let o = timeout(&["--preserve-status", ".1", "sleep", "10"]);
    assert_eq!(o.status.code(), Some(143));
}

/// `reaper run` too (issue 15): `-t 0` is no timeout, huge values are accepted, `-s 0` sends
/// nothing and SIGKILLs after the grace.
#[test]
fn run_reads_durations_and_signals_as_timeout() {
    let o = run_reaper(["run", "-t", "0", "--", "sleep", "0.2"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for d in [
        "4294967296",
        "9223372036854775808d",
        "2.34e+5d",
        "1.18973149535723176502e+4932",
    ] {
        let o = run_reaper(["run", "-t", d, "--", "true"]);
        assert_eq!(code(&o), 0, "-t {d}: {}", stderr(&o));
    }
    let o = run_reaper(["run", "-t", "1e-5000", "--", "sleep", "10"]);
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    let o = run_reaper(["run", "-t", "500ms", "--", "sleep", "10"]);
    assert_eq!(code(&o), 124, "ms stays a reaper extension: {}", stderr(&o));
    // -s 0: sleep ignores nothing, so only the KILL after the grace can end it.
    let start = Instant::now();
    let o = run_reaper([
        "run", "-s", "0", "-k", "1", "-t", ".1", "--report", "-", "--", "sleep", "10",
    ]);
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("\"signal\": \"KILL\""),
        "{}",
        stderr(&o)
    );
    assert!(
        start.elapsed() >= Duration::from_millis(1000),
        "KILL before the grace"
    );
}

/// -v says what timeout(1) says, in its words and quoting.
#[test]
fn verbose_messages_are_timeouts() {
    let o = timeout(&["-v", "-s0", "-k", ".1", ".1", "sleep", "10"]);
    assert_eq!(code(&o), 137);
    assert_eq!(
        stderr(&o),
        "reaper timeout: sending signal EXIT to command 'sleep'\n\
         reaper timeout: sending signal KILL to command 'sleep'\n"
    );
    let o = timeout(&["-v", "-s", "INT", "0.1", "sleep", "1"]);
    assert_eq!(code(&o), 124);
    assert_eq!(
        stderr(&o),
        "reaper timeout: sending signal INT to command 'sleep'\n"
    );
    let o = timeout(&["10", "reaper-no-such-command"]);
    assert_eq!(
        stderr(&o),
        "reaper timeout: failed to run command 'reaper-no-such-command': No such file or directory\n"
    );
    let o = timeout(&["1x", "true"]);
    assert_eq!(
        stderr(&o),
        "reaper timeout: invalid time interval '1x'\nTry 'reaper timeout --help' for more information.\n"
    );
    let o = timeout(&["--help"]);
    assert_eq!(code(&o), 0);
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("Usage: reaper timeout [OPTION] DURATION COMMAND [ARG]..."));
}

/// A link named `timeout` is the whole migration: reaper answers as timeout(1), named as
/// its argv[0].
#[test]
fn a_link_named_timeout_is_timeout() {
    let dir = tempfile::Builder::new()
        .prefix("reaper-test-")
        .tempdir()
        .expect("temp dir");
    let link = dir.path().join("timeout");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_reaper"), &link).expect("symlink");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("timeout")
        .args(["-v", ".1", "sleep", "10"])
        .env("PATH", path)
        .env("LC_ALL", "C")
        .output()
        .expect("run the link");
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "timeout: sending signal TERM to command 'sleep'\n"
    );
    let o = Command::new(&link)
        .arg("--help")
        .output()
        .expect("run the link");
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains(&format!("Usage: {} [OPTION] DURATION", link.display())));
}

/// The point of the face: a setsid'd grandchild that ignores TERM does not outlive COMMAND.
/// Negative control: GNU timeout (its process group does not hold a new session) leaves it
/// alive; the test kills it through a pidfd.
#[test]
fn setsid_grandchild_dies_where_gnu_timeout_leaves_it() {
    let tree = Tree::new();
    let mut args = vec!["timeout".to_owned(), "30".into()];
    args.extend(tree.fixture(&["setsid-grandchild", "--leader-exits"]));
    let o = run_reaper(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    tree.assert_all_dead("reaper timeout");

    let gnu = Path::new("/usr/bin/timeout");
    if !gnu.exists() {
        eprintln!("skipped: negative control needs GNU timeout at /usr/bin/timeout");
        return;
    }
    let control = Tree::new();
    let mut cmd = Command::new(gnu);
    cmd.arg("30")
        .args(control.fixture(&["setsid-grandchild", "--leader-exits"]));
    // Not `output()`: the surviving grandchild would hold the pipes open for ever.
    let st = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run GNU timeout");
    assert_eq!(st.code(), Some(0));
    let survivors = control.survivors();
    assert!(
        survivors.iter().any(|s| s.starts_with("grandchild")),
        "GNU timeout should have left the setsid'd grandchild: {survivors:?}"
    );
    let killed = control.kill_leftovers();
    assert!(!killed.is_empty());
    control.assert_all_dead("after killing GNU timeout's leftovers");
}

/// Without -k, timeout(1) waits for COMMAND as long as it ignores the signal; the rest of
/// the tree is stopped when COMMAND exits. Here COMMAND ignores TERM for 1 s, then exits 0.
#[test]
fn without_kill_after_command_is_waited_for() {
    let tree = Tree::new();
    let mut args = vec![
        "timeout".to_owned(),
        "--preserve-status".into(),
        ".2".into(),
    ];
    args.extend(tree.fixture(&["ignore-term", "1"]));
    let start = Instant::now();
    let o = run_reaper(&args);
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "COMMAND killed early"
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    tree.assert_all_dead("reaper timeout");
}
