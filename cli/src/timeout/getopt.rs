//! timeout(1)'s command line as getopt_long(3) with `+k:s:v` reads it: options only before
//! DURATION, long ones by a unique prefix, clusters of short ones, its exact usage messages.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use super::Args;
use crate::coreutils::{self, quote, SigSpec};

/// The long options, as getopt_long(3) matches them: exactly, or by a unique prefix.
const LONG: &[(&str, bool)] = &[
    ("kill-after", true),
    ("signal", true),
    ("verbose", false),
    ("foreground", false),
    ("preserve-status", false),
    ("help", false),
    ("version", false),
];

/// What the command line says.
pub enum Parsed {
    Run(Args),
    Help,
    Version,
}

/// The arguments as timeout(1)'s getopt_long(3) with `+k:s:v` reads them, durations with the
/// locale's decimal point `radix`; `Err(message)` is a usage error (the message, if any, goes
/// before the `Try … --help` line).
pub fn parse_args(name: &str, args: &[OsString], radix: &str) -> Result<Parsed, Option<String>> {
    let mut kill_after = None;
    let mut signal = SigSpec::TERM;
    let (mut verbose, mut foreground, mut preserve) = (false, false, false);
    let mut i = 0;
    let text = |a: &OsStr| a.to_string_lossy().into_owned();
    // Values stay bytes until read, so that a message quotes them as given (`'\377'`).
    let interval = |v: &OsStr| {
        v.to_str()
            .and_then(|t| coreutils::gnu_duration(t, radix))
            .ok_or_else(|| Some(format!("invalid time interval {}", quote(v))))
    };
    let sig = |v: &OsStr| {
        v.to_str()
            .and_then(coreutils::gnu_signal)
            .ok_or_else(|| Some(format!("{}: invalid signal", quote(v))))
    };
    // The bytes of `args[n]` from `at` on (after an ASCII prefix, the same in the lossy text).
    let tail = |n: usize, at: usize| {
        OsStr::from_bytes(args[n].as_bytes().get(at..).unwrap_or_default()).to_owned()
    };
    // …and after its first `=`.
    let after_eq = |n: usize| {
        let b = args[n].as_bytes();
        tail(
            n,
            b.iter().position(|&c| c == b'=').map_or(b.len(), |p| p + 1),
        )
    };
    while i < args.len() {
        let a = text(&args[i]);
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += 1;
        if let Some(long) = a.strip_prefix("--") {
            let (key, inline) = match long.split_once('=') {
                Some((k, _)) => (k, Some(after_eq(i - 1))),
                None => (long, None),
            };
            let exact = LONG.iter().find(|(n, _)| *n == key);
            let matches: Vec<_> = LONG.iter().filter(|(n, _)| n.starts_with(key)).collect();
            let &(opt, takes) = match (exact, matches.as_slice()) {
                (Some(o), _) => o,
                (None, [o]) => o,
                (None, []) => return Err(Some(format!("unrecognized option '--{key}'"))),
                (None, many) => {
                    let all: Vec<String> = many.iter().map(|(n, _)| format!("'--{n}'")).collect();
                    return Err(Some(format!(
                        "option '--{key}' is ambiguous; possibilities: {}",
                        all.join(" ")
                    )));
                }
            };
            let value = if takes {
                match inline {
                    Some(v) => Some(v),
                    None if i < args.len() => {
                        i += 1;
                        Some(args[i - 1].clone())
                    }
                    None => return Err(Some(format!("option '--{opt}' requires an argument"))),
                }
            } else if inline.is_some() {
                return Err(Some(format!("option '--{opt}' doesn't allow an argument")));
            } else {
                None
            };
            let v = value.unwrap_or_default();
            match opt {
                "kill-after" => kill_after = Some(interval(&v)?),
                "signal" => signal = sig(&v)?,
                "verbose" => verbose = true,
                "foreground" => foreground = true,
                "preserve-status" => preserve = true,
                "help" => return Ok(Parsed::Help),
                _ => return Ok(Parsed::Version),
            }
            continue;
        }
        // A cluster of short options: `-v`, `-k5`, `-vk 5`, `-sKILL`.
        for (at, c) in a[1..].char_indices() {
            match c {
                'v' => verbose = true,
                'k' | 's' => {
                    // `-` and the options before this one are ASCII.
                    let rest = tail(i - 1, 1 + at + 1);
                    let v = if !rest.is_empty() {
                        rest
                    } else if i < args.len() {
                        i += 1;
                        args[i - 1].clone()
                    } else {
                        return Err(Some(format!("option requires an argument -- '{c}'")));
                    };
                    if c == 'k' {
                        kill_after = Some(interval(&v)?);
                    } else {
                        signal = sig(&v)?;
                    }
                    break;
                }
                _ => return Err(Some(format!("invalid option -- '{c}'"))),
            }
        }
    }
    if args.len() - i < 2 {
        return Err(None);
    }
    let duration = interval(&args[i])?;
    // -k 0 is no -k at all, as with timeout(1).
    let kill_after = kill_after.filter(|d: &Duration| !d.is_zero());
    Ok(Parsed::Run(Args {
        name: name.to_owned(),
        duration,
        signal,
        kill_after,
        verbose,
        foreground,
        preserve_status: preserve,
        command: args[i + 1..].to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Parsed, Option<String>> {
        parse_args(
            "timeout",
            &args.iter().map(OsString::from).collect::<Vec<_>>(),
            ".",
        )
    }

    fn run_args(args: &[&str]) -> Args {
        match parse(args) {
            Ok(Parsed::Run(a)) => a,
            Ok(_) => panic!("{args:?}: help or version"),
            Err(e) => panic!("{args:?}: {e:?}"),
        }
    }

    fn usage_error(args: &[&str]) -> Option<String> {
        match parse(args) {
            Err(e) => e,
            Ok(_) => panic!("{args:?} accepted"),
        }
    }

    #[test]
    fn options_come_before_the_duration() {
        let a = run_args(&[
            "-v",
            "-k1",
            "-s",
            "INT",
            "--foreground",
            "5",
            "cmd",
            "-k",
            "x",
        ]);
        assert!(a.verbose && a.foreground);
        assert_eq!(a.kill_after, Some(Duration::from_secs(1)));
        assert_eq!(a.signal.name(), "INT");
        assert_eq!(a.duration, Duration::from_secs(5));
        assert_eq!(a.command, ["cmd", "-k", "x"]);
        // Everything after DURATION is COMMAND's, `--` included.
        assert_eq!(run_args(&["1", "--", "true"]).command, ["--", "true"]);
        assert_eq!(run_args(&["--", "1", "true"]).command, ["true"]);
        assert_eq!(run_args(&["-vs9", "1", "x"]).signal.name(), "KILL");
        assert_eq!(run_args(&["--sig=0", "1", "x"]).signal.name(), "EXIT");
        assert_eq!(
            run_args(&["--kill=2", "1", "x"]).kill_after,
            Some(Duration::from_secs(2))
        );
        assert!(run_args(&["--p", "1", "x"]).preserve_status);
        assert_eq!(run_args(&["-k", "0", "1", "x"]).kill_after, None);
        assert_eq!(run_args(&["0", "x"]).duration, Duration::ZERO);
    }

    #[test]
    fn usage_errors_read_as_getopt_writes_them() {
        assert_eq!(usage_error(&[]), None);
        assert_eq!(usage_error(&["1"]), None);
        assert_eq!(
            usage_error(&["-x", "1", "t"]).unwrap(),
            "invalid option -- 'x'"
        );
        assert_eq!(
            usage_error(&["--bogus", "1", "t"]).unwrap(),
            "unrecognized option '--bogus'"
        );
        assert_eq!(
            usage_error(&["-k"]).unwrap(),
            "option requires an argument -- 'k'"
        );
        assert_eq!(
            usage_error(&["--kill-after"]).unwrap(),
            "option '--kill-after' requires an argument"
        );
        assert_eq!(
            usage_error(&["--v", "1", "t"]).unwrap(),
            "option '--v' is ambiguous; possibilities: '--verbose' '--version'"
        );
        assert_eq!(
            usage_error(&["--for=1", "1", "t"]).unwrap(),
            "option '--foreground' doesn't allow an argument"
        );
        assert_eq!(
            usage_error(&["1x", "t"]).unwrap(),
            "invalid time interval '1x'"
        );
        assert_eq!(
            usage_error(&["1ms", "t"]).unwrap(),
            "invalid time interval '1ms'"
        );
        assert_eq!(
            usage_error(&["-k", "inv", "1", "t"]).unwrap(),
            "invalid time interval 'inv'"
        );
        assert_eq!(
            usage_error(&["-s", "invalid", "1", "t"]).unwrap(),
            "'invalid': invalid signal"
        );
        assert_eq!(
            usage_error(&["--", "-1", "t"]).unwrap(),
            "invalid time interval '-1'"
        );
        assert!(matches!(parse(&["--help"]), Ok(Parsed::Help)));
        assert!(matches!(parse(&["--vers"]), Ok(Parsed::Version)));
    }
}
