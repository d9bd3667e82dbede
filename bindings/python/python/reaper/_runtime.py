"""This process's side of reaper: the native runs, the guardian, the interpreter's exit."""

import atexit
import os
import sys
import threading
import warnings

try:
    from . import _native
except ImportError as e:
    raise ImportError(
        "reaper's native module (reaper._native) cannot be loaded: %s. Install the wheel "
        "reaper-process, or, in a checkout, build it (docs/python.md#tests)" % e) from e
from ._errors import translate
from ._outcome import Outcome

_lock = threading.Lock()
_guardian_for = None  # the pid of the process whose guardian was started (or refused)

# The guardian's program: the interpreter itself, isolated (-I -S: no site, no PYTHON* variables),
# loading this very extension module by its path (not the package, so nothing else runs there).
_GUARDIAN = (
    "import sys, importlib.util as u\n"
    "s = u.spec_from_file_location('reaper._native', sys.argv[1])\n"
    "m = u.module_from_spec(s)\n"
    "s.loader.exec_module(m)\n"
    "sys.exit(m.guardian_serve(int(sys.argv[2]), int(sys.argv[3])))\n"
)


def guardian_wanted():
    return os.environ.get("REAPER_GUARDIAN", "1") != "0"


def ensure_guardian():
    """Starts this process's guardian before its first run (once per process). Without one (no
    interpreter path, REAPER_GUARDIAN=0, or it cannot start: a warning), runs still start: the
    interpreter's SIGKILL would then leave their trees to the kernel."""
    global _guardian_for
    pid = os.getpid()
    if _guardian_for == pid:
        return
    with _lock:
        if _guardian_for == pid:
            return
        _guardian_for = pid
        if not guardian_wanted():
            return
        if not sys.executable:
            warnings.warn("reaper: no interpreter path (sys.executable) to start the guardian with; "
                          "a SIGKILL of this process would leave its runs' trees", RuntimeWarning)
            return
        argv = [sys.executable, "-I", "-S", "-c", _GUARDIAN, _native.__file__]
        try:
            _native.start_guardian(argv)
        except _native.NativeError as e:
            warnings.warn("reaper: %s; a SIGKILL of this process would leave its runs' trees"
                          % translate(e), RuntimeWarning)


def guardian_pid():
    """This process's guardian's pid, once a run started one (None without)."""
    return _native.guardian_pid()


def spawn(argv, **kw):
    """Starts ``argv`` contained (``_native.spawn``), the typed errors translated."""
    ensure_guardian()
    try:
        return _native.spawn(argv, **kw)
    except (_native.NativeError, _native.ForkedError) as e:
        raise translate(e) from None


def outcome_of(d):
    return None if d is None else Outcome(d)


def call(f, *a, **kw):
    """A call into a run, the typed errors translated."""
    try:
        return f(*a, **kw)
    except (_native.NativeError, _native.ForkedError) as e:
        raise translate(e) from None


_owner = os.getpid()


@atexit.register
def _at_exit():
    # The interpreter's normal end (an uncaught exception included): every run still going is
    # killed with its whole tree, then the guardian is told this process is done. (A run's
    # Python object may be collected after this or never; the library's own exit hook kills
    # any tree left even then.)
    if os.getpid() != _owner and _guardian_for != os.getpid():
        return
    _native.shutdown()
    _native.guardian_done()
