"""``reaper.Popen`` and ``reaper.run``: ``subprocess`` whose stops end the whole tree."""

import os
import subprocess

from . import _runtime
from ._errors import CalledProcessError, TimeoutExpired
from ._outcome import Limits

PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
DEVNULL = subprocess.DEVNULL

_DEFAULT = object()



def _options(timeout, grace, stop_signal, limits, sandbox, containment):
    kw = {"timeout": timeout, "grace": grace, "sandbox": sandbox, "containment": containment}
    if stop_signal is None:
        kw["no_stop_signal"] = True
    elif stop_signal is not _DEFAULT:
        kw["stop_signal"] = int(stop_signal)
    if limits is not None:
        if isinstance(limits, dict):
            limits = Limits(**limits)
        kw.update(memory_max=limits.memory_max, pids_max=limits.pids_max, cpus=limits.cpus)
    return kw


class Popen(subprocess.Popen):
    """``subprocess.Popen``, contained: the command and everything it starts (a ``setsid``'d
    grandchild, a double-forked daemon, a fork storm) are one run, and every way it ends ends
    the whole tree.

    Takes ``subprocess.Popen``'s arguments (``stdin``/``stdout``/``stderr`` as PIPE, DEVNULL,
    STDOUT, a descriptor or a file object; ``text``, ``encoding``, ``errors``, ``bufsize``,
    ``cwd``, ``env``, ``shell``, ``executable``) and reaper's, keyword-only:

    - ``timeout``: the run's deadline in seconds: then the tree is stopped (``outcome.stop_reason``
      is ``"timeout"``);
    - ``grace`` (seconds, default 2) and ``stop_signal`` (default SIGTERM; ``None`` sends none):
      how the tree is stopped: the stop signal to every process, the grace, SIGKILL;
    - ``limits`` (:class:`reaper.Limits`), ``sandbox`` (``"on"``/``"pid"``), ``containment``
      (``"auto"``, ``"cgroup"``, ``"subreaper"``, ``"pgid"``).

    What differs from ``subprocess.Popen``:

    - ``terminate()`` stops the whole tree (the stop signal, the grace, SIGKILL); ``kill()``
      SIGKILLs the whole tree; ``send_signal(sig)`` signals the leader alone, as ``subprocess``;
    - ``returncode`` is set (and ``wait()`` returns) once the run is over: the leader has
      exited and what it left is stopped too (so ``communicate()`` does not hang on a
      grandchild holding the pipe); ``outcome`` says how it ended;
    - leaving the ``with`` block: the pipes are closed, then the leader is waited for as
      ``subprocess`` does, and what it left is stopped; on an exception the whole tree is
      stopped at once (``terminate()``) before waiting;
    - the object collected while its run goes on kills the whole tree (SIGKILL);
    - not supported (``ValueError``): ``preexec_fn``, ``pass_fds``, ``start_new_session``,
      ``process_group``, ``user``, ``group``, ``extra_groups``, ``umask``.
    """

    _run = None
    outcome = None

    def __init__(self, args, *a, timeout=None, grace=None, stop_signal=_DEFAULT, limits=None,
                 sandbox=None, containment=None, **kw):
        self._reaper = _options(timeout, grace, stop_signal, limits, sandbox, containment)
        self.outcome = None
        super().__init__(args, *a, **kw)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, restore_signals, *rest):
        try:
            # 3.9+: gid, gids, uid, umask, start_new_session; 3.11+: process_group.
            gid, gids, uid, umask, start_new_session = rest[:5]
            process_group = rest[5] if len(rest) > 5 else None
            unsupported = [name for name, bad in (
                ("preexec_fn", preexec_fn is not None),
                ("pass_fds", bool(pass_fds)),
                ("user/group/extra_groups", uid is not None or gid is not None or gids is not None),
                ("umask", umask not in (None, -1)),
                ("start_new_session", bool(start_new_session)),
                ("process_group", process_group not in (None, -1)),
            ) if bad]
            if unsupported:
                raise ValueError("reaper.Popen does not support %s" % ", ".join(unsupported))
            if isinstance(args, (str, bytes, os.PathLike)):
                if shell and isinstance(args, os.PathLike):
                    raise TypeError("path-like args is not allowed when shell is true")
                args = [args]
            else:
                args = list(args)
            if shell:
                args = ["/bin/sh", "-c"] + args
            if executable is not None:
                # The library runs argv[0] itself: the executable takes its place.
                args[0] = executable
            argv = [os.fsdecode(x) for x in args]
            if env is not None:
                env = [(os.fsdecode(k), os.fsdecode(v)) for k, v in env.items()]
            self._run = _runtime.spawn(
                argv, cwd=None if cwd is None else os.fsdecode(cwd), env=env,
                stdin=p2cread, stdout=c2pwrite, stderr=errwrite, **self._reaper)
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        self.pid = self._run.pid
        self._child_created = True

    # --- what subprocess's wait, poll and communicate call

    def _ended(self, d):
        self.outcome = _runtime.outcome_of(d)
        self.returncode = self.outcome.returncode

    def _internal_poll(self, _deadstate=None, **_):
        if self.returncode is None and self._run is not None:
            d = _runtime.call(self._run.poll)
            if d is not None:
                self._ended(d)
        return self.returncode

    def _wait(self, timeout):
        if self.returncode is not None:
            return self.returncode
        d = _runtime.call(self._run.wait, timeout)
        if d is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        self._ended(d)
        return self.returncode

    # --- stopping

    def send_signal(self, sig):
        """Sends ``sig`` to the leader alone (as ``subprocess``); nothing once it has exited."""
        self.poll()
        if self.returncode is None:
            _runtime.call(self._run.send_signal, int(sig))

    def terminate(self):
        """Stops the whole tree: the stop signal (SIGTERM) to every process, the grace, then
        SIGKILL for what is left. Returns at once; ``wait()`` returns when it is over."""
        if self.returncode is None and self._run is not None:
            _runtime.call(self._run.stop)

    def kill(self):
        """SIGKILLs the whole tree now. Returns at once; ``wait()`` returns when it is over."""
        if self.returncode is None and self._run is not None:
            _runtime.call(self._run.kill)

    @property
    def backend(self):
        """The containment the run got: ``"cgroup"``, ``"subreaper"`` or ``"pgid"``."""
        return self._run.backend if self._run is not None else None

    @property
    def cgroup(self):
        """The run's own cgroup (a path under the cgroup2 mount) with the cgroup backend, else
        ``None``; removed when the run is over."""
        return self._run.cgroup if self._run is not None else None

    @property
    def warning(self):
        """Why the automatic containment fell back from a cgroup (``None`` when it did not)."""
        return self._run.warning if self._run is not None else None

    def __exit__(self, exc_type, value, traceback):
        try:
            if exc_type is not None:
                self.terminate()
            for f in (self.stdout, self.stderr):
                if f:
                    f.close()
        finally:
            try:
                if self.stdin:
                    self.stdin.close()
            finally:
                self.wait()

    def __del__(self, _warn=None):
        # Collected while the run goes on: the native run, dropped with this object, kills the
        # whole tree. Nothing to add to subprocess's list of children to reap later.
        pass


