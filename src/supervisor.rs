//! The engine behind [`crate::Child`]: one supervisor per run drives it from its start to its
//! [`Outcome`] by a [`Plan`] and the [`Requests`] (the vocabulary is [`crate::supervise`]'s).

use std::time::Duration;

use reaper_platform::{signal, Signal};
use tokio::time::Instant;

use crate::run::Run;
use crate::supervise::{
    Announce, CutShort, Escalation, Plan, Request, Requests, Step, StopSpec, Target,
};
use crate::{Event, Outcome, StopReason};

/// Where the supervision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Running,
    /// The stdin EOF came: the leader may still exit by itself until then.
    Allowance(Instant),
    /// The leader exited by itself; its linger has not started.
    Exited,
    Lingering(Instant),
    Decided(StopReason),
    /// The stop sequence ran.
    Stopped(StopReason),
}

/// Drives one run from its start to its [`Outcome`] by a [`Plan`].
pub(crate) struct Supervisor {
    pub(crate) run: Run,
    plan: Plan,
    requests: Requests,
    stage: Stage,
    timeout_at: Option<Instant>,
    received: Option<Signal>,
    /// A [`Request::Kill`] came: the stop is SIGKILL to the tree, now.
    kill: bool,
    /// A job-control stop from the tree was ignored, and said so.
    ignored_stop: bool,
}

impl Supervisor {
    /// Starts supervising: the timeout counts from now.
    pub fn new(mut run: Run, plan: Plan, requests: Requests) -> Self {
        let timeout_at = plan.timeout.and_then(|d| Instant::now().checked_add(d));
        // A stop of reaper's own job (job control) is bounded by it: see `guardian`.
        run.leader.deadline = timeout_at;
        Supervisor {
            run,
            plan,
            requests,
            stage: Stage::Running,
            timeout_at,
            received: None,
            kill: false,
            ignored_stop: false,
        }
    }

    /// Whether the leader has exited, looked at now (and reaped, if so: the next step says
    /// [`Step::LeaderExited`]).
    pub fn leader_exited(&mut self) -> bool {
        self.run.leader.poll();
        self.run.leader.gone
    }

    /// Ends the supervision without stopping the run (`check --keep`).
    pub fn into_run(self) -> Run {
        self.run
    }

    /// Waits for the next thing that matters. Cancel-safe; after a [`Step::Stop`] it returns
    /// the same at once.
    pub async fn step(&mut self) -> Step {
        loop {
            match self.stage {
                Stage::Decided(r) | Stage::Stopped(r) => return Step::Stop(r),
                Stage::Exited => {
                    self.stage = if self.plan.linger.is_zero() {
                        Stage::Decided(StopReason::Exited)
                    } else {
                        Stage::Lingering(far(self.plan.linger))
                    };
                }
                Stage::Running | Stage::Allowance(_) | Stage::Lingering(_) => {
                    if let Some(step) = self.wait().await {
                        return step;
                    }
                }
            }
        }
    }

    /// One wait of a waiting stage; `None` when the supervision goes on.
    async fn wait(&mut self) -> Option<Step> {
        enum Woke {
            LeaderExited,
            /// The allowance or the linger is over.
            Over,
            Timeout,
            Request(Asked),
        }
        let stage = self.stage;
        let timeout_at = match stage {
            Stage::Lingering(_) if !self.plan.timeout_ends_linger => None,
            _ => self.timeout_at,
        };
        let control = control_of(&self.run);
        let run = &mut self.run;
        let watch = async {
            match stage {
                Stage::Allowance(until) => {
                    match tokio::time::timeout_at(until, run.wait_leader()).await {
                        Ok(_) => Woke::LeaderExited,
                        Err(_) => Woke::Over,
                    }
                }
                Stage::Lingering(until) => {
                    run.linger(until.saturating_duration_since(Instant::now()))
                        .await;
                    Woke::Over
                }
                _ => {
                    run.wait_leader().await;
                    Woke::LeaderExited
                }
            }
        };
        let woke = tokio::select! {
            w = watch => w,
            _ = sleep_until(timeout_at) => Woke::Timeout,
            r = next(&self.requests, &control) => Woke::Request(r),
        };
        match (woke, stage) {
            (Woke::LeaderExited, Stage::Running) => {
                self.stage = Stage::Exited;
                #[cfg(target_os = "linux")]
                if !self.plan.linger.is_zero() {
                    self.run.set_phase(crate::runs::Phase::Lingering, None);
                }
                Some(Step::LeaderExited)
            }
            // After a stdin EOF the leader's own exit ends the run as an exit, with no linger.
            (Woke::LeaderExited, _) => {
                self.stage = Stage::Decided(StopReason::Exited);
                Some(Step::LeaderExited)
            }
            (Woke::Over, Stage::Allowance(_)) => self.decide(StopReason::StdinEof),
            (Woke::Over, _) => self.decide(StopReason::Exited),
            (Woke::Timeout, _) => self.decide(StopReason::Timeout),
            (Woke::Request(r), _) => self.request(r),
        }
    }

