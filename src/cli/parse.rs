//! Parsing command-line values: durations (`500ms`, `30s`, `5m`, `1.5h`, a bare number is
//! seconds like timeout(1)) and signals (`TERM`, `SIGTERM`, `15`).

use std::time::Duration;

use reaper_platform::{signal, Signal};

pub fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => {
            return Err(format!(
                "invalid duration '{text}': unknown unit '{unit}' (use ms, s, m, h or d)"
            ))
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{text}' (examples: 500ms, 30s, 5m, 1.5h)"))?;
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("invalid duration '{text}': too large"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn signal(text: &str) -> Result<Signal, String> {
    signal::parse(text)
        .ok_or_else(|| format!("invalid signal '{text}' (examples: TERM, SIGINT, 9)"))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(duration(" 7s "), Ok(Duration::from_secs(7)));
    }

    #[test]
    fn bad_durations_say_why() {
        for bad in [
            "",
            "s",
            "-1s",
            "1x",
            "1 s",
            "1..2s",
            "abc",
            "1e3",
            "99999999999999d",
            ".",
        ] {
            assert!(duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(duration("3w").unwrap_err().contains("unknown unit 'w'"));
    }

    #[test]
    fn signals() {
        assert_eq!(signal("TERM"), Ok(Signal::TERM));
        assert_eq!(signal("int"), Ok(Signal::INT));
        assert_eq!(signal("9"), Ok(Signal::KILL));
        assert!(signal("NOPE")
            .unwrap_err()
            .contains("invalid signal 'NOPE'"));
    }

    #[test]
    fn shows_durations() {
        assert_eq!(show(Duration::from_secs(2)), "2s");
        assert_eq!(show(Duration::from_millis(500)), "500ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
    }
}
