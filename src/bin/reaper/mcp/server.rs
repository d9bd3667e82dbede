//! The MCP face: `tools/list` (input and output schemas) and `tools/call` for `codex` and
//! `codex-reply`, each call validated, queued for one of `--max-concurrent` slots, run
//! contained, reported on with progress notifications, and cancellable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;

use super::argv::{self, ServerFlags};
use super::call::{self, CallSpec};
use super::gate::Budget;
use super::params::{self, ToolKind, SANDBOX_MODES};
use super::progress::{Progress, Status};
use super::result::{error_result, Ending, Report};
use super::stream::{EventStream, Tail};

/// Everything the server is started with.
#[derive(Debug, Clone)]
pub struct Config {
    /// `$CODEX_CMD`, or `codex`.
    pub codex_cmd: String,
    /// The `codex exec` flags after `reaper mcp --`.
    pub flags: ServerFlags,
    /// `timeout_seconds` when a call gives none.
    pub default_timeout: u64,
    /// How long one second of `timeout_seconds` lasts: 1 s, except in reaper's own tests.
    pub timeout_unit: Duration,
    pub grace: Duration,
    pub progress_interval: Duration,
    pub max_concurrent: usize,
    pub contain: reaper::ContainOptions,
}

/// The server. Cheap to clone: rmcp shares one per session.
#[derive(Clone)]
pub struct CodexServer(Arc<Inner>);

struct Inner {
    cfg: Config,
    slots: Arc<Semaphore>,
    /// What the client has not read yet: a call does not start codex while it is full.
    budget: Arc<Budget>,
    shutdown: CancellationToken,
    /// Calls in flight (validated, queued or running); the server waits for none at exit.
    live: watch::Sender<usize>,
    tools: Vec<Tool>,
    next_id: AtomicU64,
}

/// Counts a call as live for as long as it exists.
struct LiveCall(watch::Sender<usize>);

impl Drop for LiveCall {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl CodexServer {
    /// `shutdown`, once cancelled, stops every call's tree and ends each call at once;
    /// `budget` is the transport's (see [`super::gate`]).
    pub fn new(cfg: Config, budget: Arc<Budget>, shutdown: CancellationToken) -> Self {
        let tools = tools(&cfg.flags, cfg.default_timeout);
        let (live, _) = watch::channel(0);
        CodexServer(Arc::new(Inner {
            slots: Arc::new(Semaphore::new(cfg.max_concurrent)),
            budget,
            cfg,
            shutdown,
            live,
            tools,
            next_id: AtomicU64::new(1),
        }))
    }

    /// The number of calls in flight, to wait for at shutdown.
    pub fn live_calls(&self) -> watch::Receiver<usize> {
        self.0.live.subscribe()
    }

    async fn call(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> rmcp::model::CallToolResult {
        let inner = &self.0;
        let cfg = &inner.cfg;
        let Some(tool) = ToolKind::from_name(&req.name) else {
            return error_result(&format!("unknown tool: {}", req.name));
        };
        // The raw arguments go as soon as they are checked: a queued call holds its prompt
        // once, not twice.
        let validated = params::validate(tool, &req.arguments.unwrap_or_default());
        let checked = match validated {
            Ok(p) => check_more_off_thread(p, !cfg.flags.overrides(tool, "cd")).await,
            Err(m) => Err(m),
        };
        let p = match checked {
            Ok(p) => p,
            Err(m) => return error_result(&format!("input validation: {m}")),
        };
        let argv = argv::build(&cfg.codex_cmd, &cfg.flags, tool, &p);
        let ignored = argv::ignored(&cfg.flags, tool, &p);
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        if !ignored.is_empty() {
            let names: Vec<&str> = ignored.iter().map(|i| i.name).collect();
            tracing::warn!(
                call = id,
                "per-call parameters ignored (the server's own flags set them): {}",
                names.join(", ")
            );
        }
        inner.live.send_modify(|n| *n += 1);
        let _live = LiveCall(inner.live.clone());
        let target = ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t));
        let mut progress = Progress::new(target, cfg.progress_interval);

