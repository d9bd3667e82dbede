//! A call's result, exactly as the contract words it: the text block, `isError`, and
//! `structuredContent {threadId, content, ignoredParameters?}`.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Map, Value};

use super::argv::Ignored;
use super::py;
use super::stream::{EventStream, Tail, TurnStatus, USAGE_KEYS};
use reaper::{Outcome, StopReason};

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// codex exited by itself: its code, or minus the signal that killed it (Python's
    /// `returncode`).
    Exited(i64),
    /// The wall-clock limit passed; codex's return code once it was stopped.
    TimedOut { secs: u64, returncode: Option<i64> },
    /// The client cancelled the call (the result is not sent; it is logged).
    Cancelled { returncode: Option<i64> },
    /// The server is shutting down (client gone, or reaper signalled).
    Shutdown { returncode: Option<i64> },
    /// Another process ended the call: `reaper stop` (`killed: false`) or `reaper kill`.
    EndedOutside {
        killed: bool,
        returncode: Option<i64>,
    },
    /// codex could not be started: `failed to launch codex binary: … (check $CODEX_CMD)`.
    LaunchFailed(String),
    /// reaper could not contain the call (no cgroup, no pidfd…).
    NotContained(String),
    /// The call's tree went over the server's `--memory-max` (bytes) and the kernel's OOM
    /// killer ended it whole.
    OutOfMemory { limit: u64, returncode: Option<i64> },
}

impl Ending {
    /// How a call that ran ended, from its outcome (`secs`: the `timeout_seconds` asked for).
    pub fn of(o: &Outcome, secs: u64) -> Ending {
        let returncode = o.leader_status.map(crate::report::returncode);
        match o.stop_reason {
            StopReason::Oom => Ending::OutOfMemory {
                limit: o.limits.and_then(|l| l.memory_max).unwrap_or(0),
                returncode,
            },
            // `Error` is an exit whose end failed (the run layer says so in the log).
            StopReason::Exited | StopReason::Error => Ending::Exited(returncode.unwrap_or(-1)),
            StopReason::Timeout => Ending::TimedOut { secs, returncode },
            StopReason::Cancel => Ending::Cancelled { returncode },
            StopReason::Stopped | StopReason::Killed => Ending::EndedOutside {
                killed: o.stop_reason == StopReason::Killed,
                returncode,
            },
            // A call's plan has no signal, parent or stdin of its own: the server's end is
            // the only other stop.
            StopReason::Shutdown
            | StopReason::Signal
            | StopReason::ParentDied
            | StopReason::StdinEof => Ending::Shutdown { returncode },
            // A reason of a later version: the outcome without a word for it.
            _ => Ending::Exited(returncode.unwrap_or(-1)),
        }
    }

    fn ok(&self) -> bool {
        *self == Ending::Exited(0)
    }

    /// The `returncode=` line: absent when codex never ran, `None` (as Python prints it) when
    /// it ran but its status is unknown.
    fn returncode(&self) -> Option<Option<i64>> {
        match self {
            Ending::Exited(c) => Some(Some(*c)),
            Ending::TimedOut { returncode, .. } | Ending::OutOfMemory { returncode, .. } => {
                Some(*returncode)
            }
            Ending::Cancelled { returncode }
            | Ending::Shutdown { returncode }
            | Ending::EndedOutside { returncode, .. } => returncode.map(Some),
            Ending::LaunchFailed(_) | Ending::NotContained(_) => None,
        }
    }
}

/// Everything a result is made of.
pub struct Report<'a> {
    pub stream: &'a EventStream,
    pub stderr: &'a Tail,
    pub argv: &'a [String],
    pub ending: &'a Ending,
    pub ignored: &'a [Ignored],
    /// Processes that survived the call's teardown (there should be none).
    pub survivors: &'a [String],
    /// Processes of the call that had moved out of its cgroup (stopped with the rest).
    pub escapees: &'a [String],
}

