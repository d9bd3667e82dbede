//! Building codex's argv, and reading the server's own `codex exec` flags (the ones after
//! `reaper mcp --`) for the flags codex accepts only once.
//!
//! ```text
//! CODEX_CMD exec <server flags> [resume THREAD_ID] <per-call flags> <extra_args> --json -
//! ```
//! `--json -` stays last so nothing in `extra_args` can take `-` as its value; the prompt goes
//! to stdin, never into argv. No shell is involved anywhere.

use serde_json::Value;

use super::params::{Params, ToolKind};

/// Per-call parameters whose codex flag may appear only once, with every spelling of the flag.
/// A second occurrence makes `codex exec` exit 2 ("cannot be used multiple times"), so when the
/// server's command line has one, the per-call value is dropped (for `codex`) and reported.
pub const SINGLE_USE: &[(&str, &[&str])] = &[
    ("cd", &["-C", "--cd"]),
    ("model", &["-m", "--model"]),
    ("sandbox", &["-s", "--sandbox"]),
    ("profile", &["-p", "--profile"]),
    ("ephemeral", &["--ephemeral"]),
    ("skip_git_repo_check", &["--skip-git-repo-check"]),
];

/// The `codex exec` options that take the next token as their value, so that token is read as
/// a value and never as a flag of its own.
pub const VALUE_FLAGS: &[&str] = &[
    "-c",
    "--config",
    "--enable",
    "--disable",
    "-i",
    "--image",
    "-m",
    "--model",
    "--local-provider",
    "-p",
    "--profile",
    "-s",
    "--sandbox",
    "-C",
    "--cd",
    "--add-dir",
    "--thread-source",
    "--output-schema",
    "--color",
    "-o",
    "--output-last-message",
];

/// How the server's command line sets one single-use parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSetting {
    /// The flag's value, or `true` for a flag without one.
    pub value: Value,
    /// The flag as the command line spells it, shell-quoted: `-C /srv`, `'--cd=my dir'`.
    pub written: String,
}

/// The server-level `codex exec` flags, and which single-use parameters they already set.
#[derive(Debug, Clone, Default)]
pub struct ServerFlags {
    pub args: Vec<String>,
    held: Vec<(&'static str, ServerSetting)>,
}

impl ServerFlags {
    /// Reads `args` the way codex parses them: `--cd DIR`, `--cd=DIR`, `-C DIR`, `-CDIR` and
    /// `-C=DIR` are all `cd`; short flags are case-sensitive (`-c` is not `-C`); the token after
    /// a value-taking flag is a value (`-m` in `-c -m` is not the model flag); nothing after
    /// `--` is a flag. The first setting of a parameter is the one reported.
    pub fn parse(args: Vec<String>) -> ServerFlags {
        let mut held: Vec<(&'static str, ServerSetting)> = Vec::new();
        let mut hold = |param: &'static str, value: Value, written: String| {
            if !held.iter().any(|(p, _)| *p == param) {
                held.push((param, ServerSetting { value, written }));
            }
        };
        let mut tokens = args.iter();
        while let Some(token) = tokens.next() {
            if token == "--" {
                break;
            }
            if VALUE_FLAGS.contains(&token.as_str()) {
                let Some(value) = tokens.next() else { break };
                if let Some(param) = param_of(token) {
                    hold(
                        param,
                        Value::String(value.clone()),
                        format!("{} {}", shell_quote(token), shell_quote(value)),
                    );
                }
                continue;
            }
            for (param, spellings) in SINGLE_USE {
                for flag in *spellings {
                    if token == flag {
                        hold(param, Value::Bool(true), token.clone());
                    } else if flag.len() == 2 && token.starts_with(flag) {
                        let rest = &token[2..];
                        let value = rest.strip_prefix('=').unwrap_or(rest);
                        hold(param, Value::String(value.into()), shell_quote(token));
                    } else if let Some(value) =
                        token.strip_prefix(flag).and_then(|r| r.strip_prefix('='))
                    {
                        hold(param, Value::String(value.into()), shell_quote(token));
                    }
                }
            }
        }
        ServerFlags { args, held }
    }

    /// How the server's flags set `param`, if they do.
    pub fn setting(&self, param: &str) -> Option<&ServerSetting> {
        self.held.iter().find(|(p, _)| *p == param).map(|(_, s)| s)
    }

    /// Every single-use parameter the server's flags set.
    pub fn settings(&self) -> impl Iterator<Item = (&'static str, &ServerSetting)> {
        self.held.iter().map(|(p, s)| (*p, s))
    }

