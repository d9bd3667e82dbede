//! Progress for one call: what the call is doing, sent to the client as
//! `notifications/progress` with a rising `progress` when the call carried a `progressToken`,
//! and kept in a [`StatusCell`] that `tasks/get` reads when the call runs as a task.
//!
//! The call never waits for a notification: it publishes the latest status into a `watch`
//! channel (so a slow client sees the newest status, not a backlog) and a task of its own
//! sends it, each send bounded by [`SEND_TIMEOUT`]. [`Progress::close`] ends that task before
//! the result goes back, so no notification follows the result.
//!
//! A status message stays under [`MAX_MESSAGE`] characters: clients cut longer ones, and a
//! heartbeat is worth its length only if it fits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Longest a single notification may take to be written before it is given up.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest [`Progress::close`] waits for a notification being written.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Item events report at most this often (the periodic tick reports regardless).
pub const ITEM_GAP: Duration = Duration::from_secs(1);
/// The longest status message, in characters (clients show about 200).
pub const MAX_MESSAGE: usize = 160;
/// The longest item type a message names: codex's own are under 20 characters.
const MAX_ITEM_NAME: usize = 40;

/// What a call is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Waiting for one of the `--max-concurrent` slots.
    Queued { running: usize, limit: usize },
    Running {
        elapsed: Duration,
        processes: usize,
        /// The call's memory now, and its limit (`--memory-max`), where the run has the memory
        /// controller.
        memory: Option<(u64, Option<u64>)>,
        last: Option<String>,
    },
    /// The call is being stopped: codex has its grace after SIGINT.
    Stopping {
        elapsed: Duration,
        why: &'static str,
    },
}

impl Status {
    pub fn message(&self) -> String {
        let m = self.text();
        match m.char_indices().nth(MAX_MESSAGE) {
            Some((cut, _)) => m[..cut].to_owned(),
            None => m,
        }
    }

    fn text(&self) -> String {
        match self {
            Status::Queued { running, limit } => {
                format!("queued: {running} of {limit} calls running, waiting for a free slot")
            }
            Status::Running {
                elapsed,
                processes,
                memory,
                last,
            } => {
                let mut m = format!(
                    "codex running for {}s · {} {}",
                    elapsed.as_secs(),
                    processes,
                    if *processes == 1 {
                        "process"
                    } else {
                        "processes"
                    }
                );
                if let Some((now, max)) = memory {
                    m.push_str(&format!(" · {}", crate::units::show_size(*now)));
                    if let Some(max) = max {
                        m.push_str(&format!(" of {}", crate::units::show_size(*max)));
                    }
                    m.push_str(" memory");
                }
                if let Some(l) = last {
                    m.push_str(" · last: ");
                    m.extend(l.chars().take(MAX_ITEM_NAME));
                }
                m
            }
            Status::Stopping { elapsed, why } => {
                format!(
                    "codex stopping ({why}) · running for {}s",
                    elapsed.as_secs()
                )
            }
        }
    }

    /// This status `later` after it was sampled: a call's running time goes on.
    fn aged(&self, later: Duration) -> Status {
        let mut s = self.clone();
        if let Status::Running { elapsed, .. } | Status::Stopping { elapsed, .. } = &mut s {
            *elapsed = elapsed.saturating_add(later);
        }
        s
    }
}

/// The live status of a call that runs as a task: what its progress would say, read by
/// `tasks/get` at any time (the running time is current; processes and memory are as of the
/// last sample, at most one progress interval old).
#[derive(Default)]
pub struct StatusCell(Mutex<Option<(Status, Instant)>>);

impl StatusCell {
    fn set(&self, status: Status) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((status, Instant::now()));
    }

    /// The status message now, or `None` before the call reported anything.
    pub fn message(&self) -> Option<String> {
        let cell = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cell.as_ref().map(|(s, at)| s.aged(at.elapsed()).message())
    }
}

/// The progress reporter of one call; inert when the call has no progress token and is no
/// task.
pub struct Progress {
    tx: Option<watch::Sender<Option<Status>>>,
    task: Option<JoinHandle<()>>,
    cell: Option<Arc<StatusCell>>,
    /// How often a running call reports (zero: only on item events).
    pub interval: Duration,
    last_sent: Option<Instant>,
}

impl Progress {
    pub fn new(target: Option<(Peer<RoleServer>, ProgressToken)>, interval: Duration) -> Self {
        let Some((peer, token)) = target else {
            return Progress {
                tx: None,
                task: None,
                cell: None,
                interval,
                last_sent: None,
            };
        };
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(send_loop(peer, token, rx));
        Progress {
            tx: Some(tx),
            task: Some(task),
            cell: None,
            interval,
            last_sent: None,
        }
    }

    /// The reporter of a call that runs as a task: no notifications (the extension has none
    /// for tasks), the status kept in `cell` for `tasks/get`.
    pub fn for_task(cell: Arc<StatusCell>, interval: Duration) -> Self {
        Progress {
            tx: None,
            task: None,
            cell: Some(cell),
            interval,
            last_sent: None,
        }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some() || self.cell.is_some()
    }

