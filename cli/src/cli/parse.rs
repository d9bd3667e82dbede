//! reaper's own limit flags: sizes (`--memory-max`), process counts (`--pids-max`), cores
//! (`--cpus`). Durations and signals are read as coreutils reads them (`crate::coreutils`).

pub use crate::units::show_size;
use crate::units::SIZE_UNITS;

/// Below this a limit cannot even let a program exec (and `0` would kill the run at once).
pub const SIZE_MIN: u64 = 1 << 20;
/// The kernel refuses more in `pids.max` (PID_MAX_LIMIT, 4M pids on 64-bit).
pub const PIDS_MAX: u64 = 4 * 1024 * 1024;
/// `cpu.max` quotas under 1 ms per period are refused by the kernel (EINVAL).
pub const CPUS_MIN: f64 = 0.01;
pub const CPUS_MAX: f64 = 4096.0;

/// A memory size: bytes, or a number with a binary unit `K`, `M`, `G`, `T` (case-insensitive,
/// an optional trailing `B` or `iB`): `512M`, `2G`, `1.5G`. At least 1M.
pub fn size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let upper = unit.to_ascii_uppercase();
    let letter = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let scale = match letter {
        "" => 1,
        _ => match SIZE_UNITS
            .iter()
            .find(|(c, _)| letter.len() == 1 && letter.starts_with(*c))
        {
            Some((_, s)) => *s,
            None => {
                return Err(format!(
                    "invalid size '{text}': unknown unit '{unit}' (use K, M, G or T, powers of \
                     1024, or plain bytes)"
                ))
            }
        },
    };
    let bad = || format!("invalid size '{text}' (examples: 512M, 2G, 1.5G)");
    let bytes = if num.contains('.') {
        if scale == 1 {
            return Err(format!(
                "invalid size '{text}': a byte count is a whole number"
            ));
        }
        let v: f64 = num.parse().map_err(|_| bad())?;
        let b = v * scale as f64;
        if !b.is_finite() || b >= u64::MAX as f64 / 2.0 {
            return Err(format!("invalid size '{text}': too large"));
        }
        b as u64
    } else {
        let v: u64 = num.parse().map_err(|_| bad())?;
        v.checked_mul(scale)
            .filter(|b| *b < u64::MAX / 2)
            .ok_or_else(|| format!("invalid size '{text}': too large"))?
    };
    if bytes < SIZE_MIN {
        return Err(format!(
            "invalid size '{text}': at least 1M (a smaller limit kills the run before it runs)"
        ));
    }
    Ok(bytes)
}

/// `--pids-max`: a whole number of processes (threads count too), 1 up to the kernel's limit.
pub fn pids(text: &str) -> Result<u64, String> {
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("invalid process count '{text}' (a whole number, e.g. 100)"))?;
    if n == 0 || n > PIDS_MAX {
        return Err(format!(
            "invalid process count '{text}': from 1 to {PIDS_MAX} (omit the flag for no limit)"
        ));
    }
    Ok(n)
}

/// `--cpus`: cores, fractional (`0.5` is half of one core), from 0.01 to 4096.
pub fn cpus(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let v: f64 = t
        .parse()
        .ok()
        .filter(|_| t.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .ok_or_else(|| format!("invalid CPU count '{text}' (cores, e.g. 0.5 or 2)"))?;
    if !(CPUS_MIN..=CPUS_MAX).contains(&v) {
        return Err(format!(
            "invalid CPU count '{text}': from {CPUS_MIN} to {CPUS_MAX} cores"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn sizes_are_binary() {
        assert_eq!(size("512M"), Ok(512 << 20));
        assert_eq!(size("2G"), Ok(2 << 30));
        assert_eq!(size("1.5G"), Ok(3 << 29));
        assert_eq!(size("1t"), Ok(1 << 40));
        assert_eq!(size("64MiB"), Ok(64 << 20));
        assert_eq!(size("64mb"), Ok(64 << 20));
        assert_eq!(size("1048576"), Ok(1 << 20));
        assert_eq!(size("1024K"), Ok(1 << 20));
    }

    #[test]
    fn nonsense_sizes_are_refused() {
        for bad in [
            "",
            "M",
            "-1G",
            "0",
            "0M",
            "1K",
            "12",
            "1.5",
            "1x",
            "1 G",
            "1..2G",
            "1e3M",
            "G2",
            "1GG",
            "99999999999T",
            "nan",
            "inf",
            ".M",
        ] {
            assert!(size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(size("3P").unwrap_err().contains("unknown unit 'P'"));
    }

    #[test]
    fn sizes_show_as_typed() {
        assert_eq!(show_size(2 << 30), "2G");
        assert_eq!(show_size(3 << 29), "1.5G");
        assert_eq!(show_size(64 << 20), "64M");
        assert_eq!(show_size(512), "512B");
    }

    #[test]
    fn pids_and_cpus() {
        assert_eq!(pids("50"), Ok(50));
        for bad in ["0", "-1", "1.5", "x", "", "4194305"] {
            assert!(pids(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(cpus("0.5"), Ok(0.5));
        assert_eq!(cpus("2"), Ok(2.0));
        for bad in ["0", "0.001", "-1", "nan", "inf", "1e2", "", "5000"] {
            assert!(cpus(bad).is_err(), "{bad:?} accepted");
        }
    }
}
