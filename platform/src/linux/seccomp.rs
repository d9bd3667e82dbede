//! The sandbox's seccomp filter: the system calls that would take a process out of its cgroup
//! although the cgroup file system is read-only to it.
//!
//! - `clone3` fails with ENOSYS. Its `CLONE_INTO_CGROUP` creates the child in the cgroup a
//!   directory fd names, and the kernel checks only write access to that cgroup's `cgroup.procs`
//!   inode (`cgroup_may_write`), not whether the fd came through a read-only mount; the
//!   cgroup-namespace check applies only where cgroup2 is mounted with `nsdelegate`. The
//!   arguments are in memory, which a filter cannot read, so the whole call goes; ENOSYS is what
//!   glibc and Go take for "no clone3" and fall back to `clone`, which has no such flag.
//! - `unshare` and `clone` with `CLONE_NEWCGROUP` fail with EPERM: a cgroup namespace of a user
//!   namespace the process creates would let it mount a writable cgroup2 rooted at its own
//!   cgroup, whose limit files (`memory.max`, `pids.max`) it could then raise.
//!
//! Everything else is allowed: the filter closes routes out, it is no policy on what runs.

use libc::sock_filter;

/// `CLONE_NEWCGROUP` (include/uapi/linux/sched.h).
const CLONE_NEWCGROUP: u32 = 0x0200_0000;
/// The x32 ABI's system-call numbers carry this bit (arch/x86/include/uapi/asm/unistd.h).
#[cfg(target_arch = "x86_64")]
const X32: u32 = 0x4000_0000;

/// One ABI the kernel may be entered through: its `AUDIT_ARCH_*` and its numbers for the calls
/// the filter looks at.
struct Abi {
    arch: u32,
    clone3: &'static [u32],
    /// Calls whose first argument is a clone-flags word.
    flags_first: &'static [u32],
}

/// Every ABI a process on this kernel can use (a 64-bit kernel also runs 32-bit code).
#[cfg(target_arch = "x86_64")]
const ABIS: &[Abi] = &[
    // AUDIT_ARCH_X86_64 covers x32 too; its numbers carry the X32 bit.
    Abi {
        arch: 0xC000_003E,
        clone3: &[435, X32 | 435],
        // unshare 272, clone 56.
        flags_first: &[272, 56, X32 | 272, X32 | 56],
    },
    // AUDIT_ARCH_I386: unshare 310, clone 120.
    Abi {
        arch: 0x4000_0003,
        clone3: &[435],
        flags_first: &[310, 120],
    },
];

#[cfg(target_arch = "aarch64")]
const ABIS: &[Abi] = &[
    // AUDIT_ARCH_AARCH64: unshare 97, clone 220.
    Abi {
        arch: 0xC000_00B7,
        clone3: &[435],
        flags_first: &[97, 220],
    },
    // AUDIT_ARCH_ARM (compat): unshare 337, clone 120.
    Abi {
        arch: 0x4000_0028,
        clone3: &[435],
        flags_first: &[337, 120],
    },
];

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "the sandbox's seccomp filter knows the system-call numbers of x86_64 and aarch64 only"
);

/// `struct seccomp_data` offsets (include/uapi/linux/seccomp.h): nr, arch, then args[0] as a
/// 64-bit value whose low half comes first on these little-endian machines.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;

fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter program, built before the clone (the child installs it and must not allocate).
pub fn sandbox_filter() -> Vec<sock_filter> {
    use libc::{
        BPF_ABS, BPF_ALU, BPF_AND, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W,
        SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO,
    };
    let load = |off| stmt(BPF_LD | BPF_W | BPF_ABS, off);
    let ret = |v| stmt(BPF_RET | BPF_K, v);
    let allow = ret(SECCOMP_RET_ALLOW);
    let enosys = ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    let eperm = ret(SECCOMP_RET_ERRNO | libc::EPERM as u32);
    let mut prog = vec![load(ARCH)];
    for abi in ABIS {
        // Per ABI: `if arch != abi.arch skip to the next ABI`, then its checks.
        let mut body = vec![load(NR)];
        for &nr in abi.clone3 {
            body.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
            body.push(enosys);
        }
        for &nr in abi.flags_first {
            // Equal: load the flags, keep the bit, refuse if set; else skip these six.
            body.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 5));
            body.push(load(ARG0_LOW));
            body.push(stmt(BPF_ALU | BPF_AND | BPF_K, CLONE_NEWCGROUP));
            body.push(jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0));
            body.push(eperm);
            // The bit was clear: this call is allowed.
            body.push(allow);
        }
        body.push(allow);
        prog.push(jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            abi.arch,
            0,
            u8::try_from(body.len()).expect("a short per-ABI program"),
        ));
        // A body ends in a return, so the next test is reached only by skipping it, with the
        // arch still in the accumulator.
        prog.extend(body);
    }
    // An ABI this kernel does not have: nothing to filter.
    prog.push(allow);
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `prog` on one `seccomp_data`, as the kernel's classic-BPF interpreter does for the
    /// instructions the filter uses.
    fn decide(prog: &[sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        data[16..24].copy_from_slice(&arg0.to_ne_bytes());
        let word = |off: u32| {
            let o = off as usize;
            u32::from_ne_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]])
        };
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            let code = u32::from(i.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => a = word(i.k),
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf })
                }
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
        }
    }

    #[test]
    fn clone3_is_enosys_and_a_new_cgroup_namespace_eperm_on_every_abi() {
        let prog = sandbox_filter();
        let allow = libc::SECCOMP_RET_ALLOW;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let newcg = u64::from(CLONE_NEWCGROUP);
        for abi in ABIS {
            for &nr in abi.clone3 {
                assert_eq!(decide(&prog, abi.arch, nr, 0), enosys, "{nr}");
            }
            for &nr in abi.flags_first {
                assert_eq!(decide(&prog, abi.arch, nr, newcg), eperm, "{nr}");
                assert_eq!(decide(&prog, abi.arch, nr, newcg | 0x11), eperm, "{nr}");
                // The other flags alone (a new mount or user namespace, a thread).
                assert_eq!(decide(&prog, abi.arch, nr, 0x1002_0000), allow, "{nr}");
                // The high half of the argument is not a flag word's.
                assert_eq!(decide(&prog, abi.arch, nr, 1 << 40), allow, "{nr}");
            }
            // Anything else: read(2) is 0 on x86_64 and 63 on aarch64, write 1 and 64.
            for nr in [0, 1, 63, 64, 434, 436] {
                assert_eq!(decide(&prog, abi.arch, nr, newcg), allow, "{nr}");
            }
        }
        // An ABI the filter does not know.
        assert_eq!(decide(&prog, 0x1234, 435, 0), allow);
        assert!(prog.len() < usize::from(u16::MAX));
    }
}
