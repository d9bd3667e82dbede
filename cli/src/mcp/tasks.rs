//! Tasks (the `io.modelcontextprotocol/tasks` extension, 2026-07-28 schema): a call whose
//! client declared the extension on the request runs in the background, `tools/call` answers
//! with the task at once, and `tasks/get` reports its status and, once it is over, its result.
//!
//! This module keeps the tasks: their ids, their live status, their cancellation, and what
//! they ended with. Bounded on both sides:
//! - live tasks (queued or running): at most [`TaskBounds::live`], and [`TaskBounds::live_bytes`] of
//!   arguments between them; past either, a call is answered the plain way (the server may
//!   always do so), where the transport's back-pressure holds the client back;
//! - finished tasks: kept for [`TaskBounds::retain`] after they end, and [`TaskBounds::finished_bytes`]
//!   of results between them (plus the newest one, however large); past that the oldest go
//!   first. A task that is gone answers `-32602` saying so, as the extension allows.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use rmcp::task_manager::current_timestamp;
use rmcp::ErrorData;
use tokio_util::sync::CancellationToken;

use super::gate;
use super::progress::StatusCell;

/// How much the tasks may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskBounds {
    /// How long a finished task's result stays readable.
    pub retain: Duration,
    /// The size of the finished tasks' results together (about their JSON size).
    pub finished_bytes: usize,
    /// Queued and running tasks at once.
    pub live: usize,
    /// The size of the live tasks' arguments together.
    pub live_bytes: usize,
}

impl TaskBounds {
    pub const RETAIN: Duration = Duration::from_secs(600);
    pub const FINISHED_BYTES: usize = 32 << 20;
    pub const LIVE: usize = 256;
    pub const LIVE_BYTES: usize = 8 << 20;
}

impl Default for TaskBounds {
    fn default() -> Self {
        TaskBounds {
            retain: Self::RETAIN,
            finished_bytes: Self::FINISHED_BYTES,
            live: Self::LIVE,
            live_bytes: Self::LIVE_BYTES,
        }
    }
}

/// How often clients are asked to poll `tasks/get`: a codex run takes minutes.
pub const POLL_INTERVAL_MS: u64 = 1000;
/// How many dropped task ids are remembered, to tell "expired" from "never existed".
const REMEMBERED: usize = 1024;

/// Every task of the server.
pub struct Tasks {
    limits: TaskBounds,
    store: Mutex<Store>,
}

