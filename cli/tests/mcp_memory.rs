//! `reaper mcp` keeps its memory flat however much codex prints. In a test binary of its own
//! so its CPU-heavy stream does not skew the timing checks of the lifecycle tests.

mod mcp_support;

use mcp_support::*;
use serde_json::json;

/// How long the tree may take to die after the moment it must.
const SLACK: std::time::Duration = std::time::Duration::from_secs(1);

fn server_cgroup(s: &Server) -> String {
    cgroup_of(s.pid()).unwrap_or_default()
}

/// 200 MiB of output: the server's peak memory stays within a few MiB of its size before.
#[tokio::test]
async fn memory_stays_flat_for_200_mib_of_output() {
    let s = start(Options::default()).await;
    let r = s
        .call("codex", json!({"prompt": "thread T0\nsay warm\ndone"}))
        .await;
    assert_eq!(r.is_error, Some(false));
    let kib = |field: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", s.pid()))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .expect("a memory figure")
    };
    let before = kib("VmHWM:");
    let r = s
        .call(
            "codex",
            json!({"prompt": "thread T1\nbulk 200\nsay big\ndone"}),
        )
        .await;
    assert_eq!(
        structured(&r),
        Some(json!({"threadId": "T1", "content": "big"}))
    );
    let after = kib("VmHWM:");
    assert!(
        after.saturating_sub(before) < 8 * 1024,
        "peak RSS grew from {before} KiB to {after} KiB"
    );
    assert_nothing_left(&s.recorded(), &server_cgroup(&s), SLACK).await;
}