        let ending_before_start = |ending: Ending| {
            Report {
                stream: &EventStream::default(),
                stderr: &Tail::default(),
                argv: &argv,
                ending: &ending,
                ignored: &ignored,
                survivors: &[],
                escapees: &[],
            }
            .into_result()
        };
        if inner.shutdown.is_cancelled() {
            return ending_before_start(Ending::Shutdown { returncode: None });
        }
        let free = if inner.budget.output_has_room() {
            inner.slots.clone().try_acquire_owned().ok()
        } else {
            None
        };
        let permit = match free {
            Some(p) => p,
            None => {
                progress.publish(Status::Queued {
                    running: cfg.max_concurrent - inner.slots.available_permits(),
                    limit: cfg.max_concurrent,
                });
                if inner.budget.output_has_room() {
                    tracing::info!(call = id, "queued: all {} slots busy", cfg.max_concurrent);
                } else {
                    tracing::info!(call = id, "queued: the client has not read earlier results");
                }
                // Cancel and shutdown first: a slot freed at the same moment must not start codex
                // for a call that is already over.
                tokio::select! {
                    biased;
                    _ = ctx.ct.cancelled() => {
                        progress.close(&inner.shutdown).await;
                        return ending_before_start(Ending::Cancelled { returncode: None });
                    }
                    _ = inner.shutdown.cancelled() => {
                        progress.close(&inner.shutdown).await;
                        return ending_before_start(Ending::Shutdown { returncode: None });
                    }
                    p = async {
                        // Results the client has not read yet hold new runs back: a client
                        // that stops reading stops codex from being started for it.
                        inner.budget.output_room().await;
                        inner.slots.clone().acquire_owned().await
                    } => match p {
                        Ok(p) => p,
                        // Only a closed semaphore fails, and this one is never closed.
                        Err(_) => {
                            progress.close(&inner.shutdown).await;
                            return ending_before_start(Ending::NotContained("no call slot".into()));
                        }
                    },
                }
            }
        };
        let timeout_secs = p.timeout_seconds.unwrap_or(cfg.default_timeout);
        tracing::info!(
            call = id,
            tool = tool.name(),
            "exec {argv:?} (timeout={timeout_secs}s, prompt={} chars)",
            p.prompt.chars().count()
        );
        let spec = CallSpec {
            id,
            request_id: ctx.id.to_string(),
            argv: argv.clone(),
            prompt: p.prompt,
            env: p.env,
            timeout: cfg.timeout_unit.saturating_mul(timeout_secs as u32),
            timeout_secs,
            grace: cfg.grace,
            contain: cfg.contain.clone(),
        };
        let done = call::run(spec, &ctx.ct, &inner.shutdown, &mut progress).await;
        drop(permit);
        progress.close(&inner.shutdown).await;
        Report {
            stream: &done.stream,
            stderr: &done.stderr,
            argv: &argv,
            ending: &done.ending,
            ignored: &ignored,
            survivors: &done.survivors,
            escapees: &done.escapees,
        }
        .into_result()
    }
}

impl ServerHandler for CodexServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        );
        info.server_info = Implementation::new("reaper", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.0.tools.clone()))
    }

    /// `reaper://calls` ([`super::calls`]).
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            super::calls::resource(),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        super::calls::read(&request.uri).map(Into::into)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A call runs as a task of its own, so that a bug in reaper that panics answers the
        // client with an error instead of leaving it waiting forever.
        let server = self.clone();
        let result = match tokio::spawn(async move { server.call(request, context).await }).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("a call failed inside reaper: {e}");
                error_result(&format!(
                    "reaper mcp failed internally ({e}); please report this with the server's log"
                ))
            }
        };
        Ok(result.into())
    }
}