impl Report<'_> {
    /// Whether the client should see a failed call.
    pub fn is_error(&self) -> bool {
        !self.ending.ok()
            || self.stream.status == Some(TurnStatus::Failed)
            || (self.stream.has_errors() && self.stream.response().trim().is_empty())
    }

    /// `[codex] thread_id=ID status=S input_tokens=N …`
    pub fn trailer(&self) -> String {
        let s = self.stream;
        let mut t = format!(
            "[codex] thread_id={} status={}",
            s.thread_id.as_deref().unwrap_or("UNKNOWN"),
            s.status.map(TurnStatus::as_str).unwrap_or("UNKNOWN")
        );
        if let Some(usage) = &s.usage {
            for (key, value) in USAGE_KEYS.iter().zip(usage) {
                if let Some(v) = value {
                    t.push_str(&format!(" {key}={v}"));
                }
            }
        }
        t
    }

    pub fn text(&self) -> String {
        let s = self.stream;
        let errors = || format!("errors:\n{}", s.errors().join("\n"));
        let stdout = s.raw.text();
        let mut parts: Vec<String> = Vec::new();
        if self.ending.ok() && s.status != Some(TurnStatus::Failed) {
            let response = s.response();
            if !response.trim().is_empty() {
                parts.push(format!("{}\n\n{}", response.trim_end(), self.trailer()));
                if s.has_errors() {
                    // Errors the turn recovered from: visible without costing the answer.
                    parts.push(errors());
                }
            } else {
                let marker = if s.has_errors() {
                    "[ERROR]"
                } else {
                    "[WARNING]"
                };
                parts.push(format!(
                    "{marker} codex exited successfully but produced no agent message."
                ));
                if s.has_errors() {
                    parts.push(errors());
                }
                if s.saw_events() {
                    parts.push(self.trailer());
                } else if !stdout.trim().is_empty() {
                    parts.push(format!("stdout:\n{stdout}"));
                }
                self.push_stderr_and_argv(&mut parts);
            }
        } else {
            parts.push(format!("[ERROR] {}", self.error_message()));
            if let Some(code) = self.ending.returncode() {
                parts.push(match code {
                    Some(c) => format!("returncode={c}"),
                    None => "returncode=None".into(),
                });
            }
            if s.has_errors() {
                parts.push(errors());
            }
            if s.saw_events() {
                parts.push(self.trailer());
                if let Some(m) = &s.last_message {
                    parts.push(format!("last agent message:\n{m}"));
                }
            } else if !stdout.is_empty() {
                parts.push(format!("stdout:\n{stdout}"));
            }
            self.push_stderr_and_argv(&mut parts);
        }
        if !self.survivors.is_empty() {
            parts.push(format!(
                "[reaper] {} process(es) of this call survived SIGKILL: {}",
                self.survivors.len(),
                self.survivors.join(", ")
            ));
        }
        if !self.escapees.is_empty() {
            parts.push(format!(
                "[reaper] {} process(es) of this call had moved out of its cgroup; stopped \
                 them too: {}",
                self.escapees.len(),
                self.escapees.join(", ")
            ));
        }
        let mut text = parts.join("\n\n");
        if !self.ignored.is_empty() {
            let lines: Vec<String> = self
                .ignored
                .iter()
                .map(|i| {
                    format!(
                        "{}={}; this server runs with {}",
                        i.name,
                        json_dumps(&i.value),
                        i.server.written
                    )
                })
                .collect();
            text.push_str("\n\nignored, because this server's own command line already sets the flag and codex takes it only once:\n");
            text.push_str(&lines.join("\n"));
        }
        text
    }

    fn push_stderr_and_argv(&self, parts: &mut Vec<String>) {
        if !self.stderr.is_empty() {
            parts.push(format!("stderr:\n{}", self.stderr.text()));
        }
        parts.push(format!("argv: {}", py::repr_str_list(self.argv)));
    }

    /// The first line of a failure: why the call failed.
    fn error_message(&self) -> String {
        match self.ending {
            Ending::TimedOut { secs, .. } => format!("timeout after {secs}s"),
            Ending::Cancelled { .. } => "cancelled by the client".into(),
            Ending::Shutdown { .. } => "reaper mcp is shutting down".into(),
            Ending::EndedOutside { killed: false, .. } => {
                "stopped from outside the server (`reaper stop`)".into()
            }
            Ending::EndedOutside { killed: true, .. } => {
                "killed from outside the server (`reaper kill`)".into()
            }
            Ending::OutOfMemory { limit, .. } => format!(
                "killed: out of memory (limit {}): the call's processes used more memory than \
                 this server's --memory-max, and the kernel killed them all",
                crate::units::show_size(*limit)
            ),
            Ending::LaunchFailed(m) | Ending::NotContained(m) => m.clone(),
            Ending::Exited(_) => self
                .stream
                .failure
                .clone()
                .unwrap_or_else(|| "codex failed".into()),
        }
    }

    /// `{threadId, content}` whenever the thread id is known, plus `ignoredParameters`.
    ///
    /// Beyond the contract: a result that is not an error carries `{threadId, content}` even
    /// when codex never said its thread id (`threadId` is then empty), because both tools
    /// declare an `outputSchema` and MCP clients (the Python and TypeScript SDKs) reject a
    /// successful result without `structuredContent`.
    pub fn structured(&self) -> Option<Value> {
        let s = self.stream;
        let mut out = Map::new();
        match &s.thread_id {
            Some(id) => {
                out.insert("threadId".into(), json!(id));
                out.insert("content".into(), json!(s.response()));
            }
            None if !self.is_error() => {
                out.insert("threadId".into(), json!(""));
                out.insert("content".into(), json!(s.response()));
            }
            None => {}
        }
        if let Ending::OutOfMemory { limit, .. } = self.ending {
            out.insert("stopReason".into(), json!("oom"));
            out.insert("memoryMaxBytes".into(), json!(limit));
        }
        if !self.ignored.is_empty() {
            let list: Vec<Value> = self
                .ignored
                .iter()
                .map(|i| json!({"name": i.name, "value": i.value, "serverValue": i.server.value}))
                .collect();
            out.insert("ignoredParameters".into(), Value::Array(list));
        }
        // Sent at all, it must match the declared outputSchema (the TypeScript SDK checks it
        // even on errors): threadId and content are required there.
        if !out.is_empty() && !out.contains_key("threadId") {
            out.insert("threadId".into(), json!(""));
            out.insert("content".into(), json!(s.response()));
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    pub fn into_result(self) -> CallToolResult {
        let mut r = CallToolResult::success(vec![ContentBlock::text(self.text())]);
        r.is_error = Some(self.is_error());
        r.structured_content = self.structured();
        r
    }
}

/// `[ERROR] MSG`, isError, no structured content: validation failures and unknown tools.
pub fn error_result(text: &str) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(format!("[ERROR] {text}"))]);
    r.is_error = Some(true);
    r
}

