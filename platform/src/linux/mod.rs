//! Linux mechanisms: cgroup v2 files, pidfds, the subreaper, `/proc`.

pub mod cgroup;
pub mod cgroupfs;
pub mod controllers;
pub mod mountinfo;
pub mod namespaces;
pub mod pidfd;
pub mod procfs;
pub mod proctable;
pub mod sandbox;
pub mod seccomp;
pub mod spawn;
pub mod subreaper;
pub mod systemd;

// Portable since macOS got a build; still reachable here under the paths Linux code knows.
pub use crate::{errno, reap, signal};
