//! The MCP face: `tools/list` (input and output schemas) and `tools/call` for `codex` and
//! `codex-reply`, each call validated, queued for one of `--max-concurrent` slots, run
//! contained, reported on with progress notifications, and cancellable. A call whose request
//! declares the tasks extension runs as a task (`tasks/get`, `tasks/cancel`, `tasks/update`;
//! see [`super::tasks`]); its run is the same.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult,
    GetTaskParams, GetTaskResult, Implementation, JsonObject, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;

use super::argv::{self, Ignored, ServerFlags};
use super::call::{self, CallSpec};
use super::gate::{self, Budget};
use super::params::{self, Params, ToolKind, SANDBOX_MODES};
use super::progress::{Progress, Status};
use super::result::{error_result, Ending, Report};
use super::stream::{EventStream, Tail};
use super::tasks::{self, End, Tasks};

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
    /// What tasks may hold.
    pub tasks: tasks::TaskBounds,
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
    tasks: Arc<Tasks>,
}

/// Counts a call as live for as long as it exists.
struct LiveCall(watch::Sender<usize>);

impl Drop for LiveCall {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A call whose arguments passed every check, ready to run.
struct Checked {
    id: u64,
    tool: ToolKind,
    params: Params,
    argv: Vec<String>,
    ignored: Vec<Ignored>,
    /// What names the call to its client: the request's id, and the task's for a task.
    request_id: String,
}

/// What a call came to.
struct Answer {
    result: CallToolResult,
    /// Stopped by its cancellation (a task's then ends `cancelled`).
    cancelled: bool,
}

/// How often finished tasks past their retention are dropped when nothing else asks.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

impl CodexServer {
    /// `shutdown`, once cancelled, stops every call's tree and ends each call at once;
    /// `budget` is the transport's (see [`super::gate`]). Starts the tasks' sweeper, so it
    /// runs inside the runtime.
    pub fn new(cfg: Config, budget: Arc<Budget>, shutdown: CancellationToken) -> Self {
        let tools = tools(&cfg.flags, cfg.default_timeout);
        let (live, _) = watch::channel(0);
        let tasks = Tasks::new(cfg.tasks);
        tokio::spawn({
            let tasks = Arc::downgrade(&tasks);
            let shutdown = shutdown.clone();
            async move {
                let mut every = tokio::time::interval(SWEEP_EVERY);
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = every.tick() => {}
                    }
                    match tasks.upgrade() {
                        Some(t) => t.sweep_now(),
                        None => return,
                    }
                }
            }
        });
        CodexServer(Arc::new(Inner {
            slots: Arc::new(Semaphore::new(cfg.max_concurrent)),
            budget,
            cfg,
            shutdown,
            live,
            tools,
            next_id: AtomicU64::new(1),
            tasks,
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
    ) -> CallToolResponse {
        // The extension's rule: a task only for a request that declares it, whatever the
        // client declared before.
        let wants_task = ctx
            .meta
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        let weight = req.arguments.as_ref().map_or(0, gate::args_weight);
        let mut call = match self.check(req, ctx.id.to_string()).await {
            Ok(c) => c,
            Err(r) => return r.into(),
        };
        if wants_task {
            let cancel = CancellationToken::new();
            match self.0.tasks.create(weight, cancel.clone()) {
                Some(task) => {
                    tracing::info!(call = call.id, task = %task.id, "runs as a task");
                    call.request_id = format!("{} (task {})", call.request_id, task.id);
                    let progress =
                        Progress::for_task(task.status.clone(), self.0.cfg.progress_interval);
                    self.spawn_task(task.id.clone(), call, cancel, progress);
                    return CallToolResponse::Task(CreateTaskResult::new(task.task));
                }
                None => tracing::info!(
                    call = call.id,
                    "runs as a plain call: the live tasks are at their bound"
                ),
            }
        }
        let target = ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t));
        let progress = Progress::new(target, self.0.cfg.progress_interval);
        self.run(call, &ctx.ct, progress).await.result.into()
    }

    /// Runs a task's call in the background and records how it ended.
    fn spawn_task(&self, id: String, call: Checked, cancel: CancellationToken, progress: Progress) {
        let server = self.clone();
        tokio::spawn(async move {
            // In a task of its own, so that a bug that panics still ends the task.
            let run = tokio::spawn({
                let server = server.clone();
                async move { server.run(call, &cancel, progress).await }
            });
            let end = match run.await {
                Ok(Answer {
                    result,
                    cancelled: true,
                }) => End::Cancelled(super::result::text_of(&result)),
                Ok(a) => End::Completed(a.result),
                Err(e) => End::Completed(internal_error(&e)),
            };
            server.0.tasks.finish(&id, end);
        });
    }

