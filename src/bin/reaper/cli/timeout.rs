//! `reaper timeout` (and reaper invoked through a link named `timeout`): GNU timeout(1)'s
//! command line, exactly — options before DURATION as getopt_long(3) reads them, its messages,
//! its exit statuses — turned into a `reaper run` of the whole tree (src/cli/run.rs).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use super::parse::{self, SigSpec};
use super::run::{ContainArgs, GuardArgs, LimitArgs, RunArgs, TimeoutFace};
use reaper::containment::select::{DelegateMode, Requested};

/// 125: timeout(1)'s status for its own failures (bad usage included).
const CANCELED: u8 = 125;
/// How long what is left of the tree gets after the signal when `-k` is absent.
const DEFAULT_GRACE: Duration = Duration::from_secs(2);

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

/// `name` is how the messages name the program: argv[0] for the link (as coreutils does),
/// `reaper timeout` for the subcommand. `args` are the arguments after it.
pub fn main(name: &str, args: Vec<OsString>) -> u8 {
    match parse_args(name, &args, &locale().radix) {
        Ok(Parsed::Run(a)) => super::run::main(*a),
        Ok(Parsed::Help) => {
            out!("{}", help(name));
            0
        }
        Ok(Parsed::Version) => {
            out!(
                "timeout (reaper) {}\nreaper's timeout(1): GNU timeout's command line, for the whole process tree.",
                env!("CARGO_PKG_VERSION")
            );
            0
        }
        Err(msg) => {
            if let Some(m) = msg {
                say!("{name}: {m}");
            }
            say!("Try '{name} --help' for more information.");
            CANCELED
        }
    }
}

/// Whether `args` (after the program's name) run a command that wants a guardian: `main` forks
/// it before anything else when so.
pub fn wants_guardian(args: &[OsString]) -> bool {
    matches!(parse_args("timeout", args, &locale().radix), Ok(Parsed::Run(a)) if a.contain.wants_guardian(&a.guard))
}

enum Parsed {
    Run(Box<RunArgs>),
    Help,
    Version,
}

