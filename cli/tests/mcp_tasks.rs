//! `reaper mcp`'s tasks (the `io.modelcontextprotocol/tasks` extension): a call whose request
//! declares the extension comes back as a task at once; `tasks/get` tells how it goes and
//! then carries exactly what the plain call returns; `tasks/cancel` stops it as a cancel does;
//! its timeout, the shutdown and the bounds on what is kept hold as for calls. Every test
//! that runs codex checks that each process fake-codex started is dead and its cgroup gone.

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities,
    CreateTaskResult, ErrorCode, GetTaskParams, GetTaskResult, RequestMetaObject, TaskPayload,
    TaskStatus,
};
use rmcp::ServiceError;
use serde_json::{json, Value};

/// How long the tree may take to die after the moment it must (as in mcp_lifecycle.rs).
const SLACK: Duration = Duration::from_secs(3);

fn server_cgroup(s: &Server) -> String {
    cgroup_of(s.pid()).unwrap_or_default()
}

/// The per-request `_meta` that declares the tasks extension.
fn declaring_tasks() -> RequestMetaObject {
    let mut m = RequestMetaObject::new();
    m.set_client_capabilities(ClientCapabilities::builder().enable_tasks().build());
    m
}

/// `tools/call` declaring the extension: the server's answer, task or result.
async fn call_declaring_tasks(s: &Server, tool: &str, arguments: Value) -> CallToolResponse {
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments));
    params.meta = Some(declaring_tasks());
    tokio::time::timeout(Duration::from_secs(10), s.client.call_tool_once(params))
        .await
        .expect("an answer within 10 s")
        .expect("the call succeeds at the protocol level")
}

async fn create_task(s: &Server, tool: &str, arguments: Value) -> CreateTaskResult {
    match call_declaring_tasks(s, tool, arguments).await {
        CallToolResponse::Task(t) => t,
        other => panic!("not a task: {other:?}"),
    }
}

async fn get(s: &Server, id: &str) -> Result<GetTaskResult, ServiceError> {
    let mut params = GetTaskParams::new(id);
    params.meta = Some(declaring_tasks());
    s.client.get_task(params).await
}

async fn cancel(s: &Server, id: &str) {
    let mut params = CancelTaskParams::new(id);
    params.meta = Some(declaring_tasks());
    s.client
        .cancel_task(params)
        .await
        .expect("tasks/cancel is acknowledged");
}

