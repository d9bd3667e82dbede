import subprocess
from typing import IO, Any, Literal, Mapping, NamedTuple, Optional, Sequence, Union

from ._errors import (
    CalledProcessError as CalledProcessError,
    ContainmentError as ContainmentError,
    Error as Error,
    ForkedError as ForkedError,
    GuardianError as GuardianError,
    JoinFailed as JoinFailed,
    NotExecutable as NotExecutable,
    NotFound as NotFound,
    SandboxError as SandboxError,
    SpawnError as SpawnError,
    TimeoutExpired as TimeoutExpired,
    TooLarge as TooLarge,
)

PIPE: int
STDOUT: int
DEVNULL: int

_Stream = Union[None, int, IO[Any]]
_Sandbox = Optional[Literal["on", "pid"]]
_Containment = Optional[Literal["auto", "cgroup", "subreaper", "pgid"]]

class Process(NamedTuple):
    pid: int
    starttime: int
    comm: str

class Escapee(NamedTuple):
    process: Process
    to: str

class Limits(NamedTuple):
    memory_max: Optional[int] = None
    pids_max: Optional[int] = None
    cpus: Optional[float] = None

class Outcome:
    argv: list[str]
    backend: str
    cgroup: Optional[str]
    scope: Optional[str]
    leader_pid: int
    leader_status: Optional[tuple[str, int]]
    stop_reason: str
    received_signal: Optional[int]
    duration: float
    leader_ran: Optional[float]
    teardown: float
    killed: int
    survivors: list[Process]
    escapees: list[Escapee]
    error: Optional[str]
    guardian_pid: Optional[int]
    limits: Optional[Limits]
    usage: Optional[dict[str, Optional[int]]]
    exit_code: int
    returncode: int

class CompletedProcess(subprocess.CompletedProcess[Any]):
    outcome: Outcome
    stop_reason: str
    backend: str
    killed: int
    survivors: list[Process]
    escapees: list[Escapee]
    duration: float
    usage: Optional[dict[str, Optional[int]]]

class Popen(subprocess.Popen[Any]):
    outcome: Optional[Outcome]
    def __init__(
        self,
        args: Any,
        bufsize: int = -1,
        executable: Any = None,
        stdin: _Stream = None,
        stdout: _Stream = None,
        stderr: _Stream = None,
        *a: Any,
        timeout: Optional[float] = None,
        grace: Optional[float] = None,
        stop_signal: Optional[int] = ...,
        limits: Union[Limits, Mapping[str, Any], None] = None,
        sandbox: _Sandbox = None,
        containment: _Containment = None,
        **kw: Any,
    ) -> None: ...
    @property
    def backend(self) -> Optional[str]: ...
    @property
    def cgroup(self) -> Optional[str]: ...
    @property
    def warning(self) -> Optional[str]: ...

def run(
    args: Any,
    *,
    timeout: Optional[float] = None,
    grace: Optional[float] = None,
    stop_signal: Optional[int] = ...,
    limits: Union[Limits, Mapping[str, Any], None] = None,
    sandbox: _Sandbox = None,
    containment: _Containment = None,
    input: Any = None,
    capture_output: bool = False,
    check: bool = False,
    **kwargs: Any,
) -> CompletedProcess: ...
def guardian_pid() -> Optional[int]: ...
