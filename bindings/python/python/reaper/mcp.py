"""``reaper.mcp.stdio_client``: the MCP Python SDK's ``mcp.client.stdio.stdio_client``, with the
server started through reaper.

The SDK's own client starts the server in a session of its own and, at the end, closes its
stdin, waits 2 s, then signals the server's process group: what the server started in another
session or group (a ``setsid``'d helper, a daemon) outlives it, and so does everything when the
server exits on its own at the stdin's close, or when the client is SIGKILLed. Here the server
is a reaper run: closing the client (or an exception in its block) closes the server's stdin,
gives it the same 2 s to exit, then stops its whole tree (SIGTERM, ``grace``, SIGKILL); what it
left when it exited is stopped too; a SIGKILL of the client is the guardian's to clean up.

Needs the ``mcp`` package (``pip install 'reaper-process[mcp]'``) and an asyncio event loop
(anyio's asyncio backend: ``asyncio.run``, ``anyio.run``); not trio.
"""

import asyncio as _asyncio
import codecs
import os
import sys
from contextlib import asynccontextmanager

try:
    import anyio
    import anyio.lowlevel
    from mcp.client.stdio import StdioServerParameters, _parse_line, get_default_environment
    from mcp.shared.message import SessionMessage
except ImportError as e:  # pragma: no cover
    raise ImportError("reaper.mcp needs the MCP Python SDK: pip install 'reaper-process[mcp]' "
                      "(%s)" % e) from e

from . import asyncio as _rasyncio

__all__ = ["stdio_client", "StdioServerParameters"]

# As the SDK's: how long the server has to exit by itself once its stdin is closed.
PROCESS_TERMINATION_TIMEOUT = 2.0


def _stderr_fd(errlog):
    try:
        return errlog.fileno(), None
    except (AttributeError, OSError, ValueError):
        # No descriptor (io.StringIO): a pipe, copied into it.
        return _rasyncio.PIPE, errlog


@asynccontextmanager
async def stdio_client(server, errlog=sys.stderr, *, grace=2.0, limits=None, sandbox=None):
    """Starts the MCP server ``server`` (a ``mcp.StdioServerParameters``) contained and yields
    ``(read_stream, write_stream)`` for ``mcp.ClientSession``, as the SDK's ``stdio_client``.

    On leaving the block (normally or by an exception): the server's stdin is closed, it has
    2 s to exit by itself, then its whole tree is stopped (SIGTERM, ``grace``, SIGKILL); what it
    left is stopped either way. ``limits`` and ``sandbox`` are ``reaper.Popen``'s.
    """
    stderr, copy_to = _stderr_fd(errlog)
    if copy_to is not None:
        errlog.flush()
    else:
        try:
            errlog.flush()
        except Exception:
            pass
    process = await _rasyncio.create_subprocess_exec(
        server.command, *server.args,
        env=get_default_environment() | (server.env or {}),
        cwd=server.cwd, stdin=_rasyncio.PIPE, stdout=_rasyncio.PIPE, stderr=stderr,
        grace=grace, limits=limits, sandbox=sandbox)
    try:
        read_stream_writer, read_stream = anyio.create_memory_object_stream(0)
        write_stream, write_stream_reader = anyio.create_memory_object_stream(0)
    except BaseException:
        process.kill()
        raise

    async def stdout_reader():
        decoder = codecs.getincrementaldecoder(server.encoding)(errors=server.encoding_error_handler)
        buffer = ""
        try:
            async with read_stream_writer:
                while True:
                    chunk = await process.stdout.read(65536)
                    if not chunk:
                        break
                    lines = (buffer + decoder.decode(chunk)).split("\n")
                    buffer = lines.pop()
                    for line in lines:
                        try:
                            await read_stream_writer.send(_parse_line(line))
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass

    async def stdin_writer():
        try:
            async with write_stream_reader:
                async for message in write_stream_reader:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    process.stdin.write((json + "\n").encode(server.encoding,
                                                             server.encoding_error_handler))
                    await process.stdin.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()

    async def stderr_copier():
        while True:
            chunk = await process.stderr.read(65536)
            if not chunk:
                return
            copy_to.write(chunk.decode(server.encoding, "replace"))

    async def stop_server():
        process.stdin.close()
        # The run's end, awaited without the kill that cancelling Process.wait() sends.
        with anyio.move_on_after(PROCESS_TERMINATION_TIMEOUT):
            await _asyncio.shield(process._done)
            return
        process.terminate()
        await _asyncio.shield(process._done)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stdout_reader)
            tg.start_soon(stdin_writer)
            if copy_to is not None:
                tg.start_soon(stderr_copier)
            try:
                yield read_stream, write_stream
            finally:
                # Shielded: a cancelled caller still stops the server (every wait is bounded
                # by the timeout and the grace).
                with anyio.CancelScope(shield=True):
                    read_stream.close()
                    write_stream.close()
                    await stop_server()
                    for s in (read_stream, write_stream, read_stream_writer, write_stream_reader):
                        await s.aclose()
                tg.cancel_scope.cancel()
    finally:
        # Whatever happened above (a failure of the task group itself): the tree goes.
        if process.returncode is None:
            process.kill()
