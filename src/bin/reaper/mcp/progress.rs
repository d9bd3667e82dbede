//! Progress notifications for one call: what the call is doing, sent to the client as
//! `notifications/progress` with a rising `progress`, only when the call carried a
//! `progressToken`.
//!
//! The call never waits for a notification: it publishes the latest status into a `watch`
//! channel (so a slow client sees the newest status, not a backlog) and a task of its own
//! sends it, each send bounded by [`SEND_TIMEOUT`]. [`Progress::close`] ends that task before
//! the result goes back, so no notification follows the result.

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
}

impl Status {
    pub fn message(&self) -> String {
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
                    m.push_str(&format!(" · {}", crate::cli::parse::show_size(*now)));
                    if let Some(max) = max {
                        m.push_str(&format!(" of {}", crate::cli::parse::show_size(*max)));
                    }
                    m.push_str(" memory");
                }
                if let Some(l) = last {
                    m.push_str(&format!(" · last: {l}"));
                }
                m
            }
        }
    }
}

/// The progress reporter of one call; inert when the call has no progress token.
pub struct Progress {
    tx: Option<watch::Sender<Option<Status>>>,
    task: Option<JoinHandle<()>>,
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
                interval,
                last_sent: None,
            };
        };
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(send_loop(peer, token, rx));
        Progress {
            tx: Some(tx),
            task: Some(task),
            interval,
            last_sent: None,
        }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Reports `status` (replacing one not yet sent).
    pub fn publish(&mut self, status: Status) {
        if let Some(tx) = &self.tx {
            self.last_sent = Some(Instant::now());
            let _ = tx.send(Some(status));
        }
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
