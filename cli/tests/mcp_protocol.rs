//! `reaper mcp` as an MCP client sees it: tools/list, argument validation, argv building and
//! result texts, through the rmcp client over the server's stdio, with `fake-codex` as codex.

mod mcp_support;

use std::time::Duration;

use mcp_support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const TRAILER: &str =
    "[codex] thread_id=T1 status=completed input_tokens=11 cached_input_tokens=2 output_tokens=7";

#[tokio::test]
async fn tools_list_has_the_contract_schemas() {
    let s = start(Options::default()).await;
    let tools = s.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["codex", "codex-reply"]);
    let props = |i: usize| -> Vec<String> {
        tools[i].input_schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .cloned()
            .collect()
    };
    let mut codex = props(0);
    codex.sort();
    let mut want = vec![
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
    want.sort();
    assert_eq!(codex, want);
    let mut reply = props(1);
    reply.sort();
    let mut want = vec![
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
    want.sort();
    assert_eq!(reply, want);
    assert_eq!(tools[0].input_schema["required"], json!(["prompt"]));
    assert_eq!(
        tools[1].input_schema["required"],
        json!(["thread_id", "prompt"])
    );
    assert_eq!(
        tools[0].input_schema["properties"]["timeout_seconds"]["description"],
        "Hard wall-clock timeout for the codex subprocess in seconds (default 1800)."
    );
    for t in &tools {
        let out = Value::Object((**t.output_schema.as_ref().expect("an outputSchema")).clone());
        assert_eq!(
            out,
            json!({"type": "object",
                   "properties": {"threadId": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["threadId", "content"]})
        );
    }
}

#[tokio::test]
async fn server_flags_and_default_timeout_show_in_tools_list() {
    let s = start(Options {
        args: &["--", "--cd=/srv/x", "-c", "-m"],
        env: &[("CODEX_CLI_MCP_SLIM_TIMEOUT", "90")],
    })
    .await;
    let tools = s.client.list_all_tools().await.expect("tools/list");
    let desc = |i: usize, p: &str| {
        tools[i].input_schema["properties"][p]["description"]
            .as_str()
            .expect("a description")
            .to_owned()
    };
    assert!(desc(0, "cd").ends_with(
        " This server's own command line already sets --cd=/srv/x, so a value passed here is ignored."
    ));
    // `-m` is the value of `-c` there, not the model flag.
    assert!(!desc(0, "model").contains("already sets"));
    assert!(desc(0, "timeout_seconds").ends_with("(default 90)."));
}

/// Every validation message of the contract, through the real server; it keeps serving.
#[tokio::test]
async fn invalid_arguments_get_the_contract_messages() {
    let s = start(Options::default()).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "codex",
            json!({"prompt": "x", "bogus": 1}),
            "unknown parameter `bogus`",
        ),
        (
            "codex",
            json!({"prompt": "x", "cwd": "/"}),
            "unknown parameter `cwd`; this server calls it `cd`",
        ),
        (
            "codex-reply",
            json!({"thread_id": "t", "prompt": "x", "threadId": "t"}),
            "unknown parameter `threadId`; this server calls it `thread_id`",
        ),
        (
            "codex-reply",
            json!({"thread_id": "t", "prompt": "x", "conversationId": "t"}),
            "unknown parameter `conversationId`; this server calls it `thread_id`",
        ),
        (
            "codex-reply",
            json!({"thread_id": "t", "prompt": "x", "cd": "/"}),
            "unknown parameter `cd`",
        ),
        (
            "codex-reply",
            json!({"thread_id": "t", "prompt": "x", "sandbox": "read-only"}),
            "unknown parameter `sandbox`",
        ),
        ("codex", json!({}), "`prompt` is required"),
        ("codex", json!({"prompt": null}), "`prompt` is required"),
        (
            "codex-reply",
            json!({"prompt": "x"}),
            "`thread_id` is required",
        ),
        (
            "codex",
            json!({"prompt": 1}),
            "`prompt` must be a string, got int",
        ),
        (
            "codex",
            json!({"prompt": "x", "model": 1.5}),
            "`model` must be a string, got float",
        ),
        (
            "codex",
            json!({"prompt": "x", "cd": ["/"]}),
            "`cd` must be a string, got list",
        ),
        ("codex", json!({"prompt": ""}), "`prompt` must not be empty"),
        (
            "codex-reply",
            json!({"thread_id": "", "prompt": "x"}),
            "`thread_id` must not be empty",
        ),
        (
            "codex",
            json!({"prompt": "x", "ephemeral": "true"}),
            "`ephemeral` must be a boolean, got str",
        ),
        (
            "codex",
            json!({"prompt": "x", "skip_git_repo_check": 1}),
            "`skip_git_repo_check` must be a boolean, got int",
        ),
        (
            "codex",
            json!({"prompt": "x", "add_dir": "docs"}),
            "`add_dir` must be an array of strings",
        ),
        (
            "codex",
            json!({"prompt": "x", "extra_args": [1]}),
            "`extra_args` must be an array of strings",
        ),
        (
            "codex",
            json!({"prompt": "x", "config": ["bare"]}),
            "`config` entries must be key=value strings, got 'bare'",
        ),
        (
            "codex",
            json!({"prompt": "x", "sandbox": "yolo"}),
            "`sandbox` must be one of read-only, workspace-write, danger-full-access, got 'yolo'",
        ),
        (
            "codex",
            json!({"prompt": "x", "env": {"A": 1}}),
            "`env` must be an object mapping strings to strings",
        ),
        (
            "codex",
            json!({"prompt": "x", "timeout_seconds": "60"}),
            "`timeout_seconds` must be an integer, got str",
        ),
        (
            "codex",
            json!({"prompt": "x", "timeout_seconds": false}),
            "`timeout_seconds` must be an integer, got bool",
        ),
        (
            "codex",
            json!({"prompt": "x", "timeout_seconds": 10}),
            "`timeout_seconds` must be between 30 and 3600, got 10",
        ),
        (
            "codex-reply",
            json!({"thread_id": "--last", "prompt": "x"}),
            "`thread_id` must not start with '-', got '--last'",
        ),
        (
            "codex",
            json!({"prompt": "x", "cd": "/no/such/dir"}),
            "`cd` must be an existing directory, got '/no/such/dir'",
        ),
    ];
    for (tool, arguments, msg) in cases {
        let r = s.call(tool, arguments.clone()).await;
        assert_eq!(
            text(&r),
            format!("[ERROR] input validation: {msg}"),
            "{tool} {arguments}"
        );
        assert_eq!(r.is_error, Some(true), "{tool} {arguments}");
        assert_eq!(structured(&r), None, "{tool} {arguments}");
    }
    let r = s.call("nope", json!({"prompt": "x"})).await;
    assert_eq!(text(&r), "[ERROR] unknown tool: nope");
    assert_eq!(r.is_error, Some(true));
    assert!(
        s.recorded().is_empty(),
        "an invalid call must not start codex"
    );
    // Still serving.
    let r = s
        .call("codex", json!({"prompt": "thread T1\nsay ok\ndone"}))
        .await;
    assert_eq!(text(&r), format!("ok\n\n{TRAILER}"));
}

