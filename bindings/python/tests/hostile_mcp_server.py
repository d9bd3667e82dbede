"""A stdio MCP server (raw JSON-RPC, no SDK) whose tree is hostile: before serving it starts
the fixture's tree named by HOSTILE_ARGV (a JSON list), e.g. a setsid'd TERM-ignoring
grandchild. It exits by itself when its stdin closes, as servers do."""

import json
import os
import subprocess
import sys

subprocess.Popen(json.loads(os.environ["HOSTILE_ARGV"]), stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL)


def reply(id, result=None, error=None):
    msg = {"jsonrpc": "2.0", "id": id}
    if error is not None:
        msg["error"] = error
    else:
        msg["result"] = result
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if "id" not in m:
        continue
    method = m.get("method")
    if method == "initialize":
        reply(m["id"], {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                        "serverInfo": {"name": "hostile", "version": "1"}})
    elif method == "tools/list":
        reply(m["id"], {"tools": []})
    elif method == "ping":
        reply(m["id"], {})
    else:
        reply(m["id"], error={"code": -32601, "message": "no such method"})
