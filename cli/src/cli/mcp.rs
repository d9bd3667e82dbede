//! `reaper mcp`: flags and environment in, the MCP server on stdio, and the shutdown that
//! leaves nothing behind (client gone, SIGTERM, SIGINT, SIGHUP: every call's tree is killed and
//! the server exits within a second).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, ReadBuf};
#[cfg(target_os = "linux")]
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::contain::{ContainArgs, GuardArgs};
use crate::coreutils as parse;
use crate::mcp::argv::ServerFlags;
use crate::mcp::gate::{self, Bounds, Budget, Gated};
use crate::mcp::params::{MAX_TIMEOUT, MIN_TIMEOUT};
use crate::mcp::server::{CodexServer, Config};

/// The default `timeout_seconds` of a call, when neither flag nor environment set one.
const DEFAULT_TIMEOUT: u64 = 1800;
const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(15);
/// From the shutdown request to the exit: the calls' trees are killed within it.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(900);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Register it with an MCP client, e.g. `claude mcp add codex -- reaper mcp`.
Environment: CODEX_CMD (the codex binary, default `codex`), REAPER_TIMEOUT (alias
CODEX_CLI_MCP_SLIM_TIMEOUT), REAPER_PROGRESS_INTERVAL, RUST_LOG (logs go to stderr).")]
pub struct McpArgs {
    /// Default `timeout_seconds` of a call, 30..3600 [env: REAPER_TIMEOUT, or
    /// CODEX_CLI_MCP_SLIM_TIMEOUT; default 1800].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<String>,

    /// After a cancel or a timeout, how long codex gets after SIGINT before the whole tree is
    /// killed.
    #[arg(long, value_parser = parse::duration, default_value = "5s", value_name = "DUR")]
    pub grace: Duration,

    /// How often a running call sends a progress notification, when the client asked for
    /// them (0: only when codex starts or finishes an item) [env: REAPER_PROGRESS_INTERVAL;
    /// default 15s].
    #[arg(long, value_parser = parse::duration, value_name = "DUR")]
    pub progress_interval: Option<Duration>,

    /// How many calls run at once; more wait for a free slot (and say `queued` in progress).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024), value_name = "N")]
    pub max_concurrent: u32,

    /// How long a finished task's result stays readable (`tasks/get`) after the task ended.
    #[arg(long, value_parser = parse::duration, default_value = "10m", value_name = "DUR")]
    pub task_retention: Duration,

    /// The size of the finished tasks' results kept together; past it the oldest are dropped
    /// (the newest is always kept).
    #[arg(long, value_parser = super::parse::size, default_value = "32M", value_name = "SIZE")]
    pub task_results_max: u64,

    /// Test only: how long one second of `timeout_seconds` lasts, so reaper's own tests can
    /// time out a 30 s call in a fraction of that.
    #[arg(long, hide = true, value_parser = parse::duration, default_value = "1s", value_name = "DUR")]
    pub test_timeout_unit: Duration,

    #[command(flatten)]
    pub contain: ContainArgs,

    #[command(flatten)]
    pub guard: GuardArgs,

    /// Flags placed right after `codex exec` on every call (e.g. `-- -c model_reasoning_effort=high
    /// -C /srv/scratch`).
    #[arg(
        last = true,
        allow_hyphen_values = true,
        value_name = "CODEX_EXEC_FLAGS"
    )]
    pub codex_flags: Vec<String>,
}

/// Reads one source of the default timeout.
fn timeout_value(source: &str, text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(t) if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&t) => Ok(t),
        _ => Err(format!(
            "{source}={text:?} is not a whole number of seconds from {MIN_TIMEOUT} to {MAX_TIMEOUT} \
             (it is the default timeout_seconds of a call); fix it or leave it unset"
        )),
    }
}

/// The default timeout: `--timeout`, else `REAPER_TIMEOUT`, else `CODEX_CLI_MCP_SLIM_TIMEOUT`,
/// else 1800. An empty variable counts as unset; a bad value is refused, never ignored.
fn default_timeout(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<u64, String> {
    if let Some(t) = flag {
        return timeout_value("--timeout", t);
    }
    for var in ["REAPER_TIMEOUT", "CODEX_CLI_MCP_SLIM_TIMEOUT"] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            return timeout_value(var, &v);
        }
    }
    Ok(DEFAULT_TIMEOUT)
}