#[tokio::test]
async fn argv_follows_the_contract() {
    let s = start(Options::default()).await;
    let dir = s.dir.path().to_str().expect("a UTF-8 path").to_owned();
    let r = s
        .call(
            "codex",
            json!({
                "prompt": "thread T1\nargv\ndone", "cd": dir, "model": "m1",
                "config": ["a=1", "b=x,y"], "sandbox": "read-only", "add_dir": ["d1", "d 2"],
                "profile": "p", "ephemeral": true, "skip_git_repo_check": true,
                "extra_args": ["--oss", "-"], "timeout_seconds": 60
            }),
        )
        .await;
    let argv: Vec<String> = serde_json::from_str(
        structured(&r).expect("structured content")["content"]
            .as_str()
            .expect("content"),
    )
    .expect("fake-codex echoes its argv as JSON");
    assert_eq!(
        argv,
        [
            fake_codex(),
            "exec",
            "-C",
            &dir,
            "-m",
            "m1",
            "-c",
            "a=1",
            "-c",
            "b=x,y",
            "--sandbox",
            "read-only",
            "--add-dir",
            "d1",
            "--add-dir",
            "d 2",
            "-p",
            "p",
            "--ephemeral",
            "--skip-git-repo-check",
            "--oss",
            "-",
            "--json",
            "-"
        ]
    );
    let r = s
        .call(
            "codex-reply",
            json!({"thread_id": "T9", "prompt": "thread\nargv\ndone", "model": "m2"}),
        )
        .await;
    let sc = structured(&r).expect("structured content");
    assert_eq!(sc["threadId"], "T9");
    let argv: Vec<String> =
        serde_json::from_str(sc["content"].as_str().expect("content")).expect("argv as JSON");
    assert_eq!(
        argv,
        [
            fake_codex(),
            "exec",
            "resume",
            "T9",
            "-m",
            "m2",
            "--json",
            "-"
        ]
    );
}

