//! `reap_orphans` reaps any child (`waitid(P_ALL)`): the reaping lock keeps it off a child that
//! its creator waits for itself.

#![cfg(target_os = "linux")]

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use reaper_platform::reap;

/// issue 10 item 3: once `reap_orphans` waits with `P_ALL`, it can reap the child of a spawn
/// whose exec failed before std's spawn waits for it, and std then panics ("wait() should either
/// return Ok or panic"); a leader could likewise be reaped before it is registered. A spawn
/// under [`reap::hold`] is never robbed, whatever thread reaps meanwhile.
#[test]
fn a_spawn_under_the_reaping_lock_is_never_robbed() {
    let stop = Arc::new(AtomicBool::new(false));
    let reaping = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut reaped = 0;
            while !stop.load(Ordering::Relaxed) {
                reaped += reap::reap_orphans();
            }
            reaped
        })
    };
    for i in 0..300 {
        let mut cmd = Command::new("/nonexistent/reaper-test-program");
        // A pre_exec closure makes std fork and exec itself (not posix_spawn), and wait for the
        // child when the exec fails. SAFETY: the closure does nothing.
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
        let held = reap::hold();
        let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cmd.spawn()));
        drop(held);
        match spawned {
            Ok(Err(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "try {i}: {e}"),
            Ok(Ok(_)) => panic!("try {i}: /nonexistent ran"),
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                panic!("try {i}: std's spawn lost its failed child to reap_orphans");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = reaping.join();
}
