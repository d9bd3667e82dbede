//! The Python text forms the compatibility contract quotes: `codex-cli-mcp-slim` builds its
//! messages with `repr()`, `str()` and `type(x).__name__`, so `got 'X'`, `got int` and
//! `argv: ['codex', 'exec', …]` must come out exactly as Python prints them.

use serde_json::Value;

/// `type(x).__name__` of the value `json.loads` makes of `v`.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// `repr(s)` of a Python `str`: single quotes unless the text holds `'` and no `"`.
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
        }
    }
    out.push(quote);
    out
}

/// `str.isprintable()` for one character. Exact for ASCII and Latin-1; beyond that it knows
/// the format, separator, space and private-use characters (categories Cf, Zl, Zp, Zs, Co),
/// not the unassigned ones, which would need Unicode tables.
fn is_printable(c: char) -> bool {
    let n = c as u32;
    if n < 0x7f {
        return n >= 0x20;
    }
    !matches!(n,
        0x7f..=0xa0 | 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x8e2 | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000
        | 0xd800..=0xdfff | 0xe000..=0xf8ff | 0xfeff | 0xfff9..=0xfffb | 0x110bd | 0x110cd
        | 0x13430..=0x13438 | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a | 0xe0001
        | 0xe0020..=0xe007f | 0xf0000..=0x10ffff)
}

/// `repr(list_of_str)`: `['codex', 'exec', '--json', '-']`.
pub fn repr_str_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| repr_str(s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}

/// `str(x)` of the value `json.loads` makes of `v`: a string is itself, anything else its repr.
pub fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => repr(other),
    }
}

/// `repr(x)` of the value `json.loads` makes of `v` (dict keys in this map's order).
pub fn repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => repr_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => repr_str(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", repr_str(k), repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// `repr(float)`: the shortest digits that round-trip, fixed notation for exponents -4..16,
/// else `1e+16` / `1.5e-05`.
pub fn repr_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "nan".into()
        } else if f > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    // `{:e}` gives the shortest round-trip mantissa: `1.5e-5`, `-2e16`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_names_are_pythons() {
        let cases = [
            (json!(null), "NoneType"),
            (json!(true), "bool"),
            (json!(3), "int"),
            (json!(-3), "int"),
            (json!(3.0), "float"),
            (json!(1e5), "float"),
            (json!("x"), "str"),
            (json!([]), "list"),
            (json!({}), "dict"),
        ];
        for (v, name) in cases {
            assert_eq!(type_name(&v), name, "{v}");
        }
    }

    #[test]
    fn str_repr_quotes_like_python() {
        assert_eq!(repr_str("abc"), "'abc'");
        assert_eq!(repr_str(""), "''");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(repr_str("say \"hi\""), "'say \"hi\"'");
        assert_eq!(repr_str("a\\b"), "'a\\\\b'");
        assert_eq!(repr_str("a\nb\tc\rd"), "'a\\nb\\tc\\rd'");
        assert_eq!(repr_str("\x00\x1f\x7f"), "'\\x00\\x1f\\x7f'");
        assert_eq!(repr_str("é漢字🙂"), "'é漢字🙂'");
        assert_eq!(
            repr_str("\u{a0}\u{ad}\u{2028}\u{feff}"),
            "'\\xa0\\xad\\u2028\\ufeff'"
        );
        assert_eq!(repr_str("\u{e0001}"), "'\\U000e0001'");
    }

    #[test]
    fn list_repr() {
        assert_eq!(
            repr_str_list(&["codex", "exec", "--json", "-"]),
            "['codex', 'exec', '--json', '-']"
        );
        assert_eq!(repr_str_list::<&str>(&[]), "[]");
    }

    #[test]
    fn values_print_like_python() {
        assert_eq!(str_of(&json!("plain")), "plain");
        assert_eq!(str_of(&json!(42)), "42");
        assert_eq!(str_of(&json!(true)), "True");
        assert_eq!(str_of(&json!(null)), "None");
        assert_eq!(
            str_of(&json!({"code": 5, "tags": ["a", false, null]})),
            "{'code': 5, 'tags': ['a', False, None]}"
        );
    }

    #[test]
    fn floats_print_like_python() {
        assert_eq!(repr_float(1.0), "1.0");
        assert_eq!(repr_float(30.5), "30.5");
        assert_eq!(repr_float(-0.25), "-0.25");
        assert_eq!(repr_float(1e16), "1e+16");
        assert_eq!(repr_float(1.5e-5), "1.5e-05");
        assert_eq!(repr_float(0.0001), "0.0001");
        assert_eq!(repr_float(123456789012345.0), "123456789012345.0");
        assert_eq!(repr_float(1e300), "1e+300");
    }
}