#[derive(Default)]
struct Store {
    entries: HashMap<String, Entry>,
    /// Finished tasks, oldest first: who is dropped first.
    finished: VecDeque<String>,
    finished_bytes: usize,
    live: usize,
    live_bytes: usize,
    /// Ids dropped lately, and why.
    gone: VecDeque<(String, &'static str)>,
}

struct Entry {
    created: Instant,
    created_at: String,
    updated_at: String,
    state: State,
}

enum State {
    Live {
        cancel: CancellationToken,
        status: Arc<StatusCell>,
        weight: usize,
    },
    Over {
        ended: Instant,
        end: End,
        weight: usize,
    },
}

/// How a task ended.
pub enum End {
    /// The call's result, exactly as a plain call returns it.
    Completed(CallToolResult),
    /// Cancelled by `tasks/cancel`: the text the cancelled call's result would have had (what
    /// codex had printed), as the status message.
    Cancelled(String),
}

/// A new task's side: what its run needs.
pub struct Running {
    pub id: String,
    pub status: Arc<StatusCell>,
    /// The seed state for `CreateTaskResult`.
    pub task: Task,
}

impl Tasks {
    pub fn new(limits: TaskBounds) -> Arc<Tasks> {
        Arc::new(Tasks {
            limits,
            store: Mutex::new(Store::default()),
        })
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // Every update keeps the store consistent before the next one starts.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new task for a call with these arguments, or `None` when the live tasks are at their
    /// bound (the call then runs the plain way).
    /// `weight`: about the JSON size of its arguments ([`gate::args_weight`]).
    pub fn create(&self, weight: usize, cancel: CancellationToken) -> Option<Running> {
        let mut store = self.store();
        self.sweep(&mut store);
        if store.live >= self.limits.live
            || store.live_bytes.saturating_add(weight) > self.limits.live_bytes
        {
            return None;
        }
        let id = uuid::Uuid::new_v4().to_string();
        let now = current_timestamp();
        let status = Arc::new(StatusCell::default());
        store.live += 1;
        store.live_bytes += weight;
        store.entries.insert(
            id.clone(),
            Entry {
                created: Instant::now(),
                created_at: now.clone(),
                updated_at: now.clone(),
                state: State::Live {
                    cancel,
                    status: status.clone(),
                    weight,
                },
            },
        );
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_poll_interval_ms(POLL_INTERVAL_MS)
            .with_status_message("starting codex");
        Some(Running { id, status, task })
    }

    /// Records how task `id` ended; its result is kept from now on, within the bounds.
    pub fn finish(&self, id: &str, end: End) {
        let weight = match &end {
            End::Completed(r) => gate::result_weight(r),
            End::Cancelled(text) => text.len(),
        };
        let mut store = self.store();
        let Some(entry) = store.entries.get_mut(id) else {
            return;
        };
        let State::Live { weight: args, .. } = entry.state else {
            return;
        };
        entry.state = State::Over {
            ended: Instant::now(),
            end,
            weight,
        };
        entry.updated_at = current_timestamp();
        store.live -= 1;
        store.live_bytes = store.live_bytes.saturating_sub(args);
        store.finished.push_back(id.to_owned());
        store.finished_bytes = store.finished_bytes.saturating_add(weight);
        self.sweep(&mut store);
    }

    /// `tasks/get`: the task as it is now.
    pub fn get(&self, id: &str) -> Result<DetailedTask, ErrorData> {
        let mut store = self.store();
        self.sweep(&mut store);
        let Some(entry) = store.entries.get(id) else {
            return Err(missing(&store, id, &self.limits));
        };
        let mut task = Task::new(
            id,
            TaskStatus::Working,
            entry.created_at.clone(),
            entry.updated_at.clone(),
        )
        .with_poll_interval_ms(POLL_INTERVAL_MS);
        let payload = match &entry.state {
            State::Live { status, .. } => {
                task.status_message =
                    Some(status.message().unwrap_or_else(|| "starting codex".into()));
                TaskPayload::Working
            }
            State::Over { ended, end, .. } => {
                // Kept until `retain` after its end, counted from its creation.
                let kept = ended.duration_since(entry.created) + self.limits.retain;
                task.ttl_ms = Some(u64::try_from(kept.as_millis()).unwrap_or(u64::MAX));
                match end {
                    End::Completed(r) => TaskPayload::Completed {
                        result: result_object(r),
                    },
                    End::Cancelled(text) => {
                        task.status_message = Some(text.clone());
                        TaskPayload::Cancelled
                    }
                }
            }
        };
        Ok(DetailedTask::new(task, payload))
    }

    /// `tasks/cancel`: asks a live task to stop (its call stops as a cancelled call does); a
    /// finished task stays as it ended.
    pub fn cancel(&self, id: &str) -> Result<(), ErrorData> {
        let mut store = self.store();
        self.sweep(&mut store);
        match store.entries.get(id) {
            Some(Entry {
                state: State::Live { cancel, .. },
                ..
            }) => {
                cancel.cancel();
                Ok(())
            }
            Some(_) => Ok(()),
            None => Err(missing(&store, id, &self.limits)),
        }
    }

    /// `tasks/update`: these tasks never ask for input, so there is nothing to route; an
    /// unknown id is still an error.
    pub fn update(&self, id: &str) -> Result<(), ErrorData> {
        let mut store = self.store();
        self.sweep(&mut store);
        match store.entries.contains_key(id) {
            true => Ok(()),
            false => Err(missing(&store, id, &self.limits)),
        }
    }

    /// Drops what is past its time, then the oldest results while they are over their size
    /// bound (never the newest one).
    pub fn sweep_now(&self) {
        let mut store = self.store();
        self.sweep(&mut store);
    }

    fn sweep(&self, store: &mut Store) {
        while let Some(id) = store.finished.front().cloned() {
            let expired = match store.entries.get(&id) {
                Some(Entry {
                    state: State::Over { ended, .. },
                    ..
                }) => ended.elapsed() >= self.limits.retain,
                _ => true,
            };
            let over =
                store.finished_bytes > self.limits.finished_bytes && store.finished.len() > 1;
            if !expired && !over {
                break;
            }
            store.finished.pop_front();
            if let Some(Entry {
                state: State::Over { weight, .. },
                ..
            }) = store.entries.remove(&id)
            {
                store.finished_bytes = store.finished_bytes.saturating_sub(weight);
            }
            let why = if expired {
                "its result was kept for the retention time after it ended"
            } else {
                "newer results took the room kept for results"
            };
            if store.gone.len() >= REMEMBERED {
                store.gone.pop_front();
            }
            store.gone.push_back((id, why));
        }
    }

    /// What the tasks hold now: live tasks, finished ones, and their results' size.
    #[cfg(test)]
    fn held(&self) -> (usize, usize, usize) {
        let s = self.store();
        (s.live, s.finished.len(), s.finished_bytes)
    }
}

/// `-32602` for an id that is not (or no longer) a task, saying which.
fn missing(store: &Store, id: &str, limits: &TaskBounds) -> ErrorData {
    let gone = store
        .gone
        .iter()
        .find(|(g, _)| g == id)
        .map(|(_, why)| *why);
    let message = match gone {
        Some(why) => format!(
            "Failed to retrieve task: Task has expired: {why} (results are kept {}s after a \
             task ends and {} in all)",
            limits.retain.as_secs(),
            crate::units::show_size(limits.finished_bytes as u64)
        ),
        None => format!("Failed to retrieve task: Task not found: no task has the id {id:?}"),
    };
    ErrorData::invalid_params(message, None)
}

/// A result as the JSON object a completed task carries: what the plain call answers a
/// 2026-07-28 client, `resultType: "complete"` included (clients check the result against
/// that version's `CallToolResult`).
fn result_object(r: &CallToolResult) -> JsonObject {
    let mut m = match serde_json::to_value(r) {
        Ok(serde_json::Value::Object(m)) => m,
        // A CallToolResult always serializes to an object.
        _ => JsonObject::new(),
    };
    m.insert("resultType".into(), "complete".into());
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    fn args(prompt: &str) -> usize {
        let a = serde_json::json!({ "prompt": prompt });
        gate::args_weight(a.as_object().expect("an object"))
    }

    fn result(text: &str) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text.to_owned())])
    }

    fn limits() -> TaskBounds {
        TaskBounds {
            retain: Duration::from_secs(60),
            finished_bytes: 10_000,
            live: 3,
            live_bytes: 5_000,
        }
    }

    #[test]
    fn a_task_is_working_then_carries_its_result() {
        let tasks = Tasks::new(limits());
        let t = tasks
            .create(args("hi"), CancellationToken::new())
            .expect("room");
        assert_eq!(t.task.status, TaskStatus::Working);
        let now = tasks.get(&t.id).expect("known at once");
        assert_eq!(now.status(), TaskStatus::Working);
        assert_eq!(now.task.status_message.as_deref(), Some("starting codex"));
        assert_eq!(now.task.ttl_ms, None, "a live task is never dropped");
        tasks.finish(&t.id, End::Completed(result("done")));
        let over = tasks.get(&t.id).expect("kept");
        let TaskPayload::Completed { result: r } = &over.payload else {
            panic!("not completed: {over:?}");
        };
        assert_eq!(r["content"][0]["text"], "done");
        assert_eq!(r["resultType"], "complete");
        assert!(over.task.ttl_ms.is_some_and(|t| t >= 60_000));
        assert_eq!(tasks.held(), (0, 1, gate::result_weight(&result("done"))));
    }

    #[test]
    fn cancel_reaches_the_run_and_a_cancelled_task_keeps_its_text() {
        let tasks = Tasks::new(limits());
        let cancel = CancellationToken::new();
        let t = tasks.create(args("hi"), cancel.clone()).expect("room");
        tasks.cancel(&t.id).expect("known");
        assert!(cancel.is_cancelled());
        tasks.finish(
            &t.id,
            End::Cancelled("[ERROR] cancelled by the client".into()),
        );
        let over = tasks.get(&t.id).expect("kept");
        assert_eq!(over.status(), TaskStatus::Cancelled);
        assert_eq!(
            over.task.status_message.as_deref(),
            Some("[ERROR] cancelled by the client")
        );
        tasks
            .cancel(&t.id)
            .expect("cancelling a finished task is acknowledged");
    }

    #[test]
    fn live_tasks_are_bounded_by_count_and_by_bytes() {
        let tasks = Tasks::new(limits());
        let a = tasks
            .create(args("a"), CancellationToken::new())
            .expect("1");
        let _b = tasks
            .create(args("b"), CancellationToken::new())
            .expect("2");
        let _c = tasks
            .create(args("c"), CancellationToken::new())
            .expect("3");
        assert!(tasks.create(args("d"), CancellationToken::new()).is_none());
        tasks.finish(&a.id, End::Completed(result("a")));
        assert!(tasks.create(args("d"), CancellationToken::new()).is_some());

        let tasks = Tasks::new(limits());
        assert!(tasks
            .create(args(&"x".repeat(6_000)), CancellationToken::new())
            .is_none());
    }

    #[test]
    fn the_oldest_results_go_first_past_the_size_bound() {
        let tasks = Tasks::new(TaskBounds {
            live: 100,
            ..limits()
        });
        let mut ids = Vec::new();
        for _ in 0..5 {
            let t = tasks
                .create(args("p"), CancellationToken::new())
                .expect("room");
            tasks.finish(&t.id, End::Completed(result(&"r".repeat(3_000))));
            ids.push(t.id);
        }
        let (live, kept, bytes) = tasks.held();
        assert_eq!(
            (live, kept),
            (0, 3),
            "three results of ~3.3 KB fit in 10 KB"
        );
        assert!(bytes <= 10_000);
        for id in &ids[..2] {
            let e = tasks.get(id).expect_err("dropped");
            assert!(
                e.message.contains("Task has expired: newer results"),
                "{e:?}"
            );
        }
        for id in &ids[2..] {
            assert_eq!(tasks.get(id).expect("kept").status(), TaskStatus::Completed);
        }
        let e = tasks.get("nope").expect_err("unknown");
        assert!(e.message.contains("Task not found"), "{e:?}");
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    }

    #[test]
    fn the_newest_result_is_kept_even_when_larger_than_the_bound() {
        let tasks = Tasks::new(limits());
        let t = tasks
            .create(args("p"), CancellationToken::new())
            .expect("room");
        tasks.finish(&t.id, End::Completed(result(&"r".repeat(20_000))));
        assert_eq!(
            tasks.get(&t.id).expect("kept").status(),
            TaskStatus::Completed
        );
    }

    #[test]
    fn results_expire_after_the_retention_time() {
        let tasks = Tasks::new(TaskBounds {
            retain: Duration::ZERO,
            ..limits()
        });
        let t = tasks
            .create(args("p"), CancellationToken::new())
            .expect("room");
        tasks.finish(&t.id, End::Completed(result("r")));
        let e = tasks.get(&t.id).expect_err("expired");
        assert!(e.message.contains("kept for the retention time"), "{e:?}");
        assert_eq!(tasks.held(), (0, 0, 0));
    }
}
