//! `reaper-bench`: what containment costs and how fast the tree dies, side by side in one run.
//!
//! ```text
//! reaper-bench [--quick] [--out FILE] [--bin-dir DIR] [--alt-reaper PATH] [--static-reaper PATH]
//!              [--only spawn|mcp|observe|teardown] [--reps N]
//! ```
//!
//! Prints a markdown report on stdout. With `--out FILE`, also puts it into FILE between the
//! markers `<!-- bench:begin -->` and `<!-- bench:end -->` (the rest of FILE, hand-written notes,
//! is kept; without the markers the whole file is the report). `--bin-dir` is where `reaper`,
//! `reaper-fixture` and `fake-codex` are (default: next to this binary). `--alt-reaper` adds rows
//! for another reaper build (a patch under test) beside the first, measured in the same rounds.
//! `--static-reaper` adds spawn rows (and goals) for the static musl build of the same source,
//! what the release artifacts ship (`ci/dist.sh`), in the same rounds too. `ci/bench.sh` builds
//! them in release mode and runs this; `--quick` is its smoke version for `ci/test.sh`.
//! `--only spawn` runs the spawn cost alone (with `--alt-reaper`: a quick comparison of two
//! builds); `--only mcp`, `reaper mcp` (its per-call rows compare the two builds too);
//! `--only observe`, `reaper ps` and `reaper audit` on a busy host; `--only teardown`,
//! the 1000-process tree and the fork storm with their goals (with `--alt-reaper`: both builds'
//! rows in the same rounds, for a patch to the stop path). `--reps N`: N repetitions of each
//! teardown and storm row instead of the plan's.
//!
//! Every figure is a median over repetitions with its min–max; every ratio is taken between
//! figures measured in the same round of the same run. Nothing is asserted: goals are reported.

mod codex;
mod init;
mod mcp;
mod mech;
mod observe;
mod spawn;
mod stats;
mod sys;
mod teardown;

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use stats::{cell, num, ratio, Summary};
use teardown::{Scenario, Stopper};

/// Appended to the rows of the `--alt-reaper` build.
pub const ALT: &str = " — alt build";

/// Appended to the rows of the `--static-reaper` build.
pub const STATIC: &str = " — static (musl) build";

/// Paths and handles every part of the benchmark uses.
pub struct Setup {
    pub reaper: PathBuf,
    pub fixture: PathBuf,
    pub fake_codex: PathBuf,
    /// `mcp-floor`, the floor of an MCP call, where it was built beside the benchmark.
    pub mcp_floor: Option<PathBuf>,
    /// `--alt-reaper`: another build of reaper, benchmarked beside the first in the same run.
    pub alt_reaper: Option<PathBuf>,
    /// `--static-reaper`: the static (musl) build of the same source, for the spawn rows.
    pub static_reaper: Option<PathBuf>,
    pub timeout_bin: String,
    pub null: File,
    pub cgroup: Option<sys::CgroupHome>,
}

struct Plan {
    quick: bool,
    spawn_rounds: usize,
    mech_samples: usize,
    spawn_alone: usize,
    spawn_batch: usize,
    tree_sizes: Vec<u32>,
    tree_reps: usize,
    storm: (u32, u32),
    storm_reps: usize,
    init_reps: usize,
    codex_reps: usize,
    mcp: mcp::McpPlan,
    observe: observe::ObservePlan,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            quick: false,
            spawn_rounds: 10,
            mech_samples: 20,
            spawn_alone: 20,
            spawn_batch: 60,
            tree_sizes: vec![10, 100, 1000],
            tree_reps: 5,
            storm: (2000, 200),
            storm_reps: 9,
            init_reps: 5,
            codex_reps: 10,
            mcp: mcp::McpPlan {
                inits: 20,
                sessions: 3,
                calls: 200,
                parallel: 20,
                parallel_rounds: 5,
                alone_calls: 10,
                bulk_mib: 200,
                bulk_reps: 3,
            },
            observe: observe::ObservePlan {
                runs: 100,
                host: 5000,
                reps: 10,
            },
        }
    }

    fn quick() -> Plan {
        Plan {
            quick: true,
            spawn_rounds: 3,
            mech_samples: 3,
            spawn_alone: 3,
            spawn_batch: 10,
            tree_sizes: vec![10, 100],
            tree_reps: 1,
            storm: (200, 20),
            storm_reps: 1,
            init_reps: 1,
            codex_reps: 1,
            mcp: mcp::McpPlan {
                inits: 2,
                sessions: 1,
                calls: 10,
                parallel: 5,
                parallel_rounds: 1,
                alone_calls: 2,
                bulk_mib: 10,
                bulk_reps: 1,
            },
            observe: observe::ObservePlan {
                runs: 5,
                host: 300,
                reps: 2,
            },
        }
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("reaper-bench: {msg}\nusage: reaper-bench [--quick] [--out FILE] [--bin-dir DIR] [--alt-reaper PATH] [--static-reaper PATH] [--only spawn|mcp|observe|teardown] [--reps N]");
    std::process::exit(2)
}

