//! `reaper-escape`: one deliberate attempt to get out of a run, as root or the user inside it
//! would make it, for the hostile tests. Each attempt prints `ran NAME` first (the proof that
//! the hostile process ran), then `NAME rc=N`: 0 when the attempt worked, else the errno. A
//! process that got out exits at once and starts nothing.
//!
//! - `clone3 DIR`: `clone3(CLONE_INTO_CGROUP)` with an `O_RDONLY` fd of the cgroup directory
//!   DIR (a read-only mount gives one): the child prints `clone3-child CGROUP` (its
//!   `/proc/self/cgroup` line) and exits.
//! - `setuid-proc-root UID PID FILE`: as root, keeps its capabilities across `setresuid(UID)`
//!   (the uid of a process PID outside the run), raises them again, and opens FILE under
//!   `/proc/PID/root` — that process's mount namespace — for writing, then writes its own pid
//!   to it (FILE: a `cgroup.procs`).
//! - `vhangup`: hangs up the controlling terminal (`vhangup(2)`).
//! - `unshare-cgroupns`: a new cgroup namespace (`unshare(CLONE_NEWCGROUP)`).

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("");
    println!("ran {name}");
    let rc = match (name, &args[1..]) {
        ("clone3", [dir]) => clone3(dir),
        ("setuid-proc-root", [uid, pid, file]) => setuid_proc_root(uid, pid, file),
        // SAFETY: vhangup(2) takes no arguments.
        ("vhangup", []) => errno_of(unsafe { libc::vhangup() }),
        // SAFETY: unshare(2) with a flag word; this process exits right after.
        ("unshare-cgroupns", []) => errno_of(unsafe { libc::unshare(libc::CLONE_NEWCGROUP) }),
        _ => {
            eprintln!(
                "usage: reaper-escape clone3 DIR | setuid-proc-root UID PID FILE | vhangup | \
                 unshare-cgroupns"
            );
            std::process::exit(2)
        }
    };
    println!("{name} rc={rc}");
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("reaper-escape: Linux only");
    std::process::exit(2)
}

/// 0 for a call that returned 0 or more, else its errno.
#[cfg(target_os = "linux")]
fn errno_of(ret: libc::c_int) -> i32 {
    if ret < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

#[cfg(target_os = "linux")]
fn clone3(dir: &str) -> i32 {
    use std::os::fd::AsRawFd;
    let fd = match std::fs::File::open(dir) {
        Ok(f) => f,
        Err(e) => return e.raw_os_error().unwrap_or(-1),
    };
    #[repr(C)]
    #[derive(Default)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: fd.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: no CLONE_VM: the child has a copy of this address space, prints one line and
    // exits without returning.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let line = cg.lines().find(|l| l.starts_with("0::")).unwrap_or("?");
        println!("clone3-child {line}");
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) }
    }
    if ret < 0 {
        return std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a local.
    unsafe { libc::waitpid(ret as libc::pid_t, &mut status, 0) };
    0
}

#[cfg(target_os = "linux")]
fn setuid_proc_root(uid: &str, pid: &str, file: &str) -> i32 {
    use std::io::Write;
    let Ok(uid) = uid.parse::<libc::uid_t>() else {
        return libc::EINVAL;
    };
    // SAFETY: prctl, setresuid and capget/capset on local plain structs, in this process only.
    unsafe {
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0
            || libc::setresuid(uid, uid, uid) != 0
        {
            return std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
        }
        // setresuid cleared the effective set; the permitted one was kept: raise it again.
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        if libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) != 0 {
            return std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
        }
        for x in &mut d {
            x.effective = x.permitted;
        }
        if libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) != 0 {
            return std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
        }
    }
    let path = format!("/proc/{pid}/root{file}");
    match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(mut f) => match write!(f, "{}", std::process::id()) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(-1),
        },
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}
