//! `fake-codex`: a stand-in for `codex exec --json` in the `reaper mcp` tests.
//!
//! Like codex, it reads its prompt from stdin to EOF before it does anything. The prompt is a
//! script, one directive a line, run in order:
//!
//! | directive            | what it does                                                     |
//! |----------------------|------------------------------------------------------------------|
//! | `thread [ID]`        | `thread.started` (ID defaults to the `resume` id, else `fake-thread`) |
//! | `say TEXT`           | an `agent_message` item with TEXT (`\n` in TEXT is a newline)    |
//! | `say-kib N [WORD]`   | an `agent_message` of N KiB: WORD (default `x`) repeated         |
//! | `argv`               | an `agent_message` whose text is argv as a JSON array            |
//! | `env NAME`           | an `agent_message` with `$NAME` (or `<unset>`)                   |
//! | `cwd`                | an `agent_message` with the working directory                    |
//! | `prompt`             | an `agent_message` with the whole prompt                         |
//! | `item TYPE`          | `item.started` then `item.completed` of an item of TYPE          |
//! | `error MSG`          | an `error` event                                                 |
//! | `fail MSG`           | a `turn.failed` event                                            |
//! | `done`               | `turn.completed` with usage 11/2/7                               |
//! | `raw TEXT`           | TEXT as a line of its own                                        |
//! | `stderr TEXT`        | TEXT on stderr                                                   |
//! | `bulk MIB`           | MIB MiB of `item.completed` lines with 64 KiB outputs            |
//! | `sleep SECS`         | sleeps                                                           |
//! | `ignore-signals`     | ignores SIGINT, SIGTERM and SIGHUP from now on                   |
//! | `on-int MSG`         | on SIGINT: prints `turn.failed` MSG and exits 130                |
//! | `escapee`            | a grandchild in a session of its own, ignoring INT/TERM/HUP,     |
//! |                      | holding stdout open, sleeping; its parent exits at once          |
//! | `child`              | a child in codex's own process group that sleeps                 |
//! | `hang`               | sleeps "forever" (600 s, so a broken test leaks nothing for long) |
//! | `order-siblings W`   | sends W (`kill`, `stop`) to every other run's control socket in  |
//! |                      | `$REAPER_RUNTIME_DIR`; an `agent_message` with each answer       |
//! | `exit N`             | exits with N (the script's end exits 0)                          |
//!
//! `FAKE_CODEX_PIDS=PATH`: every process it starts (itself included) appends
//! `PID STARTTIME ROLE CGROUP` to PATH (CGROUP from the `0::` line of `/proc/PID/cgroup`), so
//! tests can check that each one is dead and its cgroup removed.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const FOREVER: Duration = Duration::from_secs(600);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("__spawner") => spawner(),
        Some("__sleeper") => sleep_forever(args.get(2).map(String::as_str).unwrap_or("sleeper")),
        _ => codex(&args),
    }
}

