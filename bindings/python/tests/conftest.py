"""The hostile trees of reaper's fixture (`reaper-fixture`, testkit/), and the proof of their
deaths: its lock file (free only once every process of the tree has exited) and its pid file
(pid, start time and role of each process, to prove each ran and to name survivors).

REAPER_FIXTURE_BIN names the fixture (default: target/debug/reaper-fixture of this checkout).
Cleanup kills only the pids a test's tree recorded, after re-checking their start times."""

import fcntl
import os
import pathlib
import signal
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
FIXTURE = os.environ.get("REAPER_FIXTURE_BIN", str(TARGET / "reaper-fixture"))
HERE = pathlib.Path(__file__).resolve().parent

# Bounds on waits for something that should happen promptly (never asserted as durations: only
# a machine stalled for this long fails them).
WITHIN = 30


def stat(pid):
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[19])


def alive(pid, start):
    s = stat(pid)
    return s is not None and s[1] == start and s[0] not in ("Z", "X")


class Tree:
    """A hostile tree's bookkeeping in a temp dir."""

    def __init__(self, path):
        self.dir = pathlib.Path(path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.oracle = self.dir / "oracle"
        self.pids = self.dir / "pids"
        self.ready = self.dir / "ready"
        self.oracle.touch()

    def argv(self, *scenario):
        if not os.access(FIXTURE, os.X_OK):
            pytest.fail(f"no fixture at {FIXTURE} (cargo build -p reaper-testkit, or REAPER_FIXTURE_BIN)")
        return [FIXTURE, "--oracle", str(self.oracle), "--pids", str(self.pids),
                "--ready", str(self.ready), *scenario]

    def recorded(self):
        if not self.pids.exists():
            return []
        out = []
        for line in self.pids.read_text().splitlines():
            f = line.split()
            if len(f) >= 3:
                out.append((int(f[0]), int(f[1]), f[2]))
        return out

    def wait_ready(self, *roles):
        """Waits for the tree to be built; asserts each of `roles` ran and is alive now (its
        start time checked): the proof that the hostile process existed."""
        deadline = time.monotonic() + WITHIN
        while not self.ready.exists():
            assert time.monotonic() < deadline, f"the tree never got ready: {self.recorded()}"
            time.sleep(0.01)
        rec = self.recorded()
        for role in roles:
            assert any(r == role and alive(p, s) for p, s, r in rec), f"no live {role}: {rec}"
        return rec

    def survivors(self):
        return [f"{role} (pid {pid})" for pid, start, role in self.recorded() if alive(pid, start)]

    def all_dead(self):
        with open(self.oracle) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

    def wait_all_dead(self, within=WITHIN):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.all_dead() and not self.survivors():
                return True
            time.sleep(0.02)
        return self.all_dead() and not self.survivors()

    def assert_gone(self):
        assert self.recorded(), "the tree recorded no process"
        assert self.wait_all_dead(), f"survivors: {self.survivors()}"

    def kill_leftovers(self):
        killed = []
        for _ in range(100):
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
    t = Tree(tmp_path / "tree")
    yield t
    leaked = t.kill_leftovers()
    assert not leaked, f"test left processes alive (now killed): {leaked}"


@pytest.fixture
def tree2(tmp_path):
    t = Tree(tmp_path / "tree2")
    yield t
    t.kill_leftovers()


def python_env():
    """The environment for a child interpreter that imports this very `reaper`."""
    import reaper

    env = dict(os.environ)
    pkg = str(pathlib.Path(reaper.__file__).resolve().parents[1])
    env["PYTHONPATH"] = pkg + os.pathsep + env.get("PYTHONPATH", "")
    env["REAPER_FIXTURE_BIN"] = FIXTURE
    return env


def python():
    return sys.executable
