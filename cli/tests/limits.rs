//! Resource limits (issue 13): `--memory-max`, `--pids-max`, `--cpus`. A limit is enforced or
//! the run does not start: never silently dropped. Here (a hybrid host: cgroup v1 holds memory,
//! pids and cpu, and reaper never touches v1) that is the failure path — exit 125, a message
//! naming the flag, the controller, where reaper looked and what to do, the command never run,
//! nothing created. The limits themselves are tested in the VM lane (ci/vm/scenarios/limits.sh).

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// (flag, value, controller)
const FLAGS: [(&str, &str, &str); 3] = [
    ("--memory-max", "64M", "memory"),
    ("--pids-max", "50", "pids"),
    ("--cpus", "0.5", "cpu"),
];

/// What `reaper doctor --json` says about this host.
fn doctor() -> serde_json::Value {
    let out = run_reaper(["doctor", "--json", "--delegate", "never"]);
    serde_json::from_slice(&out.stdout).expect("doctor --json")
}

/// Directories under the cgroup2 mount's reaper cgroups named after reaper process `pid`.
fn cgroups_of(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = run_cgroup_prefix(pid);
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `reaper ARGS -- touch MARKER`; returns (exit code, stderr, whether the command ran,
/// cgroups that reaper left behind).
fn try_run(args: &[&str]) -> (i32, String, bool, Vec<PathBuf>) {
    let tmp = tempfile::Builder::new()
        .prefix("reaper-test-limits-")
        .tempdir()
        .unwrap();
    let marker = tmp.path().join("ran");
    let child = reaper()
        .args(args)
        .arg("--")
        .arg("touch")
        .arg(&marker)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn reaper");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait reaper");
    let own = doctor()["own_cgroup_dir"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_default();
    (
        code(&out),
        stderr(&out),
        marker.exists(),
        cgroups_of(&own, pid),
    )
}

/// Issue 13: a limit reaper cannot enforce must stop the run, not vanish. Under `auto` (which
/// otherwise falls back to the subreaper with a warning) and under `cgroup`, each flag on a host
/// whose cgroup v2 lacks its controller: 125, the exact message, CMD never runs, no cgroup left.
/// Fails if `limits::check` lets a missing controller through (proved by making it return
/// `Ok(vec![])`: the command ran and reaper exited 0).
#[test]
fn each_limit_without_its_controller_is_refused_with_125_and_nothing_runs() {
    if !have(Need::Cgroup) {
        return;
    }
    let d = doctor();
    // Read here, not taken from reaper: which controllers reaper's cgroup has, and whether
    // reaper may enable them (not in the root cgroup, which is the whole machine's).
    let dir = d["own_cgroup_dir"].as_str().unwrap().to_owned();
    let words = |file: &str| -> Vec<String> {
        std::fs::read_to_string(Path::new(&dir).join(file))
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let (available, enabled) = (words("cgroup.controllers"), words("cgroup.subtree_control"));
    let in_root = d["own_cgroup"] == "/";
    let listed = if available.is_empty() {
        "none".to_owned()
    } else {
        available.join(" ")
    };
    let mut tested = 0;
    for (flag, value, controller) in FLAGS {
        let has = |v: &[String]| v.iter().any(|c| c == controller);
        if has(&available) && (has(&enabled) || !in_root) {
            eprintln!("skipped: {flag}: the {controller} controller is usable here (the VM lane tests the limit itself)");
            continue;
        }
        tested += 1;
        for containment in ["auto", "cgroup"] {
            let (rc, err, ran, left) = try_run(&[
                "run",
                "--delegate",
                "never",
                "--containment",
                containment,
                flag,
                value,
            ]);
            assert_eq!(rc, 125, "{flag} under {containment}: {err}");
            assert!(
                !ran,
                "{flag} under {containment}: the command ran without its limit"
            );
            assert!(left.is_empty(), "{flag}: left behind {left:?}");
            assert!(!err.contains("warning"), "{flag}: fell back? {err}");
            if d["cgroup_mode"] == "hybrid" && !has(&available) {
                assert_eq!(
                    err.trim_end(),
                    format!(
                        "reaper: {flag} needs the cgroup v2 {controller} controller, which is not \
                         available in {dir} (its cgroup.controllers lists: {listed}); this host \
                         mounts cgroup v1 beside v2 (hybrid mode) and v1 holds it, which reaper \
                         never uses: boot with systemd.unified_cgroup_hierarchy=1 (or \
                         cgroup_no_v1=all) so that cgroup v2 has it, or run without the flag; a \
                         limit is never dropped, so the run did not start"
                    ),
                    "{flag} under {containment}"
                );
            } else {
                for want in [flag, controller, dir.as_str(), "never dropped"] {
                    assert!(err.contains(want), "{flag}: no {want:?} in {err}");
                }
            }
        }
    }
    // `check` shares the flags and the path.
    if tested > 0 {
        let (flag, value, _) = FLAGS[0];
        let (rc, err, ran, _) = try_run(&["check", "--delegate", "never", flag, value]);
        assert!(!ran && err.contains(flag), "check ran: {rc} {err}");
    }
}

/// Issue 13: the subreaper and pgid backends have no cgroup to hold a limit, so a limit with
/// them is an error (125), not a run without it.
#[test]
fn a_limit_with_a_backend_that_cannot_hold_it_is_refused() {
    for containment in ["subreaper", "pgid"] {
        for (flag, value, _) in FLAGS {
            let (rc, err, ran, _) = try_run(&["run", "--containment", containment, flag, value]);
            assert_eq!(rc, 125, "{flag} with {containment}: {err}");
            assert!(!ran, "{flag} with {containment}: the command ran");
            assert_eq!(
                err.trim_end(),
                format!(
                    "reaper: {flag} needs the cgroup backend (cgroup v2); --containment \
                     {containment} cannot enforce it; a limit is never dropped, so the run did \
                     not start"
                )
            );
        }
    }
}

/// Issue 13: nonsense values are usage errors (125) that say what is wrong.
#[test]
fn nonsense_limit_values_are_usage_errors() {
    for (flag, value, says) in [
        ("--memory-max", "0", "at least 1M"),
        ("--memory-max", "1.5", "whole number"),
        ("--memory-max", "12X", "unknown unit 'X'"),
        ("--memory-max", "-1G", "invalid size"),
        ("--pids-max", "0", "from 1 to"),
        ("--pids-max", "1.5", "whole number"),
        ("--cpus", "0", "from 0.01"),
        ("--cpus", "nan", "invalid CPU count"),
    ] {
        let (rc, err, ran, _) = try_run(&["run", flag, value]);
        assert_eq!(rc, 125, "{flag} {value}: {err}");
        assert!(!ran);
        assert!(err.contains(says), "{flag} {value}: {err}");
    }
}

/// Issue 13: `reaper mcp` with a limit no call could get says so at the start (125), rather
/// than serving calls that all fail.
#[test]
fn mcp_with_a_limit_it_cannot_enforce_does_not_start() {
    if !have(Need::Cgroup) {
        return;
    }
    let d = doctor();
    let dir = PathBuf::from(d["own_cgroup_dir"].as_str().unwrap());
    let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap();
    if available.split_whitespace().any(|c| c == "memory") {
        eprintln!("skipped: mcp --memory-max: the memory controller is available here");
        return;
    }
    let out = run_reaper(["mcp", "--delegate", "never", "--memory-max", "64M"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("reaper mcp: --memory-max needs the cgroup v2 memory controller"),
        "{}",
        stderr(&out)
    );
}

/// Issue 13: the run's CPU time (`cpu.stat` `usage_usec`, there without any controller) is in
/// `--report`, `--events` and `check --json`, read before the cgroup is removed.
#[test]
fn reports_carry_the_runs_cpu_time() {
    if !have(Need::Cgroup) {
        return;
    }
    let busy = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done";
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("report.json");
    let out = reaper()
        .args(["run", "--containment", "cgroup", "--events", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", busy])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = read_report(&report);
    assert_clean_report(&r);
    assert!(
        r["usage"]["cpu_usage_usec"].as_u64().is_some_and(|u| u > 0),
        "{r}"
    );
    assert_eq!(r["limits"], serde_json::Value::Null);
    let reaped = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "reaped")
        .expect("a reaped event");
    assert!(
        reaped["usage"]["cpu_usage_usec"]
            .as_u64()
            .is_some_and(|u| u > 0),
        "{reaped}"
    );
    let out = reaper()
        .args([
            "check",
            "--containment",
            "cgroup",
            "--json",
            "--",
            "sh",
            "-c",
            busy,
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &v["runs"][0];
    assert!(
        run["usage"]["cpu_usage_usec"]
            .as_u64()
            .is_some_and(|u| u > 0),
        "{v}"
    );
    assert_eq!(run["out_of_memory"], false);
}