/// The arguments as timeout(1)'s getopt_long(3) with `+k:s:v` reads them, durations with the
/// locale's decimal point `radix`; `Err(message)` is a usage error (the message, if any, goes
/// before the `Try … --help` line).
fn parse_args(name: &str, args: &[OsString], radix: &str) -> Result<Parsed, Option<String>> {
    let mut kill_after = None;
    let mut signal = SigSpec::TERM;
    let (mut verbose, mut foreground, mut preserve) = (false, false, false);
    let mut i = 0;
    let text = |a: &OsStr| a.to_string_lossy().into_owned();
    // Values stay bytes until read, so that a message quotes them as given (`'\377'`).
    let interval = |v: &OsStr| {
        v.to_str()
            .and_then(|t| parse::gnu_duration(t, radix))
            .ok_or_else(|| Some(format!("invalid time interval {}", quote(v))))
    };
    let sig = |v: &OsStr| {
        v.to_str()
            .and_then(parse::gnu_signal)
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
    Ok(Parsed::Run(Box::new(RunArgs {
        timeout: Some(duration),
        signal,
        grace: kill_after.unwrap_or(DEFAULT_GRACE),
        linger: Duration::ZERO,
        preserve_status: preserve,
        report: None,
        events: false,
        die_with_parent: false,
        on_stdin_eof: None,
        init: false,
        forward_to: None,
        guard: GuardArgs { no_guardian: false },
        quiet: true,
        contain: ContainArgs {
            containment: Requested::Auto,
            cgroup_parent: std::env::var_os("REAPER_CGROUP_PARENT")
                .filter(|v| !v.is_empty())
                .map(Into::into),
            poll: Duration::from_millis(50),
            // As `reaper run`'s `--delegate`: REAPER_DELEGATE=never, else auto.
            delegate: match std::env::var("REAPER_DELEGATE").as_deref() {
                Ok("never") => DelegateMode::Never,
                _ => DelegateMode::Auto,
            },
            // timeout(1) has no limits.
            limits: LimitArgs::default(),
            sandbox: None,
        },
        command: args[i + 1..].to_vec(),
        face: Some(TimeoutFace {
            name: name.to_owned(),
            verbose,
            foreground,
            kill_after,
        }),
    })))
}

fn help(name: &str) -> String {
    format!(
        "\
Usage: {name} [OPTION] DURATION COMMAND [ARG]...
  or:  {name} [OPTION]
Start COMMAND, and kill it if still running after DURATION.
reaper's timeout(1): the same command line, for COMMAND's whole process tree.

Mandatory arguments to long options are mandatory for short options too.
      --preserve-status
                 exit with the same status as COMMAND, even when the
                   command times out
      --foreground
                 when not running timeout directly from a shell prompt,
                   allow COMMAND to read from the TTY and get TTY signals;
                   in this mode, the signal goes to COMMAND alone (the rest
                   of its tree is still stopped when COMMAND exits)
  -k, --kill-after=DURATION
                 also send a KILL signal if COMMAND is still running
                   this long after the initial signal was sent; reaper
                   sends it to COMMAND's whole tree
  -s, --signal=SIGNAL
                 specify the signal to be sent on timeout;
                   SIGNAL may be a name like 'HUP' or a number;
                   see 'kill -l' for a list of signals
  -v, --verbose  diagnose to stderr any signal sent upon timeout
      --help        display this help and exit
      --version     output version information and exit

DURATION is a floating point number with an optional suffix:
's' for seconds (the default), 'm' for minutes, 'h' for hours or 'd' for days.
A duration of 0 disables the associated timeout.

Upon timeout, send the TERM signal to COMMAND, if no other SIGNAL specified.
The TERM signal kills any process that does not block or catch that signal.
It may be necessary to use the KILL signal, since this signal can't be caught.

Where reaper differs from GNU timeout, on purpose:
  - The signal goes to every process COMMAND started, wherever it went (setsid,
    double fork): reaper contains the tree (a cgroup of its own, or reaper as
    subreaper), not one process group.
  - Nothing COMMAND started outlives it: once COMMAND has exited (on its own or
    after the signal), whatever is left of its tree gets the rest of the -k
    time, or 2 seconds without -k, after the signal, then SIGKILL.
  - Without -k, reaper, like GNU timeout, waits for COMMAND itself for as long
    as it runs, even if it ignores the signal.
  - COMMAND may always use the terminal as with --foreground (it stays in
    reaper's process group).

Exit status:
  124  if COMMAND times out, and --preserve-status is not specified
  125  if the timeout command itself fails (or a process survived SIGKILL)
  126  if COMMAND is found but cannot be invoked
  127  if COMMAND cannot be found
  137  if COMMAND (or timeout itself) is sent the KILL (9) signal (128+9)
  -    the exit status of COMMAND otherwise

Installed as a link named 'timeout' (ln -s \"$(command -v reaper)\" ~/bin/timeout),
reaper behaves as 'reaper timeout'."
    )
}

/// Dies of `sig`, as timeout(1) does when COMMAND did: without a core dump of reaper's own,
/// the signal's default action restored and unblocked. Returns when that is not possible, or
/// when the default action does not terminate (CHLD, WINCH, CONT…): the caller exits 128+N.
pub fn die_of(sig: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) only changes this process's dumpable flag.
    let no_core = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0;
    #[cfg(not(target_os = "linux"))]
    // SAFETY: setrlimit with a valid, initialised struct.
    let no_core = unsafe {
        libc::setrlimit(
            libc::RLIMIT_CORE,
            &libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            },
        )
    } == 0;
    if !no_core {
        return;
    }
    // SAFETY: plain libc calls on a local, initialised sigset; the run is over (tree reaped,
    // cgroup removed, guardian told), so nothing is lost when the signal ends reaper.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// How coreutils' quote() quotes, which depends on the locale's character set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quoting {
    /// 'x', with `'` escaped and non-ASCII bytes in octal.
    Ascii,
    /// ‘x’, with printable UTF-8 kept.
    Utf8,
}

/// What timeout(1) takes from the locale the environment names (setlocale(LC_ALL, "")).
struct Locale {
    quoting: Quoting,
    /// The decimal point strtod(3) reads (`.`, `,` in de_DE).
    radix: String,
}

static LOCALE: std::sync::OnceLock<Locale> = std::sync::OnceLock::new();

/// The locale, read once; the first call is on the main thread before any other thread exists
/// (`main`, `wants_guardian`), as setlocale(3) requires.
fn locale() -> &'static Locale {
    LOCALE.get_or_init(Locale::read)
}