/// The two tools, as `codex-cli-mcp-slim` describes them, plus `outputSchema`. A parameter the
/// server's own flags already set says so in its description (for `codex`; `codex-reply`
/// passes its flags after `resume`, where codex takes them).
pub fn tools(flags: &ServerFlags, default_timeout: u64) -> Vec<Tool> {
    let common = common_props(default_timeout);
    let prop = |name: &str| common.get(name).cloned().unwrap_or(Value::Null);
    let mut codex = serde_json::Map::new();
    codex.insert("prompt".into(), prop("prompt"));
    codex.insert(
        "cd".into(),
        json!({
            "type": "string",
            "description": "Pass -C <DIR>: the working directory codex runs in. Defaults to this server's own working directory."
        }),
    );
    codex.insert("model".into(), prop("model"));
    codex.insert("config".into(), prop("config"));
    codex.insert(
        "sandbox".into(),
        json!({
            "type": "string",
            "enum": SANDBOX_MODES,
            "description": "Pass --sandbox <MODE>: read-only, workspace-write or danger-full-access. Overrides sandbox_mode from config.toml; network access still follows the [sandbox_workspace_write] section there."
        }),
    );
    codex.insert(
        "add_dir".into(),
        json!({
            "type": "array",
            "items": {"type": "string"},
            "description": "Extra writable directories. Each entry maps to a separate codex --add-dir flag (repeatable, not comma-joined)."
        }),
    );
    codex.insert(
        "profile".into(),
        json!({
            "type": "string",
            "description": "Pass -p <PROFILE>: the config.toml profile to load."
        }),
    );
    for name in [
        "ephemeral",
        "skip_git_repo_check",
        "extra_args",
        "env",
        "timeout_seconds",
    ] {
        codex.insert(name.into(), prop(name));
    }
    for (param, setting) in flags.settings() {
        if let Some(desc) = codex.get_mut(param).and_then(|p| p.get_mut("description")) {
            let text = desc.as_str().unwrap_or_default();
            *desc = Value::String(format!(
                "{text} This server's own command line already sets {}, so a value passed here is ignored.",
                setting.written
            ));
        }
    }
    let mut reply = serde_json::Map::new();
    reply.insert(
        "thread_id".into(),
        json!({
            "type": "string",
            "minLength": 1,
            "description": "The thread to continue: the thread_id from a previous result's [codex] line. Maps to codex exec resume <THREAD_ID>."
        }),
    );
    for name in ToolKind::Reply.params().iter().skip(1) {
        reply.insert((*name).into(), prop(name));
    }
    vec![
        tool(
            "codex",
            "Run a single non-interactive Codex session (`codex exec`) with the given prompt and return its final message. codex is an agentic coding assistant that reads and, depending on the sandbox, edits files inside the working directory. Forward-compatible: unknown CLI flags can be passed via `extra_args`. The codex binary path is configurable via $CODEX_CMD.",
            codex,
            ToolKind::Codex,
        ),
        tool(
            "codex-reply",
            "Continue a previous Codex session (`codex exec resume <THREAD_ID>`) with a follow-up prompt and return the new final message. Only the flags `codex exec resume` accepts are exposed; the working directory and sandbox come from the current configuration (this server's own flags and config.toml), not from the original session.",
            reply,
            ToolKind::Reply,
        ),
    ]
}

fn tool(name: &'static str, description: &'static str, props: JsonObject, kind: ToolKind) -> Tool {
    let input = json!({
        "type": "object",
        "properties": props,
        "required": kind.required(),
    });
    let output = json!({
        "type": "object",
        "properties": {
            "threadId": {"type": "string"},
            "content": {"type": "string"}
        },
        "required": ["threadId", "content"],
    });
    let obj = |v: Value| Arc::new(v.as_object().cloned().unwrap_or_default());
    Tool::new(name, description, obj(input)).with_raw_output_schema(obj(output))
}

fn common_props(default_timeout: u64) -> JsonObject {
    let v = json!({
        "prompt": {
            "type": "string",
            "minLength": 1,
            "description": "Prompt sent verbatim to codex on stdin. codex runs its full agentic loop and this server returns the final agent message."
        },
        "model": {
            "type": "string",
            "description": "Pass -m <MODEL>: the model slug for this call, overriding config.toml."
        },
        "config": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Configuration overrides as key=value strings, one per element. Each entry maps to a separate codex -c flag (for example \"model_reasoning_effort=high\"). Values are parsed as TOML by codex, so quote strings that are not bare words."
        },
        "ephemeral": {
            "type": "boolean",
            "description": "Pass --ephemeral: do not persist the session's rollout file to disk."
        },
        "skip_git_repo_check": {
            "type": "boolean",
            "description": "Pass --skip-git-repo-check: allow running in a directory that is not inside a git repository. Without it codex refuses such a working directory."
        },
        "extra_args": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Raw CLI flags appended verbatim (one token per element). Use to reach new or uncommon codex exec flags without updating this server. Do not pass --json or a prompt: the server adds both."
        },
        "env": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Extra environment variables for the codex subprocess."
        },
        "timeout_seconds": {
            "type": "integer",
            "minimum": params::MIN_TIMEOUT,
            "maximum": params::MAX_TIMEOUT,
            "description": format!("Hard wall-clock timeout for the codex subprocess in seconds (default {default_timeout}).")
        }
    });
    v.as_object().cloned().unwrap_or_default()
}

