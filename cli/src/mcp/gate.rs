//! Back-pressure on the stdio transport: the server reads the next message only while what it
//! holds for the client stays under a bound, so a client that sends faster than it reads
//! blocks in its own `write` instead of growing the server.
//!
//! What counts, by message and by JSON size: every request from the time it is read until its
//! handler returns (queued, running, or answered), and every message to the client from the
//! time rmcp hands it to the transport until its last byte is in the stdout pipe. A request's
//! ticket rides in its extensions into the handler's context, and a message's ticket in its
//! send future, so both are released by `Drop` however the request ends (answered, cancelled,
//! its answer dropped by rmcp) — nothing has to match ids.
//!
//! Calls already read still run and answer; a call does not start codex while a byte budget's
//! worth of answers waits to be written (`server`), so answers nobody reads stop new runs as
//! well as new reads. What the server holds for a client is then at most [`Bounds::QUEUE`]
//! requests more than `--max-concurrent`, [`Bounds::BYTES`] of them plus one, and
//! [`Bounds::BYTES`] of unread answers plus one per running call.
//!
//! While the bound is reached, nothing is read: pings and `notifications/cancelled` wait in the
//! pipe behind the requests before them, until a result has been written. Once stdin has hung
//! up (the client is gone), reading resumes so the session sees the EOF: at most one pipe's
//! capacity is left to read.

use std::io::Write;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolResult, ClientRequest, GetExtensions, JsonObject, JsonRpcMessage, ServerResult,
    TaskPayload,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How much may be in flight before the server stops reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Requests being handled plus messages not yet written.
    pub messages: usize,
    /// Their JSON size.
    pub bytes: usize,
}

impl Bounds {
    /// Requests read ahead of the running calls (waiting for a slot, or answered and being
    /// written).
    pub const QUEUE: usize = 16;
    /// The JSON size of what is in flight: requests and results are each held a few times
    /// over (parsed, copied into the call, serialized), so this keeps the server within tens
    /// of MiB. A message is read whenever the total is under it, so one message (at most
    /// rmcp's 16 MiB line) may go past it.
    pub const BYTES: usize = 8 << 20;

    /// The bound for a server running `max_concurrent` calls at once.
    pub fn for_slots(max_concurrent: usize) -> Bounds {
        Bounds {
            messages: max_concurrent.saturating_add(Self::QUEUE),
            bytes: Self::BYTES,
        }
    }
}

/// What is in flight, against its limits.
pub struct Budget {
    limits: Bounds,
    used: Mutex<Used>,
    freed: Notify,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Used {
    messages: usize,
    bytes: usize,
    /// The part of `bytes` that is messages to the client not yet written.
    unwritten: usize,
}

/// Which way a ticket's message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// A request from the client, until its handler returns.
    In,
    /// A message to the client, until it is written.
    Out,
}

impl Budget {
    pub fn new(limits: Bounds) -> Arc<Budget> {
        Arc::new(Budget {
            limits,
            used: Mutex::new(Used::default()),
            freed: Notify::new(),
        })
    }

    fn used(&self) -> std::sync::MutexGuard<'_, Used> {
        // The counters stay consistent even if a holder panicked: every update is one step.
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has_room(&self) -> bool {
        let u = *self.used();
        u.messages < self.limits.messages && u.bytes < self.limits.bytes
    }

    /// Whether the client has left less than the byte budget unread.
    pub fn output_has_room(&self) -> bool {
        self.used().unwritten < self.limits.bytes
    }

    /// Returns once there is room for one more message.
    pub async fn room(&self) {
        self.until(Self::has_room).await
    }

    /// Returns once what waits to be written to the client is under the byte budget: a call
    /// waits for it before it starts codex, so results nobody reads stop new runs too.
    pub async fn output_room(&self) {
        self.until(Self::output_has_room).await
    }

    async fn until(&self, ok: impl Fn(&Self) -> bool) {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if ok(self) {
                return;
            }
            freed.await;
        }
    }

    /// Counts a message of `bytes` until the ticket is dropped.
    pub fn take(self: &Arc<Self>, way: Way, bytes: usize) -> Ticket {
        let mut u = self.used();
        u.messages += 1;
        u.bytes = u.bytes.saturating_add(bytes);
        if way == Way::Out {
            u.unwritten = u.unwritten.saturating_add(bytes);
        }
        Ticket {
            budget: self.clone(),
            way,
            bytes,
        }
    }
}