fn codex(args: &[String]) {
    record("codex");
    let mut prompt = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut prompt) {
        eprintln!("fake-codex: cannot read the prompt: {e}");
        std::process::exit(1);
    }
    let resume_id = args
        .iter()
        .position(|a| a == "resume")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let out = std::io::stdout();
    let mut out = out.lock();
    for line in prompt.lines() {
        let (cmd, rest) = line.split_once(' ').unwrap_or((line, ""));
        let text = rest.replace("\\n", "\n");
        match cmd {
            "thread" => {
                let id = if rest.is_empty() {
                    resume_id.clone().unwrap_or_else(|| "fake-thread".into())
                } else {
                    rest.to_owned()
                };
                emit(
                    &mut out,
                    serde_json::json!({"type": "thread.started", "thread_id": id}),
                );
            }
            "say" => message(&mut out, &text),
            "say-kib" => {
                let (n, word) = rest.split_once(' ').unwrap_or((rest, "x"));
                let kib: usize = n.parse().unwrap_or(1);
                let word = if word.is_empty() { "x" } else { word };
                let text: String = word.chars().cycle().take(kib * 1024).collect();
                message(&mut out, &text);
            }
            "argv" => message(&mut out, &serde_json::to_string(args).unwrap_or_default()),
            "env" => message(
                &mut out,
                &std::env::var(rest).unwrap_or_else(|_| "<unset>".into()),
            ),
            "cwd" => message(
                &mut out,
                &std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
            ),
            "prompt" => message(&mut out, &prompt),
            "item" => {
                let item = serde_json::json!({"id": "item_1", "type": rest});
                emit(
                    &mut out,
                    serde_json::json!({"type": "item.started", "item": item}),
                );
                emit(
                    &mut out,
                    serde_json::json!({"type": "item.completed", "item": item}),
                );
            }
            "error" => emit(
                &mut out,
                serde_json::json!({"type": "error", "message": text}),
            ),
            "fail" => emit(
                &mut out,
                serde_json::json!({"type": "turn.failed", "error": {"message": text}}),
            ),
            "done" => emit(
                &mut out,
                serde_json::json!({"type": "turn.completed", "usage": {
                    "input_tokens": 11, "cached_input_tokens": 2, "output_tokens": 7}}),
            ),
            "raw" => {
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
            "stderr" => eprintln!("{text}"),
            "bulk" => bulk(&mut out, rest.parse().unwrap_or(1)),
            "sleep" => std::thread::sleep(Duration::from_secs_f64(rest.parse().unwrap_or(1.0))),
            "ignore-signals" => ignore_signals(),
            "on-int" => on_int(&text),
            "escapee" => escapee(),
            "child" => {
                let spawned = Command::new("/proc/self/exe")
                    .args(["__sleeper", "child"])
                    .stdin(Stdio::null())
                    .spawn();
                if let Err(e) = spawned {
                    eprintln!("fake-codex: cannot start a child: {e}");
                }
            }
            "hang" => std::thread::sleep(FOREVER),
            "order-siblings" => message(&mut out, &order_siblings(rest)),
            "exit" => {
                let _ = out.flush();
                std::process::exit(rest.parse().unwrap_or(1));
            }
            "" => {}
            other => {
                eprintln!("fake-codex: unknown directive {other:?}");
                std::process::exit(2);
            }
        }
    }
}

fn emit(out: &mut impl Write, event: serde_json::Value) {
    // A closed stdout (the server went away) ends the fake like it ends codex.
    if writeln!(out, "{event}").and_then(|()| out.flush()).is_err() {
        std::process::exit(141);
    }
}

fn message(out: &mut impl Write, text: &str) {
    emit(
        out,
        serde_json::json!({"type": "item.completed", "item": {"id": "msg", "type": "agent_message", "text": text}}),
    );
}

/// Sends `word` to every control socket in `$REAPER_RUNTIME_DIR` but its own run's, as a
/// stream line (or, where the socket is a datagram socket, one datagram); the answers, one a
/// line (`NAME: ANSWER`).
fn order_siblings(word: &str) -> String {
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::{UnixDatagram, UnixStream};
    let dir = std::env::var("REAPER_RUNTIME_DIR").unwrap_or_default();
    let mine = format!(
        "{}.sock",
        std::env::var("REAPER_RUN_ID").unwrap_or_default()
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".sock") && *n != mine)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let ask = |path: &std::path::Path| -> String {
        let wait = Some(Duration::from_secs(5));
        match UnixStream::connect(path) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(wait);
                let _ = writeln!(s, "{word}");
                let mut line = String::new();
                let _ = BufReader::new(s).read_line(&mut line);
                line.trim().to_owned()
            }
            Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => {
                let d = match UnixDatagram::unbound() {
                    Ok(d) => d,
                    Err(e) => return format!("no socket: {e}"),
                };
                // An abstract address of its own, for the answer (Linux's own namespace).
                #[cfg(target_os = "linux")]
                let d = {
                    use std::os::linux::net::SocketAddrExt;
                    let name = format!("fake-codex-{}", std::process::id());
                    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                        .and_then(|a| UnixDatagram::bind_addr(&a))
                        .unwrap_or(d)
                };
                let _ = d.set_read_timeout(wait);
                let _ = d.send_to(word.as_bytes(), path);
                let mut buf = [0u8; 512];
                match d.recv(&mut buf) {
                    Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
                    Err(e) => format!("no answer: {e}"),
                }
            }
            Err(e) => format!("not sent: {e}"),
        }
    };
    let answers: Vec<String> = names
        .iter()
        .map(|n| format!("{n}: {}", ask(&std::path::Path::new(&dir).join(n))))
        .collect();
    if answers.is_empty() {
        "no sibling socket".into()
    } else {
        answers.join("\n")
    }
}

