//! One contained call: codex runs as a [`reaper::Child`] in containment of its own, its prompt is
//! written to its stdin (then closed), its stdout is parsed as it streams, and it ends in one
//! of four ways:
//!
//! - codex exits: the call completes on the leader's exit (its pidfd), plus a short drain
//!   window for output still in the pipes, never on pipe EOF: a descendant left behind can
//!   hold stdout open forever. Whatever is left is then SIGKILLed, and counted.
//! - timeout or cancel: SIGINT to every process (codex interrupts its turn and kills its own
//!   tool process groups), `--grace`, then the whole tree is killed.
//! - the server shuts down: the same with a grace capped at [`SHUTDOWN_GRACE`], so the server
//!   is gone within a second.
//!
//! In every case the tree is empty and its cgroup removed before the result is built.

use std::time::Duration;

use reaper::supervise::{CutShort, Plan, Request, Requests, Step, StopSpec, Target};
use reaper::{ContainOptions, Signal, StopReason};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::progress::{Progress, Status};
use super::result::Ending;
use super::stream::{EventStream, Tail};

/// After codex exits, how long output still in the pipes is read before leftovers are killed.
pub const DRAIN_WINDOW: Duration = Duration::from_millis(250);
/// The grace codex gets after SIGINT when the server itself is going away.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);
/// After the tree is gone, how long the last bytes in the pipes are read.
const FINAL_READ: Duration = Duration::from_millis(100);
const READ_CHUNK: usize = 64 << 10;

/// What one call runs.
pub struct CallSpec {
    /// Names the call in logs.
    pub id: u64,
    /// The client's id of the `tools/call` request, recorded with the call's run.
    pub request_id: String,
    pub argv: Vec<String>,
    pub prompt: String,
    /// Merged over the server's own environment.
    pub env: Vec<(String, String)>,
    /// The wall-clock limit, and the `timeout_seconds` it came from (for the message).
    pub timeout: Duration,
    pub timeout_secs: u64,
    pub grace: Duration,
    pub contain: ContainOptions,
}

/// What a call produced.
pub struct Finished {
    pub stream: EventStream,
    pub stderr: Tail,
    pub ending: Ending,
    pub survivors: Vec<String>,
    /// Processes of the call that had left its cgroup (stopped with the rest).
    pub escapees: Vec<String>,
}

/// A pipe from the child, read until EOF; after EOF or an error it is never ready again.
struct Source<R> {
    pipe: Option<R>,
    buf: Vec<u8>,
}

/// Read buffers of finished calls, for the next: a fresh one per pipe and call is zeroed,
/// and freeing it shrinks the heap (`brk`) only for the next call to grow it again.
static SPARE_BUFFERS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
const SPARE_BUFFERS_MAX: usize = 4;

impl<R: AsyncRead + Unpin> Source<R> {
    fn new(pipe: Option<R>) -> Self {
        let spare = SPARE_BUFFERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        Source {
            pipe,
            buf: spare.unwrap_or_else(|| vec![0; READ_CHUNK]),
        }
    }

    fn open(&self) -> bool {
        self.pipe.is_some()
    }

    /// The next bytes; pends forever once the pipe is done.
    async fn read(&mut self) -> &[u8] {
        let n = match self.pipe.as_mut() {
            Some(p) => p.read(&mut self.buf).await,
            None => std::future::pending().await,
        };
        match n {
            Ok(n) if n > 0 => &self.buf[..n],
            Ok(_) => {
                self.pipe = None;
                &[]
            }
            Err(e) => {
                tracing::debug!("reading codex's output: {e}");
                self.pipe = None;
                &[]
            }
        }
    }
}

impl<R> Drop for Source<R> {
    fn drop(&mut self) {
        let mut spare = SPARE_BUFFERS.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARE_BUFFERS_MAX {
            spare.push(std::mem::take(&mut self.buf));
        }
    }
}

