//! `struct clone_args` of `clone3(2)`, for the spawn and the sandbox's helper.

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, Linux 5.7; not in every libc
/// release). Public for the benchmark's own clone3 floor.
#[repr(C)]
#[derive(Default)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

/// `CLONE_PIDFD` (include/uapi/linux/sched.h): a pidfd of the child, with it.
pub const CLONE_PIDFD: u64 = 0x1000;