    /// Reports `status` (replacing one not yet sent).
    pub fn publish(&mut self, status: Status) {
        if !self.enabled() {
            return;
        }
        self.last_sent = Some(Instant::now());
        if let Some(cell) = &self.cell {
            cell.set(status.clone());
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(Some(status));
        }
    }

    /// A timer for the periodic reports (heartbeats), or `None` when there are none.
    pub fn ticker(&self) -> Option<tokio::time::Interval> {
        (self.enabled() && !self.interval.is_zero()).then(|| {
            let mut t = tokio::time::interval(self.interval);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        })
    }

    /// Whether an item event may report now (at most one per [`ITEM_GAP`]).
    pub fn item_report_due(&self) -> bool {
        self.enabled() && self.last_sent.is_none_or(|t| t.elapsed() >= ITEM_GAP)
    }

    /// Stops reporting: after this returns, no notification of this call is sent. Once
    /// `shutdown` is cancelled it does not wait for a notification being written: a client
    /// that does not read must not hold the server's exit.
    pub async fn close(mut self, shutdown: &CancellationToken) {
        drop(self.tx.take());
        if let Some(mut task) = self.task.take() {
            let sent = tokio::select! {
                r = tokio::time::timeout(CLOSE_TIMEOUT, &mut task) => r.is_ok(),
                _ = shutdown.cancelled() => false,
            };
            if !sent {
                tracing::debug!("a progress notification is stuck; dropping it");
                task.abort();
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn send_loop(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut rx: watch::Receiver<Option<Status>>,
) {
    let mut n = 0.0;
    while rx.changed().await.is_ok() {
        let Some(status) = rx.borrow_and_update().clone() else {
            continue;
        };
        n += 1.0;
        let note = ProgressNotificationParam::new(token.clone(), n).with_message(status.message());
        match tokio::time::timeout(SEND_TIMEOUT, peer.notify_progress(note)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!("progress notification not sent: {e}; no more for this call");
                return;
            }
            Err(_) => tracing::debug!(
                "progress notification not written within {}s; skipping it",
                SEND_TIMEOUT.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        let s = Status::Running {
            elapsed: Duration::from_millis(120_400),
            processes: 7,
            memory: None,
            last: Some("command_execution".into()),
        };
        assert_eq!(
            s.message(),
            "codex running for 120s · 7 processes · last: command_execution"
        );
        let s = Status::Running {
            elapsed: Duration::ZERO,
            processes: 1,
            memory: None,
            last: None,
        };
        assert_eq!(s.message(), "codex running for 0s · 1 process");
        let s = Status::Running {
            elapsed: Duration::from_secs(3),
            processes: 4,
            memory: Some((42 << 20, Some(64 << 20))),
            last: None,
        };
        assert_eq!(
            s.message(),
            "codex running for 3s · 4 processes · 42M of 64M memory"
        );
        let s = Status::Queued {
            running: 8,
            limit: 8,
        };
        assert_eq!(
            s.message(),
            "queued: 8 of 8 calls running, waiting for a free slot"
        );
    }

    #[test]
    fn messages_stay_short_whatever_codex_names_its_items() {
        let worst = [
            Status::Running {
                elapsed: Duration::MAX,
                processes: usize::MAX,
                memory: Some((u64::MAX, Some(u64::MAX))),
                last: Some("x".repeat(10_000)),
            },
            Status::Queued {
                running: usize::MAX,
                limit: usize::MAX,
            },
            Status::Stopping {
                elapsed: Duration::MAX,
                why: "server shutting down",
            },
        ];
        for s in worst {
            // Short as composed: the cut in `message` is only a backstop.
            let m = s.text();
            assert!(m.chars().count() <= MAX_MESSAGE, "{} chars: {m}", m.len());
        }
    }

    #[test]
    fn a_cell_ages_the_running_time() {
        let cell = StatusCell::default();
        assert_eq!(cell.message(), None);
        cell.set(Status::Running {
            elapsed: Duration::from_secs(5),
            processes: 2,
            memory: None,
            last: None,
        });
        let m = cell.message().expect("a message");
        assert!(m.starts_with("codex running for 5s · 2 processes"), "{m}");
        let aged = Status::Running {
            elapsed: Duration::from_secs(5),
            processes: 2,
            memory: None,
            last: None,
        }
        .aged(Duration::from_secs(60));
        assert!(aged.message().starts_with("codex running for 65s"));
    }

    #[tokio::test]
    async fn without_a_token_nothing_is_sent() {
        let mut p = Progress::new(None, Duration::from_secs(1));
        assert!(!p.enabled());
        assert!(!p.item_report_due());
        p.publish(Status::Queued {
            running: 1,
            limit: 1,
        });
        p.close(&CancellationToken::new()).await;
    }
}
