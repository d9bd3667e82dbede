//! `reaper audit`: the processes of this machine that look leaked (`reaper::audit::census`),
//! read-only; `--kill` ends the certain ones, or the ones named by pid and start time.

use std::collections::BTreeMap;

use reaper::audit::{self, Census, Evidence, Leak};
use reaper::Identity;
use reaper::ProcessInfo;

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The census as one JSON document on stdout.
    #[arg(long)]
    pub json: bool,

    /// Kill what is certain (processes of runs whose reaper is gone) — or, with PID@START
    /// values (as the report prints them), those processes only. Root kills a leak as the user
    /// it is of. Through pidfds checked on the start time, never by name.
    #[arg(long, num_args = 0.., value_name = "PID@START")]
    pub kill: Option<Vec<String>>,
}

pub fn main(args: AuditArgs) -> u8 {
    let census = audit::census();
    if let Some(why) = &census.refused {
        say!("reaper: cannot audit here: {why}");
        return 2;
    }
    if let Some(named) = &args.kill {
        return kill(&census, named, args.json);
    }
    if args.json {
        match serde_json::to_string_pretty(&crate::report::census_json(&census)) {
            Ok(t) => out!("{t}"),
            Err(e) => {
                say!("reaper: {e}");
                return 125;
            }
        }
    } else {
        print(&census);
    }
    u8::from(!census.certain.is_empty())
}

fn kill(census: &Census, named: &[String], json: bool) -> u8 {
    let results = if named.is_empty() {
        if census.certain.is_empty() {
            say!("reaper: nothing certain to kill");
            return 0;
        }
        // Each leak as the user it is provably of (root acting for a user has their power).
        audit::kill_leaks(&census.certain)
    } else {
        let mut t = Vec::new();
        for n in named {
            match parse_identity(n) {
                Some(id) => t.push(id),
                None => {
                    say!("reaper: {n:?} is not PID@START (as `reaper audit` prints it)");
                    return 125;
                }
            }
        }
        // Each as the user of the leak it belongs to, if it belongs to one.
        audit::kill_chosen(census, &t)
    };
    if json {
        match serde_json::to_string_pretty(&crate::report::killed_json(&results)) {
            Ok(t) => out!("{t}"),
            Err(e) => say!("reaper: {e}"),
        }
    } else {
        for r in &results {
            out!("{}@{}: {}", r.process.pid, r.process.starttime, r.result);
        }
    }
    0
}

fn parse_identity(t: &str) -> Option<Identity> {
    let (pid, start) = t.split_once('@')?;
    Some(Identity {
        pid: pid.parse().ok().filter(|p: &i32| *p > 0)?,
        starttime: start.parse().ok()?,
    })
}

fn print(c: &Census) {
    let count = |ls: &[Leak]| ls.iter().map(|l| 1 + l.descendants.len()).sum::<usize>();
    out!(
        "certain: outlived the reaper that ran them ({} tree(s), {} process(es))",
        c.certain.len(),
        count(&c.certain)
    );
    let mut by_run: BTreeMap<String, Vec<&Leak>> = BTreeMap::new();
    for l in &c.certain {
        by_run
            .entry(l.origin.clone().unwrap_or_else(|| "unknown run".into()))
            .or_default()
            .push(l);
    }
    for (origin, leaks) in by_run {
        out!("  {origin}");
        for l in leaks {
            leak(l, false);
        }
    }
    out!(
        "suspect: reparented, in no live run ({} tree(s), {} process(es))",
        c.suspect.len(),
        count(&c.suspect)
    );
    let mut groups: BTreeMap<(String, String, String), Vec<&Leak>> = BTreeMap::new();
    for l in &c.suspect {
        let r = &l.root;
        let exe = r
            .exe
            .as_ref()
            .map(|e| e.display().to_string())
            .unwrap_or_else(|| r.comm.clone());
        let user = r.uid.map_or_else(|| "?".into(), |u| u.to_string());
        groups
            .entry((exe, user, r.cgroup.clone().unwrap_or_default()))
            .or_default()
            .push(l);
    }
    for ((exe, user, cgroup), leaks) in groups {
        let ages: Vec<u64> = leaks.iter().map(|l| l.root.age_secs).collect();
        let (young, old) = (
            ages.iter().min().copied().unwrap_or(0),
            ages.iter().max().copied().unwrap_or(0),
        );
        let started = if young == old {
            format!("started {} ago", age(old))
        } else {
            format!("started {}–{} ago", age(young), age(old))
        };
        out!("  {exe} · uid {user} · cgroup {cgroup} · {started}");
        for l in leaks {
            leak(l, true);
        }
    }
    out!(
        "checked {} processes in {} ms{}{}",
        c.scanned,
        c.elapsed_ms,
        if c.unreadable > 0 {
            format!(
                "; {} orphan(s) of other users not readable (run as root to see their run ids)",
                c.unreadable
            )
        } else {
            String::new()
        },
        if c.certain.is_empty() {
            String::new()
        } else {
            "; `reaper audit --kill` kills the certain ones".into()
        }
    );
}

fn leak(l: &Leak, why: bool) {
    line(&l.root, 4);
    if why {
        let ev: Vec<String> = l.evidence.iter().map(describe).collect();
        out!("        {}", ev.join("; "));
        if let Some(o) = &l.origin {
            out!("        from {o}");
        }
    }
    for d in &l.descendants {
        line(d, 6);
    }
}

fn line(p: &ProcessInfo, indent: usize) {
    let cmd = if p.cmdline.is_empty() {
        format!("[{}]", p.comm)
    } else {
        p.cmdline.clone()
    };
    let cmd = if cmd.chars().count() > 70 {
        cmd.chars().take(69).collect::<String>() + "…"
    } else {
        cmd
    };
    out!(
        "{:indent$}{}@{}  {}  {}",
        "",
        p.pid,
        p.starttime,
        age(p.age_secs),
        cmd
    );
}

fn age(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// One line for a person.
fn describe(e: &Evidence) -> String {
    match e {
        Evidence::EndedRun { run } => format!("REAPER_RUN_ID={run}, whose reaper is gone"),
        Evidence::StaleRunCgroup { cgroup } => {
            format!("in run cgroup {cgroup}, whose reaper is gone")
        }
        Evidence::RunNotListed { run } => {
            format!("REAPER_RUN_ID={run}: its reaper lives but lists no such run")
        }
        Evidence::ServiceWithRunId { run } => format!(
            "a service manager's unit, with REAPER_RUN_ID={run} of an ended run (imported \
             into the manager's environment?)"
        ),
        Evidence::Reparented { to, to_comm } => {
            format!("reparented to {to_comm} (pid {to})")
        }
        Evidence::ForeignSession { sid, leader_gone } => format!(
            "started in session {sid}{}",
            if *leader_gone {
                ", whose leader is gone"
            } else {
                ""
            }
        ),
        Evidence::ForeignGroup { pgid, leader_gone } => format!(
            "started in process group {pgid}{}",
            if *leader_gone {
                ", whose leader is gone"
            } else {
                ""
            }
        ),
        Evidence::NotUnitMain { cgroup } => {
            format!("not the main process of {cgroup}")
        }
        Evidence::OwnSession => "leads a session of its own (setsid)".to_owned(),
        Evidence::StdinHungUp { was } => format!("stdin {was} hung up"),
        Evidence::StdinClosed => "stdin closed".to_owned(),
        // Evidence of a later library, without a sentence here yet.
        e => format!("{e:?}"),
    }
}