/// `mib` MiB of event lines, each carrying 64 KiB of command output.
fn bulk(out: &mut impl Write, mib: usize) {
    let output = "x".repeat(64 * 1024 - 100);
    let line = serde_json::json!({"type": "item.completed", "item": {
        "id": "bulk", "type": "command_execution", "aggregated_output": output}})
    .to_string();
    for _ in 0..mib * 16 {
        if writeln!(out, "{line}").is_err() {
            std::process::exit(141);
        }
    }
    let _ = out.flush();
}

fn ignore_signals() {
    // SAFETY: setting a disposition to SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}

static INT_MESSAGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

extern "C" fn interrupted(_: libc::c_int) {
    if let Some(msg) = INT_MESSAGE.get() {
        // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` lives for the program.
        unsafe {
            libc::write(1, msg.as_ptr().cast(), msg.len());
            libc::_exit(130);
        }
    }
}

/// Like codex: SIGINT interrupts the turn, which is reported as failed.
fn on_int(text: &str) {
    let event = serde_json::json!({"type": "turn.failed", "error": {"message": text}});
    let _ = INT_MESSAGE.set(format!("{event}\n").into_bytes());
    // SAFETY: the handler only calls async-signal-safe functions.
    unsafe {
        libc::signal(
            libc::SIGINT,
            interrupted as extern "C" fn(libc::c_int) as *const () as libc::sighandler_t,
        );
    }
}

/// Starts the spawner, which starts the escapee and exits; returns once both are recorded.
fn escapee() {
    let status = Command::new("/proc/self/exe")
        .arg("__spawner")
        .stdin(Stdio::null())
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("fake-codex: the escapee was not started: {status:?}");
        std::process::exit(1);
    }
}

/// The escapee's parent: starts it in a session of its own, records it, and exits, so the
/// escapee is orphaned.
fn spawner() {
    record("spawner");
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(["__sleeper", "escapee"]).stdin(Stdio::null());
    // SAFETY: setsid(2) and signal(2) are async-signal-safe and allocation-free. Ignored
    // dispositions survive exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(child) => record_pid(child.id() as i32, "escapee"),
        Err(e) => {
            eprintln!("fake-codex: cannot start the escapee: {e}");
            std::process::exit(1);
        }
    }
}

fn sleep_forever(role: &str) {
    if role != "escapee" {
        record(role);
    }
    std::thread::sleep(FOREVER);
}

fn record(role: &str) {
    record_pid(std::process::id() as i32, role);
}

/// Appends `PID STARTTIME ROLE CGROUP` to `$FAKE_CODEX_PIDS` with one `write(2)` (O_APPEND).
fn record_pid(pid: i32, role: &str) {
    let Ok(path) = std::env::var("FAKE_CODEX_PIDS") else {
        return;
    };
    let start = starttime(pid).unwrap_or(0);
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        })
        .unwrap_or_else(|| "-".into());
    let line = format!("{pid} {start} {role} {cgroup}\n");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path);
    match file {
        Ok(mut f) => {
            let _ = f.write_all(line.as_bytes());
        }
        Err(e) => eprintln!("fake-codex: cannot record to {path}: {e}"),
    }
}

/// Field 22 of `/proc/PID/stat`.
#[cfg(target_os = "linux")]
fn starttime(pid: i32) -> Option<u64> {
    reaper_platform::linux::procfs::stat(pid)
        .ok()
        .map(|s| s.starttime)
}

/// No `/proc` here: the start time is recorded as 0.
#[cfg(not(target_os = "linux"))]
fn starttime(_pid: i32) -> Option<u64> {
    None
}
