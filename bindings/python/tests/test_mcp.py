"""reaper.mcp.stdio_client against a server whose tree is hostile (a setsid'd, TERM-ignoring
grandchild): closing the client, an exception in its block and the client's SIGKILL leave
nothing. The SDK's own stdio_client runs against the same server as a measurement (printed,
not asserted); what it leaks is then killed by recorded pid and start time."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP Python SDK (reaper-process[mcp])")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client as sdk_stdio_client  # noqa: E402

import reaper.mcp  # noqa: E402
from conftest import HERE, WITHIN, python_env  # noqa: E402

SERVER = str(HERE / "hostile_mcp_server.py")
SCENARIO = ("setsid-grandchild",)


def params(tree):
    return StdioServerParameters(command=sys.executable, args=[SERVER],
                                 env={"HOSTILE_ARGV": json.dumps(tree.argv(*SCENARIO))})


async def session(client, tree, fail=False):
    async with client(params(tree)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            assert tools.tools == []
            await asyncio.get_running_loop().run_in_executor(None, tree.wait_ready, "grandchild")
            if fail:
                raise RuntimeError("the client fails")


def measure(capsys, what, tree):
    # The SDK's shutdown is over when its block has exited: what lives now was left.
    left = tree.survivors()
    with capsys.disabled():
        print(f"\nmeasure: plain SDK stdio_client, {what}: {len(left)} of "
              f"{len(tree.recorded())} processes left: {left}")
    return left


def test_close_leaves_nothing(tree):
    asyncio.run(session(reaper.mcp.stdio_client, tree))
    tree.assert_gone()


def test_exception_in_the_block_leaves_nothing(tree):
    with pytest.raises(BaseException) as e:
        asyncio.run(session(reaper.mcp.stdio_client, tree, fail=True))
    assert "the client fails" in repr(e.value)
    tree.assert_gone()


def sigkill_client(tree, which):
    ready = tree.dir / "client-ready"
    env = python_env()
    env["HOSTILE_ARGV"] = json.dumps(tree.argv(*SCENARIO))
    client = subprocess.Popen([sys.executable, str(HERE / "mcp_client.py"), which, str(ready)],
                              env=env, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WITHIN
        while not ready.exists():
            assert client.poll() is None, f"the client exited: {client.returncode}"
            assert time.monotonic() < deadline, "the client never got ready"
            time.sleep(0.02)
        tree.wait_ready("grandchild")
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()


def test_client_sigkill_leaves_nothing(tree):
    sigkill_client(tree, "reaper")
    tree.assert_gone()


# The measurements: `tree2` kills what they leave (recorded pids, start times re-checked)
# without failing.

def test_plain_sdk_close_measured(tree2, capsys):
    asyncio.run(session(sdk_stdio_client, tree2))
    measure(capsys, "close", tree2)


def test_plain_sdk_exception_measured(tree2, capsys):
    with pytest.raises(BaseException):
        asyncio.run(session(sdk_stdio_client, tree2, fail=True))
    measure(capsys, "exception in the block", tree2)


def test_plain_sdk_client_sigkill_measured(tree2, capsys):
    sigkill_client(tree2, "sdk")
    measure(capsys, "client SIGKILL", tree2)
