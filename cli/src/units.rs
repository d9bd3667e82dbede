//! Sizes as every face writes them: the binary units `--memory-max` reads (`64M`), and
//! [`show_size`], which the CLI's tables and the MCP server's messages both print with.

/// The binary units of a size, smallest first.
pub const SIZE_UNITS: [(char, u64); 4] = [
    ('K', 1 << 10),
    ('M', 1 << 20),
    ('G', 1 << 30),
    ('T', 1 << 40),
];

/// Shows a size in the largest binary unit that keeps it short: `2G`, `1.5G`, `64M`.
pub fn show_size(bytes: u64) -> String {
    for (c, s) in SIZE_UNITS.iter().rev() {
        if bytes >= *s {
            let v = bytes as f64 / *s as f64;
            let t = format!("{v:.2}");
            return format!("{}{c}", t.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    format!("{bytes}B")
}
