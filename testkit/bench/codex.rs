//! What a user meets: `reaper run -- codex --version` against `codex --version`, the real CLI
//! (Node.js), each run alone after an idle pause, the two taking turns so they share the machine's
//! moments. The ratio is taken per pair.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::spawn::stdio;
use crate::stats::Summary;
use crate::sys::{self, Cmd, Join};
use crate::Setup;

pub struct CodexResult {
    pub codex: Option<PathBuf>,
    pub direct_ms: Option<Summary>,
    pub reaper_ms: Option<Summary>,
    pub ratio: Option<Summary>,
    pub note: Option<String>,
}

/// `REAPER_BENCH_CODEX`, else the test cache's install (`ci/test.sh` puts it there).
fn find_codex() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REAPER_BENCH_CODEX") {
        return Some(p.into());
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/reaper-ci/codex/node_modules/.bin/codex");
    p.exists().then_some(p)
}

fn once(s: &Setup, cmd: &Cmd) -> Result<f64, String> {
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    let pid = sys::spawn(cmd, Join::Nothing, &stdio(s)).map_err(|e| format!("spawn: {e}"))?;
    let st = sys::wait(pid).map_err(|e| format!("wait: {e}"))?;
    let d = t0.elapsed();
    if sys::exited_ok(st) {
        Ok(d.as_secs_f64() * 1e3)
    } else {
        Err(format!("`{}`: {}", cmd.label, sys::describe_status(st)))
    }
}

pub fn bench(s: &Setup, reps: usize) -> CodexResult {
    let Some(codex) = find_codex() else {
        return CodexResult {
            codex: None,
            direct_ms: None,
            reaper_ms: None,
            ratio: None,
            note: Some("codex not installed (set REAPER_BENCH_CODEX)".into()),
        };
    };
    let direct = Cmd::new(&[codex.as_os_str(), "--version".as_ref()]);
    let reaped = Cmd::new(&[
        s.reaper.as_os_str(),
        "run".as_ref(),
        "--quiet".as_ref(),
        "--".as_ref(),
        codex.as_os_str(),
        "--version".as_ref(),
    ]);
    let (mut d, mut r) = (Vec::new(), Vec::new());
    let mut note = None;
    for i in 0..reps {
        // Alternate which goes first, so neither always follows the other's exit.
        let pair = if i % 2 == 0 {
            once(s, &direct).and_then(|a| once(s, &reaped).map(|b| (a, b)))
        } else {
            once(s, &reaped).and_then(|b| once(s, &direct).map(|a| (a, b)))
        };
        match pair {
            Ok((a, b)) => {
                d.push(a);
                r.push(b);
            }
            Err(e) => {
                note = Some(e);
                break;
            }
        }
    }
    let ratios: Vec<f64> = r.iter().zip(&d).map(|(b, a)| b / a).collect();
    CodexResult {
        codex: Some(codex),
        direct_ms: Summary::of(&d),
        reaper_ms: Summary::of(&r),
        ratio: Summary::of(&ratios),
        note,
    }
}