#[tokio::test]
async fn server_flags_win_over_once_only_parameters() {
    let s = start(Options {
        args: &["--", "-C", "/", "--ephemeral", "-c", "k=v"],
        env: &[],
    })
    .await;
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\nargv\ndone", "cd": "/no/such/dir", "ephemeral": true, "model": "m"}),
        )
        .await;
    let t = text(&r);
    let argv = format!(
        "{}",
        json!([
            fake_codex(),
            "exec",
            "-C",
            "/",
            "--ephemeral",
            "-c",
            "k=v",
            "-m",
            "m",
            "--json",
            "-"
        ])
    );
    assert_eq!(
        t,
        format!(
            "{argv}\n\n{TRAILER}\n\nignored, because this server's own command line already sets the flag and codex takes it only once:\n\
             cd=\"/no/such/dir\"; this server runs with -C /\n\
             ephemeral=true; this server runs with --ephemeral"
        )
    );
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        structured(&r).expect("structured content")["ignoredParameters"],
        json!([
            {"name": "cd", "value": "/no/such/dir", "serverValue": "/"},
            {"name": "ephemeral", "value": true, "serverValue": true}
        ])
    );
    // codex-reply passes its flags after `resume`, where codex takes them again.
    let r = s
        .call(
            "codex-reply",
            json!({"thread_id": "T2", "prompt": "thread\nargv\ndone", "ephemeral": true}),
        )
        .await;
    let sc = structured(&r).expect("structured content");
    assert!(sc.get("ignoredParameters").is_none());
    let argv: Vec<String> =
        serde_json::from_str(sc["content"].as_str().expect("content")).expect("argv as JSON");
    assert_eq!(argv.iter().filter(|a| *a == "--ephemeral").count(), 2);
}

#[tokio::test]
async fn results_success_failure_and_no_message() {
    let s = start(Options::default()).await;
    // The prompt arrives on stdin, the env is merged, codex runs in the server's directory.
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\nsay first\nenv FAKE_VAR\ndone", "env": {"FAKE_VAR": "from-call"}}),
        )
        .await;
    assert_eq!(text(&r), format!("from-call\n\n{TRAILER}"));
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        structured(&r),
        Some(json!({"threadId": "T1", "content": "from-call"}))
    );
    let r = s
        .call("codex", json!({"prompt": "thread T1\nprompt\ndone"}))
        .await;
    assert_eq!(
        structured(&r).expect("structured")["content"],
        "thread T1\nprompt\ndone"
    );
    let r = s
        .call("codex", json!({"prompt": "thread T1\nenv PATH"}))
        .await;
    assert_eq!(
        structured(&r).expect("structured")["content"],
        std::env::var("PATH").unwrap_or_else(|_| "<unset>".into())
    );

    // turn.failed at exit 0 is a failure, with codex's error.
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\nerror quota exceeded\nfail quota exceeded\nstderr oops"}),
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    let argv = format!("['{}', 'exec', '--json', '-']", fake_codex());
    assert_eq!(
        text(&r),
        format!("[ERROR] quota exceeded\n\nreturncode=0\n\nerrors:\nquota exceeded\n\n[codex] thread_id=T1 status=failed\n\nstderr:\noops\n\n\nargv: {argv}")
    );
    assert_eq!(
        structured(&r),
        Some(json!({"threadId": "T1", "content": ""}))
    );

    // A non-zero exit.
    let r = s
        .call("codex", json!({"prompt": "thread T1\nsay half\nexit 3"}))
        .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        text(&r),
        format!("[ERROR] codex failed\n\nreturncode=3\n\n[codex] thread_id=T1 status=UNKNOWN\n\nlast agent message:\nhalf\n\nargv: {argv}")
    );

    // Exit 0 without a message.
    let r = s.call("codex", json!({"prompt": "thread T1\ndone"})).await;
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        text(&r),
        format!("[WARNING] codex exited successfully but produced no agent message.\n\n{TRAILER}\n\nargv: {argv}")
    );
    let r = s
        .call("codex", json!({"prompt": "error Reconnecting... 1/5"}))
        .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).starts_with(
        "[ERROR] codex exited successfully but produced no agent message.\n\nerrors:\nReconnecting... 1/5\n\n[codex] thread_id=UNKNOWN status=UNKNOWN"
    ));
    assert_eq!(structured(&r), None);
    let r = s.call("codex", json!({"prompt": "raw not an event"})).await;
    assert_eq!(
        text(&r),
        format!("[WARNING] codex exited successfully but produced no agent message.\n\nstdout:\nnot an event\n\n\nargv: {argv}")
    );
}