fn main() {
    let mut quick = false;
    let mut out: Option<PathBuf> = None;
    let mut bin_dir: Option<PathBuf> = None;
    let mut alt: Option<PathBuf> = None;
    let mut static_reaper: Option<PathBuf> = None;
    let mut only: Option<&'static str> = None;
    let mut reps: Option<usize> = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--quick") => quick = true,
            Some("--only") => match args.next().as_deref().and_then(|a| a.to_str()) {
                Some("observe") => only = Some("observe"),
                Some("spawn") => only = Some("spawn"),
                Some("mcp") => only = Some("mcp"),
                Some("teardown") => only = Some("teardown"),
                _ => usage("--only spawn|mcp|observe|teardown"),
            },
            Some("--reps") => {
                reps = args
                    .next()
                    .and_then(|a| a.to_str()?.parse().ok())
                    .filter(|&n| n > 0)
                    .or_else(|| usage("--reps N (N ≥ 1)"))
            }
            Some("--out") => out = Some(args.next().unwrap_or_else(|| usage("--out FILE")).into()),
            Some("--alt-reaper") => {
                alt = Some(
                    args.next()
                        .unwrap_or_else(|| usage("--alt-reaper PATH"))
                        .into(),
                )
            }
            Some("--static-reaper") => {
                static_reaper = Some(
                    args.next()
                        .unwrap_or_else(|| usage("--static-reaper PATH"))
                        .into(),
                )
            }
            Some("--bin-dir") => {
                bin_dir = Some(args.next().unwrap_or_else(|| usage("--bin-dir DIR")).into())
            }
            _ => usage(&format!("unknown argument {a:?}")),
        }
    }
    if only.is_some() && out.is_some() {
        usage("--only prints a part of the report; it cannot replace the whole one (--out)");
    }
    let bin_dir = bin_dir.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| usage("cannot tell where the binaries are; pass --bin-dir"))
    });
    let setup = match setup(&bin_dir) {
        Ok(s) => Setup {
            alt_reaper: alt,
            static_reaper,
            ..s
        },
        Err(e) => {
            eprintln!("reaper-bench: {e}");
            std::process::exit(2)
        }
    };
    if let Err(e) = sys::become_subreaper() {
        eprintln!("reaper-bench: cannot become a child subreaper: {e}");
        std::process::exit(2)
    }
    let mut plan = if quick { Plan::quick() } else { Plan::full() };
    if let Some(n) = reps {
        plan.tree_reps = n;
        plan.storm_reps = n;
    }
    let report = match only {
        Some("observe") => {
            let mut r = String::new();
            let o = observe::bench(&setup, &plan.observe);
            observe_section(&mut r, &o, &plan.observe);
            r
        }
        Some("mcp") => {
            let mut r = String::new();
            let m = mcp::bench(&setup, &plan.mcp);
            mcp_section(&mut r, &m, &plan.mcp);
            r
        }
        Some("teardown") => teardown_only(&setup, &plan),
        Some(_) => {
            let mut r = String::new();
            let sp = spawn::bench(
                &setup,
                plan.spawn_rounds,
                plan.spawn_batch,
                plan.spawn_alone,
            );
            spawn_section(&mut r, &sp);
            r
        }
        None => run(&setup, &plan),
    };
    print!("{report}");
    // The smoke run's purpose: a part that failed fails it.
    if quick && report.contains("| **error** |") {
        eprintln!("reaper-bench: a part of the benchmark failed (the **error** rows above)");
        std::process::exit(1)
    }
    if let Some(path) = out {
        if let Err(e) = splice_into(&path, &report) {
            eprintln!("reaper-bench: cannot write {}: {e}", path.display());
            std::process::exit(1)
        }
        eprintln!("reaper-bench: wrote {}", path.display());
    }
}

fn setup(bin_dir: &Path) -> Result<Setup, String> {
    let find = |name: &str| {
        let p = bin_dir.join(name);
        p.is_file()
            .then_some(p)
            .ok_or_else(|| format!("{name} not found in {}", bin_dir.display()))
    };
    let timeout_bin = std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("timeout"))
                .find(|p| p.is_file())
        })
        .ok_or("timeout(1) not found in PATH")?;
    Ok(Setup {
        reaper: find("reaper")?,
        fixture: find("reaper-fixture")?,
        fake_codex: find("fake-codex")?,
        mcp_floor: find("mcp-floor").ok(),
        alt_reaper: None,
        static_reaper: None,
        timeout_bin: timeout_bin.to_string_lossy().into_owned(),
        null: sys::dev_null().map_err(|e| format!("/dev/null: {e}"))?,
        cgroup: sys::CgroupHome::find(),
    })
}