class CompletedProcess(subprocess.CompletedProcess):
    """``subprocess.CompletedProcess`` with the run's ``outcome``; its fields (``stop_reason``,
    ``killed``, ``survivors``, ``backend``, ``duration``, ``usage``, ...) read through."""

    def __init__(self, args, returncode, stdout=None, stderr=None, outcome=None):
        super().__init__(args, returncode, stdout, stderr)
        self.outcome = outcome

    def __getattr__(self, name):
        outcome = self.__dict__.get("outcome")
        if outcome is not None and name in type(outcome).__slots__:
            return getattr(outcome, name)
        raise AttributeError(name)

    def check_returncode(self):
        if self.returncode:
            raise CalledProcessError(self.returncode, self.args, self.stdout, self.stderr,
                                     self.outcome)


def run(args, *, timeout=None, grace=None, stop_signal=_DEFAULT, limits=None, sandbox=None,
        containment=None, input=None, capture_output=False, check=False, **kwargs):
    """Runs ``args`` contained and returns a :class:`CompletedProcess` with its ``outcome``.

    As ``subprocess.run``, but ``timeout`` is the run's own: when it expires the whole tree is
    stopped (the stop signal, ``grace``, SIGKILL) and :class:`reaper.TimeoutExpired` (a
    ``subprocess.TimeoutExpired``) is raised, carrying what was captured and the ``outcome``.
    An exception while waiting (Ctrl-C) kills the whole tree before it propagates.
    """
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = PIPE
        kwargs["stderr"] = PIPE
    with Popen(args, timeout=timeout, grace=grace, stop_signal=stop_signal, limits=limits,
               sandbox=sandbox, containment=containment, **kwargs) as p:
        try:
            stdout, stderr = p.communicate(input)
        except BaseException:
            p.kill()
            raise
    outcome = p.outcome
    if outcome.stop_reason == "timeout":
        raise TimeoutExpired(p.args, timeout, stdout, stderr, outcome)
    done = CompletedProcess(p.args, outcome.returncode, stdout, stderr, outcome)
    if check:
        done.check_returncode()
    return done
