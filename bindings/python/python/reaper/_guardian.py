"""``python -m reaper._guardian PID STARTTIME``: the guardian of the interpreter PID (what
``reaper`` starts by itself, through the extension module's path; kept for a manual start)."""

import sys

from . import _native

if __name__ == "__main__":
    sys.exit(_native.guardian_serve(int(sys.argv[1]), int(sys.argv[2])))
