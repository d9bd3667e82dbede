"""The real Codex CLI (@openai/codex from the npm registry, installed by ci/install-deps.sh),
under `reaper mcp` and `reaper check`. No model is reachable here: a provider pointed at a
closed loopback port either fails fast (with the retry settings below) or retries forever.
Skipped, with the reason printed, when the CLI is not installed."""

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REAPER, alive, cgroup_mount, stat

CODEX = os.environ.get("REAPER_REAL_CODEX")
pytestmark = pytest.mark.skipif(not CODEX, reason="the real Codex CLI is not installed (ci/install-deps.sh installs it)")

DEAD_PROVIDER = [
    "-c", "model_provider=dead",
    "-c", 'model_providers.dead={name="dead",base_url="http://127.0.0.1:9/v1",wire_api="responses",request_max_retries=0,stream_max_retries=0}',
]
FAIL_FAST = ["--skip-git-repo-check", "--disable", "unbounded_connection_retries", *DEAD_PROVIDER]
# The default retry policy against the same dead port: codex retries with backoff forever.
RETRY_FOREVER = ["--skip-git-repo-check", "-c", "model_provider=dead",
                 "-c", 'model_providers.dead={name="dead",base_url="http://127.0.0.1:9/v1",wire_api="responses"}']


@pytest.fixture
def codex_env(tmp_path):
    home = pathlib.Path(tempfile.mkdtemp(prefix="codex-home-", dir=os.path.expanduser("~")))
    wrapper = tmp_path / "codex"
    cgroups = tmp_path / "cgroups"
    # Records the call's cgroup (from inside it), then becomes the real codex.
    wrapper.write_text(f"#!/bin/sh\ngrep '^0::' /proc/self/cgroup | cut -c4- >> {cgroups}\nexec {CODEX} \"$@\"\n")
    wrapper.chmod(0o755)
    env = dict(os.environ, CODEX_HOME=str(home), CODEX_CMD=str(wrapper), OPENAI_API_KEY="unused")
    yield env, cgroups
    subprocess.run(["rm", "-rf", str(home)])


def members(cg):
    """(pid, starttime, comm) of every process in a cgroup, recursively."""
    out = []
    for procs in cg.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            s = stat(int(pid))
            if s:
                comm = pathlib.Path(f"/proc/{pid}/comm").read_text().strip() if pathlib.Path(f"/proc/{pid}/comm").exists() else "?"
                out.append((int(pid), s[1], comm))
    return out


async def mcp_session(env, server_flags, body):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=REAPER, args=["mcp", "--grace", "2s", "--", *server_flags], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)


def test_fail_fast_provider_returns_codex_error_and_thread_id(codex_env):
    env, _ = codex_env

    async def body(session):
        return await session.call_tool("codex", {"prompt": "say hi"})

    r = asyncio.run(mcp_session(env, FAIL_FAST, body))
    text = r.content[0].text
    print(text)
    assert r.is_error is True
    assert text.startswith("[ERROR] "), text
    assert "Connection failed" in text or "error sending request" in text, text
    assert "returncode=1" in text
    assert r.structured_content and len(r.structured_content["threadId"]) >= 32, r.structured_content


def test_retrying_codex_is_cancelled_then_timed_out_leaving_nothing(codex_env):
    env, cgroups = codex_env
    mnt = cgroup_mount()
    seen = {}

    async def body(session):
        async def snapshot_soon(tag):
            # While the call runs: what is in its cgroup (launcher, native binary, shell).
            for _ in range(100):
                await asyncio.sleep(0.1)
                if cgroups.exists() and mnt is not None:
                    cg = mnt / cgroups.read_text().split()[-1].lstrip("/")
                    procs = members(cg)
                    if len(procs) >= 2:
                        await asyncio.sleep(1.0)
                        seen[tag] = (cg, members(cg))
                        return

        snap = asyncio.create_task(snapshot_soon("cancel"))
        try:
            await session.call_tool("codex", {"prompt": "say hi"}, read_timeout_seconds=4)
            cancelled = False
        except Exception:
            cancelled = True
        await snap
        t0 = time.monotonic()
        r = await session.call_tool("codex", {"prompt": "say hi", "timeout_seconds": 30})
        return cancelled, r, time.monotonic() - t0

    cancelled, r, took = asyncio.run(mcp_session(env, RETRY_FOREVER, body))
    assert cancelled, "the first call should have been abandoned by the client"
    text = r.content[0].text
    print(text[:500])
    assert r.is_error is True and text.startswith("[ERROR] timeout after 30s"), text
    assert took < 30 + 2 + 5, f"timeout result came after {took:.1f}s"
    cg, procs = seen["cancel"]
    print("processes in the cancelled call's cgroup:", procs)
    comms = {c for _, _, c in procs}
    assert len(procs) >= 2 and any("codex" in c or "node" in c for c in comms), procs
    # Every process that was in the cancelled call's tree is dead and every call cgroup is gone.
    deadline = time.monotonic() + 5
    while any(alive(p, s) for p, s, _ in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in procs if alive(p[0], p[1])]
    for path in cgroups.read_text().split():
        assert not (mnt / path.lstrip("/")).exists(), f"cgroup {path} left behind"


def run_check(env, signal_name):
    argv = [REAPER, "check", "--json", "--interrupt-after", "2s", "--interrupt-signal", signal_name, "--settle", "1s",
            "--", CODEX, "exec", "--json", *RETRY_FOREVER, "say hi"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    report = json.loads(p.stdout)
    print(signal_name, "->", report["result"], [(s["cmdline"][:60], s["escaped_by"]) for s in report["runs"][0]["survivors"]])
    return p.returncode, report


def test_check_finds_the_native_binary_orphaned_by_a_sigkilled_launcher(codex_env):
    env, _ = codex_env
    code, report = run_check(env, "KILL")
    survivors = report["runs"][0]["survivors"]
    # Node < 22.15 runs the native binary as a child of the launcher: KILL orphans it.
    node_major, node_minor = map(int, subprocess.run(["node", "-p", "process.versions.node"], capture_output=True, text=True).stdout.split(".")[:2])
    if (node_major, node_minor) < (22, 15):
        assert code == 1, report
        native = [s for s in survivors if "codex" in (s["exe"] or "") or "codex" in s["cmdline"]]
        assert native and "reparented" in native[0]["escaped_by"], survivors
    else:
        assert code in (0, 1)


def test_check_with_sigint_reports_what_codex_leaves(codex_env):
    env, _ = codex_env
    code, report = run_check(env, "INT")
    # codex handles SIGINT (interrupts the turn, kills its tool groups): whatever it leaves is
    # reported, and reaper kills it either way.
    assert code in (0, 1), report
    assert report["runs"][0]["interrupt"]["sent"] is True
