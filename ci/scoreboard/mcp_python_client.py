"""The MCP Python SDK's stdio_client as a wrapper: starts the server (argv), and closes it the
SDK's way (leaving the `async with`) when this client's stdin reaches EOF."""

import asyncio
import sys

from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params):
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)


asyncio.run(main())
