"""Shared helpers for the interop tests: real MCP clients (the official Python SDK) against
reaper. Death oracles as in the Rust tests: the fixture's lock file (free only when every
process of the tree has exited) and its pid file (to name survivors)."""

import fcntl
import os
import pathlib
import signal
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
REAPER = os.environ.get("REAPER_BIN", str(TARGET / "reaper"))
FIXTURE = os.environ.get("REAPER_FIXTURE_BIN", str(TARGET / "reaper-fixture"))
FAKE_CODEX = os.environ.get("REAPER_FAKE_CODEX_BIN", str(TARGET / "fake-codex"))


def stat(pid):
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def alive(pid, start):
    s = stat(pid)
    return s is not None and s[1] == start and s[0] not in ("Z", "X")


class Tree:
    """A hostile tree's bookkeeping in a temp dir."""

    def __init__(self, path):
        self.dir = pathlib.Path(path)
        self.oracle = self.dir / "oracle"
        self.pids = self.dir / "pids"
        self.oracle.touch()

    def fixture(self, *scenario):
        return [FIXTURE, "--oracle", str(self.oracle), "--pids", str(self.pids), *scenario]

    def recorded(self):
        if not self.pids.exists():
            return []
        out = []
        for line in self.pids.read_text().splitlines():
            f = line.split()
            if len(f) >= 2:
                out.append((int(f[0]), int(f[1]), f[2] if len(f) > 2 else ""))
        return out

    def survivors(self):
        return [f"{role} (pid {pid})" for pid, start, role in self.recorded() if alive(pid, start)]

    def all_dead(self):
        with open(self.oracle) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

    def wait_all_dead(self, within):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.all_dead() and not self.survivors():
                return True
            time.sleep(0.02)
        return self.all_dead() and not self.survivors()

    def wait_recorded(self, n, within=20):
        deadline = time.monotonic() + within
        while len(self.recorded()) < n:
            assert time.monotonic() < deadline, f"only {self.recorded()} recorded"
            time.sleep(0.02)

    def kill_leftovers(self):
        killed = []
        for _ in range(50):
            live = [(p, s, r) for p, s, r in self.recorded() if alive(p, s)]
            if not live:
                break
            for pid, start, role in live:
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue
                try:
                    if alive(pid, start):
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                        killed.append(f"{role} (pid {pid})")
                finally:
                    os.close(fd)
            time.sleep(0.02)
        return killed


@pytest.fixture
def tree(tmp_path):
    t = Tree(tmp_path)
    yield t
    leaked = t.kill_leftovers()
    assert not leaked, f"test left processes alive (now killed): {leaked}"


def cgroup_mount():
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split(" ")[0] == "cgroup2":
            return pathlib.Path(pre.split(" ")[4])
    return None


def reaper_cgroups_of(pid):
    """Run cgroups created by reaper process `pid` of this PID namespace (named
    reaper-PIDNS-PID-START-SEQ, PIDNS the namespace's inode)."""
    mnt = cgroup_mount()
    if mnt is None:
        return []
    pidns = os.stat("/proc/self/ns/pid").st_ino
    return [p for p in mnt.rglob(f"reaper-{pidns}-{pid}-*") if p.is_dir()]
