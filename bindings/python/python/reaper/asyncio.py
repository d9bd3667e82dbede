"""``reaper.asyncio.create_subprocess_exec``: the twin of ``asyncio.create_subprocess_exec``
whose ``terminate()``, ``kill()``, cancellation and ``async with`` end the whole tree.

The run's end reaches the event loop through a descriptor (an eventfd the native run makes
readable once it is over) that the loop watches with ``add_reader``: no thread per process, no
callback from a foreign thread into the interpreter, and any loop that has ``add_reader`` (the
default selector loop, uvloop) works. The pipes are the loop's own pipe transports, so
``stdin``/``stdout``/``stderr`` are ordinary ``asyncio.StreamWriter``/``StreamReader`` objects.
"""

import asyncio
import os
import subprocess
from asyncio import streams

from . import _runtime
from ._popen import _DEFAULT, _options

PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
DEVNULL = subprocess.DEVNULL

__all__ = ["create_subprocess_exec", "create_subprocess_shell", "Process", "PIPE", "STDOUT",
           "DEVNULL"]


class _WriteProtocol(streams.FlowControlMixin, asyncio.Protocol):
    """The stdin pipe's protocol: flow control for ``StreamWriter.drain``."""


class Process:
    """A contained command, as ``asyncio.subprocess.Process``: ``pid``, ``returncode``,
    ``stdin``/``stdout``/``stderr`` streams, ``wait()``, ``communicate()``, ``send_signal()``,
    ``terminate()`` and ``kill()``; ``outcome`` once it is over.

    - ``terminate()`` stops the whole tree (the stop signal, the grace, SIGKILL), ``kill()``
      SIGKILLs it; both return at once and ``wait()`` returns when the tree is gone.
    - ``wait()`` or ``communicate()`` cancelled (``asyncio.wait_for``, ``asyncio.timeout``, a
      task's cancel) SIGKILLs the whole tree before the cancellation goes on.
    - ``async with`` it: on leaving, the whole tree is stopped (``terminate()``) and waited for.
    - The object collected while the run goes on kills the whole tree.
    """

    def __init__(self, run, loop, stdin, stdout, stderr, args):
        self._run = run
        self._loop = loop
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.args = args
        self.pid = run.pid
        self.outcome = None
        self._done = loop.create_future()
        self._fd = run.ready_fd()
        done = self._done

        def ready(loop=loop, fd=self._fd, done=done):
            loop.remove_reader(fd)
            if not done.done():
                done.set_result(None)

        loop.add_reader(self._fd, ready)

    def __repr__(self):
        return "<reaper.asyncio.Process %d>" % self.pid

    @property
    def returncode(self):
        if self.outcome is None and self._done.done():
            self.outcome = _runtime.outcome_of(_runtime.call(self._run.poll))
        return None if self.outcome is None else self.outcome.returncode

    @property
    def backend(self):
        """The containment the run got: ``"cgroup"``, ``"subreaper"`` or ``"pgid"``."""
        return self._run.backend

    @property
    def cgroup(self):
        """The run's own cgroup with the cgroup backend, else ``None``."""
        return self._run.cgroup

    @property
    def warning(self):
        """Why the automatic containment fell back from a cgroup (``None`` when it did not)."""
        return self._run.warning

    async def wait(self):
        """Waits for the run's end (the leader's exit, then what it left stopped) and returns
        the return code. Cancelled, it kills the whole tree first."""
        try:
            await asyncio.shield(self._done)
        except asyncio.CancelledError:
            self.kill()
            raise
        return self.returncode

    def send_signal(self, sig):
        """Sends ``sig`` to the leader alone."""
        if self.returncode is None:
            _runtime.call(self._run.send_signal, int(sig))

    def terminate(self):
        """Stops the whole tree: the stop signal, the grace, SIGKILL. Returns at once."""
        if self.returncode is None:
            _runtime.call(self._run.stop)

    def kill(self):
        """SIGKILLs the whole tree now. Returns at once."""
        if self.returncode is None:
            _runtime.call(self._run.kill)

    async def _feed(self, input):
        if input:
            self.stdin.write(input)
            try:
                await self.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass
        self.stdin.close()

    async def communicate(self, input=None):
        """Writes ``input`` to stdin and closes it, reads stdout and stderr to their ends, waits
        for the run's end; returns ``(stdout, stderr)``. Cancelled, it kills the whole tree."""
        async def read(stream):
            return None if stream is None else await stream.read()

        try:
            feed = self._feed(input) if self.stdin is not None else asyncio.sleep(0)
            _, out, err = await asyncio.gather(feed, read(self.stdout), read(self.stderr))
            await self.wait()
        except asyncio.CancelledError:
            self.kill()
            raise
        return out, err

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        self.terminate()
        if self.stdin is not None:
            self.stdin.close()
        await self.wait()

    def __del__(self):
        # Collected while running: the native run goes with this object and kills the tree;
        # the loop must not keep watching its descriptor, which closes with it.
        if not self._done.done() and not self._loop.is_closed():
            try:
                self._loop.remove_reader(self._fd)
            except Exception:
                pass