/// Whether `reaper run --containment BACKEND` works here; `Err` says why not.
fn backend_works(s: &Setup, backend: &str) -> Result<(), String> {
    let out = std::process::Command::new(&s.reaper)
        .args([
            "run",
            "--quiet",
            "--containment",
            backend,
            "--",
            "/bin/true",
        ])
        .output()
        .map_err(|e| e.to_string())?;
    sys::reap_strays();
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(err.lines().next().unwrap_or("failed").trim().to_owned())
    }
}

fn progress(msg: &str, t0: Instant) {
    eprintln!("reaper-bench: [{:>5.1}s] {msg}", t0.elapsed().as_secs_f64());
}

fn run(s: &Setup, plan: &Plan) -> String {
    let t0 = Instant::now();
    let machine_before = machine(s);
    let pgid = backend_works(s, "pgid");

    progress("spawn cost", t0);
    let spawn = spawn::bench(s, plan.spawn_rounds, plan.spawn_batch, plan.spawn_alone);
    progress("cgroup mechanisms, one at a time", t0);
    let mech = mech::bench(s, plan.mech_samples);

    let stoppers = stoppers(s, &pgid);
    let mut trees = Vec::new();
    for &n in &plan.tree_sizes {
        progress(&format!("teardown, tree of {n}"), t0);
        trees.push(tree(s, &stoppers, n, plan));
    }
    progress("teardown, fork storm", t0);
    let storm = storm(s, &stoppers, plan);
    progress("PID 1 of a container, beside tini and dumb-init", t0);
    let inits = init::bench(s, plan.init_reps);
    progress("reaper mcp", t0);
    let mcp = mcp::bench(s, &plan.mcp);
    progress("codex --version, with and without reaper", t0);
    let codex = codex::bench(s, plan.codex_reps);
    progress(
        &format!(
            "reaper ps and audit with {} runs and {} processes",
            plan.observe.runs, plan.observe.host
        ),
        t0,
    );
    let observe = observe::bench(s, &plan.observe);
    progress("done", t0);

    let mut r = String::new();
    header(&mut r, s, plan, &machine_before, t0);
    spawn_section(&mut r, &spawn);
    mech_section(&mut r, &mech, plan.mech_samples);
    teardown_section(&mut r, &trees, &storm, plan, &pgid);
    init_section(&mut r, &inits);
    mcp_section(&mut r, &mcp, &plan.mcp);
    codex_section(&mut r, &codex, plan.codex_reps);
    observe_section(&mut r, &observe, &plan.observe);
    goals_section(&mut r, &spawn, &trees, &storm, &mcp, &observe);
    r
}

/// Every way of stopping a tree, the alternative build's rows beside the first's.
fn stoppers(s: &Setup, pgid: &Result<(), String>) -> Vec<Stopper> {
    let mut stoppers = Vec::new();
    for alt in [false, true] {
        if alt && s.alt_reaper.is_none() {
            continue;
        }
        stoppers.push(Stopper::Reaper("cgroup", alt));
        stoppers.push(Stopper::Reaper("subreaper", alt));
        if pgid.is_ok() {
            stoppers.push(Stopper::Reaper("pgid", alt));
        }
    }
    stoppers.push(Stopper::Killpg);
    stoppers.push(Stopper::CgroupKill);
    stoppers
}

/// The teardown of a tree of `n`, by every stopper.
fn tree(s: &Setup, stoppers: &[Stopper], n: u32, plan: &Plan) -> Vec<teardown::TeardownRow> {
    teardown::bench(s, stoppers, Scenario::Tree(n), plan.tree_reps)
}

/// The fork storm's teardown, by every stopper.
fn storm(s: &Setup, stoppers: &[Stopper], plan: &Plan) -> Vec<teardown::TeardownRow> {
    let (size, ready_at) = plan.storm;
    teardown::bench(
        s,
        stoppers,
        Scenario::Storm(size, ready_at),
        plan.storm_reps,
    )
}

