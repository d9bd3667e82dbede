//! `reaper stop RUN…` and `reaper kill RUN…`: end a run from another process
//! (`reaper::runs::end`): its owner runs its own stop sequence and says how the run ended; an
//! owner that is stopped, does not answer, or is gone is done without.

use std::time::Duration;

use reaper::runs::{self, Done, EndOptions, How, ListOptions};

use crate::coreutils as parse;

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// The runs: `PID-N` as `reaper ps` shows them, or the full id (`REAPER_RUN_ID`).
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<String>,

    /// How long the owner gets to take the request before reaper acts without it.
    #[arg(long, value_parser = parse::duration, default_value = "1s", value_name = "DUR")]
    pub answer_within: Duration,

    /// `stop` only: the grace when reaper stops the run itself (the run's own otherwise).
    #[arg(long, value_parser = parse::duration, value_name = "DUR")]
    pub grace: Option<Duration>,

    /// What happened, as one JSON object per run on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: StopArgs, how: How) -> u8 {
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            say!("reaper: cannot start the async runtime: {e}");
            return 125;
        }
    };
    let mut opts = EndOptions::default();
    opts.answer_within = args.answer_within;
    opts.grace = args.grace;
    let mut status = 0;
    for text in &args.runs {
        let run = match runs::find(text, ListOptions::default()) {
            Ok(r) => r,
            Err(e) => {
                say!("reaper: {}", crate::advice::find_error(&e));
                status = 1;
                continue;
            }
        };
        let done = rt.block_on(runs::end(&run, how, opts));
        match done {
            Ok(d) => {
                if args.json {
                    let v =
                        serde_json::json!({"run": run.id, "done": crate::report::done_json(&d)});
                    out!("{v}");
                } else {
                    say!("reaper: {}", describe(&run, how, &d));
                }
            }
            Err(e) => {
                say!("reaper: run {}: {e}", run.short_id);
                status = 1;
            }
        }
    }
    status
}

fn describe(run: &runs::RunStatus, how: How, done: &Done) -> String {
    let id = &run.short_id;
    let owner = run.id.owner().pid;
    let verb = match how {
        How::Stop => "stopped",
        How::Kill => "killed",
    };
    match done {
        Done::Owner { ended: Some(e) } => {
            let reason = serde_json::to_value(e.stop_reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!(
                "run {id} {verb} by its owner (pid {owner}): stop_reason {reason}, {} process(es) \
                 ended{}",
                e.killed,
                if e.survivors > 0 {
                    format!(", {} survived", e.survivors)
                } else {
                    String::new()
                }
            )
        }
        Done::Owner { ended: None } => {
            format!("run {id} {verb} by its owner (pid {owner}), which did not say how it ended")
        }
        Done::AlreadyOver => format!("run {id} had ended already"),
        Done::Directly {
            owner: why,
            killed,
            cgroup_removed,
            limits,
        } => {
            let why = match *why {
                "stopped" => format!(
                    "its owner (pid {owner}) is stopped; it will report the run {verb} once \
                     continued"
                ),
                "gone" => format!("its owner (pid {owner}) is gone"),
                "kept" => "it was kept alive outside reaper (reaper check --keep)".to_owned(),
                "impostor" => format!(
                    "what listens at its socket is not its owner (pid {owner}); its answer was \
                     not believed"
                ),
                _ => format!("its owner (pid {owner}) did not answer"),
            };
            let mut s = format!("run {id}: {why}; {verb} {killed} process(es) directly");
            if *cgroup_removed {
                s.push_str(", its cgroup removed");
            }
            if let Some(l) = limits {
                s.push_str(&format!(" ({l})"));
            }
            s
        }
        // An end of a later version, without a sentence here yet.
        done => format!("run {id}: {done:?}"),
    }
}