/// A result's text: what its text blocks say.
pub fn text_of(r: &CallToolResult) -> String {
    let texts: Vec<&str> = r
        .content
        .iter()
        .filter_map(|b| b.as_text())
        .map(|t| t.text.as_str())
        .collect();
    texts.join("\n")
}

/// `json.dumps(v, ensure_ascii=False)`: serde_json escapes the same characters (`"`, `\`,
/// controls) and leaves the rest as is.
fn json_dumps(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::argv::ServerSetting;
    use super::*;

    const ARGV: &[&str] = &["codex", "exec", "--json", "-"];

    fn stream(lines: &[&str]) -> EventStream {
        let mut s = EventStream::default();
        for l in lines {
            s.feed(l.as_bytes());
            s.feed(b"\n");
        }
        s.finish();
        s
    }

    fn argv() -> Vec<String> {
        ARGV.iter().map(|s| s.to_string()).collect()
    }

    fn report<'a>(
        s: &'a EventStream,
        stderr: &'a Tail,
        argv: &'a [String],
        ending: &'a Ending,
    ) -> Report<'a> {
        Report {
            stream: s,
            stderr,
            argv,
            ending,
            ignored: &[],
            survivors: &[],
            escapees: &[],
        }
    }

    /// Issue 13: a call the OOM killer ended says so first, and `structuredContent` carries
    /// `stopReason: oom` (with `threadId` and `content`, which the outputSchema requires), also
    /// when codex never said its thread id.
    #[test]
    fn out_of_memory_is_said_in_text_and_structured_content() {
        let e = Ending::OutOfMemory {
            limit: 64 << 20,
            returncode: Some(-9),
        };
        let (t, a) = (Tail::default(), argv());
        for (lines, thread) in [(vec![THREAD], "T1"), (vec![], "")] {
            let s = stream(&lines);
            let r = report(&s, &t, &a, &e);
            assert!(r.is_error());
            assert!(
                r.text()
                    .starts_with("[ERROR] killed: out of memory (limit 64M): "),
                "{}",
                r.text()
            );
            assert!(r.text().contains("returncode=-9"), "{}", r.text());
            assert_eq!(
                r.structured(),
                Some(
                    json!({"threadId": thread, "content": "", "stopReason": "oom",
                            "memoryMaxBytes": 64 << 20})
                )
            );
        }
    }

    const THREAD: &str = r#"{"type":"thread.started","thread_id":"T1"}"#;
    const MSG: &str =
        r#"{"type":"item.completed","item":{"type":"agent_message","text":"The answer.\n"}}"#;
    const DONE: &str = r#"{"type":"turn.completed","usage":{"input_tokens":3,"cached_input_tokens":0,"output_tokens":4}}"#;
    const FAILED: &str = r#"{"type":"turn.failed","error":{"message":"model refused"}}"#;
    const ERR: &str = r#"{"type":"error","message":"model refused"}"#;
    const RETRY: &str = r#"{"type":"error","message":"Reconnecting... 1/5"}"#;

    #[test]
    fn success() {
        let s = stream(&[THREAD, MSG, DONE]);
        let (e, a) = (Ending::Exited(0), argv());
        let t = Tail::default();
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "The answer.\n\n[codex] thread_id=T1 status=completed input_tokens=3 cached_input_tokens=0 output_tokens=4"
        );
        assert!(!r.is_error());
        assert_eq!(
            r.structured(),
            Some(json!({"threadId": "T1", "content": "The answer.\n"}))
        );
    }

    /// Issue 14 point 1: a call whose tree had a process leave its cgroup says so, after the
    /// answer (which it does not spoil).
    #[test]
    fn escapees_are_named_after_the_answer() {
        let s = stream(&[THREAD, MSG, DONE]);
        let (e, a, t) = (Ending::Exited(0), argv(), Tail::default());
        let escapees = ["sleep (pid 42): moved out of the cgroup to /".to_owned()];
        let r = Report {
            escapees: &escapees,
            ..report(&s, &t, &a, &e)
        };
        assert!(r.text().starts_with("The answer.\n"), "{}", r.text());
        assert!(
            r.text().ends_with(
                "\n\n[reaper] 1 process(es) of this call had moved out of its cgroup; stopped \
                 them too: sleep (pid 42): moved out of the cgroup to /"
            ),
            "{}",
            r.text()
        );
        assert!(!r.is_error());
    }

    #[test]
    fn success_with_recovered_errors() {
        let s = stream(&[THREAD, RETRY, MSG, DONE]);
        let (e, a, t) = (Ending::Exited(0), argv(), Tail::default());
        let r = report(&s, &t, &a, &e);
        assert!(r
            .text()
            .ends_with("output_tokens=4\n\nerrors:\nReconnecting... 1/5"));
        assert!(!r.is_error());
    }

    #[test]
    fn no_message() {
        let s = stream(&[THREAD, DONE]);
        let (e, a) = (Ending::Exited(0), argv());
        let mut t = Tail::default();
        t.push(b"warning: x\n");
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[WARNING] codex exited successfully but produced no agent message.\n\n[codex] thread_id=T1 status=completed input_tokens=3 cached_input_tokens=0 output_tokens=4\n\nstderr:\nwarning: x\n\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(!r.is_error());
        // Errors and no message: an error.
        let s = stream(&[ERR]);
        let t = Tail::default();
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[ERROR] codex exited successfully but produced no agent message.\n\nerrors:\nmodel refused\n\n[codex] thread_id=UNKNOWN status=UNKNOWN\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(r.is_error());
        assert_eq!(r.structured(), None);
        // No event at all: the raw stdout instead of the trailer.
        let s = stream(&["plain text"]);
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[WARNING] codex exited successfully but produced no agent message.\n\nstdout:\nplain text\n\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(!r.is_error());
        assert_eq!(r.structured(), Some(json!({"threadId": "", "content": ""})));
    }

    #[test]
    fn failed_turn_at_exit_zero() {
        let s = stream(&[THREAD, ERR, FAILED]);
        let (e, a, t) = (Ending::Exited(0), argv(), Tail::default());
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[ERROR] model refused\n\nreturncode=0\n\nerrors:\nmodel refused\n\n[codex] thread_id=T1 status=failed\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(r.is_error());
        assert_eq!(
            r.structured(),
            Some(json!({"threadId": "T1", "content": ""}))
        );
    }

    #[test]
    fn non_zero_exit_with_message_and_stderr() {
        let s = stream(&[THREAD, MSG]);
        let (e, a) = (Ending::Exited(3), argv());
        let mut t = Tail::default();
        t.push(b"boom");
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[ERROR] codex failed\n\nreturncode=3\n\n[codex] thread_id=T1 status=UNKNOWN\n\nlast agent message:\nThe answer.\n\n\nstderr:\nboom\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(r.is_error());
        assert_eq!(
            r.structured(),
            Some(json!({"threadId": "T1", "content": "The answer.\n"}))
        );
    }

    #[test]
    fn timeout_keeps_what_codex_printed() {
        let s = stream(&["partial output"]);
        let (a, t) = (argv(), Tail::default());
        let e = Ending::TimedOut {
            secs: 30,
            returncode: Some(-9),
        };
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[ERROR] timeout after 30s\n\nreturncode=-9\n\nstdout:\npartial output\n\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(r.is_error());
    }

    #[test]
    fn launch_failure() {
        let s = EventStream::default();
        let (a, t) = (argv(), Tail::default());
        let e = Ending::LaunchFailed(
            "failed to launch codex binary: cannot run 'nope': command not found (check $CODEX_CMD)"
                .into(),
        );
        let r = report(&s, &t, &a, &e);
        assert_eq!(
            r.text(),
            "[ERROR] failed to launch codex binary: cannot run 'nope': command not found (check $CODEX_CMD)\n\nargv: ['codex', 'exec', '--json', '-']"
        );
        assert!(r.is_error());
        assert_eq!(r.structured(), None);
    }

    #[test]
    fn ignored_parameters() {
        let s = stream(&[THREAD, MSG]);
        let (e, a, t) = (Ending::Exited(0), argv(), Tail::default());
        let ignored = [
            Ignored {
                name: "cd",
                value: json!("/my \"dir\""),
                server: ServerSetting {
                    value: json!("/srv"),
                    written: "-C /srv".into(),
                },
            },
            Ignored {
                name: "ephemeral",
                value: json!(true),
                server: ServerSetting {
                    value: json!(true),
                    written: "--ephemeral".into(),
                },
            },
        ];
        let r = Report {
            ignored: &ignored,
            ..report(&s, &t, &a, &e)
        };
        assert_eq!(
            r.text(),
            "The answer.\n\n[codex] thread_id=T1 status=UNKNOWN\n\nignored, because this server's own command line already sets the flag and codex takes it only once:\ncd=\"/my \\\"dir\\\"\"; this server runs with -C /srv\nephemeral=true; this server runs with --ephemeral"
        );
        assert_eq!(
            r.structured(),
            Some(json!({
                "threadId": "T1", "content": "The answer.\n",
                "ignoredParameters": [
                    {"name": "cd", "value": "/my \"dir\"", "serverValue": "/srv"},
                    {"name": "ephemeral", "value": true, "serverValue": true}
                ]
            }))
        );
        let r = r.into_result();
        assert_eq!(r.is_error, Some(false));
    }

    /// A launch failure with ignored parameters: structuredContent is sent (for the ignored
    /// list), so it must still match the outputSchema (threadId and content required).
    #[test]
    fn ignored_parameters_without_a_thread_still_match_the_output_schema() {
        let s = EventStream::default();
        let (a, t) = (argv(), Tail::default());
        let e = Ending::LaunchFailed("failed to launch codex binary: x (check $CODEX_CMD)".into());
        let ignored = [Ignored {
            name: "cd",
            value: json!("/x"),
            server: ServerSetting {
                value: json!("/srv"),
                written: "-C /srv".into(),
            },
        }];
        let r = Report {
            ignored: &ignored,
            ..report(&s, &t, &a, &e)
        };
        assert!(r.is_error());
        assert_eq!(
            r.structured(),
            Some(json!({
                "threadId": "", "content": "",
                "ignoredParameters": [{"name": "cd", "value": "/x", "serverValue": "/srv"}]
            }))
        );
    }

    #[test]
    fn error_results_have_no_structured_content() {
        let r = error_result("input validation: `prompt` is required");
        assert_eq!(r.is_error, Some(true));
        assert_eq!(r.structured_content, None);
        let text = serde_json::to_value(&r).unwrap();
        assert_eq!(
            text["content"][0]["text"],
            "[ERROR] input validation: `prompt` is required"
        );
    }
}