/// `--progress-interval`, else `REAPER_PROGRESS_INTERVAL` (empty counts as unset), else 15 s.
fn progress_interval(
    flag: Option<Duration>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Duration, String> {
    if let Some(d) = flag {
        return Ok(d);
    }
    match env("REAPER_PROGRESS_INTERVAL").filter(|v| !v.is_empty()) {
        Some(v) => parse::duration(&v).map_err(|e| format!("REAPER_PROGRESS_INTERVAL: {e}")),
        None => Ok(DEFAULT_PROGRESS_INTERVAL),
    }
}

fn config(args: McpArgs) -> Result<Config, String> {
    let env = |k: &str| std::env::var(k).ok();
    let default_timeout = default_timeout(args.timeout.as_deref(), env)?;
    let progress_interval = progress_interval(args.progress_interval, env)?;
    let codex_cmd = env("CODEX_CMD")
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "codex".into());
    Ok(Config {
        codex_cmd,
        flags: ServerFlags::parse(args.codex_flags),
        default_timeout,
        timeout_unit: args.test_timeout_unit,
        grace: args.grace,
        progress_interval,
        max_concurrent: args.max_concurrent as usize,
        contain: args.contain.options(&args.guard),
        tasks: crate::mcp::tasks::TaskBounds {
            retain: args.task_retention,
            finished_bytes: usize::try_from(args.task_results_max).unwrap_or(usize::MAX),
            ..Default::default()
        },
    })
}

pub fn main(args: McpArgs) -> u8 {
    let cfg = match config(args) {
        Ok(c) => c,
        Err(e) => {
            say!("reaper mcp: {e}");
            return 125;
        }
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            say!("reaper mcp: cannot start the async runtime: {e}");
            return 125;
        }
    };
    let code = rt.block_on(serve(cfg));
    // A read of a stdin that is not a pipe runs on a blocking thread and cannot be cancelled:
    // do not wait for it.
    rt.shutdown_background();
    code
}

/// Why the server stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The session ended (the client closed it, or it never began).
    Ended,
    /// stdin reached EOF: the client is gone.
    StdinEof,
    Signal(i32),
}

async fn serve(mut cfg: Config) -> u8 {
    // Listen before serving, so a signal in between stops calls instead of killing reaper.
    let Some(mut signals) = super::Signals::new() else {
        say!("reaper mcp: cannot install signal handlers");
        return 125;
    };
    let isolated = match cfg.contain.keep_runs_apart().await {
        Ok(i) => i,
        Err(e) => {
            say!("reaper mcp: {}", crate::advice::contain_error(&e));
            super::guardian_done();
            return 125;
        }
    };
    if !isolated && cfg.max_concurrent > 1 {
        tracing::warn!(
            "calls run one at a time: without a cgroup per call (subreaper backend), stopping \
             one call would stop the others; run `reaper doctor` to see why there is no cgroup, \
             or pass --containment pgid to run calls side by side with that backend's limits"
        );
        cfg.max_concurrent = 1;
    }
    if !cfg.flags.args.is_empty() {
        tracing::info!("server-level codex exec flags: {:?}", cfg.flags.args);
    }
    // A call's orphans reparent to reaper (a subreaper) and die as its children. A cgroup reads
    // empty a moment before its last process is a zombie (cgroup_exit comes before exit_notify
    // in the kernel's do_exit), so the call's own last reap can miss one: reap on every SIGCHLD,
    // calls or no calls, so no zombie waits for the next call.
    #[cfg(target_os = "linux")]
    if let Ok(mut sigchld) = signal(SignalKind::child()) {
        tokio::spawn(async move {
            while sigchld.recv().await.is_some() {
                reaper::reap_exited_children();
            }
        });
    }
    let guardian = cfg.contain.get_guardian().cloned();
    let shutdown = CancellationToken::new();
    let eof = CancellationToken::new();
    // What the client has sent and not been answered, and answers it has not read, are
    // bounded: at the bound the server stops reading stdin (see `mcp::gate`).
    let budget = Budget::new(Bounds::for_slots(cfg.max_concurrent));
    let server = CodexServer::new(cfg, budget.clone(), shutdown.clone());
    let mut live = server.live_calls();
    let (reader, writer) = rmcp::transport::io::stdio_pipes();
    let reader = EofWatch {
        inner: reader,
        eof: eof.clone(),
    };
    // While the gate holds requests back, stdin is not read, so its EOF would go unseen: a
    // hangup of stdin counts as EOF too (and reopens the gate, so rmcp reads to the end).
    let hangup = tokio::spawn({
        let eof = eof.clone();
        async move {
            gate::hangup(rustix::stdio::stdin()).await;
            eof.cancel();
        }
    });
    let transport = Gated::new(
        rmcp::transport::async_rw::AsyncRwTransport::new_server(reader, writer),
        budget,
        eof.clone(),
    );
    let serving = async move {
        match server.serve(transport).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::info!("no MCP session: {e}"),
        }
    };
    tokio::pin!(serving);
    let why = tokio::select! {
        _ = &mut serving => Stop::Ended,
        _ = eof.cancelled() => Stop::StdinEof,
        sig = signals.recv() => Stop::Signal(sig.as_raw()),
    };
    tracing::info!(reason = ?why, "shutting down");
    hangup.abort();
    shutdown.cancel();
    let deadline = tokio::time::Instant::now() + SHUTDOWN_WAIT;
    let calls_done = async {
        let _ = live.wait_for(|n| *n == 0).await;
    };
    let stopped = tokio::time::timeout_at(deadline, calls_done).await.is_ok();
    if !stopped {
        tracing::warn!("{} call(s) still stopping at exit", *live.borrow());
    } else if let Some(g) = &guardian {
        // Every call's cgroup is gone: nothing is left for the guardian to clean up.
        g.done();
    }
    if why == Stop::StdinEof && stopped {
        // rmcp ends the session on EOF by itself, after writing the responses of calls that
        // finish now (those just stopped, quick requests read before the EOF). A client that
        // does not read them does not hold the exit past the deadline.
        if tokio::time::timeout_at(deadline, &mut serving)
            .await
            .is_err()
        {
            tracing::info!("exiting with answers the client has not read");
        }
    }
    match why {
        Stop::Signal(s) => (128 + s) as u8,
        Stop::Ended | Stop::StdinEof => 0,
    }
}

