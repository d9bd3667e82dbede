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
        // coreutils 9.1's operand2sig: SIG before a number, `RTMIN N` as strtol reads it.
        (&["-s", "SIG15", ".1", "sleep", "10"], 124),
        (&["-s", "sig9", ".1", "sleep", "10"], 137),
        (&["-s", "SIG0", ".1", "sleep", ".5"], 124),
        (&["-s", "RTMIN 1", ".1", "sleep", "10"], 124),
        (&["-s", "SIG32", ".1", "sleep", "10"], 125),
        // 9.1's parse_duration: what underflows to 0 or -0 is 0, no timeout.
        (&["--", "-1e-10000", "sleep", "0"], 0),
        (&[" -1e-10000", "sleep", "0"], 0),
        (&["--", "-1e-310", "sleep", "0"], 125),
        (&["1"], 125),
        (&[], 125),
    ];
    for (args, want) in cases {
        let o = timeout(args);
        assert_eq!(code(&o), *want, "timeout {args:?}: {}", stderr(&o));
    }
}

/// `0` is no timeout; huge values are accepted and never fire; as in coreutils 9.1, a value
/// that underflows to zero is 0 too, while one a double still holds times out at once.
#[test]
fn durations_read_as_timeout_reads_them() {
    for d in [
        "0",
        "1e-5000",
        "0x1p-5000",
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
    let o = timeout(&["1e-310", "sleep", "10"]);
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

/// The shell's view of a status, as `$?`: the exit code, or 128+N for a death by signal N.
fn shell_status(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// GNU timeout and reaper's face on the same arguments, at the same time, both named
/// `timeout` (argv[0]), in the C locale unless `env` says otherwise: each one's `$?` and
/// stderr.
fn gnu_and_reaper(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> [(i32, String); 2] {
    use std::os::unix::process::CommandExt;
    let mut gnu = Command::new(GNU_TIMEOUT);
    let mut ours = reaper();
    for c in [&mut gnu, &mut ours] {
        c.arg0("timeout")
            .args(args)
            .env("LC_ALL", "C")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
    }
    let running = [gnu.spawn(), ours.spawn()].map(|c| c.expect("spawn a timeout"));
    running.map(|c| {
        let o = c.wait_with_output().expect("wait for a timeout");
        (
            shell_status(o.status),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    })
}

/// Runs every case under GNU coreutils 9.1's timeout and reaper's face and fails with the list
/// of those whose status or stderr differ. `want` is GNU's status, so that a case that no
/// longer tests what it says (GNU itself answering otherwise) is caught too.
fn agree_with_gnu(
    cases: &[(&[&str], i32)],
    env: &[(&str, &std::ffi::OsStr)],
    compare_stderr: bool,
) {
    let mut differ = Vec::new();
    for chunk in cases.chunks(8) {
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|(args, _)| s.spawn(move || gnu_and_reaper(args, env)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a case's thread"))
                .collect()
        });
        for ((args, want), [gnu, ours]) in chunk.iter().zip(results) {
            if gnu.0 != *want {
                differ.push(format!(
                    "timeout {args:?}: GNU says {} ({:?}), not {want}",
                    gnu.0, gnu.1
                ));
            }
            if ours.0 != gnu.0 || compare_stderr && ours.1 != gnu.1 {
                differ.push(format!(
                    "timeout {args:?}: GNU {} {:?}, reaper {} {:?}",
                    gnu.0, gnu.1, ours.0, ours.1
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} case(s) differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// `-s` as coreutils 9.1's operand2sig reads it, with GNU's own timeout as the oracle: the
/// signal that reaches COMMAND (`--preserve-status`: `$?` is 128+N, or 0 when nothing was
/// sent), its name in `-v`'s message (sig2str), and the usage error for what it refuses.
#[test]
fn signals_as_gnu_timeout_9_1_reads_them() {
    if !have(Need::GnuTimeout91) {
        return;
    }
    let sig = |s: &'static str| -> Vec<&'static str> {
        vec!["-v", "--preserve-status", "-s", s, ".1", "sleep", ".5"]
    };
    let valid: &[(&str, i32)] = &[
        ("SIG15", 143),
        ("sig9", 137),
        ("SiGkIlL", 137),
        ("SIG0", 0),
        ("SIG00", 0),
        ("SIGEXIT", 0),
        ("exit", 0),
        ("0", 0),
        ("00", 0),
        ("128", 0),
        ("256", 0),
        ("143", 143),
        ("271", 143),
        ("IOT", 134),
        ("sigiot", 134),
        ("29", 157),
        ("SIGPOLL", 157),
        ("STKFLT", 144),
        ("RTMIN", 162),
        ("RTMIN 1", 163),
        ("rtmin\t+1", 163),
        ("RTMIN\n1", 163),
        ("RTMIN01", 163),
        ("RTMIN-0", 162),
        ("RTMIN+30", 192),
        ("SIGRTMIN+15", 177),
        ("RTMAX", 192),
        ("RTMAX 0", 192),
        ("RTMAX+0", 192),
        ("RTMAX -1", 191),
        ("rtmax-14", 178),
        ("SIGRTMAX-30", 162),
        ("SIG64", 192),
        ("SIG34", 162),
        ("SIG015", 143),
    ];
    let invalid = [
        "RTMIN ",
        "RTMIN+",
        "RTMIN+ 1",
        "RTMAX1",
        "RTMAX-31",
        "RTMIN+31",
        "RTMIN+0x1",
        "RTMIN-1",
        "SIG32",
        "SIG33",
        "SIG65",
        "SIG 9",
        "SIG+9",
        "SIG-9",
        "SIG9 ",
        "SIG",
        "SIGSIG9",
        "SIGSIGTERM",
        "255",
        "383",
        "384",
        "2147483648",
        "4294967311",
        "SIG099999999999999999999",
        "-1",
        "+9",
        " 9",
        "9 ",
        "0x9",
        "1.0",
        "",
        "TERM ",
    ];
    let mut cases: Vec<(Vec<&str>, i32)> = valid.iter().map(|(s, st)| (sig(s), *st)).collect();
    cases.extend(invalid.iter().map(|s| (sig(s), 125)));
    let cases: Vec<(&[&str], i32)> = cases.iter().map(|(a, st)| (a.as_slice(), *st)).collect();
    agree_with_gnu(&cases, &[], true);
}

/// DURATION as coreutils 9.1's parse_duration reads it (cl_strtod, then `0 <= d`), with GNU's
/// own timeout as the oracle: 0 for no timeout (`sleep .3` ends by itself), 124 for a timeout,
/// 125 and the same message for what it refuses.
#[test]
fn durations_as_gnu_timeout_9_1_reads_them() {
    if !have(Need::GnuTimeout91) {
        return;
    }
    let dur = |d: &'static str| -> Vec<&'static str> { vec!["--", d, "sleep", ".3"] };
    let cases: &[(&str, i32)] = &[
        ("0", 0),
        ("-0", 0),
        ("1e-5000", 0),
        ("-1e-10000", 0),
        (" -1e-10000", 0),
        ("1e-324", 0),
        ("-1e-400", 0),
        ("0x1p-5000", 0),
        ("-0x1p-5000", 0),
        ("1e-5000d", 0),
        ("0.0000000000000000000001e-4990", 0),
        ("inf", 0),
        ("INFINITYs", 0),
        ("1e400", 0),
        ("+1", 0),
        (" 1", 0),
        ("1.5e1m", 0),
        ("1e-310", 124),
        ("3e-324", 124),
        ("0x1p-1074", 124),
        ("1e-10", 124),
        ("0x1P-3", 124),
        ("+.1", 124),
        (".1s", 124),
        ("-1e-310", 125),
        ("-1", 125),
        ("-inf", 125),
        ("-1e400", 125),
        ("1,5", 125),
        ("1 ", 125),
        ("0x", 125),
        ("0x.p1", 125),
        ("0x1p", 125),
        ("1e+", 125),
        ("nan", 125),
        ("nan(abc)", 125),
        (".e1", 125),
        ("0e", 125),
        ("1ms", 125),
        ("1x", 125),
        ("", 125),
    ];
    let args: Vec<(Vec<&str>, i32)> = cases.iter().map(|(d, st)| (dur(d), *st)).collect();
    let args: Vec<(&[&str], i32)> = args.iter().map(|(a, st)| (a.as_slice(), *st)).collect();
    agree_with_gnu(&args, &[], true);
}

/// cl_strtod takes the locale's decimal point and the C locale's: in a de_DE locale (built
/// here with localedef), `1,5` and `1.5` are both durations. GNU's messages are translated
/// there and reaper's are not, so only the statuses are compared.
#[test]
fn durations_in_a_decimal_comma_locale_as_gnu_timeout_9_1() {
    if !have(Need::GnuTimeout91) || !have(Need::LocaleSources) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("reaper-test-")
        .tempdir()
        .expect("temp dir");
    let st = Command::new("localedef")
        .args(["-i", "de_DE", "-f", "UTF-8"])
        .arg(dir.path().join("de_DE.UTF-8"))
        .stdout(Stdio::null())
        .status()
        .expect("run localedef");
    assert!(st.success(), "localedef de_DE.UTF-8: {st:?}");
    let env: &[(&str, &std::ffi::OsStr)] = &[
        ("LOCPATH", dir.path().as_os_str()),
        ("LC_ALL", "de_DE.UTF-8".as_ref()),
    ];
    let dur = |d: &'static str| -> Vec<&'static str> { vec![d, "sleep", ".3"] };
    let cases: &[(&str, i32)] = &[
        ("1,5", 0),
        ("1.5", 0),
        (",1", 124),
        ("0,1s", 124),
        ("0x0,2", 124),
        ("1,5e-5000", 0),
        ("1,", 0),
        ("1,5,", 125),
        ("1,5.", 125),
        (",", 125),
    ];
    let args: Vec<(Vec<&str>, i32)> = cases.iter().map(|(d, st)| (dur(d), *st)).collect();
    let args: Vec<(&[&str], i32)> = args.iter().map(|(a, st)| (a.as_slice(), *st)).collect();
    agree_with_gnu(&args, env, false);
}

/// A value that is not UTF-8 is refused, and quoted byte for byte, as GNU timeout does.
#[test]
fn values_that_are_not_utf8_are_quoted_as_gnu_timeout_quotes_them() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    if !have(Need::GnuTimeout91) {
        return;
    }
    let bad = std::ffi::OsStr::from_bytes(b"\xff");
    let mut eq = std::ffi::OsString::from("--signal=");
    eq.push(bad);
    let mut glued = std::ffi::OsString::from("-vs");
    glued.push(bad);
    let cases: [Vec<&std::ffi::OsStr>; 4] = [
        vec!["-s".as_ref(), bad, "1".as_ref(), "true".as_ref()],
        vec![&eq, "1".as_ref(), "true".as_ref()],
        vec![&glued, "1".as_ref(), "true".as_ref()],
        vec!["-k".as_ref(), bad, "1".as_ref(), "true".as_ref()],
    ];
    for args in cases {
        let [gnu, ours] = [Command::new(GNU_TIMEOUT), reaper()].map(|mut c| {
            let o = c
                .arg0("timeout")
                .args(&args)
                .env("LC_ALL", "C")
                .stdin(Stdio::null())
                .output()
                .expect("run a timeout");
            (code(&o), stderr(&o))
        });
        assert_eq!(gnu.0, 125, "{args:?}: {}", gnu.1);
        assert_eq!(ours, gnu, "timeout {args:?}");
    }
}