/// How a call is supervised: on a timeout, cancel or shutdown, SIGINT to codex alone and the
/// grace (capped at [`SHUTDOWN_GRACE`] for a shutdown, which also cuts a running grace short);
/// after codex's own exit, its leftovers are killed at once.
pub fn plan(spec: &CallSpec) -> Plan {
    let mut plan = Plan::new(StopSpec {
        first: Some(Signal::INT),
        to: Target::Leader,
        grace: spec.grace,
    });
    plan.timeout = Some(spec.timeout);
    plan.shutdown_grace = SHUTDOWN_GRACE;
    plan.cut_short = CutShort::ByShutdown;
    plan
}

/// Runs one call to its end. `cancel` is the client's cancellation, `shutdown` the server's.
pub async fn run(
    spec: CallSpec,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
    progress: &mut Progress,
) -> Finished {
    let mut stream = EventStream::default();
    let mut stderr = Tail::default();
    let id = spec.id;
    let mut requests = Requests::new();
    requests.on(cancel.clone().cancelled_owned(), Request::Cancel);
    requests.on(shutdown.clone().cancelled_owned(), Request::Shutdown);
    let mut cmd = reaper::Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(reaper::Stdio::Piped)
        .stdout(reaper::Stdio::Piped)
        .stderr(reaper::Stdio::Piped)
        .contain(spec.contain.clone())
        .plan(plan(&spec))
        .requests(requests)
        .request_id(spec.request_id.clone())
        .events(move |t_ms, ev| tracing::debug!(call = id, t_ms, event = ?ev, "run"));
    let mut child = match cmd.spawn().await {
        Ok(c) => c,
        Err(e) => {
            let ending = match e {
                e @ (reaper::Error::NotFound { .. } | reaper::Error::NotExecutable { .. }) => {
                    Ending::LaunchFailed(format!(
                        "failed to launch codex binary: {e} (check $CODEX_CMD)"
                    ))
                }
                // Not a wrong $CODEX_CMD: the call's `env` (or the server's) is too large.
                e @ reaper::Error::TooLarge { .. } => {
                    Ending::LaunchFailed(format!("failed to launch codex binary: {e}"))
                }
                m => Ending::NotContained(format!(
                    "reaper cannot contain this call: {}",
                    crate::advice::start_error(&m)
                )),
            };
            return Finished {
                stream,
                stderr,
                ending,
                survivors: Vec::new(),
                escapees: Vec::new(),
            };
        }
    };
    warn_once(
        child
            .warning()
            .map(|w| crate::advice::fallback(w, child.backend())),
    );
    tracing::debug!(call = id, pid = child.id(), "codex started");
    let started = Instant::now();
    // The child's own pipes, already on the reactor: converting them would deregister and
    // register each again.
    let writer = tokio::spawn(write_prompt(child.stdin.take(), spec.prompt));
    let mut out = Source::new(child.stdout.take());
    let mut err = Source::new(child.stderr.take());
    // Heartbeats: a codex that prints nothing for minutes still reports at the interval.
    let mut tick = progress.ticker();
    let report = |child: &reaper::Child, stream: &EventStream, progress: &mut Progress| {
        progress.publish(Status::Running {
            elapsed: started.elapsed(),
            processes: child.process_count(),
            memory: child
                .memory_now()
                .map(|now| (now, child.limits().memory_max)),
            last: stream.last_item.clone(),
        });
    };

    let step = loop {
        let seen = stream.item_events;
        tokio::select! {
            step = child.step() => break step,
            bytes = out.read() => stream.feed(bytes),
            bytes = err.read() => stderr.push(bytes),
            _ = next_tick(&mut tick) => report(&child, &stream, progress),
        }
        if stream.item_events != seen && progress.item_report_due() {
            report(&child, &stream, progress);
        }
    };

    if step == Step::LeaderExited {
        // Output codex wrote before exiting is still in the pipes; a leftover descendant
        // may hold them open, so read for a short window only.
        let window = tokio::time::sleep(DRAIN_WINDOW);
        tokio::pin!(window);
        while out.open() || err.open() {
            tokio::select! {
                _ = &mut window => break,
                bytes = out.read() => stream.feed(bytes),
                bytes = err.read() => stderr.push(bytes),
            }
        }
    }
    // Keep reading while codex winds down: a full pipe would block its last words. On a
    // timeout, cancel or shutdown: SIGINT to codex alone (it interrupts its turn and kills its
    // own tool process groups); after the grace, the whole cgroup is killed. After its exit:
    // its leftovers are killed at once.
    // Heartbeats go on through the grace, which can be long (`--grace`); not after codex's
    // own exit, when nothing waits.
    let why = stopping(step);
    if step == Step::LeaderExited {
        tick = None;
    }
    let outcome = {
        let stop = child.wait();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                o = &mut stop => break o,
                bytes = out.read() => stream.feed(bytes),
                bytes = err.read() => stderr.push(bytes),
                _ = next_tick(&mut tick) => progress.publish(Status::Stopping {
                    elapsed: started.elapsed(),
                    why,
                }),
            }
        }
    };
    // The tree is gone, so every writer is closed: what is left in the pipes comes at once.
    let last = tokio::time::sleep(FINAL_READ);
    tokio::pin!(last);
    while out.open() || err.open() {
        tokio::select! {
            _ = &mut last => break,
            bytes = out.read() => stream.feed(bytes),
            bytes = err.read() => stderr.push(bytes),
        }
    }
    stream.finish();
    writer.abort();

    let ending = Ending::of(&outcome, spec.timeout_secs);
    let reason = outcome.stop_reason;
    if reason == StopReason::Exited && outcome.killed > 0 {
        tracing::warn!(
            call = id,
            "codex exited and left {} process(es) running; killed them",
            outcome.killed
        );
    } else {
        tracing::info!(
            call = id,
            ?reason,
            killed = outcome.killed,
            ms = outcome.duration.as_millis() as u64,
            "call ended"
        );
    }
    if !outcome.escapees.is_empty() {
        tracing::warn!(
            call = id,
            "{} process(es) of the call had moved out of its cgroup; stopped them too: {}",
            outcome.escapees.len(),
            crate::report::escapee_labels(&outcome.escapees).join(", ")
        );
    }
    if let Some(e) = crate::report::error_text(&outcome) {
        tracing::error!(call = id, "{e}");
    }
    Finished {
        stream,
        stderr,
        ending,
        survivors: crate::report::process_labels(&outcome.survivors),
        escapees: crate::report::escapee_labels(&outcome.escapees),
    }
}

/// The next heartbeat; never, without a ticker.
async fn next_tick(tick: &mut Option<tokio::time::Interval>) {
    match tick.as_mut() {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Why a call is being stopped, as a progress message says it.
fn stopping(step: Step) -> &'static str {
    match step {
        Step::LeaderExited => "codex exited",
        Step::Stop(StopReason::Timeout) => "timeout",
        Step::Stop(StopReason::Cancel) => "cancelled",
        Step::Stop(StopReason::Oom) => "out of memory",
        Step::Stop(_) => "server shutting down",
    }
}

/// Writes the prompt and closes stdin (codex reads stdin to its end before it starts). A codex
/// that exits without reading gives EPIPE, which is not an error of the call.
async fn write_prompt(stdin: Option<tokio::process::ChildStdin>, prompt: String) {
    let Some(mut pipe) = stdin else { return };
    if let Err(e) = pipe.write_all(prompt.as_bytes()).await {
        tracing::debug!("codex did not read its whole prompt: {e}");
    }
    // Dropping `pipe` closes codex's stdin.
}

/// The containment fallback warning, once per server rather than once per call.
fn warn_once(warning: Option<String>) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if let Some(w) = warning {
        WARNED.call_once(|| tracing::warn!("{w}"));
    }
}
