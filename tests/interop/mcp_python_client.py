"""Drives `reaper mcp` with the official MCP Python SDK. One scenario per invocation, named by
argv[1]; prints one JSON line per observation for the test to check."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REAPER, FAKE_CODEX, PIDS, SCENARIO = sys.argv[1:5]


def out(**kw):
    print(json.dumps(kw), flush=True)


async def main():
    env = dict(os.environ, CODEX_CMD=FAKE_CODEX, FAKE_CODEX_PIDS=PIDS)
    # REAPER_COMMAND (a JSON list) starts reaper through what installed it, as a user's client
    # config does: `uvx --from WHEEL reaper`, `npx … reaper`.
    command = json.loads(os.environ.get("REAPER_COMMAND") or "null") or [REAPER]
    args = ["mcp", "--grace", "1s", "--progress-interval", "200ms"]
    if SCENARIO == "timeout":
        # 30 "seconds" of 20 ms.
        args += ["--test-timeout-unit", "20ms"]
    params = StdioServerParameters(command=command[0], args=[*command[1:], *args], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if SCENARIO == "list":
                tools = await session.list_tools()
                out(tools={t.name: {"input": t.input_schema, "output": t.output_schema} for t in tools.tools})
            elif SCENARIO == "call":
                r = await session.call_tool("codex", {"prompt": "thread T1\nsay hello from fake codex\ndone"})
                out(is_error=r.is_error, text=r.content[0].text, structured=r.structured_content)
                r = await session.call_tool("codex-reply", {"thread_id": "T1", "prompt": "thread\nsay again\ndone"})
                out(is_error=r.is_error, text=r.content[0].text, structured=r.structured_content)
                r = await session.call_tool("codex", {"prompt": "x", "cwd": "/tmp"})
                out(is_error=r.is_error, text=r.content[0].text)
            elif SCENARIO == "progress":
                seen = []

                async def on_progress(progress, total, message):
                    seen.append({"progress": progress, "message": message})

                r = await session.call_tool(
                    "codex",
                    {"prompt": "thread P1\nitem command_execution\nsleep 1\nitem file_change\nsay ok\ndone"},
                    progress_callback=on_progress,
                )
                out(is_error=r.is_error, progress=seen)
            elif SCENARIO == "cancel":
                try:
                    # The SDK abandons the request after the read timeout and sends
                    # notifications/cancelled, as it does when the caller cancels.
                    await session.call_tool("codex", {"prompt": "thread C1\nescapee\nchild\nhang"}, read_timeout_seconds=1.5)
                    out(cancelled=False)
                except Exception as e:  # the SDK's timeout error
                    out(cancelled=True, error=type(e).__name__)
                # The server keeps serving after a cancel.
                r = await session.call_tool("codex", {"prompt": "thread A1\nsay alive\ndone"})
                out(after_cancel=r.content[0].text)
            elif SCENARIO == "timeout":
                r = await session.call_tool(
                    "codex", {"prompt": "thread T3\nescapee\nignore-signals\nhang", "timeout_seconds": 30}
                )
                out(is_error=r.is_error, text=r.content[0].text, structured=r.structured_content)
            elif SCENARIO == "exit-mid-call":
                task = asyncio.create_task(session.call_tool("codex", {"prompt": "thread E1\nescapee\nchild\nhang"}))
                await asyncio.sleep(1.0)
                out(leaving=True)
                task.cancel()
                # Leaving the context managers closes the server's stdin and ends the client.
                return


asyncio.run(main())