    /// Checks a call's arguments and builds its argv: an `Err` is the call's whole answer.
    async fn check(
        &self,
        req: CallToolRequestParams,
        request_id: String,
    ) -> Result<Checked, CallToolResult> {
        let cfg = &self.0.cfg;
        let Some(tool) = ToolKind::from_name(&req.name) else {
            return Err(error_result(&format!("unknown tool: {}", req.name)));
        };
        // The raw arguments go as soon as they are checked: a queued call holds its prompt
        // once, not twice.
        let validated = params::validate(tool, &req.arguments.unwrap_or_default());
        let checked = match validated {
            Ok(p) => check_more_off_thread(p, !cfg.flags.overrides(tool, "cd")).await,
            Err(m) => Err(m),
        };
        let params = match checked {
            Ok(p) => p,
            Err(m) => return Err(error_result(&format!("input validation: {m}"))),
        };
        let argv = argv::build(&cfg.codex_cmd, &cfg.flags, tool, &params);
        let ignored = argv::ignored(&cfg.flags, tool, &params);
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        if !ignored.is_empty() {
            let names: Vec<&str> = ignored.iter().map(|i| i.name).collect();
            tracing::warn!(
                call = id,
                "per-call parameters ignored (the server's own flags set them): {}",
                names.join(", ")
            );
        }
        Ok(Checked {
            id,
            tool,
            params,
            argv,
            ignored,
            request_id,
        })
    }

    /// Waits for a slot, runs the call, and builds its result. `cancel` is the client's
    /// cancellation of this call (`notifications/cancelled`, or `tasks/cancel` for a task).
    async fn run(
        &self,
        call: Checked,
        cancel: &CancellationToken,
        mut progress: Progress,
    ) -> Answer {
        let inner = &self.0;
        let cfg = &inner.cfg;
        let Checked {
            id,
            tool,
            params: p,
            argv,
            ignored,
            request_id,
        } = call;
        inner.live.send_modify(|n| *n += 1);
        let _live = LiveCall(inner.live.clone());

        let ending_before_start = |ending: Ending| Answer {
            cancelled: matches!(ending, Ending::Cancelled { .. }),
            result: Report {
                stream: &EventStream::default(),
                stderr: &Tail::default(),
                argv: &argv,
                ending: &ending,
                ignored: &ignored,
                survivors: &[],
                escapees: &[],
            }
            .into_result(),
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
                let queued = |slots: &Semaphore| Status::Queued {
                    running: cfg.max_concurrent - slots.available_permits(),
                    limit: cfg.max_concurrent,
                };
                progress.publish(queued(&inner.slots));
                if inner.budget.output_has_room() {
                    tracing::info!(call = id, "queued: all {} slots busy", cfg.max_concurrent);
                } else {
                    tracing::info!(call = id, "queued: the client has not read earlier results");
                }
                // Heartbeats while it waits: a call queued for minutes still says so.
                let mut tick = progress.ticker();
                if let Some(t) = tick.as_mut() {
                    // The first tick is now, and the status just went out.
                    t.reset();
                }
                let acquire = async {
                    // Results the client has not read yet hold new runs back: a client
                    // that stops reading stops codex from being started for it.
                    inner.budget.output_room().await;
                    inner.slots.clone().acquire_owned().await
                };
                tokio::pin!(acquire);
                loop {
                    // Cancel and shutdown first: a slot freed at the same moment must not
                    // start codex for a call that is already over.
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => {
                            progress.close(&inner.shutdown).await;
                            return ending_before_start(Ending::Cancelled { returncode: None });
                        }
                        _ = inner.shutdown.cancelled() => {
                            progress.close(&inner.shutdown).await;
                            return ending_before_start(Ending::Shutdown { returncode: None });
                        }
                        p = &mut acquire => match p {
                            Ok(p) => break p,
                            // Only a closed semaphore fails, and this one is never closed.
                            Err(_) => {
                                progress.close(&inner.shutdown).await;
                                return ending_before_start(Ending::NotContained(
                                    "no call slot".into(),
                                ));
                            }
                        },
                        _ = async {
                            match tick.as_mut() {
                                Some(t) => { t.tick().await; }
                                None => std::future::pending().await,
                            }
                        } => progress.publish(queued(&inner.slots)),
                    }
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
            request_id,
            argv: argv.clone(),
            prompt: p.prompt,
            env: p.env,
            timeout: cfg.timeout_unit.saturating_mul(timeout_secs as u32),
            timeout_secs,
            grace: cfg.grace,
            contain: cfg.contain.clone(),
        };
        let done = call::run(spec, cancel, &inner.shutdown, &mut progress).await;
        drop(permit);
        progress.close(&inner.shutdown).await;
        Answer {
            cancelled: matches!(done.ending, Ending::Cancelled { .. }),
            result: Report {
                stream: &done.stream,
                stderr: &done.stderr,
                argv: &argv,
                ending: &done.ending,
                ignored: &ignored,
                survivors: &done.survivors,
                escapees: &done.escapees,
            }
            .into_result(),
        }
    }
}

/// The answer to a call that failed inside reaper (a panic).
fn internal_error(e: &tokio::task::JoinError) -> CallToolResult {
    tracing::error!("a call failed inside reaper: {e}");
    error_result(&format!(
        "reaper mcp failed internally ({e}); please report this with the server's log"
    ))
}

impl ServerHandler for CodexServer {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_tasks()
            .build();
        let mut info = ServerConfig::new(caps);
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
        match tokio::spawn(async move { server.call(request, context).await }).await {
            Ok(r) => Ok(r),
            Err(e) => Ok(internal_error(&e).into()),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.0.tasks.get(&request.task_id).map(GetTaskResult::new)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tracing::info!(task = %request.task_id, "tasks/cancel");
        self.0.tasks.cancel(&request.task_id)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.0.tasks.update(&request.task_id)
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
