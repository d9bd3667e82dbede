//! cgroup v2 controller files: enable controllers for a cgroup's children, write a limit, read
//! the flat-keyed statistics (`memory.events`, `pids.events`, `cpu.stat`). Which limits, and
//! where reaper may enable anything, is the caller's policy.

use super::cgroup::Cgroup;
use super::cgroupfs;

/// Enables `names` (`memory`, `pids`, `cpu`) for the children of `cg`: one write of
/// `+memory +pids` to `cgroup.subtree_control`. The kernel refuses it (EBUSY) while `cg` holds
/// processes of its own (the no-internal-processes rule; the root cgroup is exempt), and
/// (ENOENT) for a controller its parent did not enable for it.
pub fn enable(cg: &Cgroup, names: &[&str]) -> cgroupfs::Result<()> {
    let data: Vec<String> = names.iter().map(|n| format!("+{n}")).collect();
    cgroupfs::write(&cg.path().join("cgroup.subtree_control"), &data.join(" "))
}

/// Writes one interface file of `cg` (`memory.max`, `pids.max`, `cpu.max`…).
pub fn set(cg: &Cgroup, file: &str, value: &str) -> cgroupfs::Result<()> {
    cgroupfs::write(&cg.path().join(file), value)
}

/// Whether `cg` has the interface file `file` (a controller's files exist only while it is
/// enabled for the cgroup; some depend on the kernel's configuration, like `memory.swap.max`).
pub fn has(cg: &Cgroup, file: &str) -> bool {
    cg.path().join(file).exists()
}

/// A single-value file (`memory.peak`, `memory.current`, `pids.current`).
pub fn read_value(cg: &Cgroup, file: &str) -> cgroupfs::Result<u64> {
    let path = cg.path().join(file);
    let text = cgroupfs::read(&path)?;
    text.trim().parse().map_err(|_| {
        cgroupfs::CgroupFsError::new(
            cgroupfs::Op::Read,
            &path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a number: {:?}", text.trim()),
            ),
        )
    })
}

/// A flat-keyed file (`key value` per line), as `(key, value)` pairs; lines that are not a key
/// and a number are skipped.
pub fn read_keyed(cg: &Cgroup, file: &str) -> cgroupfs::Result<Vec<(String, u64)>> {
    Ok(parse_keyed(&cgroupfs::read(&cg.path().join(file))?))
}

pub fn parse_keyed(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = it.next()?.parse().ok()?;
            it.next().is_none().then(|| (k.to_owned(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files() {
        let t = "usage_usec 1203\nuser_usec 1000\nnr_throttled 4\nbad\nx y\n";
        assert_eq!(
            parse_keyed(t),
            vec![
                ("usage_usec".to_owned(), 1203),
                ("user_usec".to_owned(), 1000),
                ("nr_throttled".to_owned(), 4)
            ]
        );
    }
}
