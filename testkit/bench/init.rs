//! reaper as a container's PID 1 beside the inits people already use (tini, dumb-init,
//! catatonit, when installed): an app whose main process, a background child and a setsid'd
//! grandchild each trap SIGTERM to exit cleanly, in a fresh PID namespace (`unshare --pid --fork
//! --mount-proc`), stopped with SIGTERM to PID 1 as `docker stop` does. Counted: which of the
//! three exited by their trap, and how long PID 1 took to exit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::stats::Summary;
use crate::{sys, Setup};

/// The app: each part writes "ready NAME" once its trap is set, "graceful NAME" from it.
const APP: &str = r#"
    trap 'echo "graceful main" >> "$OUT"; exit 0' TERM
    part='trap "echo \"graceful $0\" >> \"\$OUT\"; exit 0" TERM; echo "ready $0" >> "$OUT"; while :; do sleep 600 & wait $!; done'
    sh -c "$part" child &
    setsid sh -c "$part" grandchild &
    echo "ready main" >> "$OUT"
    while :; do sleep 600 & wait $!; done
"#;

pub const PARTS: [&str; 3] = ["main", "child", "grandchild"];

pub struct InitRow {
    pub name: String,
    /// `None`: the init is not installed (or the namespace could not be made); the reason.
    pub missing: Option<String>,
    pub runs: usize,
    /// How many runs each part exited by its trap, in [`PARTS`] order.
    pub graceful: [usize; 3],
    /// SIGTERM to PID 1 → PID 1 exited, ms.
    pub stop_ms: Option<Summary>,
}

fn installed(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(prog).is_file()))
}

pub fn bench(s: &Setup, reps: usize) -> Vec<InitRow> {
    let reaper = s.reaper.display().to_string();
    let inits: Vec<(String, Vec<String>)> = vec![
        (
            "reaper run --".into(),
            vec![reaper, "run".into(), "-q".into(), "--".into()],
        ),
        ("tini --".into(), vec!["tini".into(), "--".into()]),
        (
            "tini -g --".into(),
            vec!["tini".into(), "-g".into(), "--".into()],
        ),
        ("dumb-init".into(), vec!["dumb-init".into()]),
        ("catatonit --".into(), vec!["catatonit".into(), "--".into()]),
    ];
    let pidns = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    inits
        .into_iter()
        .map(|(name, argv)| {
            let mut row = InitRow {
                name,
                missing: None,
                runs: 0,
                graceful: [0; 3],
                stop_ms: None,
            };
            if !pidns {
                row.missing = Some("no PID namespace here (`unshare --pid` needs root)".into());
                return row;
            }
            if !Path::new(&argv[0]).is_file() && !installed(&argv[0]) {
                row.missing = Some("not installed".into());
                return row;
            }
            let mut ms = Vec::new();
            for _ in 0..reps {
                match once(&argv) {
                    Ok((done, took)) => {
                        row.runs += 1;
                        for (i, d) in done.iter().enumerate() {
                            row.graceful[i] += usize::from(*d);
                        }
                        ms.push(took);
                    }
                    Err(e) => {
                        row.missing = Some(e);
                        break;
                    }
                }
                sys::reap_strays();
            }
            row.stop_ms = Summary::of(&ms);
            row
        })
        .collect()
}

/// One run: which parts exited by their trap, and SIGTERM → PID 1's exit in ms.
fn once(init: &[String]) -> Result<([bool; 3], f64), String> {
    let dir = sys::TempDir::new("init").map_err(|e| format!("temp dir: {e}"))?;
    let out = dir.join("out");
    let mut unshare = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .args(init)
        .args(["sh", "-c", APP])
        .env("OUT", &out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("unshare: {e}"))?;
    let lines = || std::fs::read_to_string(&out).unwrap_or_default();
    let me = unshare.id();
    let children = format!("/proc/{me}/task/{me}/children");
    let pid1 = || -> Option<i32> {
        std::fs::read_to_string(&children)
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let ready = loop {
        if PARTS
            .iter()
            .all(|p| lines().lines().any(|l| l == format!("ready {p}")))
        {
            break true;
        }
        if Instant::now() > deadline || matches!(unshare.try_wait(), Ok(Some(_))) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // A pidfd on PID 1, still listed as unshare's child after the open: its pid was its own.
    let fd = pid1().and_then(|p| {
        let fd = sys::pidfd_open(p).ok()?;
        (pid1() == Some(p)).then_some(fd)
    });
    let result = match (&fd, ready) {
        (Some(fd), true) => {
            let t = Instant::now();
            sys::pidfd_signal(fd, libc::SIGTERM).map_err(|e| format!("signal PID 1: {e}"))?;
            let limit = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(_)) = unshare.try_wait() {
                    break Ok(t.elapsed().as_secs_f64() * 1e3);
                }
                if Instant::now() > limit {
                    break Err("PID 1 did not exit within 30 s of SIGTERM".to_owned());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        _ => Err(format!("the app never got ready: {:?}", lines())),
    };
    if let Some(fd) = &fd {
        // PID 1's death ends its namespace: nothing it started is left.
        let _ = sys::pidfd_signal(fd, libc::SIGKILL);
    }
    let _ = unshare.kill();
    let _ = unshare.wait();
    let took = result?;
    let text = lines();
    let done = PARTS.map(|p| text.lines().any(|l| l == format!("graceful {p}")));
    Ok((done, took))
}
