"""Issue: nothing of a wrapped stdio server's tree survives its MCP client, however the client
goes away (SIGKILL of the client alone, SIGKILL of the client's whole process group, or a
clean exit)."""

import json
import os
import signal
import subprocess
import sys
import time

from conftest import REAPER


def start_client(tree, group=False):
    server = [sys.executable, os.path.join(os.path.dirname(__file__), "wrapped_server.py"), str(tree.pids)]
    server += tree.fixture("setsid-grandchild")
    argv = [sys.executable, os.path.join(os.path.dirname(__file__), "wrapped_client.py"), REAPER,
            "run", "--die-with-parent", "--on-stdin-eof", "2s", "--", *server]
    client = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=group)
    line = client.stdout.readline()
    assert line, "the client did not get through initialize/list/call"
    answer = json.loads(line)
    assert answer == {"tools": ["hello"], "text": "hello reaper"}
    # server + fixture leader + child + setsid grandchild
    tree.wait_recorded(4)
    return client


def test_client_sigkilled_leaves_nothing(tree):
    client = start_client(tree)
    client.send_signal(signal.SIGKILL)
    client.wait()
    assert tree.wait_all_dead(5), f"survivors: {tree.survivors()}"


def test_client_process_group_sigkilled_leaves_nothing(tree):
    client = start_client(tree, group=True)
    os.killpg(client.pid, signal.SIGKILL)  # the group this test created for the client
    client.wait()
    assert tree.wait_all_dead(5), f"survivors: {tree.survivors()}"


def test_negative_control_without_reaper_the_escapee_survives(tree):
    """The same server launched directly: the SDK's shutdown misses the setsid grandchild."""
    server = [sys.executable, os.path.join(os.path.dirname(__file__), "wrapped_server.py"), str(tree.pids)]
    server += tree.fixture("setsid-grandchild")
    argv = [sys.executable, os.path.join(os.path.dirname(__file__), "wrapped_client.py"), *server]
    client = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert client.stdout.readline()
    tree.wait_recorded(4)
    client.send_signal(signal.SIGKILL)
    client.wait()
    time.sleep(1.0)
    survivors = tree.survivors()
    assert any(s.startswith("grandchild") for s in survivors), survivors
    tree.kill_leftovers()
