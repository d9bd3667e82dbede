"""reaper for Python: run commands so that nothing they start outlives them.

``reaper.run`` and ``reaper.Popen`` are ``subprocess.run`` and ``subprocess.Popen`` whose
timeouts, ``terminate()``, ``kill()``, ``with`` blocks and garbage collection end the command's
whole process tree (cgroup v2 where it can; see docs/python.md). ``reaper.asyncio`` has the twin
of ``asyncio.create_subprocess_exec``; ``reaper.mcp.stdio_client`` the MCP SDK's stdio client,
contained.
"""

from ._errors import (
    CalledProcessError,
    ContainmentError,
    Error,
    ForkedError,
    GuardianError,
    JoinFailed,
    NotExecutable,
    NotFound,
    SandboxError,
    SpawnError,
    TimeoutExpired,
    TooLarge,
)
from ._outcome import Escapee, Outcome, Process
from ._popen import DEVNULL, PIPE, STDOUT, CompletedProcess, Limits, Popen, run
from ._runtime import guardian_pid

__all__ = [
    "run", "Popen", "CompletedProcess", "Outcome", "Process", "Escapee", "Limits",
    "PIPE", "STDOUT", "DEVNULL", "guardian_pid",
    "Error", "NotFound", "NotExecutable", "TooLarge", "SpawnError", "ContainmentError",
    "JoinFailed", "SandboxError", "GuardianError", "ForkedError", "TimeoutExpired",
    "CalledProcessError",
]