/// How long the `cd` check may take before the call is refused.
const CD_CHECK_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `check_more` stats the `cd` directory, which blocks on a hung network mount: it runs on a
/// blocking thread with a limit, never on the runtime thread that every call, timeout and the
/// shutdown share. Without a `cd` to stat it only looks at strings, and runs inline: the hop to
/// a blocking thread and back was two wake-ups per call, a measurable part of a short call on a
/// busy machine (docs/BENCHMARKS.md).
async fn check_more_off_thread(p: params::Params, cd_used: bool) -> Result<params::Params, String> {
    if !cd_used || p.cd.as_deref().is_none_or(str::is_empty) {
        return params::check_more(&p, cd_used).map(|()| p);
    }
    // Moved there and back rather than cloned: the prompt may be megabytes.
    let check = tokio::task::spawn_blocking(move || params::check_more(&p, cd_used).map(|()| p));
    match tokio::time::timeout(CD_CHECK_LIMIT, check).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("cannot check the parameters: {e}")),
        Err(_) => Err(format!(
            "`cd` did not answer within {}s (a hung mount?)",
            CD_CHECK_LIMIT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(t: &Tool) -> Value {
        Value::Object((*t.input_schema).clone())
    }

    #[test]
    fn schemas_list_the_contract_parameters_in_order() {
        let tools = tools(&ServerFlags::default(), 1800);
        assert_eq!(tools.len(), 2);
        for (t, kind) in tools.iter().zip([ToolKind::Codex, ToolKind::Reply]) {
            assert_eq!(t.name, kind.name());
            let s = schema(t);
            let props = s["properties"].as_object().unwrap();
            let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
            let mut want = kind.params().to_vec();
            names.sort_unstable();
            want.sort_unstable();
            assert_eq!(names, want);
            assert_eq!(s["required"], json!(kind.required()));
            let out = Value::Object((**t.output_schema.as_ref().unwrap()).clone());
            assert_eq!(out["required"], json!(["threadId", "content"]));
        }
        let s = schema(&tools[0]);
        assert_eq!(
            s["properties"]["timeout_seconds"],
            json!({"type": "integer", "minimum": 30, "maximum": 3600,
                   "description": "Hard wall-clock timeout for the codex subprocess in seconds (default 1800)."})
        );
        assert_eq!(
            s["properties"]["sandbox"]["enum"],
            json!(["read-only", "workspace-write", "danger-full-access"])
        );
    }

    #[test]
    fn server_flags_are_named_in_the_codex_schema_only() {
        let flags = ServerFlags::parse(vec!["-C".into(), "/srv".into(), "--ephemeral".into()]);
        let tools = tools(&flags, 60);
        let codex = schema(&tools[0]);
        assert_eq!(
            codex["properties"]["cd"]["description"],
            "Pass -C <DIR>: the working directory codex runs in. Defaults to this server's own working directory. This server's own command line already sets -C /srv, so a value passed here is ignored."
        );
        assert!(codex["properties"]["ephemeral"]["description"]
            .as_str()
            .unwrap()
            .ends_with(" This server's own command line already sets --ephemeral, so a value passed here is ignored."));
        assert!(!codex["properties"]["model"]["description"]
            .as_str()
            .unwrap()
            .contains("already sets"));
        let reply = schema(&tools[1]);
        assert!(!reply["properties"]["ephemeral"]["description"]
            .as_str()
            .unwrap()
            .contains("already sets"));
    }
}
