import asyncio
from typing import IO, Any, Mapping, Optional, Union

from . import Limits, Outcome

PIPE: int
STDOUT: int
DEVNULL: int

class Process:
    pid: int
    args: list[str]
    stdin: Optional[asyncio.StreamWriter]
    stdout: Optional[asyncio.StreamReader]
    stderr: Optional[asyncio.StreamReader]
    outcome: Optional[Outcome]
    @property
    def returncode(self) -> Optional[int]: ...
    @property
    def backend(self) -> Optional[str]: ...
    @property
    def cgroup(self) -> Optional[str]: ...
    @property
    def warning(self) -> Optional[str]: ...
    async def wait(self) -> int: ...
    async def communicate(self, input: Optional[bytes] = None) -> tuple[Optional[bytes], Optional[bytes]]: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    async def __aenter__(self) -> "Process": ...
    async def __aexit__(self, *exc: Any) -> None: ...

async def create_subprocess_exec(
    program: Any,
    *args: Any,
    stdin: Union[None, int, IO[Any]] = None,
    stdout: Union[None, int, IO[Any]] = None,
    stderr: Union[None, int, IO[Any]] = None,
    limit: int = ...,
    cwd: Any = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
    grace: Optional[float] = None,
    stop_signal: Optional[int] = ...,
    limits: Union[Limits, Mapping[str, Any], None] = None,
    sandbox: Optional[str] = None,
    containment: Optional[str] = None,
) -> Process: ...
async def create_subprocess_shell(cmd: str, **kwargs: Any) -> Process: ...
