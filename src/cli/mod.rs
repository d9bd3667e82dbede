//! The command-line faces: flags in, a run spec to the run layer, an exit status and a report
//! out.

pub mod doctor;
pub mod parse;
pub mod run;

/// A current-thread runtime: every fork happens on the main thread, which lives as long as
/// reaper (PR_SET_PDEATHSIG fires when the forking *thread* dies).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
