//! Reading `codex exec --json` as it streams: one JSON object a line, folded into the few facts
//! a result needs (thread id, last agent message, errors, usage, turn status) plus bounded tails
//! of the raw output. Nothing here grows with the output: a line longer than [`MAX_LINE`] is
//! skipped, errors are capped, the raw tails are ring buffers, so a 200 MiB stream costs a few
//! MiB at most.
//!
//! Lines that are not JSON objects are skipped, not rejected: a codex release that prints
//! something new must not turn every call into an error.

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::Value;

use super::py;

/// Longest line parsed; longer ones (no real event is that big) are skipped.
pub const MAX_LINE: usize = 4 << 20;
/// How much of the raw stdout and stderr is kept (the end of it).
pub const TAIL_BYTES: usize = 64 << 10;
/// Longest error message kept.
const MAX_ERROR: usize = 8 << 10;
/// Distinct errors kept: the first ones and the latest ones (codex's retry loop reports a new
/// "Reconnecting… N/5" each time, so a stuck call could produce thousands).
const ERRORS_FIRST: usize = 32;
const ERRORS_LAST: usize = 32;

/// The last bytes of a stream, and how many came before them.
#[derive(Debug, Default)]
pub struct Tail {
    buf: Vec<u8>,
    total: u64,
}

impl Tail {
    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if bytes.len() >= TAIL_BYTES {
            self.buf.clear();
            self.buf
                .extend_from_slice(&bytes[bytes.len() - TAIL_BYTES..]);
            return;
        }
        self.buf.extend_from_slice(bytes);
        // Trim in batches, so each byte is moved at most once more.
        if self.buf.len() > 2 * TAIL_BYTES {
            let cut = self.buf.len() - TAIL_BYTES;
            self.buf.drain(..cut);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Bytes seen but not kept.
    pub fn omitted(&self) -> u64 {
        self.total - self.kept().len() as u64
    }

    fn kept(&self) -> &[u8] {
        &self.buf[self.buf.len().saturating_sub(TAIL_BYTES)..]
    }

    /// The kept text (invalid UTF-8 replaced), preceded by a note when the start was dropped.
    pub fn text(&self) -> String {
        let mut kept = self.kept();
        if self.omitted() == 0 {
            return String::from_utf8_lossy(kept).into_owned();
        }
        // Start at a character boundary.
        while let Some((&b, rest)) = kept.split_first() {
            if b & 0xc0 != 0x80 {
                break;
            }
            kept = rest;
        }
        format!(
            "[reaper: the first {} bytes are not kept]\n{}",
            self.total - kept.len() as u64,
            String::from_utf8_lossy(kept)
        )
    }
}

/// Distinct errors in order of first report, bounded.
#[derive(Debug, Default)]
struct Errors {
    first: Vec<String>,
    last: VecDeque<String>,
    dropped: u64,
}

impl Errors {
    fn push(&mut self, mut e: String) {
        if e.len() > MAX_ERROR {
            let mut cut = MAX_ERROR;
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            e.truncate(cut);
            e.push('…');
        }
        if self.first.contains(&e) || self.last.contains(&e) {
            return;
        }
        if self.first.len() < ERRORS_FIRST {
            self.first.push(e);
            return;
        }
        self.last.push_back(e);
        if self.last.len() > ERRORS_LAST {
            self.last.pop_front();
            self.dropped += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    fn lines(&self) -> Vec<String> {
        let mut out = self.first.clone();
        if self.dropped > 0 {
            out.push(format!(
                "[reaper: {} more distinct errors are not kept]",
                self.dropped
            ));
        }
        out.extend(self.last.iter().cloned());
        out
    }
}

/// The turn's own verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Completed,
    Failed,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
        }
    }
}

/// The usage keys the trailer reports, in its order.
pub const USAGE_KEYS: [&str; 3] = ["input_tokens", "cached_input_tokens", "output_tokens"];

