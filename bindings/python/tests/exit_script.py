"""`exit_script.py MODE READY FIXTURE-ARGV...`: starts the fixture's tree with reaper.Popen, the
handle kept alive, writes READY once the tree is built, waits for its stdin's EOF (the test has seen the tree), then ends
the interpreter by MODE:
normal (the end of the script), exception (uncaught), os_exit (os._exit: no exit handler at
all), sigkill (waits for the test's SIGKILL)."""

import os
import pathlib
import sys
import time

import reaper

mode, ready, *argv = sys.argv[1:]
KEEP = reaper.Popen(argv)
tree_ready = pathlib.Path(argv[argv.index("--ready") + 1])
while not tree_ready.exists():
    time.sleep(0.01)
pathlib.Path(ready).write_text(str(KEEP.pid))
# The test has seen the tree alive once stdin closes.
sys.stdin.read()
if mode == "exception":
    raise RuntimeError("uncaught")
if mode == "os_exit":
    os._exit(0)
if mode == "sigkill":
    while True:
        time.sleep(3600)
