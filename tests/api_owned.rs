//! The library's public API in a process that declared every child reaper's
//! (`reaper::own_every_child`): the subreaper backend, which needs it. A test binary of its own,
//! since the declaration is for the whole process.

use std::time::{Duration, Instant};

use reaper::{Command, Containment, Stdio};

/// Dropping the handle kills the setsid'd, TERM-ignoring grandchild within a second on the
/// subreaper backend too: orphans come back to this process, which finds them.
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_child_kills_its_whole_tree_on_the_subreaper_backend() {
    reaper::own_every_child().expect("a child subreaper");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pidfile = dir.path().join("pid");
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 600' & exec sleep 600",
            pidfile.display()
        ))
        .stdin(Stdio::Null)
        .containment(Containment::Subreaper)
        .spawn()
        .await
        .expect("spawns");
    let deadline = Instant::now() + Duration::from_secs(10);
    let gc: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the grandchild never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    drop(child);
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{gc}/stat")).unwrap_or_default();
        let dead = state
            .rsplit_once(')')
            .is_none_or(|(_, r)| r.trim_start().starts_with(['Z', 'X']));
        if dead {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the grandchild outlived the drop"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
