//! An agent's shell tool: runs one shell command with a timeout, returns what it printed and
//! how it ended — and leaves nothing behind, whatever the command started.
//!
//! ```text
//! cargo run --example harness -- 2 'setsid sh -c "trap \"\" TERM; sleep 600" & echo started; sleep 600'
//! ```
//!
//! prints `started`, and after 2 s the outcome: stopped by the timeout, the shell, its sleep and
//! the grandchild that left its session and ignored SIGTERM all killed, no survivors.

use std::process::ExitCode;
use std::time::Duration;

use reaper::{Command, Stdio};
use tokio::io::AsyncReadExt;

/// What the tool returns to the model: bounded, so a flood cannot fill the context.
const MAX_OUTPUT: usize = 64 * 1024;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(secs), Some(script)) = (args.next(), args.next()) else {
        eprintln!("usage: harness SECONDS 'SHELL COMMAND'");
        return ExitCode::from(2);
    };
    let Ok(secs) = secs.parse::<f64>() else {
        eprintln!("harness: {secs:?} is not a number of seconds");
        return ExitCode::from(2);
    };
    let timeout = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);

    let mut child = match Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::Null)
        .stdout(Stdio::Piped)
        .stderr(Stdio::Piped)
        .timeout(timeout)
        .grace(Duration::from_millis(500))
        .spawn()
        .await
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    eprintln!(
        "harness: running in {} containment",
        child.backend().map_or("no", |b| b.as_str())
    );

    // Read both pipes while the run goes on; the tree's last writer may be a grandchild, so
    // the pipes end only when the whole tree is gone — which `wait` guarantees.
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let read_out = async move { read_bounded(stdout.as_mut()).await };
    let read_err = async move { read_bounded(stderr.as_mut()).await };
    let (outcome, out, err) = tokio::join!(child.wait(), read_out, read_err);

    print!("{}", String::from_utf8_lossy(&out));
    eprint!("{}", String::from_utf8_lossy(&err));
    println!(
        "--- {:?} after {:?}: {} killed, {} survived, {} had left the cgroup{}",
        outcome.stop_reason,
        outcome.duration,
        outcome.killed,
        outcome.survivors.len(),
        outcome.escapees.len(),
        outcome
            .error
            .as_ref()
            .map(|e| format!("; {e}"))
            .unwrap_or_default()
    );
    ExitCode::from(outcome.exit_code(false))
}

/// Everything the pipe gives until EOF, keeping the first [`MAX_OUTPUT`] bytes.
async fn read_bounded(pipe: Option<&mut (impl AsyncReadExt + Unpin)>) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(pipe) = pipe else { return kept };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}
