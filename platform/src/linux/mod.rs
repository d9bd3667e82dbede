//! Linux mechanisms: cgroup v2 files, pidfds, the subreaper, `/proc`.

pub mod cgroup;
pub mod cgroupfs;
pub mod clone_args;
pub mod controllers;
pub mod creds;
pub mod detach;
pub mod mountinfo;
pub mod namespaces;
pub mod peer;
pub mod pidfd;
pub mod procfs;
pub mod proctable;
pub mod sandbox;
pub mod sched;
pub mod seccomp;
pub mod spawn;
pub mod subreaper;
#[cfg(feature = "systemd")]
pub mod systemd;

/// Whether systemd is the service manager of this machine (sd_booted(3): the directory
/// `/run/systemd/system` exists only then).
pub fn systemd_booted() -> bool {
    std::path::Path::new("/run/systemd/system").is_dir()
}
