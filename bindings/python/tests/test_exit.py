"""The interpreter's end leaves no tree, however it ends: its normal exit and an uncaught
exception (the atexit handler kills every run's tree), os._exit (no handler runs: the
guardian sees the interpreter gone and kills the runs' cgroups), SIGKILL (the guardian too)."""

import signal
import subprocess
import sys
import time

import pytest

from conftest import HERE, WITHIN, python_env


@pytest.mark.parametrize("mode", ["normal", "exception", "os_exit", "sigkill"])
def test_interpreter_end_leaves_no_tree(tree, mode):
    ready = tree.dir / "script-ready"
    p = subprocess.Popen([sys.executable, str(HERE / "exit_script.py"), mode, str(ready),
                          *tree.argv("setsid-grandchild")],
                         env=python_env(), stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WITHIN
        while not ready.exists():
            assert p.poll() is None or ready.exists(), f"the script exited early: {p.stderr.read()}"
            assert time.monotonic() < deadline, "the script never got ready"
            time.sleep(0.02)
        tree.wait_ready("grandchild")
        if mode == "sigkill":
            p.send_signal(signal.SIGKILL)
    except BaseException:
        p.kill()
        raise
    finally:
        _, err = p.communicate()
    want = {"normal": 0, "exception": 1, "os_exit": 0, "sigkill": -signal.SIGKILL}[mode]
    assert p.returncode == want, err
    if mode == "exception":
        assert b"RuntimeError: uncaught" in err
    tree.assert_gone()
