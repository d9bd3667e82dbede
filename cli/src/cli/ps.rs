//! `reaper ps`: every live run this user may see (every user's, for root), from the runs'
//! records and their cgroups or `/proc` (`reaper::runs::list`); never from the runs' owners.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reaper::runs::{self, ListOptions, RunStatus};

use crate::coreutils as parse;

#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Under each run, its processes as a tree.
    #[arg(long)]
    pub tree: bool,

    /// One JSON array of the runs on stdout (with --watch: one per refresh, a line each).
    #[arg(long)]
    pub json: bool,

    /// Refresh every DUR (2s unless given) until interrupted, as top(1) does, with each run's
    /// CPU use since the last refresh.
    #[arg(long, value_name = "DUR", num_args = 0..=1, default_missing_value = "2s", value_parser = parse::duration)]
    pub watch: Option<Duration>,
}

pub fn main(args: PsArgs) -> u8 {
    let mut opts = ListOptions::default();
    opts.processes = args.tree;
    let Some(every) = args.watch else {
        let all = runs::list(opts);
        return show(&args, &all, None);
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut before: Option<(Instant, HashMap<runs::RunId, u64>)> = None;
    loop {
        let now = Instant::now();
        let all = runs::list(opts);
        let rates = before.as_ref().map(|(t, cpu)| {
            let secs = now.duration_since(*t).as_secs_f64().max(1e-3);
            all.iter()
                .filter_map(|r| {
                    let prev = cpu.get(&r.id)?;
                    let used = r.cpu_usec?.saturating_sub(*prev);
                    Some((r.id, used as f64 / 1e6 / secs * 100.0))
                })
                .collect::<HashMap<_, _>>()
        });
        if !args.json {
            if tty {
                // Home, then clear: one frame replaces the last, as watch(1) draws.
                use std::io::Write as _;
                let _ = write!(std::io::stdout(), "\x1b[H\x1b[2J");
            }
            out!(
                "reaper ps · every {} · {} run(s) · {}",
                parse::show(every),
                all.len(),
                clock()
            );
        }
        if show(&args, &all, rates.as_ref()) != 0 {
            return 1;
        }
        before = Some((
            now,
            all.iter()
                .filter_map(|r| Some((r.id, r.cpu_usec?)))
                .collect(),
        ));
        std::thread::sleep(every.saturating_sub(now.elapsed()));
    }
}

/// Prints the runs as a table (or JSON); `rates`: CPU % since the last refresh, by run.
fn show(args: &PsArgs, all: &[RunStatus], rates: Option<&HashMap<runs::RunId, f64>>) -> u8 {
    if args.json {
        let all = crate::report::runs_json(all);
        let text = if args.watch.is_some() {
            serde_json::to_string(&all)
        } else {
            serde_json::to_string_pretty(&all)
        };
        return match text {
            Ok(t) => {
                out!("{t}");
                0
            }
            Err(e) => {
                say!("reaper: {e}");
                125
            }
        };
    }
    if all.is_empty() {
        out!("no runs");
        return 0;
    }
    let mut rows = vec![row_header(rates.is_some())];
    for r in all {
        rows.push(row(r, rates.map(|m| m.get(&r.id).copied())));
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for (n, cells) in rows.iter().enumerate() {
        let last = cells.len() - 1;
        let mut line = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == last {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out!("{}", line.trim_end());
        if args.tree && n > 0 {
            tree(&all[n - 1]);
        }
    }
    0
}

fn row_header(rates: bool) -> Vec<String> {
    let mut h = vec![
        "ID", "STATE", "OWNER", "AGE", "LEADER", "PROCS", "MEM", "PEAK", "CPU",
    ];
    if rates {
        h.push("%CPU");
    }
    h.extend(["LIMITS", "COMMAND"]);
    h.into_iter().map(str::to_owned).collect()
}

fn row(r: &RunStatus, rate: Option<Option<f64>>) -> Vec<String> {
    let owner = match &r.owner_command {
        Some(c) => format!("{c} ({})", r.id.owner().pid),
        None => format!("pid {}", r.id.owner().pid),
    };
    let state = match (r.state, r.stop_reason) {
        (runs::RunState::Stopping, Some(why)) => {
            format!(
                "stopping ({})",
                serde_json::to_value(why)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            )
        }
        (s, _) => s.as_str().to_owned(),
    };
    let leader = if r.leader_alive {
        r.leader.pid.to_string()
    } else {
        format!("({})", r.leader.pid)
    };
    let (mem, peak) = match &r.memory {
        Some(m) => (
            format!(
                "{}{}",
                super::parse::show_size(m.current_bytes),
                if m.source == "rss" { " rss" } else { "" }
            ),
            m.peak_bytes
                .map(super::parse::show_size)
                .unwrap_or_else(|| "-".into()),
        ),
        None => ("-".into(), "-".into()),
    };
    let cpu = r
        .cpu_usec
        .map(|u| format!("{:.2}s", u as f64 / 1e6))
        .unwrap_or_else(|| "-".into());
    let mut cells = vec![
        r.short_id.clone(),
        state,
        owner,
        age(r.age_ms),
        leader,
        r.process_count.to_string(),
        mem,
        peak,
        cpu,
    ];
    if let Some(rate) = rate {
        cells.push(rate.map_or_else(|| "-".into(), |p| format!("{p:.0}%")));
    }
    cells.push(limits(r));
    cells.push(command(&r.argv, r.request_id.as_deref()));
    cells
}

/// `mem 512M!, pids 100`: each limit, `!` where it held the run back.
fn limits(r: &RunStatus) -> String {
    let Some(l) = r.limits else {
        return "-".into();
    };
    let hit = |h: bool| if h { "!" } else { "" };
    let mut parts = Vec::new();
    if let Some(m) = l.memory_max {
        parts.push(format!(
            "mem {}{}",
            super::parse::show_size(m),
            hit(r.limits_hit.memory)
        ));
    }
    if let Some(p) = l.pids_max {
        parts.push(format!("pids {p}{}", hit(r.limits_hit.pids)));
    }
    if let Some(c) = l.cpus {
        parts.push(format!("cpu {c}{}", hit(r.limits_hit.cpu)));
    }
    parts.join(",")
}

/// The command line, shortened for a table; an MCP call's request id first.
fn command(argv: &[String], request: Option<&str>) -> String {
    let mut s = argv.join(" ");
    if s.chars().count() > 60 {
        s = s.chars().take(59).collect::<String>() + "…";
    }
    match request {
        Some(id) => format!("[request {id}] {s}"),
        None => s,
    }
}

fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The run's processes, indented under their parents.
fn tree(r: &RunStatus) {
    let pids: Vec<i32> = r.processes.iter().map(|m| m.pid).collect();
    let roots = r.processes.iter().filter(|m| !pids.contains(&m.ppid));
    fn walk(all: &[reaper::ProcessInfo], m: &reaper::ProcessInfo, depth: usize) {
        let cmd = if m.cmdline.is_empty() {
            format!("[{}]", m.comm)
        } else {
            m.cmdline.clone()
        };
        out!("    {}{} {} {}", "  ".repeat(depth), m.pid, m.state, cmd);
        for c in all.iter().filter(|c| c.ppid == m.pid) {
            walk(all, c, depth + 1);
        }
    }
    for root in roots {
        walk(&r.processes, root, 0);
    }
}

/// The wall clock, `HH:MM:SS` UTC (no time zone database here).
fn clock() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02} UTC", s / 3600 % 24, s / 60 % 60, s % 60)
}
