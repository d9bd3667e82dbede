"""reaper.run and reaper.Popen against hostile trees: every path that stops a command ends its
whole tree. Each test first proves its hostile process ran (the fixture's pid file, start times
checked), then that nothing of the tree is left."""

import gc
import os
import signal
import subprocess

import pytest

import reaper
from conftest import alive


def test_run_returns_the_outcome():
    r = reaper.run(["sh", "-c", "echo out; echo err >&2; exit 3"], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert isinstance(r, subprocess.CompletedProcess)
    assert r.stop_reason == "exited" and r.outcome.returncode == 3
    assert r.survivors == []
    r = reaper.run(["cat"], input=b"abc", capture_output=True)
    assert r.stdout == b"abc"
    with pytest.raises(subprocess.CalledProcessError) as e:
        reaper.run(["false"], check=True)
    assert isinstance(e.value, reaper.CalledProcessError) and e.value.outcome.returncode == 1


def test_missing_program_is_file_not_found():
    with pytest.raises(FileNotFoundError) as e:
        reaper.run(["/nonexistent/program"])
    assert isinstance(e.value, reaper.NotFound) and e.value.exit_code == 127
    with pytest.raises(FileNotFoundError):
        reaper.Popen(["no-such-program-anywhere"])


def test_signal_returncode_is_negative(tree):
    p = reaper.Popen(tree.argv("sleep", "600"))
    tree.wait_ready("leader")
    p.send_signal(signal.SIGUSR1)
    assert p.wait() == -signal.SIGUSR1
    tree.assert_gone()


def test_run_timeout_stops_the_setsid_grandchild(tree):
    # A subprocess.run timeout kills the leader alone: the grandchild, in a session of its own
    # and ignoring SIGTERM, would live on.
    with pytest.raises(subprocess.TimeoutExpired) as e:
        reaper.run(tree.argv("setsid-grandchild"), timeout=3, grace=0.5)
    o = e.value.outcome
    assert isinstance(e.value, reaper.TimeoutExpired)
    assert o.stop_reason == "timeout" and o.survivors == []
    rec = tree.recorded()
    assert {"leader", "child", "grandchild"} <= {r for _, _, r in rec}, rec
    tree.assert_gone()


def test_terminate_stops_a_double_forked_daemon(tree):
    p = reaper.Popen(tree.argv("daemon"), grace=0.5)
    tree.wait_ready("daemon")
    if p.backend == "cgroup":
        # The run's own cgroup holds the tree while it runs, and is gone with it.
        members = open(p.cgroup + "/cgroup.procs").read().split()
        assert str(p.pid) in members, (p.cgroup, members)
        assert p.warning is None
    p.terminate()
    assert p.wait() == -signal.SIGTERM
    assert p.outcome.stop_reason == "cancel" and p.outcome.survivors == []
    tree.assert_gone()
    if p.backend == "cgroup":
        assert p.outcome.cgroup == p.cgroup and not os.path.exists(p.cgroup)


def test_kill_ends_a_fork_storm(tree):
    p = reaper.Popen(tree.argv("fork-storm", "200", "--ready-at", "20"))
    tree.wait_ready("storm")
    p.kill()
    assert p.wait() == -signal.SIGKILL
    assert p.outcome.survivors == []
    tree.assert_gone()


def test_wait_timeout_then_kill(tree):
    p = reaper.Popen(tree.argv("setsid-grandchild"))
    tree.wait_ready("grandchild")
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    assert p.returncode is None and p.poll() is None
    p.kill()
    p.wait()
    tree.assert_gone()


def test_communicate_timeout_then_kill_with_a_pipe_holder(tree):
    p = reaper.Popen(tree.argv("hold-stdout", "--leader-stays"), stdout=reaper.PIPE)
    tree.wait_ready("holder")
    with pytest.raises(subprocess.TimeoutExpired):
        p.communicate(timeout=0.2)
    p.kill()
    out, _ = p.communicate()
    assert p.returncode == -signal.SIGKILL
    tree.assert_gone()


def test_communicate_returns_though_a_child_holds_the_pipe(tree):
    # The leader exits at once; a TERM-ignoring child keeps stdout open. subprocess's
    # communicate() would wait for EOF forever: here the run's end stops the holder.
    p = reaper.Popen(tree.argv("hold-stdout"), stdout=reaper.PIPE, grace=0.3)
    out, _ = p.communicate()
    assert p.returncode == 0
    assert "holder" in {r for _, _, r in tree.recorded()}
    assert p.outcome.killed >= 1
    tree.assert_gone()


def test_with_block_exception_stops_the_tree(tree):
    with pytest.raises(RuntimeError):
        with reaper.Popen(tree.argv("setsid-grandchild"), grace=0.3) as p:
            tree.wait_ready("grandchild")
            raise RuntimeError("the caller fails")
    assert p.outcome.stop_reason == "cancel"
    tree.assert_gone()


def test_with_block_end_stops_what_the_leader_left(tree):
    # The leader exits; its setsid'd, TERM-ignoring grandchild stays: the block's end waits for
    # the leader, as subprocess does, and the run's end stops the grandchild.
    with reaper.Popen(tree.argv("setsid-grandchild", "--leader-exits"), grace=0.3) as p:
        pass
    assert p.returncode == 0
    assert "grandchild" in {r for _, _, r in tree.recorded()}
    assert p.outcome.killed >= 1
    tree.assert_gone()


def test_gc_of_the_handle_kills_the_tree(tree):
    p = reaper.Popen(tree.argv("daemon"))
    tree.wait_ready("daemon")
    del p
    gc.collect()
    tree.assert_gone()


def test_text_mode_and_stdout_to_stderr():
    p = reaper.Popen(["sh", "-c", "echo a; echo b >&2"], stdout=reaper.PIPE,
                     stderr=reaper.STDOUT, text=True)
    out, err = p.communicate()
    assert out == "a\nb\n" and err is None and p.returncode == 0


def test_unsupported_arguments_are_refused():
    with pytest.raises(ValueError, match="preexec_fn"):
        reaper.Popen(["true"], preexec_fn=lambda: None)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_is_refused_clearly():
    import os
    reaper.run(["true"])  # the runtime and the guardian belong to this process
    pid = os.fork()
    if pid == 0:
        try:
            reaper.run(["true"])
        except reaper.ForkedError:
            os._exit(7)
        except BaseException:
            os._exit(8)
        os._exit(9)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7


def test_control_subprocess_terminate_leaves_the_grandchild(tree2):
    # The negative control: the same tree under subprocess.Popen. terminate() and wait() end
    # the leader alone; the setsid'd, TERM-ignoring grandchild lives on (tree2's cleanup kills
    # it by recorded pid and start time).
    p = subprocess.Popen(tree2.argv("setsid-grandchild"))
    tree2.wait_ready("grandchild")
    p.terminate()
    p.wait()
    assert any(r == "grandchild" and alive(p, s) for p, s, r in tree2.recorded()), tree2.recorded()
