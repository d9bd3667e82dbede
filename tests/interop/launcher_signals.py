#!/usr/bin/env python3
"""A client signals the launcher of `reaper mcp` (uvx, npx, npm's JavaScript launcher): does every
run die? For each way a client ends a stdio server it started through a launcher, one call is
made whose codex leaves a setsid'd, TERM-ignoring escapee, then the client ends the server:

  term      SIGTERM to the launcher, then stdin closed (the TypeScript SDK's close())
  kill      SIGKILL to the launcher, the client alive with its pipes open for 3 s, then closed
  killpg    SIGKILL to the launcher's process group (a client that started it in a session of
            its own), pipes closed
  eof       stdin closed only (the Python SDK's first step)

Each must leave nothing: not the call's codex, not its escapee, not reaper. The hostile
processes prove they ran (fake-codex records each with its start time). Only processes this
script started, or recorded, are ever signalled, by pidfd after checking their start time.

  REAPER_COMMAND='["uvx", "--from", "W.whl", "reaper"]' FAKE_CODEX=… tests/interop/launcher_signals.py
Exit 0 when every end left nothing, else 1 (naming what lived on).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ENDS = ["term", "kill", "killpg", "eof"]
DEADLINE = 15.0


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def alive(pid, st):
    return start_time(pid) == st


def kill_checked(pid, st):
    """SIGKILL through a pidfd, only if pid is still the process that started at st."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if alive(pid, st):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def recorded(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 2:
                    out.append((int(p[0]), int(p[1]), p[2] if len(p) > 2 else ""))
    except OSError:
        pass
    return out


def send(proc, msg):
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def read_reply(proc, want_id, deadline):
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return None
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("id") == want_id:
            return m
    return None


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return int(s[s.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def one(command, end, fake):
    tmp = tempfile.mkdtemp(prefix="reaper-launcher-")
    pids = os.path.join(tmp, "pids")
    env = dict(os.environ, CODEX_CMD=fake, FAKE_CODEX_PIDS=pids)
    launcher = subprocess.Popen(
        command + ["mcp", "--grace", "300ms"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(tmp, "stderr"), "wb"),
        env=env,
        start_new_session=(end == "killpg"),
    )
    launcher_st = start_time(launcher.pid)
    ours = []  # (pid, starttime, role) to check and clean up
    try:
        deadline = time.monotonic() + 60
        send(launcher, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "launcher-signals", "version": "1"}}})
        if read_reply(launcher, 1, deadline) is None:
            return f"{end}: no initialize reply"
        send(launcher, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(launcher, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "codex", "arguments": {"prompt": "thread T\nescapee\nhang"}}})
        while time.monotonic() < deadline:
            roles = {r for _, _, r in recorded(pids)}
            if "escapee" in roles and "codex" in roles:
                break
            time.sleep(0.05)
        else:
            return f"{end}: the call's codex and its escapee never ran"
        ours = recorded(pids)
        codex = next((p, s) for p, s, r in ours if r == "codex")
        # reaper: codex's parent (the call's leader is codex, a child of reaper).
        rp = parent_of(codex[0])
        if rp:
            ours.append((rp, start_time(rp), "reaper"))
        if end == "term":
            launcher.send_signal(signal.SIGTERM)
            launcher.stdin.close()
        elif end == "kill":
            launcher.send_signal(signal.SIGKILL)
            time.sleep(3)
            launcher.stdin.close()
        elif end == "killpg":
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.stdin.close()
        else:
            launcher.stdin.close()
        until = time.monotonic() + DEADLINE
        while time.monotonic() < until:
            left = [(p, s, r) for p, s, r in ours if s is not None and alive(p, s)]
            if not left:
                break
            time.sleep(0.1)
        left = [(p, s, r) for p, s, r in ours if s is not None and alive(p, s)]
        if left:
            return f"{end}: left alive after {DEADLINE:.0f} s: " + ", ".join(
                f"{r} (pid {p})" for p, _, r in left)
        return None
    finally:
        for p, s, _ in recorded(pids) + ours:
            if s is not None:
                kill_checked(p, s)
        if launcher.poll() is None and alive(launcher.pid, launcher_st):
            launcher.kill()
        launcher.wait()
        subprocess.run(["rm", "-rf", tmp])


def main():
    command = json.loads(os.environ["REAPER_COMMAND"])
    fake = os.environ["FAKE_CODEX"]
    ends = sys.argv[1:] or ENDS
    failed = 0
    for end in ends:
        why = one(command, end, fake)
        if why:
            failed += 1
            print(f"FAIL: {' '.join(command)}: {why}")
        else:
            print(f"ok: {' '.join(command)}: {end}: the call's tree and reaper are gone")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
