//! What an embedder gets: a process that drops its `Child` and returns from `main` leaves no
//! process and no cgroup behind; nor does one that calls `std::process::exit` with its `Child`
//! alive, or after `mem::forget`ting it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn alive(pid: i32) -> bool {
    // A zombie is dead: only its parent's wait is missing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit(") ").next().and_then(|s| s.chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => false,
    }
}

#[test]
fn returning_from_main_after_a_drop_leaves_nothing() {
    ends_leaving_nothing("drop");
}

/// `exit` skips every destructor: the exit hook stops the live runs instead.
#[test]
fn exit_with_a_live_child_leaves_nothing() {
    ends_leaving_nothing("exit");
}

#[test]
fn exit_after_forgetting_a_child_leaves_nothing() {
    ends_leaving_nothing("forget");
}

fn ends_leaving_nothing(how: &str) {
    let dir = std::env::temp_dir().join(format!("reaper-embed-{}-{how}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let pidfile = dir.join("pids");
    let _ = std::fs::remove_file(&pidfile);
    std::fs::write(&pidfile, "").expect("the pid file");

    let status = Command::new(env!("CARGO_BIN_EXE_reaper-embed"))
        .arg(&pidfile)
        .arg(how)
        .status()
        .expect("reaper-embed runs");
    assert!(status.success(), "reaper-embed failed: {status}");

    let recorded = std::fs::read_to_string(&pidfile).expect("the pid file");
    let mut lines = recorded.lines();
    let pids: Vec<i32> = lines
        .by_ref()
        .take(2)
        .map(|l| l.trim().parse().expect("a pid"))
        .collect();
    assert_eq!(
        pids.len(),
        2,
        "the shell and its setsid'd grandchild ran: {recorded:?}"
    );
    let cgroup = lines.next().map(str::to_owned);

    // The kill was synchronous, the kernel's delivery is not; bounded, never a fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    for p in &pids {
        assert!(
            !alive(*p),
            "{how}: pid {p} outlived the process that ended with its Child"
        );
    }
    if let Some(cg) = cgroup {
        // Removed before reaper-embed's exit returned: no waiting here.
        let left = Path::new(&cg).exists();
        if left {
            // Ours (reaper-embed's run): removed so a failure leaves nothing either.
            let _ = std::fs::remove_dir(&cg);
        }
        assert!(!left, "{how}: {cg} was left behind");
    } else if std::env::var("REAPER_REQUIRE").is_ok_and(|r| r.split(' ').any(|n| n == "cgroup")) {
        panic!("no run cgroup, on a machine that has them (REAPER_REQUIRE)");
    } else {
        eprintln!("skipped: {how}: the cgroup check (no run cgroup here)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
