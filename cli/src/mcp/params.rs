//! Tool arguments: checked from the raw JSON object, in the contract's order (the first failure
//! wins), with the contract's exact messages. Checking the raw `Map` rather than deserializing
//! into a struct is what lets an unknown key, a `null`, a bare string where an array belongs or a
//! `true` where a string belongs get the contract's message instead of serde's.

use serde_json::{Map, Value};

use super::py;

/// The two tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `codex`: a new thread.
    Codex,
    /// `codex-reply`: `codex exec resume THREAD_ID`.
    Reply,
}

impl ToolKind {
    pub fn from_name(name: &str) -> Option<ToolKind> {
        match name {
            "codex" => Some(ToolKind::Codex),
            "codex-reply" => Some(ToolKind::Reply),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ToolKind::Codex => "codex",
            ToolKind::Reply => "codex-reply",
        }
    }

    /// The parameters the tool takes, in the schema's order.
    pub fn params(self) -> &'static [&'static str] {
        match self {
            ToolKind::Codex => CODEX_PARAMS,
            ToolKind::Reply => REPLY_PARAMS,
        }
    }

    pub fn required(self) -> &'static [&'static str] {
        match self {
            ToolKind::Codex => &["prompt"],
            ToolKind::Reply => &["thread_id", "prompt"],
        }
    }
}

const CODEX_PARAMS: &[&str] = &[
    "prompt",
    "cd",
    "model",
    "config",
    "sandbox",
    "add_dir",
    "profile",
    "ephemeral",
    "skip_git_repo_check",
    "extra_args",
    "env",
    "timeout_seconds",
];

/// `codex exec resume` takes no `cd`, `sandbox`, `add_dir` or `profile`.
const REPLY_PARAMS: &[&str] = &[
    "thread_id",
    "prompt",
    "model",
    "config",
    "ephemeral",
    "skip_git_repo_check",
    "extra_args",
    "env",
    "timeout_seconds",
];

pub const SANDBOX_MODES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];

pub const MIN_TIMEOUT: u64 = 30;
pub const MAX_TIMEOUT: u64 = 3600;

/// Names the removed `codex mcp-server` used, and what this server calls them.
const RENAMED: &[(&str, &str)] = &[
    ("cwd", "cd"),
    ("threadId", "thread_id"),
    ("conversationId", "thread_id"),
];

const STRINGS: &[&str] = &["prompt", "thread_id", "cd", "model", "sandbox", "profile"];
const BOOLEANS: &[&str] = &["ephemeral", "skip_git_repo_check"];
const STRING_ARRAYS: &[&str] = &["config", "add_dir", "extra_args"];

/// A call's arguments once they passed [`validate`]. Absent and `null` are both `None`/empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    pub thread_id: Option<String>,
    pub prompt: String,
    pub cd: Option<String>,
    pub model: Option<String>,
    pub config: Vec<String>,
    pub sandbox: Option<String>,
    pub add_dir: Vec<String>,
    pub profile: Option<String>,
    pub ephemeral: bool,
    pub skip_git_repo_check: bool,
    pub extra_args: Vec<String>,
    /// In the order the client sent them (as far as the JSON map keeps it).
    pub env: Vec<(String, String)>,
    pub timeout_seconds: Option<u64>,
}

impl Params {
    /// The value a single-use parameter was given, when it is set (a non-empty string, `true`):
    /// what `ignoredParameters` reports.
    pub fn set_value(&self, param: &str) -> Option<Value> {
        let s = |v: &Option<String>| {
            v.as_ref()
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.clone()))
        };
        match param {
            "cd" => s(&self.cd),
            "model" => s(&self.model),
            "sandbox" => s(&self.sandbox),
            "profile" => s(&self.profile),
            "ephemeral" => self.ephemeral.then_some(Value::Bool(true)),
            "skip_git_repo_check" => self.skip_git_repo_check.then_some(Value::Bool(true)),
            _ => None,
        }
    }
}