/// `--only teardown`: the largest tree and the fork storm, with their goals.
fn teardown_only(s: &Setup, plan: &Plan) -> String {
    let t0 = Instant::now();
    let pgid = backend_works(s, "pgid");
    let stoppers = stoppers(s, &pgid);
    let n = plan.tree_sizes.last().copied().unwrap_or(100);
    progress(&format!("teardown, tree of {n}"), t0);
    let trees = vec![tree(s, &stoppers, n, plan)];
    progress("teardown, fork storm", t0);
    let storm = storm(s, &stoppers, plan);
    progress("done", t0);
    let mut r = String::new();
    teardown_section(&mut r, &trees, &storm, plan, &pgid);
    let _ = writeln!(r, "### Teardown goals (reported, never asserted)\n");
    let _ = writeln!(r, "| goal | measured | |\n|---|---|---|");
    teardown_goals(&mut r, &trees, &storm, true);
    let _ = writeln!(r);
    r
}

fn observe_section(r: &mut String, o: &observe::ObserveResult, plan: &observe::ObservePlan) {
    let _ = writeln!(
        r,
        "### Observing: `reaper ps` and `reaper audit` on a busy host\n\n\
         {} live runs (each a `reaper run` of its own with its guardian), listed: {}; {} \
         processes on the host while measuring (the rest a sleeping fixture tree of the \
         benchmark's). Wall time from spawn to exit, ms, median of {} (min–max).\n",
        plan.runs, o.runs_listed, o.host_processes, plan.reps
    );
    if let Some(n) = &o.note {
        let _ = writeln!(r, "n/a: {n}\n");
    }
    let _ = writeln!(r, "| command | ms |\n|---|---|");
    for (label, ms) in &o.rows {
        let _ = writeln!(r, "| {label} | {} |", cell(*ms));
    }
    let _ = writeln!(r);
}

struct Machine {
    cores: String,
    cpu: String,
    kernel: String,
    cgroup: String,
    memory: String,
    load: String,
}

