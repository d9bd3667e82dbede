//! Reading and writing values as GNU coreutils does, for timeout(1)'s face and reaper's own
//! flags: durations are floating-point numbers as strtod(3) reads them (`30`, `2.5m`,
//! `2.34e+5d`, `0x10`, `inf`) with an optional suffix `s`, `m`, `h` or `d` (reaper's own flags
//! also take `ms`); signals are names or numbers as coreutils 9.1's operand2sig reads them,
//! with `0` (`EXIT`) meaning none; and quote() quotes as the locale says.

use std::ffi::OsStr;
use std::time::Duration;

use reaper::Signal;
use reaper_platform::signal;

/// The longest duration reaper waits: values beyond it (`4294967296`, `inf`,
/// `1.18973149535723176502e+4932`) mean "in practice never", as with timeout(1), and are
/// capped here so that no deadline computed from them (`Instant + Duration`) can overflow.
pub const LONGEST: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A duration for reaper's own flags: timeout(1)'s syntax plus the suffix `ms`.
pub fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text, Reading::Own).ok_or_else(|| {
        format!("invalid duration '{text}' (a number with an optional suffix ms, s, m, h or d: 500ms, 30s, 1.5h, 2e3)")
    })
}

/// A duration exactly as coreutils 9.1's timeout(1) takes it (no `ms`), in a locale whose
/// decimal point is `radix`. `None` when invalid.
pub fn gnu_duration(text: &str, radix: &str) -> Option<Duration> {
    parse_duration(text, Reading::Gnu { radix })
}

/// Whose rules read a duration.
#[derive(Clone, Copy)]
enum Reading<'a> {
    /// reaper's own flags: strtod in the C locale, plus `ms`; a value that underflows is the
    /// shortest timeout when positive (`1e-5000`) and refused when negative (`-1e-10000`), as
    /// coreutils reads them since its timeout bounds durations with gnulib's dtimespec_bound.
    Own,
    /// coreutils 9.1's parse_duration: cl_strtod (the locale's decimal point, or `.`); any
    /// value `0 <= d` admits, so one that underflows to 0 or -0 is 0, no timeout.
    Gnu { radix: &'a str },
}

fn parse_duration(text: &str, how: Reading) -> Option<Duration> {
    let (num, rest) = match how {
        Reading::Own => strtod(text, ".")?,
        Reading::Gnu { radix } => cl_strtod(text, radix)?,
    };
    let scale = match rest {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "ms" if matches!(how, Reading::Own) => 0.001,
        _ => return None,
    };
    // `0 <= d`: NaN and negative values are refused; `-0` is zero.
    if num.value.is_nan() || num.negative && num.value != 0.0 {
        return None;
    }
    if num.underflow && matches!(how, Reading::Own) {
        return (!num.negative).then_some(Duration::from_nanos(1));
    }
    let secs = num.value * scale;
    if secs >= LONGEST.as_secs_f64() {
        return Some(LONGEST);
    }
    // Round up to the next nanosecond, as gnulib's dtotimespec does, so that a timeout never
    // fires early (and a positive value never becomes 0, "no timeout").
    let whole = secs.trunc();
    let frac = 1e9 * (secs - whole);
    let mut ns = frac as u64;
    if (ns as f64) < frac {
        ns += 1;
    }
    Some(Duration::from_secs(whole as u64) + Duration::from_nanos(ns))
}

/// gnulib's cl_strtod: strtod(3) in the locale (decimal point `radix`) and, if that leaves
/// text unread, in the C locale too; whichever reads further wins.
fn cl_strtod<'t>(text: &'t str, radix: &str) -> Option<(Number, &'t str)> {
    let local = strtod(text, radix);
    let unread = |r: &Option<(Number, &str)>| r.as_ref().map_or(text.len(), |(_, rest)| rest.len());
    if radix == "." || unread(&local) == 0 {
        return local;
    }
    let c = strtod(text, ".");
    if unread(&c) < unread(&local) {
        c
    } else {
        local
    }
}

/// A number as strtod(3) reads it, and the text after it.
#[derive(Debug)]
struct Number {
    /// The magnitude (the sign is `negative`).
    value: f64,
    negative: bool,
    /// Nonzero digits that a double cannot hold (the value became 0).
    underflow: bool,
}