/// Checks `args` for `tool` as the contract orders it; the first failure is the message.
pub fn validate(tool: ToolKind, args: &Map<String, Value>) -> Result<Params, String> {
    let allowed = tool.params();
    // 1. Unknown keys, naming the new name of an old one.
    for key in args.keys() {
        if allowed.contains(&key.as_str()) {
            continue;
        }
        let renamed = RENAMED
            .iter()
            .find(|(old, new)| old == key && allowed.contains(new));
        return Err(match renamed {
            Some((_, new)) => format!("unknown parameter `{key}`; this server calls it `{new}`"),
            None => format!("unknown parameter `{key}`"),
        });
    }
    let get = |k: &str| args.get(k).filter(|v| !v.is_null());
    // 2. Required: missing and null alike.
    for key in tool.required() {
        if get(key).is_none() {
            return Err(format!("`{key}` is required"));
        }
    }
    // 3. Strings.
    for key in STRINGS {
        if let Some(v) = get(key) {
            if !v.is_string() {
                return Err(format!(
                    "`{key}` must be a string, got {}",
                    py::type_name(v)
                ));
            }
        }
    }
    // 4. Required ones must not be empty.
    for key in tool.required() {
        if get(key).and_then(Value::as_str) == Some("") {
            return Err(format!("`{key}` must not be empty"));
        }
    }
    // 5. Booleans must be JSON booleans (`"false"` is not one).
    for key in BOOLEANS {
        if let Some(v) = get(key) {
            if !v.is_boolean() {
                return Err(format!(
                    "`{key}` must be a boolean, got {}",
                    py::type_name(v)
                ));
            }
        }
    }
    // 6. Arrays of strings; a bare string would become one flag per character.
    for key in STRING_ARRAYS {
        if let Some(v) = get(key) {
            let ok = v
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string));
            if !ok {
                return Err(format!("`{key}` must be an array of strings"));
            }
        }
    }
    let strings = |k: &str| -> Vec<String> {
        get(k)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let config = strings("config");
    // 7. `-c` takes key=value.
    if let Some(bad) = config.iter().find(|c| !c.contains('=')) {
        return Err(format!(
            "`config` entries must be key=value strings, got {}",
            py::repr_str(bad)
        ));
    }
    let string = |k: &str| get(k).and_then(Value::as_str).map(str::to_owned);
    // 8. Sandbox modes.
    let sandbox = string("sandbox");
    if let Some(mode) = &sandbox {
        if !SANDBOX_MODES.contains(&mode.as_str()) {
            return Err(format!(
                "`sandbox` must be one of {}, got {}",
                SANDBOX_MODES.join(", "),
                py::repr_str(mode)
            ));
        }
    }
    // 9. env: strings to strings.
    let mut env = Vec::new();
    if let Some(v) = get("env") {
        let pairs = v.as_object().and_then(|m| {
            m.iter()
                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect::<Option<Vec<_>>>()
        });
        match pairs {
            Some(p) => env = p,
            None => return Err("`env` must be an object mapping strings to strings".into()),
        }
    }
    // 10. timeout_seconds: an integer (not a bool, not 30.0) in range.
    let mut timeout_seconds = None;
    if let Some(v) = get("timeout_seconds") {
        let n = match v {
            Value::Number(n) if !n.is_f64() => n,
            other => {
                return Err(format!(
                    "`timeout_seconds` must be an integer, got {}",
                    py::type_name(other)
                ))
            }
        };
        match n.as_u64() {
            Some(t) if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&t) => timeout_seconds = Some(t),
            _ => {
                return Err(format!(
                    "`timeout_seconds` must be between {MIN_TIMEOUT} and {MAX_TIMEOUT}, got {n}"
                ))
            }
        }
    }
    Ok(Params {
        thread_id: string("thread_id"),
        prompt: string("prompt").unwrap_or_default(),
        cd: string("cd"),
        model: string("model"),
        config,
        sandbox,
        add_dir: strings("add_dir"),
        profile: string("profile"),
        ephemeral: get("ephemeral").and_then(Value::as_bool).unwrap_or(false),
        skip_git_repo_check: get("skip_git_repo_check")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        extra_args: strings("extra_args"),
        env,
        timeout_seconds,
    })
}

