//! Every run, discoverable from outside its owner (Linux): what `reaper ps`, `reaper stop` and
//! `reaper kill` are built on.
//!
//! Each run — of the `reaper` binary's faces or of any program using [`crate::Command`] — has a
//! [`RunId`], which every process it starts inherits as [`RUN_ID_ENV`] (so what escapes, or
//! outlives its owner, still says whose it was), and a record in its user's
//! records directory: `/run/reaper` for root, `/run/user/UID/reaper` (else `/tmp/reaper-UID`)
//! for others, or `$REAPER_RUNTIME_DIR`. The record is written when the leader has started and
//! removed with the run (also when a [`crate::Child`] is dropped; by the [`crate::Guardian`]
//! or the next stale sweep when the owner was SIGKILLed).
//!
//! Why a directory and not the run's cgroup: every backend has one (the subreaper and pgid
//! backends have no cgroup), it is per user with the file system's permissions (a user's
//! records are closed to other users, root reads all), a rename makes each write whole, and it
//! lives on the runtime file system, so a reboot does not leave records behind (each record also
//! carries the boot it was written in, for a `/tmp` that survives one).
//!
//! - [`list`] and [`find`] read the records and add what the host says now ([`RunStatus`]: the
//!   owner alive or not, the processes, memory, CPU, limits hit), from the run's cgroup where
//!   it has one, else from `/proc` — without asking the owner, which may be stopped or gone.
//! - [`end`] stops or kills a run from another process: its owner is asked through the run's
//!   control socket and runs its own stop sequence (its outcome says
//!   [`crate::StopReason::Stopped`] or [`crate::StopReason::Killed`]); when it cannot answer,
//!   or is gone, the run is ended directly.
//!
//! | module         | concern                                                         |
//! |----------------|-----------------------------------------------------------------|
//! | `dir`          | where records live, made and trusted per user; files in them    |
//! | `record`       | the record file, the note of an outside stop, the stale sweep   |
//! | `control`      | the control socket: the owner's end and the asker's             |
//! | `registration` | the owner's side: recorded at the start, removed with the run   |
//! | `view`         | [`RunStatus`]: the record and the host's figures                |
//! | `act`          | [`end`]: through the owner, or directly                         |
//! | `as_user`      | root acting for a user, with that user's power only             |

mod act;
pub(crate) mod as_user;
pub(crate) mod control;
pub(crate) mod dir;
pub(crate) mod record;
pub(crate) mod registration;
mod view;

pub use crate::naming::{BadRunId, RunId, RUN_ID_ENV};
pub use act::{end, Done, EndError, EndOptions};
pub use control::Ended;
pub use dir::RUNTIME_DIR_ENV;
pub use record::{How, RECORD_VERSION};
pub(crate) use record::{Phase, RunRecord};
pub use view::{
    find, list, of_this_process, FindError, LimitsHit, ListOptions, Memory, RunState, RunStatus,
};
