"""An MCP client of the hostile server: `mcp_client.py reaper|sdk READY_FILE`. Initializes,
lists the tools, writes READY_FILE, then waits forever (for the test's SIGKILL)."""

import asyncio
import os
import pathlib
import sys

from mcp import ClientSession, StdioServerParameters

which, ready = sys.argv[1:3]
if which == "reaper":
    from reaper.mcp import stdio_client
else:
    from mcp.client.stdio import stdio_client


async def main():
    params = StdioServerParameters(command=sys.executable,
                                   args=[os.path.join(os.path.dirname(__file__), "hostile_mcp_server.py")],
                                   env={"HOSTILE_ARGV": os.environ["HOSTILE_ARGV"]})
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            await s.list_tools()
            pathlib.Path(ready).write_text("ready")
            await asyncio.sleep(3600)


asyncio.run(main())