/// Passes stdin through, and says at once when it reaches EOF (rmcp notices too, but then
/// waits for in-flight calls before it ends the session; reaper stops them instead).
struct EofWatch<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofWatch<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                self.eof.cancel()
            }
            Poll::Ready(Err(_)) => self.eof.cancel(),
            _ => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn default_timeout_sources_in_order() {
        assert_eq!(default_timeout(None, env_of(&[])), Ok(1800));
        assert_eq!(
            default_timeout(None, env_of(&[("CODEX_CLI_MCP_SLIM_TIMEOUT", "60")])),
            Ok(60)
        );
        assert_eq!(
            default_timeout(
                None,
                env_of(&[
                    ("REAPER_TIMEOUT", "90"),
                    ("CODEX_CLI_MCP_SLIM_TIMEOUT", "60")
                ])
            ),
            Ok(90)
        );
        assert_eq!(
            default_timeout(Some("30"), env_of(&[("REAPER_TIMEOUT", "bad")])),
            Ok(30)
        );
        assert_eq!(
            default_timeout(
                None,
                env_of(&[
                    ("REAPER_TIMEOUT", ""),
                    ("CODEX_CLI_MCP_SLIM_TIMEOUT", "3600")
                ])
            ),
            Ok(3600)
        );
    }

    #[test]
    fn progress_interval_sources() {
        let secs = Duration::from_secs;
        assert_eq!(progress_interval(None, env_of(&[])), Ok(secs(15)));
        assert_eq!(
            progress_interval(None, env_of(&[("REAPER_PROGRESS_INTERVAL", "")])),
            Ok(secs(15))
        );
        assert_eq!(
            progress_interval(None, env_of(&[("REAPER_PROGRESS_INTERVAL", "2s")])),
            Ok(secs(2))
        );
        assert_eq!(
            progress_interval(Some(secs(1)), env_of(&[("REAPER_PROGRESS_INTERVAL", "x")])),
            Ok(secs(1))
        );
        let e = progress_interval(None, env_of(&[("REAPER_PROGRESS_INTERVAL", "soon")]));
        assert!(e
            .unwrap_err()
            .starts_with("REAPER_PROGRESS_INTERVAL: invalid duration 'soon'"));
    }

    #[test]
    fn bad_default_timeouts_are_refused_by_name() {
        for (flag, env, name) in [
            (Some("29"), vec![], "--timeout=\"29\""),
            (Some("1.5"), vec![], "--timeout=\"1.5\""),
            (
                None,
                vec![("REAPER_TIMEOUT", "3601")],
                "REAPER_TIMEOUT=\"3601\"",
            ),
            (
                None,
                vec![("CODEX_CLI_MCP_SLIM_TIMEOUT", "abc")],
                "CODEX_CLI_MCP_SLIM_TIMEOUT=\"abc\"",
            ),
            (
                None,
                vec![("REAPER_TIMEOUT", "-30")],
                "REAPER_TIMEOUT=\"-30\"",
            ),
        ] {
            let e = default_timeout(flag, env_of(&env)).unwrap_err();
            assert!(e.starts_with(name), "{e}");
            assert!(e.contains("from 30 to 3600"), "{e}");
        }
    }
}