/// One message in flight; dropping it makes room.
pub struct Ticket {
    budget: Arc<Budget>,
    way: Way,
    bytes: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        {
            let mut u = self.budget.used();
            u.messages = u.messages.saturating_sub(1);
            u.bytes = u.bytes.saturating_sub(self.bytes);
            if self.way == Way::Out {
                u.unwritten = u.unwritten.saturating_sub(self.bytes);
            }
        }
        self.budget.freed.notify_waiters();
    }
}

/// A request's ticket, carried in its extensions into the handler's `RequestContext`
/// (extensions must be `Clone`; nothing in the handler path clones them past its end).
#[derive(Clone)]
pub struct Admitted(#[allow(dead_code)] Arc<Ticket>); // held for its `Drop` only

/// A transport that reads only while its [`Budget`] has room.
pub struct Gated<T> {
    inner: T,
    budget: Arc<Budget>,
    /// Cancelled once stdin has hung up: from then on nothing is held back.
    hung_up: CancellationToken,
}

impl<T> Gated<T> {
    pub fn new(inner: T, budget: Arc<Budget>, hung_up: CancellationToken) -> Self {
        Gated {
            inner,
            budget,
            hung_up,
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Gated<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let ticket = self.budget.take(Way::Out, weigh_out(&item));
        let send = self.inner.send(item);
        async move {
            let sent = send.await;
            drop(ticket);
            sent
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        // Cancel-safe: rmcp polls this in a `select!`; waiting holds nothing, and the inner
        // transport keeps a partly read line for the next call.
        tokio::select! {
            biased;
            _ = self.hung_up.cancelled() => {}
            _ = self.budget.room() => {}
        }
        let mut msg = self.inner.receive().await?;
        if let JsonRpcMessage::Request(r) = &mut msg {
            let ticket = self.budget.take(Way::In, weigh_in(&r.request));
            r.request
                .extensions_mut()
                .insert(Admitted(Arc::new(ticket)));
        }
        Some(msg)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

/// About the JSON size of a request: a call's arguments are measured by walking them, which
/// costs a fraction of serializing a prompt of megabytes again; other requests are small.
fn weigh_in(r: &ClientRequest) -> usize {
    match r {
        ClientRequest::CallToolRequest(c) => {
            args_weight(c.params.arguments.as_ref().unwrap_or(&JsonObject::new()))
        }
        other => json_size(other),
    }
}

/// About the JSON size of a call's arguments.
pub fn args_weight(args: &JsonObject) -> usize {
    OVERHEAD
        + args
            .iter()
            .map(|(k, v)| k.len() + value_weight(v))
            .sum::<usize>()
}

/// About the JSON size of a call's result: its text blocks and structured content.
pub fn result_weight(c: &CallToolResult) -> usize {
    let content = c.content.iter().map(|b| match b.as_text() {
        Some(t) => t.text.len(),
        None => json_size(b),
    });
    OVERHEAD + content.sum::<usize>() + c.structured_content.as_ref().map_or(0, value_weight)
}

/// About the JSON size of a message to the client; a result's text blocks and structured
/// content (also a finished task's) are measured by walking them.
fn weigh_out(m: &TxJsonRpcMessage<RoleServer>) -> usize {
    match m {
        JsonRpcMessage::Response(r) => match &r.result {
            ServerResult::CallToolResult(c) => result_weight(c),
            ServerResult::GetTaskResult(t) => {
                OVERHEAD
                    + t.task.task.status_message.as_ref().map_or(0, String::len)
                    + match &t.task.payload {
                        TaskPayload::Completed { result } => {
                            result.iter().map(|(k, v)| k.len() + value_weight(v)).sum()
                        }
                        _ => 0,
                    }
            }
            other => json_size(other),
        },
        other => json_size(other),
    }
}

/// What a message weighs besides its strings.
const OVERHEAD: usize = 256;

/// The bytes of `v`'s strings and keys, plus a few per value: about its JSON size (escapes
/// aside). serde_json limits nesting to 128 levels, so the recursion is bounded.
fn value_weight(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|v| 1 + value_weight(v)).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, v)| k.len() + 4 + value_weight(v))
                .sum::<usize>()
        }
        _ => 8,
    }
}

/// The size of `v` as JSON, without building the text.
fn json_size(v: &impl Serialize) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Serializing a message rmcp itself serializes cannot fail; if it did, it weighs nothing
    // more than its count.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Resolves when the pipe, socket or terminal `fd` has hung up (its writers are all gone),