    fn request(&mut self, r: Asked) -> Option<Step> {
        let r = match r {
            Asked::Request(r) => r,
            Asked::Outside(StopReason::Killed) => {
                self.kill = true;
                return self.decide(StopReason::Killed);
            }
            Asked::Outside(reason) => return self.decide(reason),
        };
        match r {
            Request::Signal(sig) if self.plan.forward.contains(&sig) => {
                self.run.forward(sig, self.plan.forward_to == Target::Tree);
                None
            }
            // timeout(1) takes a SIGALRM from outside for its timeout.
            Request::Signal(sig)
                if sig == Signal::ALARM
                    && matches!(self.plan.escalation, Escalation::AfterLeader { .. }) =>
            {
                self.decide(StopReason::Timeout)
            }
            Request::Signal(sig) => {
                self.received = Some(sig);
                self.decide(StopReason::Signal)
            }
            Request::Cancel => self.decide(StopReason::Cancel),
            Request::Kill => {
                self.kill = true;
                self.decide(StopReason::Cancel)
            }
            Request::ParentDied => self.decide(StopReason::ParentDied),
            Request::StdinEof => match (self.stage, self.plan.stdin_eof) {
                (Stage::Running, Some(allowance)) => {
                    self.run.sink.emit(Event::StdinEof);
                    self.stage = Stage::Allowance(far(allowance));
                    None
                }
                _ => None,
            },
            Request::Shutdown => self.decide(StopReason::Shutdown),
            Request::JobStop(stop) => {
                if self.run.sent_from_outside(stop.sender) {
                    self.run.leader.relay_stop(stop.signal);
                } else {
                    tracing::debug!(?stop, "a job-control stop from the run itself: ignored");
                    if !self.ignored_stop {
                        self.ignored_stop = true;
                        tracing::info!(
                            "ignored SIG{} sent to reaper by a process of its run (or by a \
                             sender it cannot prove is outside it): only the terminal and \
                             processes outside the run stop reaper's job",
                            signal::name(stop.signal)
                        );
                    }
                }
                None
            }
        }
    }

    /// The run stops for `reason`: said once, as it is decided.
    fn decide(&mut self, reason: StopReason) -> Option<Step> {
        let sink = &self.run.sink;
        match reason {
            StopReason::Timeout => sink.emit(Event::Timeout {
                after: self.plan.timeout.unwrap_or_default(),
            }),
            StopReason::Cancel => sink.emit(Event::CancelRequested),
            StopReason::ParentDied => sink.emit(Event::ParentDied),
            StopReason::Signal => {
                if let Some(sig) = self.received {
                    sink.emit(Event::ReaperSignalled { signal: sig })
                }
            }
            // Said when the EOF came (the allowance started then); an exit is `LeaderExited`;
            // a shutdown is the server's, not the run's.
            StopReason::StdinEof
            | StopReason::Exited
            | StopReason::Shutdown
            | StopReason::Oom
            | StopReason::Error => {}
            StopReason::Stopped | StopReason::Killed => sink.emit(Event::EndRequested {
                kill: reason == StopReason::Killed,
            }),
        }
        #[cfg(target_os = "linux")]
        if reason != StopReason::Exited {
            self.run
                .set_phase(crate::runs::Phase::Stopping, Some(reason));
        }
        self.stage = Stage::Decided(reason);
        Some(Step::Stop(reason))
    }

