"""The reaper library's typed errors, as Python exceptions.

Each subclasses :class:`reaper.Error` and, where drop-in code expects a standard exception, that
one too: a missing program is a :class:`FileNotFoundError` (as ``subprocess`` raises), a run's
timeout a :class:`subprocess.TimeoutExpired`, a failed ``check=True`` a
:class:`subprocess.CalledProcessError`.
"""

import errno as _errno
import os
import subprocess


class Error(Exception):
    """Any error of reaper. ``exit_code`` is timeout(1)'s status for it where it has one (127 not
    found, 126 not executable, 125 reaper's own failure)."""

    exit_code = 125


class NotFound(Error, FileNotFoundError):
    """The program does not exist (``FileNotFoundError``, as ``subprocess`` raises)."""

    exit_code = 127


class NotExecutable(Error, PermissionError):
    """The program exists but cannot be executed (``errno``: EACCES, ENOEXEC, ...)."""

    exit_code = 126


class TooLarge(Error, OSError):
    """The arguments and environment are over the kernel's limit for exec (E2BIG)."""

    exit_code = 126


class SpawnError(Error, OSError):
    """The command could not be started otherwise (fork, pidfd_open, ...)."""


class ContainmentError(Error):
    """No containment as asked. ``kind`` is the library's ``ContainErrorKind`` name
    (``"NoCgroup2"``, ``"NotDelegated"``, ``"LimitUnavailable"``, ...); ``what``, ``path`` and
    ``errno`` say what failed."""

    def __init__(self, message, kind=None, what=None, path=None, errno=None):
        super().__init__(message)
        self.kind = kind
        self.what = what
        self.path = path
        self.errno = errno


class JoinFailed(ContainmentError):
    """The leader could not join its cgroup before exec."""


class SandboxError(Error):
    """The sandbox could not be set up as asked: a run never starts in a weaker one."""


class GuardianError(Error):
    """The guardian (which cleans up if this interpreter is SIGKILLed) could not start."""


class ForkedError(Error):
    """This process was forked from the one whose runs and runtime these are."""


class TimeoutExpired(Error, subprocess.TimeoutExpired):
    """The run's timeout expired: its whole tree was stopped (the stop signal, the grace,
    SIGKILL). ``outcome`` says how; ``output``/``stdout`` and ``stderr`` hold what was
    captured."""

    def __init__(self, cmd, timeout, output=None, stderr=None, outcome=None):
        subprocess.TimeoutExpired.__init__(self, cmd, timeout, output, stderr)
        self.outcome = outcome


class CalledProcessError(Error, subprocess.CalledProcessError):
    """``check=True`` and the command failed; ``outcome`` says how it ended."""

    def __init__(self, returncode, cmd, output=None, stderr=None, outcome=None):
        subprocess.CalledProcessError.__init__(self, returncode, cmd, output, stderr)
        self.outcome = outcome


def translate(e):
    """The typed exception for a ``_native.NativeError`` (or ``ForkedError``)."""
    from . import _native

    if isinstance(e, _native.ForkedError):
        return ForkedError(str(e))
    kind, message, d = e.args
    program = d.get("program")
    err = d.get("errno")
    if kind == "NotFound":
        x = NotFound(_errno.ENOENT, os.strerror(_errno.ENOENT), program)
    elif kind == "NotExecutable":
        n = err or _errno.EACCES
        x = NotExecutable(n, os.strerror(n), program)
    elif kind == "TooLarge":
        x = TooLarge(err or _errno.E2BIG, message, program)
    elif kind in ("Spawn", "NoPidfd"):
        n = err or 0
        x = SpawnError(n, message, program)
    elif kind in ("Containment", "JoinFailed"):
        cls = JoinFailed if kind == "JoinFailed" else ContainmentError
        x = cls(message, d.get("contain_kind"), d.get("what"), d.get("path"), err)
    elif kind == "Sandbox":
        x = SandboxError(message)
        x.undeclared_directory = d.get("undeclared_directory")
    elif kind == "Guardian":
        x = GuardianError(message)
    else:
        x = Error(message)
    x.reaper_message = message
    if "exit_code" in d:
        x.exit_code = d["exit_code"]
    return x