/// whether or not unread data is left in it; pends forever for anything that cannot hang up
/// (a file, /dev/null: epoll refuses them, and their EOF is read at once anyway).
///
/// poll(2) reports POLLHUP on a pipe's read end once it has no writer, independently of the
/// data still queued, so this sees a client leave while the gate keeps its requests unread.
/// It watches a duplicate of `fd`, registered with the reactor apart from the reader's.
pub async fn hangup(fd: std::os::fd::BorrowedFd<'_>) {
    use rustix::event::{poll, PollFd, PollFlags};
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    let watched = fd.try_clone_to_owned().and_then(|dup| {
        // SAFETY: the duplicate is moved into the `AsyncFd`, which owns it until dropped, so
        // the raw fd stays open and names the same file description for the whole
        // registration.
        Ok(unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }?)
    });
    let watched = match watched {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!("stdin cannot be watched for hangup ({e}); EOF is seen when read");
            return std::future::pending().await;
        }
    };
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // A socket whose peer only shut down its writing side says POLLRDHUP, not POLLHUP.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let gone = PollFlags::HUP | PollFlags::RDHUP;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let gone = PollFlags::HUP;
    loop {
        let Ok(mut ready) = watched.readable().await else {
            return std::future::pending().await;
        };
        let mut fds = [PollFd::new(watched.get_ref(), PollFlags::IN | gone)];
        match poll(&mut fds, Some(&zero)) {
            Ok(_) if fds[0].revents().intersects(gone) => return,
            // Readable because data arrived: wait for the next change.
            Ok(_) | Err(_) => ready.clear_ready(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn room_waits_for_a_ticket_to_drop() {
        let budget = Budget::new(Bounds {
            messages: 2,
            bytes: 100,
        });
        let a = budget.take(Way::In, 10);
        let b = budget.take(Way::Out, 10);
        assert!(!budget.has_room(), "two messages fill a bound of two");
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        waiting.await.expect("room after a drop");
        drop(b);
        assert_eq!(*budget.used(), Used::default());
    }

    #[test]
    fn bytes_close_the_gate_too() {
        let budget = Budget::new(Bounds {
            messages: 10,
            bytes: 100,
        });
        let big = budget.take(Way::In, 150);
        assert!(!budget.has_room());
        assert!(budget.output_has_room(), "a request is not output");
        drop(big);
        assert!(budget.has_room());
        let out = budget.take(Way::Out, 150);
        assert!(!budget.output_has_room());
        drop(out);
        assert!(budget.output_has_room());
    }

    #[test]
    fn json_size_is_the_serialized_length() {
        let v = serde_json::json!({"prompt": "x".repeat(1000), "n": [1, 2]});
        assert_eq!(json_size(&v), serde_json::to_vec(&v).unwrap().len());
    }

    #[test]
    fn weights_follow_the_size_of_prompts_and_results() {
        let prompt = "x".repeat(100_000);
        let args = serde_json::json!({"prompt": prompt, "timeout_seconds": 60});
        let call = rmcp::model::CallToolRequestParams::new("codex")
            .with_arguments(args.as_object().cloned().unwrap());
        let req = ClientRequest::CallToolRequest(rmcp::model::Request::new(call));
        let w = weigh_in(&req);
        assert!((100_000..101_000).contains(&w), "{w}");

        let mut r = rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
            prompt.clone(),
        )]);
        r.structured_content = Some(serde_json::json!({"threadId": "T", "content": prompt}));
        let msg = TxJsonRpcMessage::<RoleServer>::response(
            ServerResult::CallToolResult(r),
            rmcp::model::RequestId::Number(1),
        );
        let w = weigh_out(&msg);
        let exact = json_size(&msg);
        assert!(w.abs_diff(exact) < 1000, "weighed {w}, serialized {exact}");
    }

    #[tokio::test]
    async fn hangup_fires_when_the_writer_closes_with_data_unread() {
        let (r, w) = rustix::pipe::pipe().expect("a pipe");
        rustix::io::write(&w, b"unread").expect("write");
        let watch = tokio::spawn(async move { hangup(std::os::fd::AsFd::as_fd(&r)).await });
        tokio::task::yield_now().await;
        assert!(!watch.is_finished(), "data alone is not a hangup");
        drop(w);
        tokio::time::timeout(std::time::Duration::from_secs(5), watch)
            .await
            .expect("hangup seen")
            .expect("no panic");
    }
}
