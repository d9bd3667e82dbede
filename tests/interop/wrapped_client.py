"""A real MCP client (official Python SDK) that launches a stdio server through
`reaper run`, calls a tool, prints "ready", then idles until it is killed."""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            result = await session.call_tool("hello", {"name": "reaper"})
            print(json.dumps({"tools": [t.name for t in tools.tools], "text": result.content[0].text}), flush=True)
            await asyncio.sleep(600)


asyncio.run(main())
