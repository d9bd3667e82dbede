//! `reaper mcp` over stdio, driven by a minimal newline-delimited JSON-RPC client (no MCP library
//! on this side, so the client adds nothing but a pipe write and a line parse to each figure).
//! codex is `fake-codex`, a compiled stand-in that answers at once, so the server's own cost shows;
//! the same fake run directly by this process is the floor each call is compared with.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::stats::{percentile, Summary};
use crate::sys;
use crate::Setup;

const REPLY_LIMIT: Duration = Duration::from_secs(120);
/// A call that answers at once: a thread, one message, the turn's end.
const QUICK_PROMPT: &str = "thread T\nsay ok\ndone";

/// A running `reaper mcp` and the client side of its stdio.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<(Instant, Value)>,
    next_id: u64,
    pid: i32,
}

impl Server {
    /// Spawns the server; returns it and the instant just before the spawn.
    fn spawn(s: &Setup) -> Result<(Server, Instant), String> {
        Self::spawn_from(s, &s.reaper)
    }

    /// [`Server::spawn`] of the reaper binary at `reaper` (the `--alt-reaper` build).
    fn spawn_from(s: &Setup, reaper: &std::path::Path) -> Result<(Server, Instant), String> {
        Self::spawn_program(s, reaper, &["mcp"])
    }

    /// A server started as `program args…`, with the fake as `CODEX_CMD`.
    fn spawn_program(
        s: &Setup,
        program: &std::path::Path,
        args: &[&str],
    ) -> Result<(Server, Instant), String> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("CODEX_CMD", &s.fake_codex)
            .env_remove("FAKE_CODEX_PIDS")
            .env_remove("REAPER_TIMEOUT")
            .env_remove("CODEX_CLI_MCP_SLIM_TIMEOUT")
            .env_remove("REAPER_PROGRESS_INTERVAL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let t0 = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, replies) = std::sync::mpsc::channel();
        // Lines are timestamped as they arrive; notifications (progress, logs) are skipped.
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 16, stdout);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let at = Instant::now();
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if v.get("id").is_some()
                    && (v.get("result").is_some() || v.get("error").is_some())
                    && tx.send((at, v)).is_err()
                {
                    return;
                }
            }
        });
        let pid = child.id() as i32;
        Ok((
            Server {
                child,
                stdin,
                replies,
                next_id: 1,
                pid,
            },
            t0,
        ))
    }

    fn write(&mut self, msg: &Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.stdin
            .as_mut()
            .ok_or("stdin closed")?
            .write_all(&line)
            .map_err(|e| format!("write to reaper mcp: {e}"))
    }

    fn request(&mut self, method: &str, params: Value) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    fn reply(&mut self) -> Result<(Instant, u64, Value), String> {
        match self.replies.recv_timeout(REPLY_LIMIT) {
            Ok((at, v)) => {
                let id = v.get("id").and_then(Value::as_u64).unwrap_or(0);
                if let Some(e) = v.get("error") {
                    return Err(format!("request {id} failed: {e}"));
                }
                Ok((at, id, v))
            }
            Err(RecvTimeoutError::Timeout) => Err("no reply within 120 s".into()),
            Err(RecvTimeoutError::Disconnected) => Err("reaper mcp closed its stdout".into()),
        }
    }

    fn initialize(&mut self) -> Result<Instant, String> {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "reaper-bench", "version": "0"}}),
        )?;
        let (at, _, _) = self.reply()?;
        self.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(at)
    }

    fn call_request(&mut self, prompt: &str) -> Result<u64, String> {
        self.request(
            "tools/call",
            json!({"name": "codex", "arguments": {"prompt": prompt}}),
        )
    }

    /// One call, start to result; the result must not be an error.
    fn call(&mut self, prompt: &str, expect: &str) -> Result<Duration, String> {
        let t0 = Instant::now();
        self.call_request(prompt)?;
        let (at, _, v) = self.reply()?;
        check_result(&v, expect)?;
        Ok(at - t0)
    }

    fn kib(&self, field: &str) -> f64 {
        sys::status_kib(self.pid, field).unwrap_or(0) as f64
    }

    /// RSS of the server's helpers (the guardian), KiB.
    fn helpers_kib(&self) -> f64 {
        sys::children(self.pid)
            .into_iter()
            .filter_map(|p| sys::status_kib(p, "VmRSS:"))
            .sum::<u64>() as f64
    }

    /// Closes stdin (the client goes away) and waits for the server to exit.
    fn close(mut self) -> Result<Duration, String> {
        let t0 = Instant::now();
        drop(self.stdin.take());
        let deadline = t0 + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                let t = t0.elapsed();
                sys::reap_strays();
                return Ok(t);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                sys::reap_strays();
                return Err("reaper mcp did not exit within 10 s of stdin EOF".into());
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            drop(self.stdin.take());
            std::thread::sleep(Duration::from_millis(100));
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
            let _ = self.child.wait();
        }
    }
}