impl Locale {
    /// As setlocale(3) resolves the environment (a locale that is not installed is C).
    fn read() -> Locale {
        // SAFETY: setlocale, nl_langinfo and localeconv are not thread-safe; this runs on the
        // main thread before any other thread exists (the runtime starts later), each category
        // is put back to "C" at once (Rust's std does not use the locale), and what the
        // returned pointers point to is copied before that.
        unsafe {
            let quoting = if libc::setlocale(libc::LC_CTYPE, c"".as_ptr()).is_null() {
                Quoting::Ascii
            } else {
                let cs = libc::nl_langinfo(libc::CODESET);
                let utf8 = !cs.is_null() && std::ffi::CStr::from_ptr(cs).to_bytes() == b"UTF-8";
                libc::setlocale(libc::LC_CTYPE, c"C".as_ptr());
                if utf8 {
                    Quoting::Utf8
                } else {
                    Quoting::Ascii
                }
            };
            let mut radix = ".".to_owned();
            if !libc::setlocale(libc::LC_NUMERIC, c"".as_ptr()).is_null() {
                let lc = libc::localeconv();
                if !lc.is_null() && !(*lc).decimal_point.is_null() {
                    let point = std::ffi::CStr::from_ptr((*lc).decimal_point);
                    if let Ok(p) = point.to_str() {
                        if !p.is_empty() {
                            radix = p.to_owned();
                        }
                    }
                }
                libc::setlocale(libc::LC_NUMERIC, c"C".as_ptr());
            }
            Locale { quoting, radix }
        }
    }
}

/// `s` quoted as coreutils' quote() does (locale_quoting_style); ASCII quotes where the locale
/// was never read (reaper's other faces).
pub fn quote(s: impl AsRef<OsStr>) -> String {
    quote_as(
        s.as_ref(),
        LOCALE.get().map_or(Quoting::Ascii, |l| l.quoting),
    )
}

fn quote_as(s: &OsStr, q: Quoting) -> String {
    use std::os::unix::ffi::OsStrExt;
    let bytes = s.as_bytes();
    let (open, close) = match q {
        Quoting::Ascii => ('\'', '\''),
        Quoting::Utf8 => ('\u{2018}', '\u{2019}'),
    };
    let mut out = String::new();
    out.push(open);
    let mut rest = bytes;
    while let Some(&b) = rest.first() {
        // Printable UTF-8 beyond ASCII is kept in a UTF-8 locale.
        if b >= 0x80 && q == Quoting::Utf8 {
            let len = match b {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => 1,
            };
            if let Some(c) = rest
                .get(..len)
                .and_then(|c| std::str::from_utf8(c).ok())
                .filter(|c| !c.chars().any(char::is_control))
            {
                out.push_str(c);
                rest = &rest[len..];
                continue;
            }
        }
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' if q == Quoting::Ascii => out.push_str("\\'"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x0b => out.push_str("\\v"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
        rest = &rest[1..];
    }
    out.push(close);
    out
}

/// strerror(3)'s text, without std's ` (os error N)`.
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rsplit_once(" (os error") {
        Some((text, _)) => text.to_owned(),
        None => s,
    }
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

    fn run_args(args: &[&str]) -> RunArgs {
        match parse(args) {
            Ok(Parsed::Run(a)) => *a,
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
        let f = a.face.expect("face");
        assert!(f.verbose && f.foreground);
        assert_eq!(f.kill_after, Some(Duration::from_secs(1)));
        assert_eq!(a.signal.name(), "INT");
        assert_eq!(a.timeout, Some(Duration::from_secs(5)));
        assert_eq!(a.command, ["cmd", "-k", "x"]);
        // Everything after DURATION is COMMAND's, `--` included.
        assert_eq!(run_args(&["1", "--", "true"]).command, ["--", "true"]);
        assert_eq!(run_args(&["--", "1", "true"]).command, ["true"]);
        assert_eq!(run_args(&["-vs9", "1", "x"]).signal.name(), "KILL");
        assert_eq!(run_args(&["--sig=0", "1", "x"]).signal.name(), "EXIT");
        assert_eq!(
            run_args(&["--kill=2", "1", "x"]).grace,
            Duration::from_secs(2)
        );
        assert!(run_args(&["--p", "1", "x"]).preserve_status);
        assert_eq!(
            run_args(&["-k", "0", "1", "x"]).face.unwrap().kill_after,
            None
        );
        assert_eq!(run_args(&["0", "x"]).timeout, Some(Duration::ZERO));
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

    #[test]
    fn quotes_as_coreutils() {
        let q = |s: &[u8], how| quote_as(std::os::unix::ffi::OsStrExt::from_bytes(s), how);
        assert_eq!(q(b"sleep", Quoting::Ascii), "'sleep'");
        assert_eq!(q(b"a'b", Quoting::Ascii), "'a\\'b'");
        assert_eq!(q(b"a'b", Quoting::Utf8), "\u{2018}a'b\u{2019}");
        assert_eq!(q(b"a\\b\tc\n", Quoting::Ascii), "'a\\\\b\\tc\\n'");
        assert_eq!(q("é".as_bytes(), Quoting::Ascii), "'\\303\\251'");
        assert_eq!(q("é".as_bytes(), Quoting::Utf8), "\u{2018}é\u{2019}");
        assert_eq!(q(b"\xff", Quoting::Utf8), "\u{2018}\\377\u{2019}");
    }
}
