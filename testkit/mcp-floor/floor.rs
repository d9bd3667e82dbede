//! The floor of an MCP call: an rmcp server over stdio with one tool, `codex`, that runs
//! `$CODEX_CMD exec --json -` as a plain child (tokio's `Command`: no containment, no records,
//! no limits, no progress), writes the prompt to its stdin, reads its stdout to the end, and
//! answers with the last `agent_message`. What `reaper mcp` does per call beyond this is
//! reaper's own cost; what this costs over the fake codex run directly is the framework's
//! (JSON-RPC through rmcp, a tokio child's pipes and SIGCHLD) and the process's.

use std::process::Stdio;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone)]
struct Floor {
    codex: String,
}

impl Floor {
    async fn run(&self, prompt: String) -> Result<String, String> {
        let mut child = tokio::process::Command::new(&self.codex)
            .args(["exec", "--json", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.codex))?;
        let mut stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let mut stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let mut stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let write = async move {
            let _ = stdin.write_all(prompt.as_bytes()).await;
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ((), o, e, status) = tokio::join!(
            write,
            stdout.read_to_end(&mut out),
            stderr.read_to_end(&mut err),
            child.wait()
        );
        o.and(e).map_err(|e| format!("reading codex: {e}"))?;
        let status = status.map_err(|e| format!("waiting for codex: {e}"))?;
        if !status.success() {
            return Err(format!("codex: {status}"));
        }
        let last = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["item"]["type"] == "agent_message")
            .filter_map(|v| v["item"]["text"].as_str().map(str::to_owned))
            .next_back();
        Ok(last.unwrap_or_default())
    }
}

impl ServerHandler for Floor {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("mcp-floor", "0");
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({
            "type": "object",
            "properties": {"prompt": {"type": "string"}},
            "required": ["prompt"],
        });
        let Value::Object(schema) = schema else {
            return Err(ErrorData::internal_error("schema", None));
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "codex",
            "Runs $CODEX_CMD exec --json - with the prompt on stdin.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let prompt = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("prompt"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorData::invalid_params("prompt is required", None))?
            .to_owned();
        Ok(match self.run(prompt).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
        }
        .into())
    }
}

fn main() -> std::process::ExitCode {
    let floor = Floor {
        codex: std::env::var("CODEX_CMD").unwrap_or_else(|_| "codex".into()),
    };
    // As `reaper mcp` runs: one thread.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-floor: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // As `reaper mcp` reads and writes: stdio pipes on the reactor, not the blocking pool.
    rt.block_on(async move {
        let (reader, writer) = rmcp::transport::io::stdio_pipes();
        let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(reader, writer);
        match floor.serve(transport).await {
            Ok(running) => {
                let _ = running.waiting().await;
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mcp-floor: no session: {e}");
                std::process::ExitCode::FAILURE
            }
        }
    })
}
