//! An agent's tool call, the way an embedder writes it: spawn a command contained, and return.
//!
//! `reaper-embed PIDFILE [HOW]` runs a shell whose grandchild leaves its session and ignores
//! SIGTERM, waits until both wrote their pids to PIDFILE (one per line, with the run's cgroup
//! on a third line when there is one), then ends as HOW says: `drop` (the default) drops the
//! `Child` and returns from `main` at once; `exit` calls `std::process::exit` with the `Child`
//! alive; `forget` `mem::forget`s the `Child`, then calls `std::process::exit`.

use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let pidfile = args.next().ok_or("usage: reaper-embed PIDFILE [drop|exit|forget]")?;
    let how = args.next().unwrap_or_else(|| "drop".into());
    let script = r#"echo $$ >> "$1"; setsid sh -c 'trap "" TERM; echo $$ >> "$1"; exec sleep 600' sh "$1" & wait"#;
    let child = reaper::Command::new("sh")
        .args(["-c", script, "sh", &pidfile])
        .spawn()
        .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&pidfile)?.lines().count() < 2 {
        if std::time::Instant::now() > deadline {
            return Err("the tree did not start within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if let Some(cg) = child.cgroup() {
        std::fs::write(
            &pidfile,
            format!("{}{}\n", std::fs::read_to_string(&pidfile)?, cg.display()),
        )?;
    }
    match how.as_str() {
        "exit" => std::process::exit(0),
        "forget" => {
            std::mem::forget(child);
            std::process::exit(0)
        }
        _ => drop(child),
    }
    Ok(())
}
