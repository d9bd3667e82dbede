//! Every run of the library is discoverable, as an embedder's: it has an id its processes
//! carry (`REAPER_RUN_ID`), [`reaper::runs::list`] shows it with its processes, and its record
//! goes with it — at its end, and when the `Child` is dropped.

use std::time::{Duration, Instant};

use reaper::runs::{self, ListOptions, RunState};
use reaper::{Command, Containment, Stdio, StopReason};

fn backends() -> Vec<Containment> {
    let mut b = vec![Containment::Pgid];
    if reaper::host::cgroup_writable() {
        b.push(Containment::Cgroup);
    } else {
        let required = std::env::var("REAPER_REQUIRE")
            .is_ok_and(|r| r.split_whitespace().any(|n| n == "cgroup"));
        assert!(
            !required,
            "no cgroup backend, which REAPER_REQUIRE says this machine has"
        );
        eprintln!("skipped: the cgroup backend here");
    }
    b
}

/// A shell that writes its environment's run id to `file` (the proof it ran), then sleeps. The
/// write is the shell's own (one `write` of the line), so no helper process is alive to be
/// counted once the line is there.
fn tagged(file: &std::path::Path, backend: Containment) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "sh -c 'echo \"$REAPER_RUN_ID\" > {}; exec sleep 600' & exec sleep 600",
            file.display()
        ))
        .stdin(Stdio::Null)
        .containment(backend)
        .delegation(reaper::Delegation::Never)
        .request_id("req-42");
    cmd
}

async fn read_when_written(file: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Whole once it ends the line: the file is created empty, then written at once.
        if let Some(s) = std::fs::read_to_string(file)
            .ok()
            .filter(|s| s.ends_with('\n'))
        {
            return s.trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the child never wrote its run id"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_embedders_run_is_listed_and_its_record_goes_with_it() {
    for backend in backends() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("id");
        let mut child = tagged(&file, backend).spawn().await.expect("spawns");
        let id = child.run_id().expect("the run has an id");
        assert_eq!(
            read_when_written(&file).await,
            id.to_string(),
            "{backend:?}"
        );
        assert_eq!(id.owner().pid, std::process::id() as i32);
        let mut opts = ListOptions::default();
        opts.processes = true;
        let mine = runs::of_this_process(opts);
        let run = mine.iter().find(|r| r.id == id).expect("listed");
        assert_eq!(run.state, RunState::Running);
        assert_eq!(run.request_id.as_deref(), Some("req-42"));
        // The leader (exec'd to sleep) and its child (likewise).
        assert_eq!(run.process_count, 2, "{backend:?}: {:?}", run.processes);
        assert!(runs::find(&id.short(), ListOptions::default()).is_ok());
        let outcome = child.stop().await;
        assert_eq!(outcome.stop_reason, StopReason::Cancel);
        assert!(
            runs::list(ListOptions::default())
                .iter()
                .all(|r| r.id != id),
            "{backend:?}: the record outlived the run"
        );

        // Dropped: the record goes with the tree.
        let file = dir.path().join("id2");
        let child = tagged(&file, backend).spawn().await.expect("spawns");
        let id = child.run_id().expect("the run has an id");
        read_when_written(&file).await;
        assert!(runs::list(ListOptions::default())
            .iter()
            .any(|r| r.id == id));
        drop(child);
        assert!(
            runs::list(ListOptions::default())
                .iter()
                .all(|r| r.id != id),
            "{backend:?}: a dropped run's record is left"
        );
    }
}

/// `runs::end` from the same process, as another would: the owner (this process, polling its
/// child) takes the request and reports `stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ended_through_its_control_socket_reports_why() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("id");
    let mut child = tagged(&file, Containment::Pgid)
        .grace(Duration::from_millis(200))
        .spawn()
        .await
        .expect("spawns");
    let id = child.run_id().expect("an id");
    read_when_written(&file).await;
    let status = runs::find(&id.to_string(), ListOptions::default()).expect("found");
    let asker = tokio::spawn(async move {
        runs::end(&status, runs::How::Stop, runs::EndOptions::default()).await
    });
    let outcome = child.wait().await;
    assert_eq!(outcome.stop_reason, StopReason::Stopped);
    let done = asker.await.expect("joins").expect("ended");
    match done {
        runs::Done::Owner { ended: Some(e) } => assert_eq!(e.stop_reason, StopReason::Stopped),
        other => panic!("not through the owner: {other:?}"),
    }
}
