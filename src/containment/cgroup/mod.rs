//! The cgroup backend, from where run cgroups go to the sweep of those whose reaper is gone.
//! Each module uses only those above it in this table:
//!
//! | module     | concern                                                                    |
//! |------------|----------------------------------------------------------------------------|
//! | `place`    | the cgroup2 mount, reaper's own cgroup, where run cgroups go, their names  |
//! | `delegate` | under systemd, a delegated scope to create them in (asked once per process)|
//! | `limits`   | the controllers limits need, enabled and set; what they did                |
//! | `create`   | a run cgroup made and owner-locked; reaper's own leaf when it needs one    |
//! | `escapees` | processes of the run that left its cgroup: found, stopped, named           |
//! | `backend`  | [`CgroupBackend`]: spawn into the cgroup, signal, kill, wait for empty     |
//! | `stale`    | the sweep of run cgroups whose reaper is provably gone                     |
//!
//! Process-wide state, each documented where it lives: the mount read once (`place`), the
//! delegation asked once (`delegate::DONE`), the run cgroups this process holds (`escapees::LIVE`,
//! so an orphan is attributed only where that is certain), and reaper's own leaf's lock
//! (`create::ensure_leaf`). A run cgroup's number is its run's (`naming::next_seq`).

pub mod backend;
pub mod create;
pub mod delegate;
pub mod escapees;
pub mod limits;
pub mod place;
pub mod stale;

pub use backend::CgroupBackend;