/// Checks reaper makes beyond the contract's list, after it: what would otherwise reach codex
/// as a flag (`thread_id` `--last`), fail later with a message that no longer names the
/// parameter (a `cd` that is not a directory, a NUL that `execve` cannot carry), or silently
/// set the wrong variable (an `env` key holding `=`). `cd_used` is false when the server's own
/// command line overrides `cd` (then its value is never used, so it is not checked).
pub fn check_more(p: &Params, cd_used: bool) -> Result<(), String> {
    if let Some(id) = &p.thread_id {
        if id.starts_with('-') {
            return Err(format!(
                "`thread_id` must not start with '-', got {}",
                py::repr_str(id)
            ));
        }
    }
    no_nul("thread_id", &p.thread_id)?;
    no_nul("cd", &p.cd)?;
    no_nul("model", &p.model)?;
    no_nul("config", &p.config)?;
    no_nul("add_dir", &p.add_dir)?;
    no_nul("profile", &p.profile)?;
    no_nul("extra_args", &p.extra_args)?;
    for (k, v) in &p.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(format!(
                "`env` keys must be variable names without '=' or NUL, got {}",
                py::repr_str(k)
            ));
        }
        if v.contains('\0') {
            return Err(format!(
                "`env` values must not contain NUL characters, got one in {}",
                py::repr_str(k)
            ));
        }
    }
    if cd_used {
        if let Some(cd) = p.cd.as_deref().filter(|c| !c.is_empty()) {
            if !std::path::Path::new(cd).is_dir() {
                return Err(format!(
                    "`cd` must be an existing directory, got {}",
                    py::repr_str(cd)
                ));
            }
        }
    }
    Ok(())
}

