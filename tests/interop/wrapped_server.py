"""A stdio MCP server (official Python SDK) that leaks on purpose: at start it spawns a child
in a session of its own that ignores SIGTERM (the reaper-fixture `setsid-grandchild` tree).
Records its own pid in the fixture's pid file so the test can check it died too."""

import os
import pathlib
import subprocess
import sys

from mcp.server.mcpserver import MCPServer

pids, fixture_argv = sys.argv[1], sys.argv[2:]
start = pathlib.Path("/proc/self/stat").read_text()
start = start[start.rindex(")") + 2 :].split()[19]
with open(pids, "a") as f:
    f.write(f"{os.getpid()} {start} server\n")
subprocess.Popen(fixture_argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

mcp = MCPServer("leaky")


@mcp.tool()
def hello(name: str) -> str:
    """Says hello."""
    return f"hello {name}"


mcp.run()