/// Polls `tasks/get` until the task is over (bounded).
async fn wait_over(s: &Server, id: &str, limit: Duration) -> GetTaskResult {
    let deadline = Instant::now() + limit;
    loop {
        let t = get(s, id).await.expect("tasks/get answers");
        if t.task.status().is_terminal() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "task still {:?}",
            t.task.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn completed(t: &GetTaskResult) -> Value {
    match &t.task.payload {
        TaskPayload::Completed { result } => Value::Object(result.clone()),
        other => panic!("not completed: {other:?}"),
    }
}

/// Waits until fake-codex recorded `n` processes of `role`.
async fn wait_for_roles(s: &Server, role: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.recorded().iter().filter(|p| p.role == role).count() < n {
        assert!(Instant::now() < deadline, "fewer than {n} {role} recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server advertises the extension; the task's result is the plain call's, byte for
/// byte, for `codex` (with an error result too) and `codex-reply`.
#[tokio::test]
async fn a_task_carries_exactly_what_the_plain_call_returns() {
    let s = start(Options::default()).await;
    let caps = s
        .client
        .peer_info()
        .map(|i| i.capabilities.clone())
        .expect("server info");
    assert!(caps.supports_tasks(), "{caps:?}");
    for (tool, arguments) in [
        (
            "codex",
            json!({"prompt": "thread T1\nitem command_execution\nsay hi\ndone"}),
        ),
        ("codex", json!({"prompt": "thread T2\nfail boom\nexit 1"})),
        (
            "codex-reply",
            json!({"thread_id": "T1", "prompt": "thread\nsay again\ndone"}),
        ),
    ] {
        let plain = serde_json::to_value(s.call(tool, arguments.clone()).await).expect("json");
        let task = create_task(&s, tool, arguments).await;
        assert_eq!(task.task.status, TaskStatus::Working);
        assert_eq!(task.task.poll_interval_ms, Some(1000));
        let over = wait_over(&s, &task.task.task_id, Duration::from_secs(20)).await;
        assert_eq!(over.task.status(), TaskStatus::Completed);
        // This client speaks 2025-11-25, where a plain result has no `resultType`; the
        // task's is the 2026-07-28 one, which has it.
        let mut got = completed(&over);
        assert_eq!(got["resultType"], "complete");
        if let Some(m) = got.as_object_mut() {
            m.remove("resultType");
        }
        assert_eq!(got, plain, "{tool}");
        assert!(
            over.task.task.ttl_ms.is_some_and(|t| t >= 600_000),
            "kept 10 min after its end: {:?}",
            over.task.task.ttl_ms
        );
    }
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// `tasks/get` while it runs says what progress says: the running time, the processes, the
/// last item; and `queued` while it waits for a slot.
#[tokio::test]
async fn tasks_get_tells_what_progress_tells() {
    let s = start(Options {
        args: &["--max-concurrent", "1", "--progress-interval", "100ms"],
        env: &[],
    })
    .await;
    let first = create_task(
        &s,
        "codex",
        json!({"prompt": "thread T1\nchild\nitem command_execution\nsleep 3\nsay one\ndone"}),
    )
    .await;
    let second = create_task(&s, "codex", json!({"prompt": "thread T2\nsay two\ndone"})).await;
    let message = |t: GetTaskResult| t.task.task.status_message.unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = message(get(&s, &first.task.task_id).await.expect("known"));
        if m.contains("· 2 processes · last: command_execution") {
            assert!(m.starts_with("codex running for "), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "{m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let m = message(get(&s, &second.task.task_id).await.expect("known"));
    assert_eq!(m, "queued: 1 of 1 calls running, waiting for a free slot");
    for (t, want) in [(first, "one"), (second, "two")] {
        let over = wait_over(&s, &t.task.task_id, Duration::from_secs(20)).await;
        assert_eq!(completed(&over)["structuredContent"]["content"], want);
    }
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// `tasks/cancel` of a task whose codex ignores SIGINT and left a setsid'd grandchild that
/// ignores INT/TERM/HUP: SIGINT, the grace, then the whole tree is killed; the task ends
/// `cancelled` within grace + 1 s carrying what codex printed, and nothing is left.
#[tokio::test]
async fn tasks_cancel_kills_the_whole_tree_within_the_grace() {
    let s = start(Options {
        args: &["--grace", "1s"],
        env: &[],
    })
    .await;
    let task = create_task(
        &s,
        "codex",
        json!({"prompt": "thread C1\nsay partial\nescapee\nignore-signals\nhang"}),
    )
    .await;
    let id = task.task.task_id;
    s.wait_for_role("escapee").await;
    // The escapee really runs, in a session of its own.
    let procs = s.recorded();
    let escapee = procs.iter().find(|p| p.role == "escapee").expect("escapee");
    assert!(alive(escapee));
    let t0 = Instant::now();
    cancel(&s, &id).await;
    let over = wait_over(&s, &id, Duration::from_secs(10)).await;
    let took = t0.elapsed();
    assert_eq!(over.task.status(), TaskStatus::Cancelled);
    assert!(
        took < Duration::from_secs(2),
        "cancelled after {took:?}, over grace + 1 s"
    );
    let text = over.task.task.status_message.unwrap_or_default();
    assert!(
        text.starts_with("[ERROR] cancelled by the client"),
        "{text}"
    );
    assert!(text.contains("[codex] thread_id=C1"), "{text}");
    assert!(text.contains("last agent message:\npartial"), "{text}");
    // The tree was dead before the task said so: nothing to wait for.
    assert_eq!(survivors(&procs), []);
    assert_nothing_left(&procs, &server_cgroup(&s), SLACK).await;
    // Cancelling again is acknowledged; the task stays as it ended.
    cancel(&s, &id).await;
    assert_eq!(
        get(&s, &id).await.expect("kept").task.status(),
        TaskStatus::Cancelled
    );
}

/// A task that is still queued when cancelled never starts codex.
#[tokio::test]
async fn a_queued_task_cancelled_never_runs() {
    let s = start(Options {
        args: &["--max-concurrent", "1", "--grace", "1s"],
        env: &[],
    })
    .await;
    let running = create_task(&s, "codex", json!({"prompt": "thread R\nhang"})).await;
    s.wait_for_role("codex").await;
    let queued = create_task(&s, "codex", json!({"prompt": "thread Q\nsay no\ndone"})).await;
    cancel(&s, &queued.task.task_id).await;
    let over = wait_over(&s, &queued.task.task_id, Duration::from_secs(10)).await;
    assert_eq!(over.task.status(), TaskStatus::Cancelled);
    assert_eq!(s.recorded().len(), 1, "the queued call started codex");
    cancel(&s, &running.task.task_id).await;
    let over = wait_over(&s, &running.task.task_id, Duration::from_secs(10)).await;
    assert_eq!(over.task.status(), TaskStatus::Cancelled);
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// A task's timeout is the call's: the same result, and the whole tree killed.
#[tokio::test]
async fn a_task_times_out_as_a_call_does() {
    // 30 "seconds" of 20 ms: 0.6 s.
    let s = start(Options {
        args: &["--test-timeout-unit", "20ms", "--grace", "300ms"],
        env: &[],
    })
    .await;
    let task = create_task(
        &s,
        "codex",
        json!({"prompt": "thread T1\nescapee\nignore-signals\nhang", "timeout_seconds": 30}),
    )
    .await;
    let over = wait_over(&s, &task.task.task_id, Duration::from_secs(20)).await;
    let r = completed(&over);
    assert_eq!(r["isError"], true);
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("[ERROR] timeout after 30s"), "{text}");
    assert_eq!(r["structuredContent"]["threadId"], "T1");
    let procs = s.recorded();
    assert!(procs.iter().any(|p| p.role == "escapee"));
    assert_nothing_left(&procs, &server_cgroup(&s), SLACK).await;
}

/// stdin EOF and SIGTERM stop every running task's tree, and the server exits.
#[tokio::test]
async fn shutdown_kills_every_running_task() {
    for how in ["stdin EOF", "SIGTERM"] {
        let s = start(Options::default()).await;
        for n in 0..2 {
            create_task(
                &s,
                "codex",
                json!({"prompt": format!("thread T{n}\nescapee\nignore-signals\nhang")}),
            )
            .await;
        }
        wait_for_roles(&s, "escapee", 2).await;
        let procs = s.recorded();
        let cgroup = server_cgroup(&s);
        let pid = s.pid();
        let Server {
            mut child, client, ..
        } = s;
        let t0 = Instant::now();
        match how {
            // Cancelling the client service closes its transport: the server's stdin ends.
            "stdin EOF" => {
                let _ = client.cancel().await;
            }
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our live child.
            _ => unsafe {
                libc::kill(pid, libc::SIGTERM);
            },
        }
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .expect("the server exits")
            .expect("wait");
        let took = t0.elapsed();
        let left = survivors(&procs);
        kill_recorded(&left);
        assert!(took < SLACK, "{how}: exit took {took:?}");
        assert!(status.code().is_some(), "{how}: {status:?}");
        assert_eq!(left, [], "{how}");
        assert_nothing_left(&procs, &cgroup, SLACK).await;
    }
}

/// A client that does not declare the extension on its request gets the plain result, and
/// its `tasks/*` requests are refused with -32021, as the extension says.
#[tokio::test]
async fn a_plain_client_gets_plain_results() {
    let s = start(Options::default()).await;
    let r = s
        .call("codex", json!({"prompt": "thread P\nsay plain\ndone"}))
        .await;
    assert_eq!(
        structured(&r),
        Some(json!({"threadId": "P", "content": "plain"}))
    );
    let err = s
        .client
        .get_task(GetTaskParams::new("anything"))
        .await
        .expect_err("refused");
    let ServiceError::McpError(e) = err else {
        panic!("not a protocol error: {err:?}");
    };
    assert_eq!(e.code.0, -32021, "{e:?}");
    // A declaring client gets -32602 for an id that is no task.
    let ServiceError::McpError(e) = get(&s, "no-such-task").await.expect_err("unknown") else {
        panic!("not a protocol error");
    };
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
    assert!(e.message.contains("Task not found"), "{e:?}");
    // Invalid arguments are answered at once, as a result, not a task.
    let CallToolResponse::Complete(r) =
        call_declaring_tasks(&s, "codex", json!({"prompt": ""})).await
    else {
        panic!("a task for invalid arguments");
    };
    assert_eq!(
        text(&r),
        "[ERROR] input validation: `prompt` must not be empty"
    );
}

/// Finished results are kept within `--task-results-max` (the oldest go first, the newest
/// stays) and for `--task-retention`; a dropped task says it expired.
#[tokio::test]
async fn finished_results_are_bounded_in_size_and_time() {
    let s = start(Options {
        args: &["--task-results-max", "1M", "--task-retention", "3s"],
        env: &[],
    })
    .await;
    // Each result holds the 300 KiB answer twice (text and structuredContent): ~600 KiB.
    let mut ids = Vec::new();
    for n in 0..3 {
        let t = create_task(
            &s,
            "codex",
            json!({"prompt": format!("thread B{n}\nsay-kib 300\ndone")}),
        )
        .await;
        // One after the other, so "oldest" is well defined.
        let over = wait_over(&s, &t.task.task_id, Duration::from_secs(20)).await;
        assert_eq!(
            completed(&over)["structuredContent"]["threadId"],
            format!("B{n}")
        );
        ids.push(t.task.task_id);
    }
    for id in &ids[..2] {
        let ServiceError::McpError(e) = get(&s, id).await.expect_err("dropped") else {
            panic!("not a protocol error");
        };
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(
            e.message.contains("Task has expired: newer results"),
            "{e:?}"
        );
    }
    let newest = get(&s, &ids[2]).await.expect("the newest is kept");
    assert_eq!(completed(&newest)["structuredContent"]["threadId"], "B2");
    // Past its retention it goes too (bounded wait: the sweep runs on every request).
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match get(&s, &ids[2]).await {
            Err(ServiceError::McpError(e)) => break e,
            Err(e) => panic!("{e:?}"),
            Ok(_) => {
                assert!(Instant::now() < deadline, "kept past its retention");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(e.message.contains("kept for the retention time"), "{e:?}");
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// Past the live tasks' bound (here their arguments' 8 MiB) a call is answered the plain way,
/// under the transport's back-pressure, and still returns its result.
#[tokio::test]
async fn past_the_live_bound_a_call_runs_plain() {
    let s = start(Options::default()).await;
    // 1000 KiB each: eight fit in 8 MiB, a ninth does not. fake-codex exits before it
    // reaches the padding; the eight run for 5 s, long enough to be live at the ninth.
    let padded = |script: &str| format!("{script}\nexit 0\n{}", "#".repeat(1000 << 10));
    let mut ids = Vec::new();
    for n in 0..8 {
        let t = create_task(
            &s,
            "codex",
            json!({"prompt": padded(&format!("thread L{n}\nsleep 5\nsay {n}\ndone"))}),
        )
        .await;
        ids.push(t.task.task_id);
    }
    let answer = call_declaring_tasks(
        &s,
        "codex",
        json!({"prompt": padded("thread PLAIN\nsay plain\ndone")}),
    )
    .await;
    let CallToolResponse::Complete(r) = answer else {
        panic!("a task past the bound: {answer:?}");
    };
    assert_eq!(structured(&r).expect("structured")["content"], "plain");
    for (n, id) in ids.iter().enumerate() {
        let over = wait_over(&s, id, Duration::from_secs(30)).await;
        assert_eq!(
            completed(&over)["structuredContent"]["content"],
            n.to_string()
        );
    }
    // Room again once they are over.
    let t = create_task(&s, "codex", json!({"prompt": "thread A\nsay again\ndone"})).await;
    wait_over(&s, &t.task.task_id, Duration::from_secs(20)).await;
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}

/// A call run as a task is listed in `reaper://calls` under its request's id and its task's.
#[tokio::test]
async fn a_running_task_is_listed_among_the_calls() {
    use rmcp::model::{ReadResourceRequestParams, ResourceContents};
    let s = start(Options::default()).await;
    let task = create_task(&s, "codex", json!({"prompt": "thread L1\nchild\nhang"})).await;
    let id = task.task.task_id;
    s.wait_for_role("child").await;
    let read = s
        .client
        .read_resource(ReadResourceRequestParams::new("reaper://calls"))
        .await
        .expect("resources/read succeeds");
    let Some(ResourceContents::TextResourceContents { text, .. }) = read.contents.first() else {
        panic!("not one text content: {read:?}");
    };
    let calls: Vec<Value> = serde_json::from_str(text).expect("a JSON array");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let named = calls[0]["record"]["request_id"]
        .as_str()
        .unwrap_or_default();
    assert!(named.ends_with(&format!(" (task {id})")), "{named}");
    assert_eq!(calls[0]["process_count"], 2, "{:#}", calls[0]);
    cancel(&s, &id).await;
    let over = wait_over(&s, &id, Duration::from_secs(10)).await;
    assert_eq!(over.task.status(), TaskStatus::Cancelled);
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}