/// strtod(3) with `radix` as the decimal point (`.` in the C locale, `,` in de_DE).
fn strtod<'t>(text: &'t str, radix: &str) -> Option<(Number, &'t str)> {
    // isspace(3) in the C locale.
    let s = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    let word = |value: f64, len: usize| {
        Some((
            Number {
                value,
                negative,
                underflow: false,
            },
            &s[len..],
        ))
    };
    if lower.starts_with("infinity") {
        return word(f64::INFINITY, 8);
    }
    if lower.starts_with("inf") {
        return word(f64::INFINITY, 3);
    }
    if lower.starts_with("nan") {
        // `nan(chars)`: the parenthesised part belongs to the number when it is closed.
        let after = &s[3..];
        let len = after
            .strip_prefix('(')
            .and_then(|a| {
                a.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|&i| a[i..].starts_with(')'))
                    .map(|i| i + 2)
            })
            .unwrap_or(0);
        return word(f64::NAN, 3 + len);
    }
    let b = s.as_bytes();
    let hex_digits = |from: usize| {
        b.get(from).is_some_and(u8::is_ascii_hexdigit)
            || s.get(from..).is_some_and(|t| {
                t.strip_prefix(radix)
                    .is_some_and(|t| t.as_bytes().first().is_some_and(u8::is_ascii_hexdigit))
            })
    };
    if b.len() > 2 && b[0] == b'0' && (b[1] | 0x20) == b'x' && hex_digits(2) {
        let (value, underflow, len) = hex_float(&s[2..], radix);
        return Some((
            Number {
                value,
                negative,
                underflow,
            },
            &s[2 + len..],
        ));
    }
    // Decimal: digits with at most one point (at least one digit), then an exponent only if
    // it has digits (`1e` is 1 followed by `e`).
    let int = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let mut end = int;
    let mut frac = "";
    if s[end..].starts_with(radix) {
        let after = end + radix.len();
        let n = b[after..].iter().take_while(|c| c.is_ascii_digit()).count();
        frac = &s[after..after + n];
        end = after + n;
    }
    if int + frac.len() == 0 {
        return None;
    }
    let mut exponent = "";
    if b.get(end).is_some_and(|c| c | 0x20 == b'e') {
        let mut e = end + 1;
        if matches!(b.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let digits = b[e..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 {
            exponent = &s[end..e + digits];
            end = e + digits;
        }
    }
    let value: f64 = format!("{}.{frac}{exponent}", &s[..int]).parse().ok()?;
    let underflow = value == 0.0
        && s[..int]
            .bytes()
            .chain(frac.bytes())
            .any(|c| matches!(c, b'1'..=b'9'));
    Some((
        Number {
            value,
            negative,
            underflow,
        },
        &s[end..],
    ))
}

/// The hexadecimal float after `0x` (`1p-3`, `.8`, `10`), `radix` its point: its value,
/// whether it underflowed, and how many bytes it took. Precision beyond 60 bits does not matter
/// for a timeout.
fn hex_float(s: &str, radix: &str) -> (f64, bool, usize) {
    let b = s.as_bytes();
    let (mut mantissa, mut exp, mut i, mut nonzero) = (0u64, 0i64, 0usize, false);
    let mut seen_point = false;
    while i < b.len() {
        let c = b[i];
        if !seen_point && s[i..].starts_with(radix) {
            seen_point = true;
            i += radix.len();
            continue;
        } else if let Some(d) = (c as char).to_digit(16) {
            nonzero |= d != 0;
            if mantissa < 1 << 59 {
                mantissa = mantissa * 16 + u64::from(d);
                if seen_point {
                    exp -= 4;
                }
            } else if !seen_point {
                exp += 4;
            }
        } else {
            break;
        }
        i += 1;
    }
    if b.get(i).is_some_and(|c| c | 0x20 == b'p') {
        let mut e = i + 1;
        let neg = b.get(e) == Some(&b'-');
        if matches!(b.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let digits = b[e..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 {
            let p = b[e..e + digits].iter().fold(0i64, |acc, &c| {
                (acc * 10 + i64::from(c - b'0')).min(1 << 20)
            });
            exp += if neg { -p } else { p };
            i = e + digits;
        }
    }
    let exp = exp.clamp(-4000, 4000) as i32;
    let value = mantissa as f64 * 2f64.powi(exp / 2) * 2f64.powi(exp - exp / 2);
    (value, nonzero && value == 0.0, i)
}

/// A signal as timeout(1) takes it: a name (`TERM`, `SIGTERM`, `term`, `RTMIN+2`, `EXIT`) or a
/// number, where 0 means "send nothing".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigSpec(i32);

impl SigSpec {
    pub const TERM: SigSpec = SigSpec(libc::SIGTERM);

    pub fn from_signal(s: Signal) -> SigSpec {
        SigSpec(s.as_raw())
    }

    /// The signal to send; `None` for 0.
    pub fn signal(self) -> Option<Signal> {
        if let Some(s) = Signal::from_named_raw(self.0) {
            return Some(s);
        }
        #[cfg(target_os = "linux")]
        if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&self.0) {
            // SAFETY: a real-time signal in libc's application range (SIGRTMIN..=SIGRTMAX,
            // above the ones glibc reserves); it is only ever sent, never handled or blocked.
            return Some(unsafe { Signal::from_raw_unchecked(self.0) });
        }
        None
    }

    #[cfg(test)]
    pub fn raw(self) -> i32 {
        self.0
    }

    /// timeout(1)'s name for it (sig2str): `TERM`, `EXIT`, `RTMIN+1`, `RTMAX`.
    pub fn name(self) -> String {
        signal::sig2str(self.0).unwrap_or_else(|| self.0.to_string())
    }
}

/// A signal for reaper's flags and timeout(1)'s `-s`, with timeout's rules: a number (masked
/// like a shell's `$?`: 143 is TERM), or a name with or without `SIG`, in any case.
pub fn sig_spec(text: &str) -> Result<SigSpec, String> {
    gnu_signal(text)
        .ok_or_else(|| format!("invalid signal '{text}' (examples: TERM, SIGINT, 9, 0 for none)"))
}

/// A signal that must be sent (not 0).
pub fn signal(text: &str) -> Result<Signal, String> {
    sig_spec(text)?
        .signal()
        .ok_or_else(|| format!("invalid signal '{text}': a signal to send is needed here"))
}

/// coreutils 9.1's operand2sig. A number (it starts with a digit) is read by strtol to an int
/// and masked as a shell status (`& 0x7f`, or `& 0xff` from 255: ksh adds 256): 143 and 271 are
/// TERM, 128 and 256 are 0. Anything else is upcased and read by gnulib's str2sig, then again
/// without a leading `SIG` (`SIG15`, `sigrtmin 1`). Valid only if sig2str names the result.
/// `None` when invalid.
pub fn gnu_signal(text: &str) -> Option<SigSpec> {
    let raw = if text.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        if !text.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        // Beyond an int, strtol's ERANGE or the narrowing makes it invalid.
        let n: i32 = text.parse().ok()?;
        n & if n >= 0xff { 0xff } else { 0x7f }
    } else {
        let up = text.to_ascii_uppercase();
        signal::str2sig(&up).or_else(|| up.strip_prefix("SIG").and_then(signal::str2sig))?
    };
    let spec = SigSpec(raw);
    (signal::sig2str(raw).is_some() && (raw == 0 || spec.signal().is_some())).then_some(spec)
}

/// Formats a duration the way users typed it: `2s`, `500ms`, `1.5s`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms < 1000 {
        format!("{ms}ms")
    } else {
        let secs = format!("{:.3}", d.as_secs_f64());
        format!("{}s", secs.trim_end_matches('0').trim_end_matches('.'))
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

/// The decimal point of the environment's locale, as strtod(3) reads it there (`.`, `,` in
/// de_DE); reads the locale first if nothing has yet (see [`locale`]).
pub fn radix() -> &'static str {
    &locale().radix
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

#[cfg(test)]
mod tests {
    use super::*;
    use reaper_platform::signal;

    #[test]
    fn durations_with_units() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration(" 7s"), Ok(Duration::from_secs(7)));
    }

    /// The cases of coreutils' timeout tests, and strtod's corners.
    #[test]
    fn durations_as_timeout_reads_them() {
        let d = |t| gnu_duration(t, ".");
        assert_eq!(
            d("2.34e+5d"),
            Some(LONGEST.min(Duration::from_secs(20_217_600_000)))
        );
        for huge in [
            "4294967296",
            "9223372036854775808d",
            "1.18973149535723176502e+4932",
            "inf",
            "INFINITY",
            "+Inf",
            "1e400",
            "0x1p2000",
        ] {
            assert_eq!(d(huge), Some(LONGEST), "{huge}");
        }
        assert_eq!(d("1e9"), Some(Duration::from_secs(1_000_000_000)));
        assert_eq!(d("10.34"), Some(Duration::from_millis(10_340)));
        assert_eq!(d("9.999999999"), Some(Duration::new(9, 999_999_999)));
        assert_eq!(d(".1"), Some(Duration::from_millis(100)));
        assert_eq!(d("1."), Some(Duration::from_secs(1)));
        assert_eq!(d("1E1"), Some(Duration::from_secs(10)));
        assert_eq!(d("0x10"), Some(Duration::from_secs(16)));
        assert_eq!(d("0x1d"), Some(Duration::from_secs(29)));
        assert_eq!(d("0x1p-3"), Some(Duration::from_millis(125)));
        assert_eq!(d("0x.8m"), Some(Duration::from_secs(30)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("-0"), Some(Duration::ZERO));
        assert_eq!(d("0.0e-99999"), Some(Duration::ZERO));
        // 9.1: what underflows to zero, of either sign, is 0 (no timeout); what a double still
        // holds, however small, rounds up to 1 ns.
        for zero in [
            "1e-5000",
            "1e-10000",
            "-1e-10000",
            " -1e-10000",
            "1e-324",
            "-1e-400",
            "0x1p-5000",
            "-0x1p-5000",
            "1e-5000d",
        ] {
            assert_eq!(d(zero), Some(Duration::ZERO), "{zero}");
        }
        for tiny in ["4.9e-324", "3e-324", "1e-310", "1e-10", "0x1p-1074"] {
            assert_eq!(d(tiny), Some(Duration::from_nanos(1)), "{tiny}");
        }
        assert_eq!(d(" \t1m"), Some(Duration::from_secs(60)));
        assert_eq!(d("+.5"), Some(Duration::from_millis(500)));
    }

    /// cl_strtod: the locale's decimal point, and the C locale's too.
    #[test]
    fn durations_in_a_locale_with_a_decimal_comma() {
        let d = |t| gnu_duration(t, ",");
        assert_eq!(d("1,5"), Some(Duration::from_millis(1500)));
        assert_eq!(d("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(d(",5m"), Some(Duration::from_secs(30)));
        assert_eq!(d("1,"), Some(Duration::from_secs(1)));
        assert_eq!(d("0x1,8"), Some(Duration::from_millis(1500)));
        assert_eq!(d("1,5e-5000"), Some(Duration::ZERO));
        for bad in ["1,5,", "1,5.", ",", "1,5 "] {
            assert_eq!(d(bad), None, "{bad:?} accepted");
        }
        // A multibyte decimal point (U+066B ARABIC DECIMAL SEPARATOR).
        assert_eq!(
            gnu_duration("2\u{66b}5", "\u{66b}"),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(gnu_duration("1,5", "."), None);
    }

    /// reaper's own flags keep the newer rule: underflow is the shortest timeout, never none.
    #[test]
    fn reapers_own_durations_never_underflow_to_none() {
        assert_eq!(duration("1e-5000"), Ok(Duration::from_nanos(1)));
        assert_eq!(duration("0x1p-5000"), Ok(Duration::from_nanos(1)));
        assert!(duration("-1e-10000").is_err());
        assert!(duration("1,5").is_err());
        assert_eq!(duration("-0"), Ok(Duration::ZERO));
    }

    #[test]
    fn invalid_durations_as_timeout_refuses_them() {
        for bad in [
            "", " ", "s", ".", "-1", "-0.1", " -0.1", "-1e-310", "-inf", "-1e400", "nan", "NaN(1)",
            "-nan", "1x", "42D", "1ss", "1 ", "1 s", "1,5", "1e", "1e+", "1e-s", "1..2", "abc",
            "0x", "0xg", "1ms", "infinit", "1.5.", "0x.p1", "0x1p", ".e1", "0e", "--1", "+-1",
        ] {
            assert_eq!(gnu_duration(bad, "."), None, "{bad:?} accepted");
        }
        assert!(duration("1ms").is_ok());
        assert!(duration("1 ms").is_err());
        assert!(duration("3w")
            .unwrap_err()
            .contains("invalid duration '3w'"));
    }

    #[test]
    fn signals_as_timeout_reads_them() {
        let s = |t| gnu_signal(t).map(SigSpec::raw);
        assert_eq!(s("TERM"), Some(15));
        assert_eq!(s("sigterm"), Some(15));
        assert_eq!(s("SiGkIlL"), Some(9));
        assert_eq!(s("9"), Some(9));
        assert_eq!(s("09"), Some(9));
        assert_eq!(s("0"), Some(0));
        assert_eq!(s("EXIT"), Some(0));
        assert_eq!(s("IOT"), Some(6));
        assert_eq!(s("CLD"), Some(17));
        assert_eq!(s("IO"), Some(29));
        assert_eq!(s("STKFLT"), Some(16));
        // Shell statuses: 128+N and 256+N name signal N.
        assert_eq!(s("143"), Some(15));
        assert_eq!(s("128"), Some(0));
        assert_eq!(s("271"), Some(15));
        assert_eq!(s("256"), Some(0));
        assert_eq!(s("RTMIN"), Some(34));
        assert_eq!(s("RTMIN+1"), Some(35));
        assert_eq!(s("RTMAX-1"), Some(63));
        assert_eq!(s("SIGRTMAX"), Some(64));
        // str2sig after `SIG`: a number, and strtol's reading of an offset.
        assert_eq!(s("SIG15"), Some(15));
        assert_eq!(s("sig9"), Some(9));
        assert_eq!(s("SIG0"), Some(0));
        assert_eq!(s("SIG00"), Some(0));
        assert_eq!(s("SIG64"), Some(64));
        assert_eq!(s("SIGEXIT"), Some(0));
        assert_eq!(s("exit"), Some(0));
        assert_eq!(s("RTMIN 1"), Some(35));
        assert_eq!(s("rtmin\t+1"), Some(35));
        assert_eq!(s("RTMIN01"), Some(35));
        assert_eq!(s("RTMIN-0"), Some(34));
        assert_eq!(s("RTMAX 0"), Some(64));
        assert_eq!(s("SIGRTMAX-30"), Some(34));
        for bad in [
            "",
            "invalid",
            "-1",
            "+9",
            " 9",
            "9 ",
            "0x9",
            "32",
            "33",
            "65",
            "255",
            "RTMIN+31",
            "RTMAX+1",
            "SIG",
            "SIGSIGTERM",
            "1.0",
            "383",
            "384",
            "2147483648",
            "4294967311",
            "SIG32",
            "SIG65",
            "SIG 9",
            "SIG+9",
            "SIG-9",
            "SIG9 ",
            "SIG099999999999999999999",
            "RTMIN ",
            "RTMIN+",
            "RTMAX1",
            "RTMAX-31",
            "RTMIN+0x1",
        ] {
            assert_eq!(s(bad), None, "{bad:?} accepted");
        }
    }

    #[test]
    fn signal_names_as_timeout_prints_them() {
        let n = |r| SigSpec(r).name();
        assert_eq!(n(0), "EXIT");
        assert_eq!(n(6), "ABRT");
        assert_eq!(n(17), "CHLD");
        assert_eq!(n(29), "POLL");
        assert_eq!(n(34), "RTMIN");
        assert_eq!(n(49), "RTMIN+15");
        assert_eq!(n(50), "RTMAX-14");
        assert_eq!(n(64), "RTMAX");
        assert_eq!(SigSpec(0).signal(), None);
        assert_eq!(SigSpec(15).signal(), Some(Signal::TERM));
        assert_eq!(SigSpec(40).signal().map(Signal::as_raw), Some(40));
    }

    #[test]
    fn signals() {
        assert_eq!(signal("TERM"), Ok(Signal::TERM));
        assert_eq!(signal("int"), Ok(Signal::INT));
        assert_eq!(signal("9"), Ok(Signal::KILL));
        assert!(signal("NOPE")
            .unwrap_err()
            .contains("invalid signal 'NOPE'"));
        assert!(signal("0").is_err());
        // The platform's names still parse the same.
        assert_eq!(signal::parse("TERM"), Some(Signal::TERM));
    }

    #[test]
    fn shows_durations() {
        assert_eq!(show(Duration::from_secs(2)), "2s");
        assert_eq!(show(Duration::from_millis(500)), "500ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
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