/// One event line; every other field is skipped by the parser without being stored (an item's
/// `aggregated_output` can be megabytes).
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type", default)]
    kind: Option<Value>,
    #[serde(default)]
    thread_id: Option<Value>,
    #[serde(default)]
    item: Option<Item>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

/// The two fields of an item the result needs; `None` when `item` is not an object. Its other
/// fields are skipped unread.
#[derive(Default)]
struct Item {
    kind: Option<Value>,
    text: Option<Value>,
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Item, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Item;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
                let mut item = Item::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "type" => item.kind = Some(map.next_value()?),
                        "text" => item.text = Some(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(item)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Item::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Item, E> {
                Ok(Item::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Item, E> {
                Ok(Item::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Item, E> {
                Ok(Item::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Item, E> {
                Ok(Item::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Item, E> {
                Ok(Item::default())
            }
            fn visit_unit<E>(self) -> Result<Item, E> {
                Ok(Item::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// What the stream has said so far.
#[derive(Debug, Default)]
pub struct EventStream {
    partial: Vec<u8>,
    /// The current line passed [`MAX_LINE`]: skip to its end.
    skipping: bool,
    pub raw: Tail,
    pub thread_id: Option<String>,
    /// The last agent message (`Some("")` when one came with no text).
    pub last_message: Option<String>,
    errors: Errors,
    /// The last `turn.failed` message, for the result's first line.
    pub failure: Option<String>,
    /// The usage of the last `turn.completed`, as Python's `str()` of each present key.
    pub usage: Option<[Option<String>; 3]>,
    pub status: Option<TurnStatus>,
    /// Events parsed.
    pub events: u64,
    /// The type of the last item started, updated or completed (`command_execution`).
    pub last_item: Option<String>,
    /// Counts `item.started` and `item.completed`: progress reports live work on each.
    pub item_events: u64,
    /// Lines longer than [`MAX_LINE`], skipped.
    pub oversized: u64,
}

impl EventStream {
    /// Takes the next bytes of stdout.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        self.raw.push(chunk);
        while let Some(nl) = chunk.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&chunk[..nl], &chunk[nl + 1..]);
            chunk = rest;
            if self.skipping {
                self.skipping = false;
                self.oversized += 1;
                continue;
            }
            if self.partial.is_empty() {
                self.line(head);
            } else if self.partial.len() + head.len() > MAX_LINE {
                self.partial.clear();
                self.oversized += 1;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.line(&line);
                line.clear();
                // Keep the allocation only while it is small.
                if line.capacity() <= 64 << 10 {
                    self.partial = line;
                }
            }
        }
        if self.skipping {
            return;
        }
        if self.partial.len() + chunk.len() > MAX_LINE {
            self.partial = Vec::new();
            self.skipping = true;
        } else {
            self.partial.extend_from_slice(chunk);
        }
    }

    /// The stream ended: a last line without a newline still counts.
    pub fn finish(&mut self) {
        if self.skipping {
            self.skipping = false;
            self.oversized += 1;
        }
        let line = std::mem::take(&mut self.partial);
        if !line.is_empty() {
            self.line(&line);
        }
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors.lines()
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Whether any event that matters to the result was seen (else the result shows raw stdout).
    pub fn saw_events(&self) -> bool {
        self.thread_id.is_some()
            || self.last_message.is_some()
            || self.has_errors()
            || self.status.is_some()
    }

    /// The answer: the last agent message, or empty.
    pub fn response(&self) -> &str {
        self.last_message.as_deref().unwrap_or("")
    }

    fn line(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim();
        // A struct also deserializes from a JSON array: only objects are events.
        if !text.starts_with('{') {
            return;
        }
        let Ok(ev) = serde_json::from_str::<Line>(text) else {
            return;
        };
        self.events += 1;
        let kind = ev.kind.as_ref().and_then(Value::as_str).unwrap_or("");
        match kind {
            "thread.started" => {
                if let Some(id) = ev.thread_id.as_ref().filter(|v| truthy(v)) {
                    self.thread_id = Some(py::str_of(id));
                }
            }
            "item.started" | "item.updated" | "item.completed" => {
                let item = ev.item.unwrap_or_default();
                let item_type = item.kind.as_ref().and_then(Value::as_str);
                if let Some(t) = item_type {
                    self.last_item = Some(t.to_owned());
                }
                if kind != "item.updated" {
                    self.item_events += 1;
                }
                if kind == "item.completed" && item_type == Some("agent_message") {
                    let text = item
                        .text
                        .as_ref()
                        .filter(|v| truthy(v))
                        .map(py::str_of)
                        .unwrap_or_default();
                    self.last_message = Some(text);
                }
            }
            "turn.completed" => {
                self.status = Some(TurnStatus::Completed);
                self.usage =
                    ev.usage.as_ref().and_then(Value::as_object).map(|u| {
                        USAGE_KEYS.map(|k| u.get(k).filter(|v| !v.is_null()).map(py::str_of))
                    });
            }
            "turn.failed" => {
                self.status = Some(TurnStatus::Failed);
                let message = ev
                    .error
                    .as_ref()
                    .and_then(Value::as_object)
                    .and_then(|e| e.get("message"))
                    .filter(|m| truthy(m));
                let e = match (message, ev.error.as_ref().filter(|e| truthy(e))) {
                    (Some(m), _) => py::str_of(m),
                    (None, Some(err)) => py::str_of(err),
                    (None, None) => whole(text),
                };
                self.failure = Some(e.clone());
                self.errors.push(e);
            }
            "error" => {
                let e = match ev.message.as_ref().filter(|m| truthy(m)) {
                    Some(m) => py::str_of(m),
                    None => whole(text),
                };
                self.errors.push(e);
            }
            _ => {}
        }
    }
}

/// Python's truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// `str(event)`, for an error event that carries no message.
fn whole(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .map(|v| py::str_of(&v))
        .unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> EventStream {
        let mut s = EventStream::default();
        s.feed(text.as_bytes());
        s.finish();
        s
    }

    #[test]
    fn folds_a_successful_turn() {
        let s = parse(concat!(
            "{\"type\":\"thread.started\",\"thread_id\":\"T-1\"}\n",
            "{\"type\":\"turn.started\"}\n",
            "{\"type\":\"item.started\",\"item\":{\"id\":\"i0\",\"type\":\"command_execution\",\"command\":\"ls\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"i0\",\"type\":\"command_execution\",\"aggregated_output\":\"a\\nb\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"i1\",\"type\":\"agent_message\",\"text\":\"first\"}}\n",
            "{\"type\":\"item.completed\",\"item\":{\"id\":\"i2\",\"type\":\"agent_message\",\"text\":\"second\"}}\n",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"cached_input_tokens\":2,\"output_tokens\":5}}\n",
        ));
        assert_eq!(s.thread_id.as_deref(), Some("T-1"));
        assert_eq!(s.response(), "second");
        assert_eq!(s.status, Some(TurnStatus::Completed));
        assert_eq!(
            s.usage,
            Some([Some("10".into()), Some("2".into()), Some("5".into())])
        );
        assert_eq!(s.events, 7);
        assert_eq!(s.item_events, 4);
        assert_eq!(s.last_item.as_deref(), Some("agent_message"));
        assert!(!s.has_errors());
        assert!(s.saw_events());
    }

    #[test]
    fn errors_are_deduplicated_in_order() {
        let s = parse(concat!(
            "{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n",
            "{\"type\":\"error\",\"message\":\"boom\"}\n",
            "{\"type\":\"turn.failed\",\"error\":{\"message\":\"boom\"}}\n",
            "{\"type\":\"error\"}\n",
            "{\"type\":\"turn.failed\",\"error\":{\"code\":5}}\n",
        ));
        assert_eq!(
            s.errors(),
            [
                "Reconnecting... 1/5",
                "boom",
                "{'type': 'error'}",
                "{'code': 5}"
            ]
        );
        assert_eq!(s.status, Some(TurnStatus::Failed));
        assert_eq!(s.failure.as_deref(), Some("{'code': 5}"));
    }

    #[test]
    fn skips_what_is_not_an_event() {
        let s = parse("not json\n[1,2]\n\"str\"\n{broken\n\n   \n{\"type\":7}\n{\"no_type\":1}\n");
        assert!(!s.saw_events());
        assert_eq!(s.events, 2);
        assert_eq!(
            s.raw.text(),
            "not json\n[1,2]\n\"str\"\n{broken\n\n   \n{\"type\":7}\n{\"no_type\":1}\n"
        );
    }

    #[test]
    fn lines_split_across_chunks_and_a_last_line_without_newline() {
        let text = "{\"type\":\"thread.started\",\"thread_id\":\"abc\"}\r\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"héllo\"}}";
        for size in [1, 2, 3, 7, 64] {
            let mut s = EventStream::default();
            for piece in text.as_bytes().chunks(size) {
                s.feed(piece);
            }
            assert_eq!(
                s.response(),
                "",
                "a line is not complete before its newline"
            );
            s.finish();
            assert_eq!(s.thread_id.as_deref(), Some("abc"));
            assert_eq!(s.response(), "héllo");
        }
    }

    #[test]
    fn message_text_follows_python_truthiness() {
        let s = parse("{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\"}}\n");
        assert_eq!(s.last_message.as_deref(), Some(""));
        assert!(s.saw_events());
        let s = parse(
            "{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":42}}\n",
        );
        assert_eq!(s.response(), "42");
        let s = parse("{\"type\":\"turn.completed\",\"usage\":\"n/a\"}\n{\"type\":\"thread.started\",\"thread_id\":\"\"}\n");
        assert_eq!(s.usage, None);
        assert_eq!(s.thread_id, None);
        let s = parse("{\"type\":\"turn.completed\",\"usage\":{\"output_tokens\":3}}\n");
        assert_eq!(s.usage, Some([None, None, Some("3".into())]));
    }

    #[test]
    fn memory_stays_bounded() {
        let mut s = EventStream::default();
        // 40 MiB in one line: skipped, never buffered whole.
        let chunk = vec![b'x'; 1 << 20];
        s.feed(b"{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"");
        for _ in 0..40 {
            s.feed(&chunk);
            assert!(s.partial.capacity() <= MAX_LINE + (1 << 20));
        }
        s.feed(b"\"}}\n{\"type\":\"thread.started\",\"thread_id\":\"after\"}\n");
        assert_eq!(s.oversized, 1);
        assert_eq!(s.last_message, None);
        assert_eq!(s.thread_id.as_deref(), Some("after"));
        assert!(s.raw.buf.capacity() <= 4 * TAIL_BYTES + (1 << 20));
        assert!(s.raw.omitted() > 39 << 20);
        let text = s.raw.text();
        assert!(text.starts_with("[reaper: the first "), "{}", &text[..80]);
        assert!(text.ends_with("\"thread_id\":\"after\"}\n"));
        // Many distinct errors: the first and the last are kept, with a count between.
        for i in 0..10_000 {
            s.feed(format!("{{\"type\":\"error\",\"message\":\"retry {i}\"}}\n").as_bytes());
        }
        let errors = s.errors();
        assert_eq!(errors.len(), ERRORS_FIRST + 1 + ERRORS_LAST);
        assert_eq!(errors[0], "retry 0");
        assert_eq!(
            errors[ERRORS_FIRST],
            "[reaper: 9936 more distinct errors are not kept]"
        );
        assert_eq!(errors.last().map(String::as_str), Some("retry 9999"));
    }

    #[test]
    fn tail_keeps_the_end_at_a_character_boundary() {
        let mut t = Tail::default();
        assert!(t.is_empty());
        t.push("é".repeat(TAIL_BYTES).as_bytes());
        let text = t.text();
        assert!(text.starts_with("[reaper: the first "));
        assert!(!text.contains('\u{fffd}'));
        let mut t = Tail::default();
        t.push(b"short");
        assert_eq!(t.text(), "short");
        assert_eq!(t.omitted(), 0);
    }
}