    /// Whether a per-call `param` of `tool` is dropped because the server's flags set it.
    /// After `resume` the per-call flags are the subcommand's own and codex takes them even
    /// when the same flag is among the server's, so `codex-reply` never drops anything.
    pub fn overrides(&self, tool: ToolKind, param: &str) -> bool {
        tool == ToolKind::Codex && self.setting(param).is_some()
    }
}

fn param_of(flag: &str) -> Option<&'static str> {
    SINGLE_USE
        .iter()
        .find(|(_, spellings)| spellings.contains(&flag))
        .map(|(p, _)| *p)
}

/// `shlex.quote`: the word itself when it is made only of `[A-Za-z0-9_@%+=:,./-]`, else in
/// single quotes (`'` written as `'"'"'`).
pub fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let safe = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if safe {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\"'\"'"))
    }
}

/// codex's argv for one call.
pub fn build(codex_cmd: &str, server: &ServerFlags, tool: ToolKind, p: &Params) -> Vec<String> {
    let mut argv: Vec<String> = vec![codex_cmd.into(), "exec".into()];
    argv.extend(server.args.iter().cloned());
    if tool == ToolKind::Reply {
        if let Some(id) = p.thread_id.as_deref().filter(|t| !t.is_empty()) {
            // A subcommand: before the per-call flags. The server's flags stay in front of it,
            // where codex parses them as `exec` options.
            argv.extend(["resume".into(), id.into()]);
        }
    }
    let used = |param: &str, v: &Option<String>| -> Option<String> {
        v.clone()
            .filter(|s| !s.is_empty() && !server.overrides(tool, param))
    };
    if let Some(cd) = used("cd", &p.cd) {
        argv.extend(["-C".into(), cd]);
    }
    if let Some(m) = used("model", &p.model) {
        argv.extend(["-m".into(), m]);
    }
    for c in &p.config {
        argv.extend(["-c".into(), c.clone()]);
    }
    if let Some(s) = used("sandbox", &p.sandbox) {
        argv.extend(["--sandbox".into(), s]);
    }
    for d in &p.add_dir {
        argv.extend(["--add-dir".into(), d.clone()]);
    }
    if let Some(prof) = used("profile", &p.profile) {
        argv.extend(["-p".into(), prof]);
    }
    if p.ephemeral && !server.overrides(tool, "ephemeral") {
        argv.push("--ephemeral".into());
    }
    if p.skip_git_repo_check && !server.overrides(tool, "skip_git_repo_check") {
        argv.push("--skip-git-repo-check".into());
    }
    argv.extend(p.extra_args.iter().cloned());
    argv.extend(["--json".into(), "-".into()]);
    argv
}

/// A per-call parameter the server's own flags overrode.
#[derive(Debug, Clone, PartialEq)]
pub struct Ignored {
    pub name: &'static str,
    pub value: Value,
    pub server: ServerSetting,
}