fn check_result(v: &Value, expect: &str) -> Result<(), String> {
    let r = &v["result"];
    if r["isError"].as_bool() == Some(true) {
        return Err(format!("the call failed: {}", r["content"]));
    }
    if r["content"][0]["text"].as_str() != Some(expect)
        && r["structuredContent"]["content"].as_str() != Some(expect)
    {
        return Err(format!("unexpected result: {r}"));
    }
    Ok(())
}

/// fake-codex run directly: prompt on stdin, stdout drained to EOF, waited for. Returns the
/// wall time and the bytes read.
fn fake_direct(s: &Setup, prompt: &str) -> Result<(Duration, u64), String> {
    let t0 = Instant::now();
    let mut child = Command::new(&s.fake_codex)
        .args(["exec", "--json", "-"])
        .env_remove("FAKE_CODEX_PIDS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("fake-codex: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin
        .write_all(prompt.as_bytes())
        .map_err(|e| e.to_string())?;
    drop(stdin);
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("fake-codex: {st}"));
    }
    Ok((t0.elapsed(), total))
}

pub struct McpResult {
    pub init_ms: Option<Summary>,
    pub idle_rss_mib: Option<Summary>,
    pub guardian_rss_mib: Option<Summary>,
    pub exit_ms: Option<Summary>,
    pub call_median_ms: Option<Summary>,
    pub call_p95_ms: Option<Summary>,
    pub call_alone_ms: Option<Summary>,
    pub direct_median_ms: Option<Summary>,
    pub call_vs_direct: Option<Summary>,
    /// The `--alt-reaper` build's per-call median, in the same sessions.
    pub alt_median_ms: Option<Summary>,
    /// This build's per-call median × the alt build's, session by session.
    pub call_vs_alt: Option<Summary>,
    /// The floor server's (`mcp-floor`) per-call median, in the same sessions.
    pub floor_median_ms: Option<Summary>,
    /// The floor server's per-call median × fake-codex directly.
    pub floor_vs_direct: Option<Summary>,
    /// This build's per-call median × the floor server's, session by session.
    pub call_vs_floor: Option<Summary>,
    pub rss_after_calls_mib: Option<Summary>,
    pub hwm_after_calls_mib: Option<Summary>,
    pub parallel_wall_ms: Option<Summary>,
    pub parallel_per_call_ms: Option<Summary>,
    pub bulk_mib: u64,
    pub bulk_wall_s: Option<Summary>,
    pub bulk_direct_s: Option<Summary>,
    pub bulk_vs_direct: Option<Summary>,
    pub bulk_hwm_before_mib: Option<Summary>,
    pub bulk_hwm_mib: Option<Summary>,
    pub errors: Vec<String>,
}

pub struct McpPlan {
    pub inits: usize,
    pub sessions: usize,
    pub calls: usize,
    pub parallel: usize,
    pub parallel_rounds: usize,
    /// Calls per session made one at a time after an idle pause.
    pub alone_calls: usize,
    pub bulk_mib: u64,
    pub bulk_reps: usize,
}

fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