/// `execve(2)` takes NUL-terminated strings: a NUL inside one cannot reach codex.
fn no_nul<'a>(name: &str, values: impl IntoIterator<Item = &'a String>) -> Result<(), String> {
    if values.into_iter().any(|v| v.contains('\0')) {
        Err(format!("`{name}` must not contain NUL characters"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(tool: ToolKind, args: Value) -> Result<Params, String> {
        let map = args.as_object().cloned().unwrap_or_default();
        validate(tool, &map)
    }

    /// Every message of the contract, in its exact text.
    #[test]
    fn contract_messages() {
        use ToolKind::{Codex, Reply};
        let cases: Vec<(ToolKind, Value, &str)> = vec![
            (Codex, json!({"prompt": "x", "bogus": 1}), "unknown parameter `bogus`"),
            (Codex, json!({"prompt": "x", "cwd": "/"}), "unknown parameter `cwd`; this server calls it `cd`"),
            (Reply, json!({"prompt": "x", "thread_id": "t", "cwd": "/"}), "unknown parameter `cwd`"),
            (Reply, json!({"prompt": "x", "threadId": "t"}), "unknown parameter `threadId`; this server calls it `thread_id`"),
            (Reply, json!({"prompt": "x", "conversationId": "t"}), "unknown parameter `conversationId`; this server calls it `thread_id`"),
            (Codex, json!({"prompt": "x", "threadId": "t"}), "unknown parameter `threadId`"),
            (Codex, json!({"prompt": "x", "thread_id": "t"}), "unknown parameter `thread_id`"),
            (Reply, json!({"prompt": "x", "thread_id": "t", "sandbox": "read-only"}), "unknown parameter `sandbox`"),
            (Reply, json!({"prompt": "x", "thread_id": "t", "add_dir": []}), "unknown parameter `add_dir`"),
            (Reply, json!({"prompt": "x", "thread_id": "t", "profile": "p"}), "unknown parameter `profile`"),
            (Reply, json!({"prompt": "x", "thread_id": "t", "cd": "/"}), "unknown parameter `cd`"),
            (Codex, json!({}), "`prompt` is required"),
            (Codex, json!({"prompt": null}), "`prompt` is required"),
            (Reply, json!({"prompt": "x"}), "`thread_id` is required"),
            (Reply, json!({"thread_id": "t"}), "`prompt` is required"),
            (Reply, json!({"thread_id": null, "prompt": "x"}), "`thread_id` is required"),
            (Codex, json!({"prompt": 5}), "`prompt` must be a string, got int"),
            (Codex, json!({"prompt": 5.5}), "`prompt` must be a string, got float"),
            (Codex, json!({"prompt": true}), "`prompt` must be a string, got bool"),
            (Codex, json!({"prompt": ["a"]}), "`prompt` must be a string, got list"),
            (Codex, json!({"prompt": {"a": 1}}), "`prompt` must be a string, got dict"),
            (Reply, json!({"thread_id": 7, "prompt": "x"}), "`thread_id` must be a string, got int"),
            (Codex, json!({"prompt": "x", "cd": 1}), "`cd` must be a string, got int"),
            (Codex, json!({"prompt": "x", "model": false}), "`model` must be a string, got bool"),
            (Codex, json!({"prompt": "x", "sandbox": 1}), "`sandbox` must be a string, got int"),
            (Codex, json!({"prompt": "x", "profile": []}), "`profile` must be a string, got list"),
            (Codex, json!({"prompt": ""}), "`prompt` must not be empty"),
            (Reply, json!({"thread_id": "", "prompt": "x"}), "`thread_id` must not be empty"),
            (Reply, json!({"thread_id": "t", "prompt": ""}), "`prompt` must not be empty"),
            (Codex, json!({"prompt": "x", "ephemeral": "false"}), "`ephemeral` must be a boolean, got str"),
            (Codex, json!({"prompt": "x", "ephemeral": 0}), "`ephemeral` must be a boolean, got int"),
            (Codex, json!({"prompt": "x", "skip_git_repo_check": 1}), "`skip_git_repo_check` must be a boolean, got int"),
            (Codex, json!({"prompt": "x", "config": "a=b"}), "`config` must be an array of strings"),
            (Codex, json!({"prompt": "x", "config": ["a=b", 1]}), "`config` must be an array of strings"),
            (Codex, json!({"prompt": "x", "add_dir": "docs"}), "`add_dir` must be an array of strings"),
            (Codex, json!({"prompt": "x", "extra_args": {"a": "b"}}), "`extra_args` must be an array of strings"),
            (Codex, json!({"prompt": "x", "config": ["a=b", "bare"]}), "`config` entries must be key=value strings, got 'bare'"),
            (Codex, json!({"prompt": "x", "config": ["it's"]}), "`config` entries must be key=value strings, got \"it's\""),
            (Codex, json!({"prompt": "x", "sandbox": "full"}), "`sandbox` must be one of read-only, workspace-write, danger-full-access, got 'full'"),
            (Codex, json!({"prompt": "x", "env": ["A=1"]}), "`env` must be an object mapping strings to strings"),
            (Codex, json!({"prompt": "x", "env": {"A": 1}}), "`env` must be an object mapping strings to strings"),
            (Codex, json!({"prompt": "x", "env": "A=1"}), "`env` must be an object mapping strings to strings"),
            (Codex, json!({"prompt": "x", "timeout_seconds": "60"}), "`timeout_seconds` must be an integer, got str"),
            (Codex, json!({"prompt": "x", "timeout_seconds": 60.0}), "`timeout_seconds` must be an integer, got float"),
            (Codex, json!({"prompt": "x", "timeout_seconds": true}), "`timeout_seconds` must be an integer, got bool"),
            (Codex, json!({"prompt": "x", "timeout_seconds": 29}), "`timeout_seconds` must be between 30 and 3600, got 29"),
            (Codex, json!({"prompt": "x", "timeout_seconds": 3601}), "`timeout_seconds` must be between 30 and 3600, got 3601"),
            (Codex, json!({"prompt": "x", "timeout_seconds": -5}), "`timeout_seconds` must be between 30 and 3600, got -5"),
        ];
        for (tool, args, want) in cases {
            assert_eq!(check(tool, args.clone()), Err(want.to_owned()), "{args}");
        }
    }

    /// The first failure in the contract's order wins, whatever else is wrong.
    #[test]
    fn first_failure_wins() {
        let got = check(
            ToolKind::Codex,
            json!({"bogus": 1, "prompt": 5, "ephemeral": "x", "timeout_seconds": 1}),
        );
        assert_eq!(got, Err("unknown parameter `bogus`".into()));
        let got = check(ToolKind::Codex, json!({"model": 5}));
        assert_eq!(got, Err("`prompt` is required".into()));
        let got = check(ToolKind::Codex, json!({"prompt": "", "model": 5}));
        assert_eq!(got, Err("`model` must be a string, got int".into()));
        let got = check(ToolKind::Codex, json!({"prompt": "", "ephemeral": 1}));
        assert_eq!(got, Err("`prompt` must not be empty".into()));
        let got = check(
            ToolKind::Codex,
            json!({"prompt": "x", "sandbox": "bad", "config": ["bare"], "env": 1}),
        );
        assert_eq!(
            got,
            Err("`config` entries must be key=value strings, got 'bare'".into())
        );
    }

    #[test]
    fn nulls_of_optional_keys_are_absent() {
        let p = check(
            ToolKind::Codex,
            json!({"prompt": "x", "cd": null, "config": null, "ephemeral": null, "env": null, "timeout_seconds": null}),
        )
        .unwrap();
        assert_eq!(
            p,
            Params {
                prompt: "x".into(),
                ..Params::default()
            }
        );
    }

    #[test]
    fn full_arguments_are_kept() {
        let p = check(
            ToolKind::Codex,
            json!({
                "prompt": "hi", "cd": "/tmp", "model": "m", "config": ["a=1", "b=2"],
                "sandbox": "read-only", "add_dir": ["x", "y"], "profile": "p",
                "ephemeral": true, "skip_git_repo_check": false, "extra_args": ["--oss"],
                "env": {"A": "1"}, "timeout_seconds": 30
            }),
        )
        .unwrap();
        assert_eq!(p.cd.as_deref(), Some("/tmp"));
        assert_eq!(p.config, ["a=1", "b=2"]);
        assert_eq!(p.add_dir, ["x", "y"]);
        assert!(p.ephemeral && !p.skip_git_repo_check);
        assert_eq!(p.env, [("A".to_owned(), "1".to_owned())]);
        assert_eq!(p.timeout_seconds, Some(30));
        assert_eq!(p.set_value("cd"), Some(json!("/tmp")));
        assert_eq!(p.set_value("ephemeral"), Some(json!(true)));
        assert_eq!(p.set_value("skip_git_repo_check"), None);
        let p = check(
            ToolKind::Codex,
            json!({"prompt": "x", "timeout_seconds": 3600}),
        )
        .unwrap();
        assert_eq!(p.timeout_seconds, Some(3600));
    }

    #[test]
    fn reaper_checks_beyond_the_contract() {
        let reply = |id: &str| Params {
            thread_id: Some(id.into()),
            prompt: "x".into(),
            ..Params::default()
        };
        assert_eq!(
            check_more(&reply("--last"), true),
            Err("`thread_id` must not start with '-', got '--last'".into())
        );
        assert_eq!(check_more(&reply("019a-thread"), true), Ok(()));
        let cd = |d: &str| Params {
            prompt: "x".into(),
            cd: Some(d.into()),
            ..Params::default()
        };
        assert_eq!(
            check_more(&cd("/nonexistent/dir"), true),
            Err("`cd` must be an existing directory, got '/nonexistent/dir'".into())
        );
        assert_eq!(check_more(&cd("/nonexistent/dir"), false), Ok(()));
        assert_eq!(check_more(&cd("/"), true), Ok(()));
        let env = |k: &str, v: &str| Params {
            prompt: "x".into(),
            env: vec![(k.into(), v.into())],
            ..Params::default()
        };
        assert!(check_more(&env("A=B", "1"), true)
            .unwrap_err()
            .contains("got 'A=B'"));
        assert!(check_more(&env("", "1"), true).is_err());
        assert!(check_more(&env("A", "a\0b"), true).is_err());
        let model = Params {
            prompt: "x".into(),
            model: Some("a\0b".into()),
            ..Params::default()
        };
        assert_eq!(
            check_more(&model, true),
            Err("`model` must not contain NUL characters".into())
        );
    }
}