/// The per-call parameters [`build`] left out, in [`SINGLE_USE`] order.
pub fn ignored(server: &ServerFlags, tool: ToolKind, p: &Params) -> Vec<Ignored> {
    SINGLE_USE
        .iter()
        .filter(|(param, _)| server.overrides(tool, param))
        .filter_map(|(param, _)| {
            Some(Ignored {
                name: param,
                value: p.set_value(param)?,
                server: server.setting(param)?.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flags(args: &[&str]) -> ServerFlags {
        ServerFlags::parse(args.iter().map(|s| s.to_string()).collect())
    }

    fn setting(f: &ServerFlags, param: &str) -> Option<(Value, String)> {
        f.setting(param)
            .map(|s| (s.value.clone(), s.written.clone()))
    }

    #[test]
    fn every_spelling_of_a_single_use_flag_counts() {
        for (args, value, written) in [
            (&["-C", "/srv"][..], "/srv", "-C /srv"),
            (&["-C/srv"][..], "/srv", "-C/srv"),
            (&["-C=/srv"][..], "/srv", "-C=/srv"),
            (&["--cd", "/srv"][..], "/srv", "--cd /srv"),
            (&["--cd=/srv"][..], "/srv", "--cd=/srv"),
            (&["--cd", "my dir"][..], "my dir", "--cd 'my dir'"),
            (&["--cd=my dir"][..], "my dir", "'--cd=my dir'"),
        ] {
            let f = flags(args);
            assert_eq!(
                setting(&f, "cd"),
                Some((json!(value), written.to_owned())),
                "{args:?}"
            );
        }
        let f = flags(&["--ephemeral", "-mo3", "-s", "read-only", "--profile=fast"]);
        assert_eq!(
            setting(&f, "ephemeral"),
            Some((json!(true), "--ephemeral".into()))
        );
        assert_eq!(setting(&f, "model"), Some((json!("o3"), "-mo3".into())));
        assert_eq!(
            setting(&f, "sandbox"),
            Some((json!("read-only"), "-s read-only".into()))
        );
        assert_eq!(
            setting(&f, "profile"),
            Some((json!("fast"), "--profile=fast".into()))
        );
        let f = flags(&["--skip-git-repo-check"]);
        assert_eq!(
            setting(&f, "skip_git_repo_check"),
            Some((json!(true), "--skip-git-repo-check".into()))
        );
    }

    #[test]
    fn values_case_and_double_dash_are_respected() {
        // `-c` is the repeatable config flag, not `-C`; its value `-m` is not the model flag.
        let f = flags(&["-c", "-m", "-c", "model=o3", "--add-dir", "--cd"]);
        assert_eq!(f.settings().count(), 0);
        let f = flags(&["-cmodel=o3"]);
        assert_eq!(f.settings().count(), 0);
        let f = flags(&["--", "-C", "/srv"]);
        assert_eq!(f.settings().count(), 0);
        // A value flag at the end without its value sets nothing.
        let f = flags(&["-C"]);
        assert_eq!(f.settings().count(), 0);
        // The first setting wins.
        let f = flags(&["-m", "a", "--model", "b"]);
        assert_eq!(setting(&f, "model"), Some((json!("a"), "-m a".into())));
    }

    #[test]
    fn shell_quoting_is_shlex() {
        assert_eq!(shell_quote("abc-1.2/x:y,z@%+="), "abc-1.2/x:y,z@%+=");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\"'\"'s'");
        assert_eq!(shell_quote("é"), "'é'");
    }

    fn params() -> Params {
        Params {
            prompt: "p".into(),
            cd: Some("/w".into()),
            model: Some("m".into()),
            config: vec!["a=1".into(), "b=2".into()],
            sandbox: Some("read-only".into()),
            add_dir: vec!["d1".into(), "d2".into()],
            profile: Some("prof".into()),
            ephemeral: true,
            skip_git_repo_check: true,
            extra_args: vec!["--oss".into(), "-".into()],
            ..Params::default()
        }
    }

    #[test]
    fn argv_in_the_contract_order() {
        let argv = build("codex", &flags(&[]), ToolKind::Codex, &params());
        assert_eq!(
            argv,
            [
                "codex",
                "exec",
                "-C",
                "/w",
                "-m",
                "m",
                "-c",
                "a=1",
                "-c",
                "b=2",
                "--sandbox",
                "read-only",
                "--add-dir",
                "d1",
                "--add-dir",
                "d2",
                "-p",
                "prof",
                "--ephemeral",
                "--skip-git-repo-check",
                "--oss",
                "-",
                "--json",
                "-"
            ]
        );
        let minimal = Params {
            prompt: "p".into(),
            cd: Some(String::new()),
            ..Params::default()
        };
        assert_eq!(
            build(
                "/opt/codex",
                &flags(&["-c", "x=1"]),
                ToolKind::Codex,
                &minimal
            ),
            ["/opt/codex", "exec", "-c", "x=1", "--json", "-"]
        );
    }

    #[test]
    fn reply_resumes_after_the_server_flags_and_keeps_its_own() {
        let p = Params {
            thread_id: Some("T1".into()),
            prompt: "p".into(),
            model: Some("m".into()),
            ephemeral: true,
            ..Params::default()
        };
        let f = flags(&["-m", "server-model", "--ephemeral"]);
        assert_eq!(
            build("codex", &f, ToolKind::Reply, &p),
            [
                "codex",
                "exec",
                "-m",
                "server-model",
                "--ephemeral",
                "resume",
                "T1",
                "-m",
                "m",
                "--ephemeral",
                "--json",
                "-"
            ]
        );
        assert!(ignored(&f, ToolKind::Reply, &p).is_empty());
    }

    #[test]
    fn server_flags_override_single_use_parameters_of_codex() {
        let f = flags(&["-C", "/srv", "--ephemeral", "-s=read-only"]);
        let argv = build("codex", &f, ToolKind::Codex, &params());
        assert!(!argv[4..].contains(&"-C".to_owned()), "{argv:?}");
        assert!(!argv[4..].contains(&"--sandbox".to_owned()), "{argv:?}");
        assert_eq!(argv.iter().filter(|a| *a == "--ephemeral").count(), 1);
        assert!(argv.contains(&"-m".to_owned()));
        let ig = ignored(&f, ToolKind::Codex, &params());
        let names: Vec<_> = ig.iter().map(|i| i.name).collect();
        assert_eq!(names, ["cd", "sandbox", "ephemeral"]);
        assert_eq!(ig[0].value, json!("/w"));
        assert_eq!(ig[0].server.value, json!("/srv"));
        assert_eq!(ig[0].server.written, "-C /srv");
        assert_eq!(ig[2].value, json!(true));
        assert_eq!(ig[2].server.value, json!(true));
        // Not set per call: nothing ignored.
        let p = Params {
            prompt: "p".into(),
            ..Params::default()
        };
        assert!(ignored(&f, ToolKind::Codex, &p).is_empty());
    }
}