#[tokio::test]
async fn a_missing_codex_binary_is_a_launch_failure() {
    let s = start(Options {
        args: &[],
        env: &[("CODEX_CMD", "/no/such/codex")],
    })
    .await;
    let r = s.call("codex", json!({"prompt": "hello"})).await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.starts_with("[ERROR] failed to launch codex binary: ")
            && t.contains("(check $CODEX_CMD)"),
        "{t}"
    );
    assert!(
        t.ends_with("argv: ['/no/such/codex', 'exec', '--json', '-']"),
        "{t}"
    );
    assert!(!t.contains("returncode="), "{t}");
    assert_eq!(structured(&r), None);
}

/// A malformed line and an unknown method get JSON-RPC errors (or are skipped); the server
/// goes on serving. Spoken raw, without the rmcp client.
#[tokio::test]
async fn malformed_lines_and_unknown_methods_do_not_stop_the_server() {
    let mut child = tokio::process::Command::new(REAPER)
        .arg("mcp")
        .env("CODEX_CMD", fake_codex())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("reaper mcp starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let send = |v: String| {
        let mut line = v.into_bytes();
        line.push(b'\n');
        line
    };
    for msg in [
        send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
            .to_string(),
        ),
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()),
        send("{this is not json".into()),
        send(json!({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}).to_string()),
        send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string()),
    ] {
        stdin.write_all(&msg).await.expect("write");
    }
    let mut seen = Vec::new();
    while !seen.iter().any(|v: &Value| v["id"] == 3) {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer within 10 s")
            .expect("read")
            .expect("the server is still there");
        seen.push(serde_json::from_str(&line).expect("the server writes JSON"));
    }
    let unknown = seen
        .iter()
        .find(|v| v["id"] == 2)
        .expect("an answer to id 2");
    assert_eq!(unknown["error"]["code"], -32601);
    let list = seen
        .iter()
        .find(|v| v["id"] == 3)
        .expect("an answer to id 3");
    assert_eq!(list["result"]["tools"][0]["name"], "codex");
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("exits after stdin closes")
        .expect("wait");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn bad_default_timeouts_are_refused_at_startup() {
    for (var, value) in [
        ("REAPER_TIMEOUT", "10"),
        ("REAPER_TIMEOUT", "abc"),
        ("CODEX_CLI_MCP_SLIM_TIMEOUT", "3601"),
    ] {
        let out = tokio::process::Command::new(REAPER)
            .arg("mcp")
            .env_remove("REAPER_TIMEOUT")
            .env_remove("CODEX_CLI_MCP_SLIM_TIMEOUT")
            .env(var, value)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .expect("reaper mcp runs");
        assert_eq!(out.status.code(), Some(125), "{var}={value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "{var}=\"{value}\" is not a whole number of seconds from 30 to 3600"
            )),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "stdout is the JSON-RPC channel");
    }
}
