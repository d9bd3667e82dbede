"""`reaper mcp` with the official MCP Python SDK as a real client: list tools, call, progress,
cancel mid-call, exit mid-call. The fake codex records every process it starts; none may
survive, and no cgroup may be left."""

import json
import os
import pathlib
import subprocess
import sys
import time

from conftest import FAKE_CODEX, REAPER, cgroup_mount

CLIENT = os.path.join(os.path.dirname(__file__), "mcp_python_client.py")


def drive(tree, scenario, timeout=60):
    p = subprocess.run(
        [sys.executable, CLIENT, REAPER, FAKE_CODEX, str(tree.pids), scenario],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return p, lines


def cgroups_recorded(tree):
    mnt = cgroup_mount()
    out = []
    for line in tree.pids.read_text().splitlines() if tree.pids.exists() else []:
        f = line.split()
        if len(f) >= 4 and mnt is not None and f[3] != "/":
            out.append(mnt / f[3].lstrip("/"))
    return out


def assert_nothing_left(tree, within=5):
    assert tree.wait_all_dead(within), f"survivors: {tree.survivors()}"
    deadline = time.monotonic() + within
    while any(p.exists() for p in cgroups_recorded(tree)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [str(p) for p in cgroups_recorded(tree) if p.exists()]
    assert not left, f"cgroups left: {left}"


def test_list_tools_with_schemas(tree):
    p, lines = drive(tree, "list")
    assert p.returncode == 0, p.stderr
    tools = lines[0]["tools"]
    assert set(tools) == {"codex", "codex-reply"}
    assert tools["codex"]["input"]["required"] == ["prompt"]
    assert sorted(tools["codex-reply"]["input"]["required"]) == ["prompt", "thread_id"]
    for t in tools.values():
        assert t["output"]["properties"].keys() >= {"threadId", "content"}


def test_call_and_reply(tree):
    p, lines = drive(tree, "call")
    assert p.returncode == 0, p.stderr
    first, reply, bad = lines
    assert first["is_error"] is False
    assert first["text"].startswith("hello from fake codex\n\n[codex] thread_id=T1 status=completed")
    assert first["structured"] == {"threadId": "T1", "content": "hello from fake codex"}
    assert reply["structured"]["threadId"] == "T1" and reply["structured"]["content"] == "again"
    assert bad["is_error"] is True
    assert bad["text"] == "[ERROR] input validation: unknown parameter `cwd`; this server calls it `cd`"
    assert_nothing_left(tree)


def test_progress_notifications_rise(tree):
    p, lines = drive(tree, "progress")
    assert p.returncode == 0, p.stderr
    seen = lines[0]["progress"]
    assert len(seen) >= 2, seen
    values = [s["progress"] for s in seen]
    assert values == sorted(values) and len(set(values)) == len(values), values
    assert any("codex running for" in (s["message"] or "") for s in seen), seen
    assert_nothing_left(tree)


def test_cancel_mid_call_kills_the_whole_tree(tree):
    p, lines = drive(tree, "cancel")
    assert p.returncode == 0, p.stderr
    assert lines[0]["cancelled"] is True
    assert lines[1]["after_cancel"].startswith("alive")
    roles = {r for _, _, r in tree.recorded()}
    assert {"codex", "escapee"} <= roles, roles
    assert_nothing_left(tree)


def test_timeout_ends_the_call_and_its_whole_tree(tree):
    p, lines = drive(tree, "timeout")
    assert p.returncode == 0, p.stderr
    r = lines[0]
    assert r["is_error"] is True
    assert r["text"].startswith("[ERROR] timeout after 30s"), r["text"]
    assert r["structured"]["threadId"] == "T3"
    roles = {role for _, _, role in tree.recorded()}
    assert {"codex", "escapee"} <= roles, roles
    assert_nothing_left(tree)


def test_client_exit_mid_call_leaves_nothing(tree):
    start = time.monotonic()
    p, lines = drive(tree, "exit-mid-call")
    assert lines and lines[0]["leaving"] is True, p.stdout + p.stderr
    assert_nothing_left(tree)
    assert time.monotonic() - start < 30
