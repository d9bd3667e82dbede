//! The MCP resource `reaper://calls`: an agent sees its own running calls as `reaper ps` does —
//! one per running call, with the client's request id, the call's leader (codex) and its
//! processes.

mod mcp_support;

use std::time::Duration;

use mcp_support::{alive, start, Options};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use serde_json::{json, Value};

async fn calls(s: &mcp_support::Server) -> Vec<Value> {
    let r = s
        .client
        .read_resource(ReadResourceRequestParams::new("reaper://calls"))
        .await
        .expect("resources/read succeeds");
    let Some(ResourceContents::TextResourceContents {
        text, mime_type, ..
    }) = r.contents.first()
    else {
        panic!("not one text content: {r:?}");
    };
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    serde_json::from_str(text).expect("the calls are a JSON array")
}

#[tokio::test]
async fn the_calls_resource_lists_each_running_call_with_its_processes() {
    let s = start(Options::default()).await;
    let listed = s
        .client
        .list_resources(None)
        .await
        .expect("resources/list succeeds");
    assert!(
        listed.resources.iter().any(|r| r.uri == "reaper://calls"),
        "{listed:?}"
    );
    assert!(calls(&s).await.is_empty(), "no call runs yet");

    let one = s
        .start_call("codex", json!({"prompt": "thread T1\nchild\nhang"}))
        .await;
    let two = s
        .start_call("codex", json!({"prompt": "thread T2\nhang"}))
        .await;
    let child = s.wait_for_role("child").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s.recorded().iter().filter(|p| p.role == "codex").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "two codex processes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let codex: Vec<i32> = s
        .recorded()
        .iter()
        .filter(|p| p.role == "codex")
        .map(|p| p.pid)
        .collect();
    let running = calls(&s).await;
    assert_eq!(running.len(), 2, "{running:#?}");
    for (handle, processes) in [(&one, 2), (&two, 1)] {
        let request = handle.id.to_string();
        let call = running
            .iter()
            .find(|c| c["record"]["request_id"] == request.as_str())
            .unwrap_or_else(|| panic!("no call for request {request}: {running:#?}"));
        assert_eq!(call["state"], "running");
        assert_eq!(call["process_count"], processes, "{call:#}");
        let leader = call["record"]["leader_pid"].as_i64().unwrap_or(0) as i32;
        assert!(codex.contains(&leader), "the leader is a codex: {call:#}");
        let pids: Vec<i64> = call["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .filter_map(|p| p["pid"].as_i64())
            .collect();
        assert!(pids.contains(&i64::from(leader)));
        if processes == 2 {
            assert!(pids.contains(&i64::from(child.pid)), "{pids:?}");
        }
    }
    assert!(alive(&child));
    one.cancel(Some("done".into())).await.expect("cancel sent");
    two.cancel(Some("done".into())).await.expect("cancel sent");
    let left = mcp_support::wait_all_dead(&s.recorded(), Duration::from_secs(10)).await;
    assert!(left.is_empty(), "survivors: {left:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !calls(&s).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the calls are still listed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