pub fn bench(s: &Setup, plan: &McpPlan) -> McpResult {
    let mut errors = Vec::new();

    // Spawn → initialize, idle RSS, exit on stdin EOF: a fresh server each time.
    let (mut init, mut idle, mut guard, mut exit) = (vec![], vec![], vec![], vec![]);
    for _ in 0..plan.inits {
        let r = (|| -> Result<(), String> {
            let (mut srv, t0) = Server::spawn(s)?;
            let at = srv.initialize()?;
            init.push((at - t0).as_secs_f64() * 1e3);
            std::thread::sleep(Duration::from_millis(300));
            idle.push(mib(srv.kib("VmRSS:")));
            guard.push(mib(srv.helpers_kib()));
            exit.push(srv.close()?.as_secs_f64() * 1e3);
            Ok(())
        })();
        if let Err(e) = r {
            errors.push(format!("initialize: {e}"));
            break;
        }
    }

    // Sequential calls, interleaved with the same fake run directly; then parallel rounds.
    let (mut med, mut p95, mut direct, mut ratio, mut rss, mut hwm) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut pwall, mut pmax, mut alone) = (vec![], vec![], vec![]);
    let (mut alt_med, mut vs_alt) = (vec![], vec![]);
    let (mut floor_med, mut floor_direct, mut vs_floor) = (vec![], vec![], vec![]);
    for _ in 0..plan.sessions {
        let r = (|| -> Result<(), String> {
            let (mut srv, _) = Server::spawn(s)?;
            srv.initialize()?;
            // The alt build's server, called in turn with this one's: the same rounds.
            let mut alt = match &s.alt_reaper {
                Some(path) => {
                    let (mut a, _) = Server::spawn_from(s, path)?;
                    a.initialize()?;
                    Some(a)
                }
                None => None,
            };
            // And the floor server, likewise.
            let mut floor = match &s.mcp_floor {
                Some(path) => {
                    let (mut f, _) = Server::spawn_program(s, path, &[])?;
                    f.initialize()?;
                    Some(f)
                }
                None => None,
            };
            let (mut lat, mut dir, mut alat, mut flat) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..plan.calls {
                lat.push(srv.call(QUICK_PROMPT, "ok")?.as_secs_f64() * 1e3);
                if let Some(a) = alt.as_mut() {
                    alat.push(a.call(QUICK_PROMPT, "ok")?.as_secs_f64() * 1e3);
                }
                if let Some(f) = floor.as_mut() {
                    flat.push(f.call(QUICK_PROMPT, "ok")?.as_secs_f64() * 1e3);
                }
                dir.push(fake_direct(s, QUICK_PROMPT)?.0.as_secs_f64() * 1e3);
            }
            if let Some(f) = floor.take() {
                let fm = percentile(&flat, 50.0);
                floor_med.push(fm);
                floor_direct.push(fm / percentile(&dir, 50.0));
                vs_floor.push(percentile(&lat, 50.0) / fm);
                f.close()?;
            }
            if let Some(a) = alt.take() {
                let am = percentile(&alat, 50.0);
                alt_med.push(am);
                vs_alt.push(percentile(&lat, 50.0) / am);
                a.close()?;
            }
            let m = percentile(&lat, 50.0);
            let d = percentile(&dir, 50.0);
            med.push(m);
            p95.push(percentile(&lat, 95.0));
            direct.push(d);
            ratio.push(m / d);
            rss.push(mib(srv.kib("VmRSS:")));
            hwm.push(mib(srv.kib("VmHWM:")));
            // Real calls come seconds or minutes apart: a few after an idle pause each.
            for _ in 0..plan.alone_calls {
                std::thread::sleep(Duration::from_millis(50));
                alone.push(srv.call(QUICK_PROMPT, "ok")?.as_secs_f64() * 1e3);
            }
            for _ in 0..plan.parallel_rounds {
                let t0 = Instant::now();
                for _ in 0..plan.parallel {
                    srv.call_request(QUICK_PROMPT)?;
                }
                let mut last = t0;
                for _ in 0..plan.parallel {
                    let (at, _, v) = srv.reply()?;
                    check_result(&v, "ok")?;
                    last = last.max(at);
                }
                pwall.push((last - t0).as_secs_f64() * 1e3);
                pmax.push((last - t0).as_secs_f64() * 1e3 / plan.parallel as f64);
            }
            srv.close()?;
            Ok(())
        })();
        if let Err(e) = r {
            errors.push(format!("calls: {e}"));
            break;
        }
    }

    // A flood of output: wall time and the server's peak RSS, a fresh server each time (VmHWM
    // only grows), against the fake writing the same bytes straight into a pipe.
    let (mut bwall, mut bdirect, mut bratio, mut bhwm0, mut bhwm) =
        (vec![], vec![], vec![], vec![], vec![]);
    let bulk_prompt = format!("thread T1\nbulk {}\nsay big\ndone", plan.bulk_mib);
    for _ in 0..plan.bulk_reps {
        let r = (|| -> Result<(), String> {
            let (d, bytes) = fake_direct(s, &bulk_prompt)?;
            // 16 lines of 64 KiB (minus a little) per MiB, plus the JSON around them.
            if bytes < (plan.bulk_mib << 20) * 99 / 100 {
                return Err(format!("fake-codex wrote only {bytes} bytes"));
            }
            let (mut srv, _) = Server::spawn(s)?;
            srv.initialize()?;
            srv.call("thread T0\nsay warm\ndone", "warm")?;
            let before = mib(srv.kib("VmHWM:"));
            let wall = srv.call(&bulk_prompt, "big")?;
            bhwm0.push(before);
            bhwm.push(mib(srv.kib("VmHWM:")));
            bwall.push(wall.as_secs_f64());
            bdirect.push(d.as_secs_f64());
            bratio.push(wall.as_secs_f64() / d.as_secs_f64());
            srv.close()?;
            Ok(())
        })();
        if let Err(e) = r {
            errors.push(format!("bulk output: {e}"));
            break;
        }
    }
    sys::reap_strays();

    McpResult {
        init_ms: Summary::of(&init),
        idle_rss_mib: Summary::of(&idle),
        guardian_rss_mib: Summary::of(&guard),
        exit_ms: Summary::of(&exit),
        call_median_ms: Summary::of(&med),
        call_p95_ms: Summary::of(&p95),
        call_alone_ms: Summary::of(&alone),
        direct_median_ms: Summary::of(&direct),
        call_vs_direct: Summary::of(&ratio),
        alt_median_ms: Summary::of(&alt_med),
        call_vs_alt: Summary::of(&vs_alt),
        floor_median_ms: Summary::of(&floor_med),
        floor_vs_direct: Summary::of(&floor_direct),
        call_vs_floor: Summary::of(&vs_floor),
        rss_after_calls_mib: Summary::of(&rss),
        hwm_after_calls_mib: Summary::of(&hwm),
        parallel_wall_ms: Summary::of(&pwall),
        parallel_per_call_ms: Summary::of(&pmax),
        bulk_mib: plan.bulk_mib,
        bulk_wall_s: Summary::of(&bwall),
        bulk_direct_s: Summary::of(&bdirect),
        bulk_vs_direct: Summary::of(&bratio),
        bulk_hwm_before_mib: Summary::of(&bhwm0),
        bulk_hwm_mib: Summary::of(&bhwm),
        errors,
    }
}