    /// Runs the supervision to its decision, then the stop sequence of the plan. Once only
    /// (later calls return at once); not cancel-safe: run it to its end.
    pub async fn stop(&mut self) {
        let reason = loop {
            match self.step().await {
                Step::Stop(r) => break r,
                Step::LeaderExited => {}
            }
        };
        if matches!(self.stage, Stage::Stopped(_)) {
            return;
        }
        let mut reason = reason;
        let plan = self.plan.clone();
        let mut spec = match reason {
            StopReason::Exited => plan.leftovers,
            StopReason::ParentDied => StopSpec {
                grace: plan.stop.grace.min(plan.parent_death_grace),
                ..plan.stop
            },
            StopReason::Shutdown => StopSpec {
                grace: plan.stop.grace.min(plan.shutdown_grace),
                ..plan.stop
            },
            _ => plan.stop,
        };
        if self.kill {
            spec = StopSpec::KILL;
        }
        if let (
            false,
            Escalation::AfterLeader {
                kill_after,
                foreground,
                announce,
            },
        ) = (self.kill, &plan.escalation)
        {
            if matches!(reason, StopReason::Timeout | StopReason::Signal) {
                let (end, timed_out) = self
                    .signal_and_wait(reason, *kill_after, *foreground, announce.as_ref())
                    .await;
                if timed_out {
                    reason = StopReason::Timeout;
                }
                // The rest of the tree already had the signal, if it was sent to all: what is
                // left of its grace, then SIGKILL. After -k: SIGKILL at once.
                spec = match end {
                    StageEnd::KillAfter => StopSpec::KILL,
                    StageEnd::LeaderExited {
                        signalled_all: true,
                        left,
                    } => StopSpec {
                        first: None,
                        to: Target::Tree,
                        grace: left,
                    },
                    StageEnd::LeaderExited {
                        signalled_all: false,
                        left,
                    } => StopSpec {
                        to: Target::Tree,
                        grace: left,
                        ..spec
                    },
                };
            }
        }
        let requests = &self.requests;
        let control = control_of(&self.run);
        let forward = &plan.forward;
        let cut = plan.cut_short;
        // A kill asked for during the grace ends it whatever the plan says.
        let cut_short = async move {
            loop {
                let r = match next(requests, &control).await {
                    Asked::Request(r) => r,
                    Asked::Outside(StopReason::Killed) => break,
                    Asked::Outside(_) => continue,
                };
                match (cut, r) {
                    (_, Request::Kill) => break,
                    (CutShort::BySignal, Request::Signal(s)) if !forward.contains(&s) => break,
                    // A shutdown during a cancel's or timeout's grace cuts it to nothing; the
                    // shutdown's own (short) grace is not cut.
                    (CutShort::ByShutdown, Request::Shutdown) if reason != StopReason::Shutdown => {
                        break
                    }
                    _ => {}
                }
            }
        };
        match (spec.to, spec.first) {
            (Target::Leader, Some(first)) => {
                self.run
                    .stop_from_leader(first, spec.grace, cut_short)
                    .await
            }
            _ => self.run.stop(spec.first, spec.grace, cut_short).await,
        }
        self.stage = Stage::Stopped(reason);
    }

