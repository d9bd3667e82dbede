//! Medians with their range, percentiles, and how the tables print them.

/// Median, min and max of repeated measurements.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Summary {
    /// `None` for no samples.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Summary {
            median: percentile_sorted(&v, 50.0),
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        })
    }
}

/// The p-th percentile (0..=100) of sorted samples, interpolated linearly.
pub fn percentile_sorted(v: &[f64], p: f64) -> f64 {
    if v.len() == 1 {
        return v[0];
    }
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, p)
}

/// A number with a sensible count of significant digits.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// `median (min–max)`, or `n/a`.
pub fn cell(s: Option<Summary>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{} ({}–{})", num(s.median), num(s.min), num(s.max)),
        Some(s) => num(s.median),
        None => "n/a".into(),
    }
}

/// A ratio as `1.23×`, from its median (and range).
pub fn ratio(s: Option<Summary>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{:.2}× ({:.2}–{:.2})", s.median, s.min, s.max),
        Some(s) => format!("{:.2}×", s.median),
        None => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
        assert!(Summary::of(&[]).is_none());
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 95.0), 4.8);
    }
}
