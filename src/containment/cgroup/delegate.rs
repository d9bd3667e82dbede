//! Under systemd, reaper's run cgroups live in a scope of its own with `Delegate=yes`.
//!
//! On a systemd machine the cgroup tree belongs to systemd: a normal user's session cgroup is not
//! theirs to write, and root's service cgroup belongs to its unit, which did not hand it over. So
//! before creating run cgroups reaper asks the service manager — the user's own over the session
//! bus, the system manager for root — for a transient scope `reaper-PID-STARTTIME.scope` with
//! `Delegate=yes` and moves itself into it, as `systemd-run --scope -p Delegate=yes` would. A unit
//! that is already delegated (reaper started inside `systemd-run -p Delegate=yes`) is used as it
//! is. The scope ends when reaper exits.
//!
//! Asked once per reaper process, before its first run cgroup; `--delegate never` or
//! `--cgroup-parent` skip it.

#[cfg(feature = "systemd")]
use std::time::Duration;

#[cfg(feature = "systemd")]
use reaper_platform::linux::systemd::{self, Bus, Manager};
use tokio::sync::OnceCell;

/// Why the step was not asked for: the caller chose `Delegation::Never`.
pub const NEVER: &str = "the caller chose never to ask";

/// What the delegation step did.
#[derive(Debug, Clone)]
pub enum Delegated {
    /// Not asked, and why (not under systemd, `--delegate never`).
    NotAsked(&'static str),
    /// reaper already runs in a delegated unit.
    #[cfg_attr(not(feature = "systemd"), allow(dead_code))] // found by asking systemd
    Inherited { unit: String },
    /// reaper moved itself into this new scope, from this service manager (`the user's
    /// service manager`, `the system's service manager`).
    #[cfg_attr(not(feature = "systemd"), allow(dead_code))]
    Started { unit: String, bus: &'static str },
    /// systemd was asked and did not delegate: run cgroups must not be created in a cgroup
    /// systemd manages for another unit.
    Failed { why: String },
}

impl Delegated {
    /// The delegated unit reaper's run cgroups live in.
    pub fn unit(&self) -> Option<&str> {
        match self {
            Delegated::Inherited { unit } | Delegated::Started { unit, .. } => Some(unit),
            _ => None,
        }
    }

    /// One line for `reaper doctor`.
    pub fn describe(&self) -> String {
        match self {
            Delegated::NotAsked(why) => format!("not asked: {why}"),
            Delegated::Inherited { unit } => format!("already in a delegated unit ({unit})"),
            Delegated::Started { unit, bus } => {
                format!("moved into {unit}, a scope with Delegate=yes from {bus}")
            }
            Delegated::Failed { why } => format!("failed: {why}"),
        }
    }
}

/// Bounds every exchange with systemd: a manager that does not answer must not hang reaper.
#[cfg(feature = "systemd")]
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
#[cfg(feature = "systemd")]
const JOB_TIMEOUT: Duration = Duration::from_secs(5);

/// The step's result, once per process: it moves this process into a scope, which only
/// happens once; every later run cgroup goes there.
static DONE: OnceCell<Delegated> = OnceCell::const_new();

/// Runs the delegation step once per process and returns what it did; `ask: false`
/// (`--delegate never`) records that systemd was not asked.
pub async fn ensure(ask: bool) -> &'static Delegated {
    DONE.get_or_init(|| delegate(ask)).await
}

/// What the step did, if it ran (for reports).
pub fn done() -> Option<&'static Delegated> {
    DONE.get()
}

async fn delegate(ask: bool) -> Delegated {
    if !ask {
        return Delegated::NotAsked(NEVER);
    }
    if !reaper_platform::linux::systemd_booted() {
        return Delegated::NotAsked("systemd is not the service manager here");
    }
    // A container's read-only cgroup file system: a scope would not make it writable, and a
    // manager reached through a shared bus socket would move reaper for nothing.
    if super::place::discover().is_ok_and(|env| {
        reaper_platform::linux::namespaces::read_only(&env.mount.mount_point).unwrap_or(false)
    }) {
        return Delegated::NotAsked("the cgroup file system is read-only here (a container?)");
    }
    ask_systemd().await
}

#[cfg(not(feature = "systemd"))]
async fn ask_systemd() -> Delegated {
    Delegated::Failed {
        why: "systemd is the service manager here, and this reaper was built without D-Bus \
              support (the `systemd` feature) to ask it for a delegated scope"
            .into(),
    }
}

#[cfg(feature = "systemd")]
async fn ask_systemd() -> Delegated {
    let bus = if rustix::process::geteuid().is_root() {
        Bus::System
    } else {
        Bus::User
    };
    match ask(bus).await {
        Ok(d) => d,
        Err(e) => Delegated::Failed {
            why: format!(
                "{} did not give reaper a delegated scope: {e}",
                bus.as_str()
            ),
        },
    }
}

#[cfg(feature = "systemd")]
async fn ask(bus: Bus) -> Result<Delegated, systemd::SystemdError> {
    let manager = Manager::connect(bus, CALL_TIMEOUT).await?;
    // PID 0 means "the caller" to systemd, which then takes reaper's pid from the bus's peer
    // credentials, in its own PID namespace: in a container reaper's own pid names some other
    // process there, and moving that one into reaper's scope would touch what is not reaper's.
    if let Ok((unit, true)) = manager.unit_of(0).await {
        return Ok(Delegated::Inherited { unit });
    }
    let reaper_platform::process::Identity {
        starttime: start, ..
    } = reaper_platform::linux::procfs::self_identity().map_err(|e| systemd::SystemdError {
        step: "naming the scope",
        detail: format!("cannot read /proc/self/stat: {e}"),
    })?;
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let unit = format!("reaper-{pid}-{start}.scope");
    manager
        .start_delegated_scope(
            &unit,
            0,
            &format!("reaper {pid}: its run cgroups"),
            JOB_TIMEOUT,
        )
        .await?;
    // The job is done, so the move is: check it, rather than trust it.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if !own
        .lines()
        .any(|l| l.starts_with("0::") && l.ends_with(&unit))
    {
        return Err(systemd::SystemdError {
            step: "moving into the scope",
            detail: format!("{unit} started, but /proc/self/cgroup says {}", own.trim()),
        });
    }
    Ok(Delegated::Started {
        unit,
        bus: bus.as_str(),
    })
}