    /// timeout(1) after its timeout or a signal to reaper: the signal (the `-s` one, or the one
    /// reaper received) to the tree — to COMMAND alone with `--foreground` — then a wait for
    /// COMMAND itself: for `-k` at most, for ever without it (timeout(1) never escalates by
    /// itself). A further signal to reaper is passed on the same way; the timeout, if it fires
    /// meanwhile, sends the `-s` signal. Returns how it ended and whether the timeout fired.
    async fn signal_and_wait(
        &mut self,
        reason: StopReason,
        kill_after: Option<Duration>,
        foreground: bool,
        announce: Option<&Announce>,
    ) -> (StageEnd, bool) {
        let say = |sig: Option<Signal>| {
            if let Some(a) = announce {
                a(sig)
            }
        };
        let mut timed_out = reason == StopReason::Timeout;
        let mut timeout_pending = self.timeout_at.is_some() && !timed_out;
        let mut sig = if timed_out {
            self.plan.stop.first
        } else {
            self.received.or(self.plan.stop.first)
        };
        let kill_at = kill_after.and_then(|d| Instant::now().checked_add(d));
        let mut signalled_all = false;
        loop {
            say(sig);
            if let Some(s) = sig {
                self.run.signal(s, foreground);
                signalled_all |= !foreground;
            }
            // Waits until something re-sends, ignoring what timeout(1) does not listen to.
            let control = control_of(&self.run);
            loop {
                let timeout_at = self.timeout_at.filter(|_| timeout_pending);
                tokio::select! {
                    _ = self.run.wait_leader() => {
                        let left = kill_at.map_or(self.plan.stop.grace, |t| {
                            t.saturating_duration_since(Instant::now())
                        });
                        return (StageEnd::LeaderExited { signalled_all, left }, timed_out);
                    }
                    _ = sleep_until(kill_at) => {
                        say(Some(Signal::KILL));
                        return (StageEnd::KillAfter, timed_out);
                    }
                    _ = sleep_until(timeout_at) => {
                        timeout_pending = false;
                        timed_out = true;
                        sig = self.plan.stop.first;
                        break;
                    }
                    r = next(&self.requests, &control) => match r {
                        Asked::Outside(StopReason::Killed) => {
                            return (StageEnd::KillAfter, timed_out)
                        }
                        Asked::Outside(_) => {}
                        Asked::Request(Request::Signal(s)) if s == Signal::ALARM => {
                            timeout_pending = false;
                            timed_out = true;
                            sig = self.plan.stop.first;
                            break;
                        }
                        Asked::Request(Request::Signal(s)) => {
                            sig = Some(s);
                            break;
                        }
                        Asked::Request(Request::Kill) => return (StageEnd::KillAfter, timed_out),
                        Asked::Request(_) => {}
                    },
                }
            }
        }
    }

    /// Stops the run as planned (if not yet), then reaps, lists survivors, removes the
    /// containment and returns the one outcome.
    pub async fn finish(mut self) -> Outcome {
        self.stop().await;
        let reason = match self.stage {
            Stage::Stopped(r) | Stage::Decided(r) => r,
            _ => StopReason::Exited,
        };
        self.run.finish(reason, self.received).await
    }
}

/// How timeout(1)'s wait for COMMAND ended.
enum StageEnd {
    /// `-k` passed with COMMAND still running: everything is SIGKILLed now.
    KillAfter,
    /// COMMAND exited. `signalled_all`: the rest of the tree had the signal too; `left`: the
    /// grace it still has before SIGKILL.
    LeaderExited { signalled_all: bool, left: Duration },
}

/// `d` from now; durations are capped at 100 years (parse::duration), and an Instant that far
/// may still not exist: then a year, which is for ever in practice.
fn far(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
}

/// A request to the run: from its owner's [`Requests`], or from another process through the
/// run's control socket (`reaper stop`: [`StopReason::Stopped`], `reaper kill`:
/// [`StopReason::Killed`]).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // no control socket off Linux
enum Asked {
    Request(Request),
    Outside(StopReason),
}

/// The run's control socket, where it has one.
#[cfg(target_os = "linux")]
type ControlRef = Option<std::sync::Arc<crate::runs::control::Control>>;
#[cfg(not(target_os = "linux"))]
type ControlRef = Option<std::convert::Infallible>;

fn control_of(run: &Run) -> ControlRef {
    #[cfg(target_os = "linux")]
    return run.control();
    #[cfg(not(target_os = "linux"))]
    {
        let _ = run;
        None
    }
}

/// The next request, from whichever source has one. Cancel-safe: each source's receive is.
async fn next(requests: &Requests, control: &ControlRef) -> Asked {
    #[cfg(target_os = "linux")]
    let outside = async {
        match control {
            Some(c) => c.request().await.reason(),
            None => std::future::pending().await,
        }
    };
    #[cfg(not(target_os = "linux"))]
    let outside = {
        let _ = control;
        std::future::pending::<StopReason>()
    };
    tokio::select! {
        r = requests.next() => Asked::Request(r),
        reason = outside => Asked::Outside(reason),
    }
}

/// Resolves at `at`; never without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
