//! The resource `reaper://calls`: this server's running calls, with what `reaper ps` says of
//! each (id, MCP request id, age, state, leader, processes and their command lines, memory,
//! CPU, limits and whether one was hit, codex's command line), so that an agent can see what
//! its own calls are doing. Read from the calls' run records and their cgroups
//! (`reaper::runs::of_this_process`), as `reaper ps --tree --json` reads them; queued calls
//! have no run yet and are not listed.

use rmcp::model::{ReadResourceResult, Resource, ResourceContents};
use rmcp::ErrorData;

/// The resource's URI.
pub const URI: &str = "reaper://calls";

/// How `resources/list` shows it.
pub fn resource() -> Resource {
    Resource::new(URI, "calls")
        .with_title("This server's running calls")
        .with_description(
            "JSON array, one object per running codex call: id, record (argv, request_id, \
             backend, cgroup, limits, started_unix_ms, timeout_ms), state, age_ms, \
             leader_alive, process_count, processes (pid, ppid, state, cmdline), memory \
             (current_bytes, peak_bytes), cpu_usec, limits_hit. The same fields as \
             `reaper ps --tree --json`.",
        )
        .with_mime_type("application/json")
}

/// `resources/read` of `uri`.
pub fn read(uri: &str) -> Result<ReadResourceResult, ErrorData> {
    if uri != URI {
        return Err(ErrorData::resource_not_found(
            format!("no resource {uri} (this server has {URI})"),
            None,
        ));
    }
    #[cfg(target_os = "linux")]
    let calls = {
        let mut opts = reaper::runs::ListOptions::default();
        opts.processes = true;
        reaper::runs::of_this_process(opts)
    };
    #[cfg(target_os = "linux")]
    let calls = crate::report::runs_json(&calls);
    // Runs are recorded on Linux only.
    #[cfg(not(target_os = "linux"))]
    let calls: [(); 0] = [];
    let text = serde_json::to_string_pretty(&calls)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::TextResourceContents {
            uri: URI.to_owned(),
            mime_type: Some("application/json".to_owned()),
            text,
            meta: None,
        },
    ]))
}