fn machine(s: &Setup) -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let usable = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cgroup = match &s.cgroup {
        Some(c) => format!(
            "{} (cgroup2 at `{}`, mount options `{}`; benchmark's own cgroup `{}`)",
            if c.hybrid { "hybrid" } else { "unified" },
            c.mount.display(),
            c.mount_options,
            c.own_dir.display()
        ),
        None => "no cgroup2 mount".into(),
    };
    let mem = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| format!("{:.1} GiB", kib as f64 / 1048576.0))
        .unwrap_or_default();
    Machine {
        cores: format!("{online} online, {usable} usable"),
        cpu,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        cgroup,
        memory: mem,
        load: read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn header(r: &mut String, s: &Setup, plan: &Plan, m: &Machine, t0: Instant) {
    let end = machine(s);
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
    let _ = writeln!(
        r,
        "## Results{}\n",
        if plan.quick {
            " (--quick smoke run: tiny samples, not for quoting)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        r,
        "Generated by `ci/bench.sh` on {} from reaper `{}` (release build, {}), in {:.0} s.\n\
         **These numbers come from a shared 2-core VM** on which other engineers' builds and \
         tests ran at the same time; absolute figures wander by tens of percent between runs, so \
         read the ratios, which compare figures measured in the same round.\n",
        env("REAPER_BENCH_DATE"),
        env("REAPER_BENCH_COMMIT"),
        env("REAPER_BENCH_RUSTC"),
        t0.elapsed().as_secs_f64()
    );
    if let Some(alt) = &s.alt_reaper {
        let _ = writeln!(
            r,
            "Rows marked \"{}\" run `{}`, another build benchmarked beside the first in \
             the same rounds.\n",
            ALT.trim_start_matches([' ', '—']),
            alt.display()
        );
    }
    if let Some(st) = &s.static_reaper {
        let _ = writeln!(
            r,
            "Rows marked \"{}\" run `{}`: the same source built as the release artifacts \
             are (`x86_64-unknown-linux-musl`, static: no dynamic loader, no shared library), \
             in the same rounds.\n",
            STATIC.trim_start_matches([' ', '—']),
            st.display()
        );
    }
    let _ = writeln!(r, "| machine | |\n|---|---|");
    let _ = writeln!(r, "| cores | {} |", m.cores);
    let _ = writeln!(r, "| CPU | {} |", m.cpu);
    let _ = writeln!(r, "| kernel | Linux {} |", m.kernel);
    let _ = writeln!(r, "| cgroup mode | {} |", m.cgroup);
    let _ = writeln!(r, "| memory | {} |", m.memory);
    let _ = writeln!(
        r,
        "| load average (1/5/15 min) | {} at start, {} at end |\n",
        m.load, end.load
    );
}

fn spawn_section(r: &mut String, sp: &spawn::SpawnResult) {
    let _ = writeln!(
        r,
        "### Spawn cost: sequential runs of `/bin/true`\n\n\
         **In a batch**: {} runs per row ({} rounds of {} back-to-back runs; the rows take \
         turns, in a rotating order); µs per run, median over the rounds (min–max). **Alone**: \
         {} single runs per row, each after a 50 ms pause, as a person or a CI script meets \
         reaper; back-to-back runs share kernel grace periods that a single run pays in full \
         (see the mechanisms below). Ratios are taken per round, then the median (min–max). \
         \"× cgroup floor\" compares with the first cgroup floor row, which joins the cgroup \
         the way `reaper run` does.\n",
        sp.runs_per_variant, sp.rounds, sp.batch, sp.alone
    );
    let _ = writeln!(
        r,
        "| how | batch: µs per run | × bare fork/exec | × `timeout 60` | × cgroup floor | alone: µs | alone: × `timeout 60` |\n|---|---|---|---|---|---|---|"
    );
    for row in &sp.rows {
        let name = match &row.note {
            Some(n) => format!("{} — n/a: {}", row.name, n.replace('|', "\\|")),
            None => row.name.clone(),
        };
        let _ = writeln!(
            r,
            "| {name} | {} | {} | {} | {} | {} | {} |",
            cell(row.us),
            ratio(row.vs_bare),
            ratio(row.vs_timeout),
            if row.vs_cgroup_floor.is_some() {
                ratio(row.vs_cgroup_floor)
            } else {
                String::new()
            },
            cell(row.alone_us),
            ratio(row.alone_vs_timeout),
        );
    }
    let _ = writeln!(r);
}

fn mech_section(r: &mut String, rows: &[mech::MechRow], samples: usize) {
    let _ = writeln!(
        r,
        "### The cgroup mechanisms, one at a time\n\n\
         Each timed alone, {samples} times, after a 30 ms pause: that is how a single \
         `reaper run` meets them, while back-to-back runs in a batch share some of their cost. \
         A `cgroup.procs` write takes the cgroup threadgroup rwsem for writing, which waits for \
         an RCU grace period when nobody wrote moments ago; `clone3(CLONE_INTO_CGROUP)` takes it \
         only for reading. Closing an inotify instance that had a watch waits for an SRCU grace \
         period; a `poll` on the `cgroup.events` fd (kernfs wakes it with POLLPRI) has no such \
         cost. µs, median (min–max).\n"
    );
    let _ = writeln!(r, "| mechanism | µs |\n|---|---|");
    for row in rows {
        let v = match &row.note {
            Some(n) => format!("n/a: {}", n.replace('|', "\\|")),
            None => cell(row.us),
        };
        let _ = writeln!(r, "| {} | {v} |", row.name);
    }
    let _ = writeln!(r);
}

fn teardown_rows(r: &mut String, rows: &[teardown::TeardownRow], storm: bool) {
    for row in rows {
        let name = match &row.note {
            Some(n) => format!("{} — n/a: {}", row.stopper, n.replace('|', "\\|")),
            None => row.stopper.clone(),
        };
        let procs = if storm {
            format!(
                "{} at stop, {} in all",
                cell(row.at_stop),
                cell(row.created)
            )
        } else {
            cell(row.created)
        };
        let surv = if row.note.is_some() && row.survivors_median.is_none() {
            "n/a".to_owned()
        } else if row.survivors_max == 0 {
            "**0**".to_owned()
        } else {
            format!(
                "**{}** (max {})",
                cell(row.survivors_median),
                row.survivors_max
            )
        };
        let _ = writeln!(
            r,
            "| {} | {name} | {procs} | {} | {} | {} | {surv} |",
            row.scenario,
            cell(row.dead_ms),
            cell(row.done_ms),
            ratio(row.vs_floor),
        );
    }
}

fn teardown_section(
    r: &mut String,
    trees: &[Vec<teardown::TeardownRow>],
    storm: &[teardown::TeardownRow],
    plan: &Plan,
    pgid: &Result<(), String>,
) {
    let _ = writeln!(
        r,
        "### Teardown: a tree, a tenth of it setsid'd and ignoring SIGTERM, stopped with no grace\n\n\
         `tree N --setsid-every 10` of `reaper-fixture` (fanout 4; every 10th process calls \
         `setsid()` and ignores TERM/INT/HUP, and its subtree follows it out of the leader's \
         group). {} repetitions per row, interleaved. The clock starts at the stop request \
         (SIGTERM to `reaper run --grace 0`; `kill(-pgid, SIGKILL)`; `cgroup.kill`). \
         **all dead**: a thread blocked on `flock(LOCK_EX)` of the fixture's oracle file, \
         which every process holds shared until it exits, gets the lock. **dead + reaped**: \
         the tool returned (reaper exits only when the tree is empty, reaped and its cgroup \
         removed); for `killpg` and the floor, this process reaped every member (it is a child \
         subreaper). Survivors: processes of the fixture's pid file still alive afterwards (pid \
         + start time; zombies are dead), cross-checked with the oracle; they are then killed \
         by pidfd. ms, median (min–max).\n",
        plan.tree_reps
    );
    if let Err(e) = pgid {
        let _ = writeln!(
            r,
            "The pgid backend is **n/a** in this build (`reaper run --containment pgid`: {}).\n",
            e.replace('|', "\\|")
        );
    }
    let _ = writeln!(
        r,
        "| tree | stopped by | processes | all dead, ms | dead + reaped, ms | × floor | survivors |\n|---|---|---|---|---|---|---|"
    );
    for rows in trees {
        teardown_rows(r, rows, false);
    }
    let _ = writeln!(
        r,
        "\n### Fork storm, still forking when the stop comes\n\n\
         `fork-storm {} --ready-at {}`: every process forks again every ~1 ms until {} exist; \
         the stop is requested as soon as {} have started. Same clocks as above; {} \
         repetitions.\n",
        plan.storm.0, plan.storm.1, plan.storm.0, plan.storm.1, plan.storm_reps
    );
    let _ = writeln!(
        r,
        "| storm | stopped by | processes | all dead, ms | dead + reaped, ms | × floor | survivors |\n|---|---|---|---|---|---|---|"
    );
    teardown_rows(r, storm, true);
    let _ = writeln!(r);
}

fn init_section(r: &mut String, rows: &[init::InitRow]) {
    let _ = writeln!(
        r,
        "### PID 1 of a container: `docker stop` of an app with a setsid'd process\n\n\
         A fresh PID namespace (`unshare --pid --fork --mount-proc`) whose PID 1 is each init \
         below, running `sh -c APP`: the main process, a background child and a setsid'd \
         grandchild each trap SIGTERM to write \"graceful NAME\" and exit 0. SIGTERM goes to \
         PID 1 (as `docker stop` sends it); counted is how many runs each part exited by its \
         trap (the rest were SIGKILLed by the kernel when PID 1 exited), and the time from the \
         signal to PID 1's exit (reaper's: its 2 s `--grace` when a process the app forked \
         during the TERM sweep got no TERM and is SIGKILLed at the grace's end). tini and \
         dumb-init are Debian's packages (`ci/bench.sh` installs them when it can).\n"
    );
    let _ = writeln!(
        r,
        "| PID 1 | main graceful | background child graceful | setsid'd grandchild graceful | SIGTERM → PID 1 exited, ms |\n|---|---|---|---|---|"
    );
    for row in rows {
        match &row.missing {
            Some(why) if row.runs == 0 => {
                let _ = writeln!(r, "| `{}` | n/a: {why} | | | |", row.name);
            }
            _ => {
                let g = |i: usize| format!("{}/{}", row.graceful[i], row.runs);
                let _ = writeln!(
                    r,
                    "| `{}` | {} | {} | {} | {} |",
                    row.name,
                    g(0),
                    g(1),
                    g(2),
                    cell(row.stop_ms)
                );
            }
        }
    }
    let _ = writeln!(r);
}

fn mcp_section(r: &mut String, m: &mcp::McpResult, p: &mcp::McpPlan) {
    let _ = writeln!(
        r,
        "### `reaper mcp` over stdio, with a fake codex that answers at once\n\n\
         Driven by this benchmark's own minimal JSON-RPC client over the server's stdin/stdout; \
         `CODEX_CMD` is `fake-codex` (compiled; `thread T / say ok / done` answers at once), so \
         the server's own cost shows. Default server flags (cgroup backend, guardian, \
         `--max-concurrent 8`). \"fake-codex directly\" is the same prompt through a pipe to \
         the fake started by this process: the floor of a call. \"floor server\" is \
         `mcp-floor` (`testkit/mcp-floor/`), an rmcp server over stdio whose one tool runs the \
         fake as a plain tokio child (no containment, records, limits or progress), called in \
         turn with reaper in the same sessions: what any MCP server that runs a program per \
         call pays.\n"
    );
    let _ = writeln!(r, "| measure | median (min–max) |\n|---|---|");
    let mut row = |k: String, v: String| {
        let _ = writeln!(r, "| {k} | {v} |");
    };
    row(
        format!(
            "spawn → `initialize` answered, ms ({} fresh servers)",
            p.inits
        ),
        cell(m.init_ms),
    );
    row(
        "idle RSS after `initialize`, MiB".into(),
        cell(m.idle_rss_mib),
    );
    row(
        "… its guardian process's RSS, MiB".into(),
        cell(m.guardian_rss_mib),
    );
    row("stdin EOF → server exited, ms".into(), cell(m.exit_ms));
    row(
        format!(
            "per-call latency, median of {} sequential calls, ms ({} sessions)",
            p.calls, p.sessions
        ),
        cell(m.call_median_ms),
    );
    row("per-call latency, p95, ms".into(), cell(m.call_p95_ms));
    row(
        format!(
            "one call alone (after a 50 ms pause), ms ({} per session, all sessions)",
            p.alone_calls
        ),
        cell(m.call_alone_ms),
    );
    row(
        "fake-codex directly, median, ms".into(),
        cell(m.direct_median_ms),
    );
    row(
        "per-call latency × fake-codex directly".into(),
        ratio(m.call_vs_direct),
    );
    if m.floor_median_ms.is_some() {
        row(
            "floor server (`mcp-floor`: rmcp, the fake as a plain tokio child), per-call median, ms"
                .into(),
            cell(m.floor_median_ms),
        );
        row(
            "… floor server × fake-codex directly".into(),
            ratio(m.floor_vs_direct),
        );
        row(
            "per-call latency × the floor server's, same sessions".into(),
            ratio(m.call_vs_floor),
        );
    }
    if m.alt_median_ms.is_some() {
        row(
            format!("per-call latency, median{}, ms", crate::ALT),
            cell(m.alt_median_ms),
        );
        row(
            "per-call latency × the alt build's, same sessions".into(),
            ratio(m.call_vs_alt),
        );
    }
    row(
        format!("RSS after {} calls, MiB", p.calls),
        cell(m.rss_after_calls_mib),
    );
    row(
        format!("peak RSS (VmHWM) after {} calls, MiB", p.calls),
        cell(m.hwm_after_calls_mib),
    );
    row(
        format!(
            "{} parallel calls: first request → last result, ms ({} rounds)",
            p.parallel, p.parallel_rounds
        ),
        cell(m.parallel_wall_ms),
    );
    row(
        format!("… per call (wall / {}), ms", p.parallel),
        cell(m.parallel_per_call_ms),
    );
    row(
        format!(
            "{} MiB of output in one call: wall, s ({} runs)",
            p.bulk_mib, p.bulk_reps
        ),
        cell(m.bulk_wall_s),
    );
    row(
        "… fake-codex writing it straight into a pipe, s".into(),
        cell(m.bulk_direct_s),
    );
    row("… call wall × direct".into(), ratio(m.bulk_vs_direct));
    row(
        "… server peak RSS before the call, MiB".into(),
        cell(m.bulk_hwm_before_mib),
    );
    row(
        "… server peak RSS after the call, MiB".into(),
        cell(m.bulk_hwm_mib),
    );
    for e in &m.errors {
        row("**error**".into(), e.replace('|', "\\|"));
    }
    let _ = writeln!(r);
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "n/a",
    }
}

fn codex_section(r: &mut String, c: &codex::CodexResult, reps: usize) {
    let _ = writeln!(
        r,
        "### What a user meets: `reaper run -- codex --version`\n\n\
         The real codex CLI (Node.js{}), {reps} runs each, alone after a 50 ms pause, the two \
         taking turns; `reaper run` with its defaults (cgroup backend, guardian). Ratio per pair. \
         ms, median (min–max).\n",
        c.codex
            .as_ref()
            .map_or(String::new(), |p| format!(", `{}`", p.display()))
    );
    let _ = writeln!(r, "| how | ms |\n|---|---|");
    let _ = writeln!(r, "| `codex --version` | {} |", cell(c.direct_ms));
    let _ = writeln!(
        r,
        "| `reaper run -- codex --version` | {} |",
        cell(c.reaper_ms)
    );
    let _ = writeln!(r, "| … × `codex --version` | {} |", ratio(c.ratio));
    if let Some(n) = &c.note {
        let _ = writeln!(r, "\n{n}");
    }
    let _ = writeln!(r);
}

fn goals_section(
    r: &mut String,
    sp: &spawn::SpawnResult,
    trees: &[Vec<teardown::TeardownRow>],
    storm: &[teardown::TeardownRow],
    m: &mcp::McpResult,
    o: &observe::ObserveResult,
) {
    let _ = writeln!(r, "### Goals (reported, never asserted)\n");
    let _ = writeln!(r, "| goal | measured | |\n|---|---|---|");
    let mut goal = |g: &str, measured: String, ok: Option<bool>| {
        let _ = writeln!(r, "| {g} | {measured} | {} |", verdict(ok));
    };
    let ours = |name: &str| name.starts_with("`reaper run`") && !name.ends_with(ALT);
    for row in sp.rows.iter().filter(|x| ours(&x.name)) {
        let name = row.name.trim_start_matches("`reaper run` ");
        goal(
            &format!("spawn cost within 1.5× `timeout 60 /bin/true`, in a batch: {name}"),
            ratio(row.vs_timeout),
            row.vs_timeout.map(|x| x.median <= 1.5),
        );
        goal(
            &format!("… one run alone, within 1.3× `timeout 60` alone (issue 16): {name}"),
            ratio(row.alone_vs_timeout),
            row.alone_vs_timeout.map(|x| x.median <= 1.3),
        );
    }
    teardown_goals(r, trees, storm, false);
    let mut goal = |g: &str, measured: String, ok: Option<bool>| {
        let _ = writeln!(r, "| {g} | {measured} | {} |", verdict(ok));
    };
    let lt = |s: Option<Summary>, lim: f64| s.map(|x| x.median < lim);
    goal(
        "MCP spawn → initialize under 20 ms",
        format!("{} ms", cell(m.init_ms)),
        lt(m.init_ms, 20.0),
    );
    goal(
        "MCP call within 1.2× fake-codex directly (issue 16)",
        ratio(m.call_vs_direct),
        m.call_vs_direct.map(|x| x.median <= 1.2),
    );
    goal(
        "MCP idle RSS under 10 MiB",
        format!("{} MiB", cell(m.idle_rss_mib)),
        lt(m.idle_rss_mib, 10.0),
    );
    goal(
        &format!("MCP {} MiB output with peak RSS under 30 MiB", m.bulk_mib),
        format!("{} MiB", cell(m.bulk_hwm_mib)),
        lt(m.bulk_hwm_mib, 30.0),
    );
    for (label, ms) in &o.rows {
        goal(
            &format!(
                "{label} under 100 ms with {} runs and {} processes",
                o.runs_listed, o.host_processes
            ),
            format!("{} ms", cell(*ms)),
            lt(*ms, 100.0),
        );
    }
    let _ = writeln!(r);
}

/// The teardown goals, as rows of the goals table: of this build's rows, and of the alternative
/// build's too with `with_alt`.
fn teardown_goals(
    r: &mut String,
    trees: &[Vec<teardown::TeardownRow>],
    storm: &[teardown::TeardownRow],
    with_alt: bool,
) {
    let mut goal = |g: &str, measured: String, ok: Option<bool>| {
        let _ = writeln!(r, "| {g} | {measured} | {} |", verdict(ok));
    };
    let ours = |name: &str| name.starts_with("`reaper run`") && (with_alt || !name.ends_with(ALT));
    if let Some(rows) = trees
        .iter()
        .find(|t| t.first().is_some_and(|x| x.scenario == "tree of 1000"))
    {
        for row in rows.iter().filter(|x| ours(&x.stopper)) {
            goal(
                &format!(
                    "1000-process teardown under 50 ms, zero survivors: {}",
                    row.stopper.trim_start_matches("`reaper run` ")
                ),
                format!(
                    "{} ms, {} survivor(s) max",
                    row.done_ms.map_or("n/a".into(), |x| num(x.median)),
                    row.survivors_max
                ),
                row.done_ms
                    .map(|x| x.median < 50.0 && row.survivors_max == 0),
            );
            let name = row.stopper.trim_start_matches("`reaper run` ");
            goal(
                &format!(
                    "1000-process teardown within 1.5× the `cgroup.kill` floor (issue 16): {name}"
                ),
                ratio(row.vs_floor),
                row.vs_floor.map(|x| x.median <= 1.5),
            );
        }
    }
    for row in storm.iter().filter(|x| ours(&x.stopper)) {
        let name = row.stopper.trim_start_matches("`reaper run` ");
        let lim = if name.starts_with("cgroup") { 1.5 } else { 3.0 };
        goal(
            &format!("fork storm, dead + reaped, within {lim}× the `cgroup.kill` floor (issue 16): {name}"),
            ratio(row.vs_floor),
            row.vs_floor.map(|x| x.median <= lim),
        );
    }
}

const BEGIN: &str = "<!-- bench:begin -->";
const END: &str = "<!-- bench:end -->";

/// Puts `report` between the markers of `path`, keeping the hand-written rest.
fn splice_into(path: &Path, report: &str) -> std::io::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{BEGIN}\n{report}{END}\n");
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            let after = &old[e + END.len()..];
            format!(
                "{}{block}{}",
                &old[..b],
                after.strip_prefix('\n').unwrap_or(after)
            )
        }
        _ => format!("# Benchmarks\n\n{block}"),
    };
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, new)?;
    std::fs::rename(&tmp, path)
}