def _child_end(spec, for_stdin, to_close):
    """(the child's descriptor, our end or None) for one stream as asyncio takes it."""
    if spec is None:
        return -1, None
    if spec == PIPE:
        r, w = os.pipe()
        if for_stdin:
            to_close.append(r)
            return r, w
        to_close.append(w)
        return w, r
    if spec == DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        to_close.append(fd)
        return fd, None
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


async def create_subprocess_exec(program, *args, stdin=None, stdout=None, stderr=None,
                                 limit=streams._DEFAULT_LIMIT, cwd=None, env=None, timeout=None,
                                 grace=None, stop_signal=_DEFAULT, limits=None, sandbox=None,
                                 containment=None):
    """Starts ``program`` with ``args``, contained, and returns a :class:`Process`.

    ``stdin``/``stdout``/``stderr``: None (inherit), PIPE, DEVNULL, STDOUT (stderr only), a
    descriptor or a file object. reaper's options (keyword-only) are ``reaper.Popen``'s:
    ``timeout`` (the run's own deadline: the tree is then stopped), ``grace``, ``stop_signal``,
    ``limits``, ``sandbox``, ``containment``.
    """
    loop = asyncio.get_running_loop()
    argv = [os.fsdecode(program)] + [os.fsdecode(a) for a in args]
    to_close, ours = [], []
    try:
        fin, win = _child_end(stdin, True, to_close)
        fout, rout = _child_end(stdout, False, to_close)
        if stderr == STDOUT:
            ferr, rerr = (fout if fout >= 0 else 1), None
        else:
            ferr, rerr = _child_end(stderr, False, to_close)
        ours = [fd for fd in (win, rout, rerr) if fd is not None]
        envl = None if env is None else [(os.fsdecode(k), os.fsdecode(v)) for k, v in env.items()]
        kw = _options(timeout, grace, stop_signal, limits, sandbox, containment)
        run = await loop.run_in_executor(None, lambda: _runtime.spawn(
            argv, cwd=None if cwd is None else os.fsdecode(cwd), env=envl, stdin=fin,
            stdout=fout, stderr=ferr, **kw))
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in to_close:
            os.close(fd)
    try:
        w = r_out = r_err = None
        if win is not None:
            transport, protocol = await loop.connect_write_pipe(
                lambda: _WriteProtocol(loop), os.fdopen(win, "wb", 0))
            win = None
            w = streams.StreamWriter(transport, protocol, None, loop)

        async def reader(fd):
            r = streams.StreamReader(limit=limit, loop=loop)
            await loop.connect_read_pipe(lambda: streams.StreamReaderProtocol(r, loop=loop),
                                         os.fdopen(fd, "rb", 0))
            return r

        if rout is not None:
            r_out, rout = await reader(rout), None
        if rerr is not None:
            r_err, rerr = await reader(rerr), None
    except BaseException:
        for fd in (win, rout, rerr):
            if fd is not None:
                os.close(fd)
        run.kill()
        raise
    return Process(run, loop, w, r_out, r_err, argv)


async def create_subprocess_shell(cmd, **kwargs):
    """``create_subprocess_exec('/bin/sh', '-c', cmd, ...)``."""
    return await create_subprocess_exec("/bin/sh", "-c", cmd, **kwargs)
